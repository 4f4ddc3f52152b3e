//! Flows (issue 25): a parent with `CHILDREN` children (1,000) on one
//! private server. Per round it reports how long `Queue::add_flow` takes
//! for the whole graph, the time from the last child's handler returning
//! to the parent's handler starting (a `Consumer` at concurrency 64 runs
//! them: the settler's batching, the completion script releasing the
//! parent, the wake-up and the claim), and the server commands per child
//! (`INFO commandstats`, commands inside scripts included) against as many
//! plain jobs run the same way. Then the same flow with its children on
//! another queue than the parent's (`Step::on`): each child is made there
//! by a relayed message, and its end comes back by one, so the release
//! waits for the relay (the worker's maintenance, within
//! `maintenance::RELAY_HOT_INTERVAL` of a settlement that left a message).
//! Last, a batch of as many members with a complete callback, its members
//! on the batch's queue and then on another (`Batch::on`): the add's time,
//! the last member's return to the callback's start, commands per member.
//!
//! Run: `cargo bench --bench flows --features local-server` (server binary
//! from `ECHOMQ_SERVER_BIN`, `.tools/valkey` or `PATH`). Sizes
//! (environment): `CHILDREN` (1000), `ROUNDS` (5).
//!
//! Each round prints one JSON line on stdout; medians close the run.

#[allow(dead_code)]
mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::batch::{BatchOptions, Callback};
use echomq::flow::{FlowSpec, Step};
use echomq::server::LocalServer;
use echomq::{Client, Job, Queue, Worker};
use redis::aio::MultiplexedConnection;
use serde_json::json;

use support::{Snap, env_or, median, round};

async fn snap(c: &mut MultiplexedConnection) -> Snap {
    let stats: String = redis::cmd("INFO").arg("commandstats").query_async(c).await.unwrap();
    let cpu: String = redis::cmd("INFO").arg("cpu").query_async(c).await.unwrap();
    Snap::parse(&stats, &cpu)
}

/// When each job's handler started and returned, by id.
#[derive(Default)]
struct Times {
    last_child_done: Option<Instant>,
    parent_started: Option<Instant>,
    done: usize,
}

/// Runs every pending job of `q` with a Consumer at concurrency 64 until
/// `want` handlers returned; a job whose id ends in ":parent" marks its
/// start. Answers the times seen.
async fn run(q: &Queue, want: usize) -> Times {
    run_on(&[q], want).await
}

/// [`run`] with one worker on each of `queues` (64 each).
async fn run_on(queues: &[&Queue], want: usize) -> Times {
    let times: Arc<Mutex<Times>> = Arc::default();
    let mut worker = Worker::new();
    for q in queues {
        let t = times.clone();
        worker = worker.queue((*q).clone(), move |job: Job<serde_json::Value>| {
            let t = t.clone();
            async move {
                // a flow's parent, or a batch's callback
                let parent = job.id().ends_with(":parent") || job.id().ends_with(":complete");
                let mut t = t.lock().unwrap();
                if parent {
                    t.parent_started = Some(Instant::now());
                } else {
                    t.last_child_done = Some(Instant::now());
                }
                t.done += 1;
                Ok::<_, echomq::HandlerError>(())
            }
        });
    }
    let worker = worker.concurrency(64).spawn().unwrap();
    let until = Instant::now() + Duration::from_secs(120);
    while times.lock().unwrap().done < want && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    worker.shutdown().await.unwrap();
    let t = times.lock().unwrap();
    Times {
        last_child_done: t.last_child_done,
        parent_started: t.parent_started,
        done: t.done,
    }
}

/// Adds flow `id` to `home`, a parent after `children` children (on
/// `there` when given), and runs it with a worker on both queues; answers
/// the add's time, the time from the last child's return to the parent's
/// start (ms), and the server commands per child.
async fn measure(
    raw: &mut MultiplexedConnection,
    home: &Queue,
    there: Option<&Queue>,
    id: &str,
    children: usize,
) -> (f64, f64, f64) {
    let mut spec = FlowSpec::new().id(id);
    let mut parent = Step::new("parent", &json!({"parent": true})).unwrap();
    for i in 0..children {
        let child = Step::new(format!("c{i}"), &json!({"i": i})).unwrap();
        spec = spec.step(match there {
            Some(q) => child.on(q),
            None => child,
        });
        parent = parent.after(format!("c{i}"));
    }
    spec = spec.step(parent);
    let before = snap(raw).await;
    let start = Instant::now();
    home.add_flow(&spec).await.unwrap();
    let add_ms = start.elapsed().as_secs_f64() * 1e3;
    let queues: Vec<&Queue> = std::iter::once(home).chain(there).collect();
    let t = run_on(&queues, children + 1).await;
    assert_eq!(t.done, children + 1, "every child and the parent ran");
    let cmds = snap(raw).await.since(&before).all_calls() as f64 / children as f64;
    let release_ms = t
        .parent_started
        .unwrap()
        .duration_since(t.last_child_done.unwrap())
        .as_secs_f64()
        * 1e3;
    (add_ms, release_ms, cmds)
}

/// Opens batch `id` on `home` with a complete callback, adds `members`
/// members (on `there` when given, by message) in one call, closes it, and
/// runs it with a worker on both queues; answers the add's time, the time
/// from the last member's return to the callback's start (ms), and the
/// server commands per member.
async fn measure_batch(
    raw: &mut MultiplexedConnection,
    home: &Queue,
    there: Option<&Queue>,
    id: &str,
    members: usize,
) -> (f64, f64, f64) {
    let jobs: Vec<_> = (0..members).map(|i| json!({"i": i})).collect();
    let before = snap(raw).await;
    let batch = home
        .open_batch(
            &BatchOptions::new()
                .id(id)
                .on_complete(Callback::new(&json!("done")).unwrap()),
        )
        .await
        .unwrap();
    let start = Instant::now();
    match there {
        Some(q) => batch.on(q).unwrap().add(&jobs).await.unwrap(),
        None => batch.add(&jobs).await.unwrap(),
    };
    let add_ms = start.elapsed().as_secs_f64() * 1e3;
    batch.close().await.unwrap();
    let queues: Vec<&Queue> = std::iter::once(home).chain(there).collect();
    let t = run_on(&queues, members + 1).await;
    assert_eq!(t.done, members + 1, "every member and the callback ran");
    let cmds = snap(raw).await.since(&before).all_calls() as f64 / members as f64;
    let fired_ms = t
        .parent_started
        .unwrap()
        .duration_since(t.last_child_done.unwrap())
        .as_secs_f64()
        * 1e3;
    (add_ms, fired_ms, cmds)
}

#[tokio::main]
async fn main() {
    let children: usize = env_or("CHILDREN", 1000);
    let rounds: usize = env_or("ROUNDS", 5);
    let server = LocalServer::start().expect("start a local server");
    let client = Client::connect(&server.url()).await.unwrap();
    let mut raw = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let (mut adds, mut releases, mut flow_cmds, mut plain_cmds) = (vec![], vec![], vec![], vec![]);
    let (mut x_adds, mut x_releases, mut x_cmds) = (vec![], vec![], vec![]);
    // batches: [members on the batch's queue, on another queue] x [add, fire, commands]
    let mut b: [[Vec<f64>; 3]; 2] = Default::default();
    for r in 0..rounds {
        // plain jobs, run the same way: the baseline commands per job
        let q = client.queue(&format!("plain-{r}")).await.unwrap();
        let jobs: Vec<_> = (0..children).map(|i| json!({"i": i})).collect();
        let before = snap(&mut raw).await;
        q.enqueue_bulk(&jobs).await.unwrap();
        let t = run(&q, children).await;
        assert_eq!(t.done, children);
        let plain = snap(&mut raw).await.since(&before).all_calls() as f64 / children as f64;

        let q = client.queue(&format!("flow-{r}")).await.unwrap();
        let (add_ms, release_ms, flow) = measure(&mut raw, &q, None, &format!("f{r}"), children).await;
        println!(
            "{}",
            json!({"round": r, "children": children, "add_flow_ms": round(add_ms, 2),
                   "last_child_to_parent_start_ms": round(release_ms, 2),
                   "commands_per_child": round(flow, 2), "commands_per_plain_job": round(plain, 2)})
        );
        adds.push(add_ms);
        releases.push(release_ms);
        flow_cmds.push(flow);
        plain_cmds.push(plain);

        // the children on another queue: made there, and their ends
        // brought back, by relayed messages
        let home = client.queue(&format!("home-{r}")).await.unwrap();
        let there = client.queue(&format!("there-{r}")).await.unwrap();
        let (add_ms, release_ms, cmds) = measure(&mut raw, &home, Some(&there), &format!("x{r}"), children).await;
        println!(
            "{}",
            json!({"round": r, "children_on_another_queue": children, "add_flow_ms": round(add_ms, 2),
                   "last_child_to_parent_start_ms": round(release_ms, 2),
                   "commands_per_child": round(cmds, 2)})
        );
        x_adds.push(add_ms);
        x_releases.push(release_ms);
        x_cmds.push(cmds);

        // a batch of as many members, on its own queue and on another
        for (k, elsewhere) in [false, true].into_iter().enumerate() {
            let home = client.queue(&format!("bhome-{r}-{k}")).await.unwrap();
            let there = client.queue(&format!("bthere-{r}-{k}")).await.unwrap();
            let (add_ms, fired_ms, cmds) =
                measure_batch(&mut raw, &home, elsewhere.then_some(&there), &format!("b{r}"), children).await;
            println!(
                "{}",
                json!({"round": r, "batch_members": children, "on_another_queue": elsewhere,
                       "add_ms": round(add_ms, 2), "last_member_to_callback_start_ms": round(fired_ms, 2),
                       "commands_per_member": round(cmds, 2)})
            );
            for (v, x) in b[k].iter_mut().zip([add_ms, fired_ms, cmds]) {
                v.push(x);
            }
        }
    }
    println!("\nflow of {children} children and one parent, median of {rounds}:");
    println!("  add_flow (the whole graph, one call)      {:>8.2} ms", median(&adds));
    println!(
        "  last child's return -> parent's start     {:>8.2} ms",
        median(&releases)
    );
    println!(
        "  server commands per child / per plain job {:>8.2} / {:.2}",
        median(&flow_cmds),
        median(&plain_cmds)
    );
    println!("\nthe same, its children on another queue than the parent's:");
    println!(
        "  add_flow (and relaying the children there) {:>7.2} ms",
        median(&x_adds)
    );
    println!(
        "  last child's return -> parent's start     {:>8.2} ms",
        median(&x_releases)
    );
    println!("  server commands per child                 {:>8.2}", median(&x_cmds));
    for (k, what) in ["on the batch's queue", "on another queue (Batch::on)"]
        .iter()
        .enumerate()
    {
        println!("\nbatch of {children} members {what}, one add, median of {rounds}:");
        println!(
            "  add (one call, and relaying them there)   {:>8.2} ms",
            median(&b[k][0])
        );
        println!(
            "  last member's return -> callback's start  {:>8.2} ms",
            median(&b[k][1])
        );
        println!("  server commands per member                {:>8.2}", median(&b[k][2]));
    }
}
