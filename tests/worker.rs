//! `Worker`: one worker over many queues, with one pool of handlers and
//! slots, one blocking wake-up and the client's one maintenance task.
//! Each queue keeps its own handler and payload type; none with work is
//! starved; weights and strict order decide who gets free slots; idle
//! queues cost about one blocking call per poll interval between them;
//! shutdown hands back what was leased ahead on every queue.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{eventually, unique};
use echomq::server::LocalServer;
use echomq::{Client, Error, Job, JobState, Order, Queue, Worker, WorkerEvent};

/// A private server and a client on it.
async fn client() -> (LocalServer, Client) {
    let server = LocalServer::start().expect("start a local server (run scripts/test to install one)");
    let client = Client::connect(&server.url()).await.unwrap();
    (server, client)
}

/// `n` uniquely named queues of `client`.
async fn queues(client: &Client, n: usize) -> Vec<Queue> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        out.push(client.queue(&unique(&format!("w{i}"))).await.unwrap());
    }
    out
}

/// Calls of `command` (lowercase) so far, from `INFO commandstats`.
async fn calls(c: &mut redis::aio::MultiplexedConnection, commands: &[&str]) -> u64 {
    let stats: String = redis::cmd("INFO").arg("commandstats").query_async(c).await.unwrap();
    stats
        .lines()
        .filter(|l| commands.iter().any(|c| l.starts_with(&format!("cmdstat_{c}:"))))
        .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
        .sum()
}

/// The order handlers started in, by queue name.
#[derive(Clone, Default)]
struct Starts(Arc<Mutex<Vec<String>>>);

impl Starts {
    fn push(&self, queue: &str) {
        self.0.lock().unwrap().push(queue.to_owned());
    }
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn first(&self, n: usize) -> Vec<String> {
        self.0.lock().unwrap().iter().take(n).cloned().collect()
    }
}

// Two queues with different payload types each run their own handler; events name the queue; a payload of the wrong type fails its job.
#[tokio::test]
async fn two_queues_two_payload_types() {
    let (_s, client) = client().await;
    let nums = client.queue(&unique("nums")).await.unwrap();
    let words = client.queue(&unique("words")).await.unwrap();
    let done = Arc::new(Mutex::new(Vec::new()));
    let claimed = Arc::new(Mutex::new(Vec::new()));
    let (d1, d2, c) = (done.clone(), done.clone(), claimed.clone());
    let worker = Worker::new()
        .queue(nums.clone(), move |job: Job<u32>| {
            let d = d1.clone();
            async move {
                d.lock().unwrap().push(format!("n{}", job.payload() * 2));
                Ok(())
            }
        })
        .queue(words.clone(), move |job: Job<String>| {
            let d = d2.clone();
            async move {
                d.lock().unwrap().push(format!("w{}", job.payload().to_uppercase()));
                Ok(())
            }
        })
        .observer(move |e| {
            if let WorkerEvent::Claimed { queue, id, .. } = e {
                c.lock().unwrap().push((queue.to_string(), id.to_string()));
            }
        })
        .spawn()
        .unwrap();
    let n = nums.enqueue(&21u32).await.unwrap();
    let w = words.enqueue("hi").await.unwrap();
    let bad = nums.enqueue("not a number").await.unwrap();
    assert!(common::completes(&nums, &n).await && common::completes(&words, &w).await);
    assert!(
        eventually(Duration::from_secs(10), || async {
            nums.job(&bad).await.unwrap().state == JobState::Failed
        })
        .await
    );
    worker.shutdown().await.unwrap();
    let mut done = done.lock().unwrap().clone();
    done.sort();
    assert_eq!(done, vec!["n42", "wHI"]);
    let claimed = claimed.lock().unwrap().clone();
    assert!(claimed.contains(&(nums.name().to_owned(), n)));
    assert!(claimed.contains(&(words.name().to_owned(), w)));
    assert!(claimed.contains(&(nums.name().to_owned(), bad)));
}

// A worker over 50 queues serves every one of them (none starved): all 4 jobs of each complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_queues_are_all_served() {
    let (_s, client) = client().await;
    let qs = queues(&client, 50).await;
    for q in &qs {
        q.enqueue_bulk(&[1u32, 2, 3, 4]).await.unwrap();
    }
    let starts = Starts::default();
    let mut w = Worker::new().concurrency(8).poll_interval(Duration::from_millis(200));
    for q in &qs {
        let s = starts.clone();
        w = w.queue(q.clone(), move |job: Job<u32>| {
            s.push(job.queue());
            async { Ok(()) }
        });
    }
    let worker = w.spawn().unwrap();
    assert!(eventually(Duration::from_secs(20), || async { starts.len() >= 200 }).await);
    worker.shutdown().await.unwrap();
    let mut per_queue: HashMap<String, usize> = HashMap::new();
    for name in starts.first(usize::MAX) {
        *per_queue.entry(name).or_default() += 1;
    }
    for q in &qs {
        assert_eq!(per_queue.get(q.name()), Some(&4), "queue {}", q.name());
        assert_eq!(q.counts().await.unwrap().completed, 4);
    }
}

// With a backlog on each queue, weights 1:2:4 give each queue a share of the first 140 starts within 5 points of 1/7, 2/7 and 4/7.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_are_honoured() {
    let (_s, client) = client().await;
    let qs = queues(&client, 3).await;
    let backlog: Vec<u32> = (0..150).collect();
    for q in &qs {
        q.enqueue_bulk(&backlog).await.unwrap();
    }
    let starts = Starts::default();
    let mut w = Worker::new().concurrency(4);
    for (q, weight) in qs.iter().zip([1, 2, 4]) {
        let s = starts.clone();
        w = w.queue_weighted(
            q.clone(),
            move |job: Job<u32>| {
                s.push(job.queue());
                async { Ok(()) }
            },
            weight,
        );
    }
    let worker = w.spawn().unwrap();
    const K: usize = 140;
    assert!(eventually(Duration::from_secs(20), || async { starts.len() >= K }).await);
    worker.shutdown().await.unwrap();
    let first = starts.first(K);
    for (q, weight) in qs.iter().zip([1.0, 2.0, 4.0]) {
        let share = first.iter().filter(|n| *n == q.name()).count() as f64 / K as f64;
        let want = weight / 7.0;
        assert!(
            (share - want).abs() <= 0.05,
            "queue of weight {weight}: share {share:.3}, want {want:.3} ± 0.05"
        );
    }
}

// Strict order serves the second queue only when the first has no ready work, and a job that arrives on the first goes ahead of the second's backlog.
#[tokio::test]
async fn strict_order_serves_the_first_queue_first() {
    let (_s, client) = client().await;
    let qs = queues(&client, 2).await;
    let (hi, lo) = (qs[0].clone(), qs[1].clone());
    hi.enqueue_bulk(&[1u32, 2, 3]).await.unwrap();
    lo.enqueue_bulk(&[1u32, 2, 3, 4, 5]).await.unwrap();
    let starts = Starts::default();
    let (s1, s2, hi2) = (starts.clone(), starts.clone(), hi.clone());
    let worker = Worker::new()
        .order(Order::Strict)
        .concurrency(1)
        .prefetch(0)
        .queue(hi.clone(), move |job: Job<u32>| {
            s1.push(job.queue());
            async { Ok(()) }
        })
        .queue(lo.clone(), move |job: Job<u32>| {
            s2.push(job.queue());
            let hi = hi2.clone();
            async move {
                if *job.payload() == 2 {
                    hi.enqueue(&9u32).await?;
                }
                // Simulated work, long enough for the wake-up to see the push.
                tokio::time::sleep(Duration::from_millis(150)).await;
                Ok(())
            }
        })
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(20), || async { starts.len() >= 9 }).await);
    worker.shutdown().await.unwrap();
    let (h, l) = (hi.name().to_owned(), lo.name().to_owned());
    assert_eq!(
        starts.first(9),
        [&h, &h, &h, &l, &l, &h, &l, &l, &l].map(String::clone),
        "hi's backlog, lo until hi has work again, hi's new job, lo's rest"
    );
}

// 50 idle queues cost about one BLPOP per poll interval between them, one connection for the wake-up, and no claim storm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_queues_cost_one_blocking_call_per_poll() {
    let (server, client) = client().await;
    let mut raw = common::raw(&server).await;
    let qs = queues(&client, 50).await;
    let before_clients = connected_clients(&mut raw).await;
    let poll = Duration::from_millis(100);
    let mut w = Worker::new().poll_interval(poll).reaper(false);
    for q in &qs {
        w = w.queue(q.clone(), |_job: Job<u32>| async { Ok(()) });
    }
    let worker = w.spawn().unwrap();
    // Started: every queue claimed once and found empty, and the wake-up blocks.
    assert!(
        eventually(Duration::from_secs(10), || {
            let mut r = raw.clone();
            async move { calls(&mut r, &["blpop"]).await >= 3 }
        })
        .await
    );
    let (b0, s0) = (calls(&mut raw, &["blpop"]).await, calls(&mut raw, &["fcall"]).await);
    let window = Duration::from_secs(1);
    tokio::time::sleep(window).await;
    let (b1, s1) = (calls(&mut raw, &["blpop"]).await, calls(&mut raw, &["fcall"]).await);
    let polls = (window.as_millis() / poll.as_millis()) as u64;
    let (blpops, scripts) = (b1 - b0, s1 - s0);
    assert!(
        blpops <= 2 * polls + 2,
        "{blpops} BLPOPs in {window:?} at a {poll:?} poll interval"
    );
    assert!(
        scripts <= polls + 3,
        "{scripts} script calls in {window:?} with 50 idle queues"
    );
    assert!(
        connected_clients(&mut raw).await <= before_clients + 1,
        "one blocking connection for all the queues"
    );
    // A push wakes the worker within a poll interval's fraction: the wake-up names the queue.
    let id = qs[37].enqueue(&1u32).await.unwrap();
    assert!(common::completes(&qs[37], &id).await);
    worker.shutdown().await.unwrap();
}

async fn connected_clients(c: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO").arg("clients").query_async(c).await.unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

// Graceful shutdown hands back the jobs leased ahead on every queue, unstarted, and the running one.
#[tokio::test]
async fn shutdown_releases_prefetched_jobs_of_every_queue() {
    let (_s, client) = client().await;
    let qs = queues(&client, 2).await;
    for q in &qs {
        q.enqueue_bulk(&[1u32, 2, 3, 4, 5, 6]).await.unwrap();
    }
    let starts = Starts::default();
    let mut w = Worker::new()
        .concurrency(1)
        .prefetch(5)
        .shutdown_timeout(Duration::from_millis(50));
    for q in &qs {
        let s = starts.clone();
        w = w.queue(q.clone(), move |job: Job<u32>| {
            s.push(job.queue());
            async move {
                // Runs until shutdown's grace period cancels it (its job is then released).
                job.cancellation().cancelled().await;
                Err::<(), _>("cancelled".into())
            }
        });
    }
    let worker = w.spawn().unwrap();
    let active = || async {
        let mut n = Vec::new();
        for q in &qs {
            n.push(q.counts().await.unwrap().active);
        }
        n
    };
    assert!(
        eventually(Duration::from_secs(10), || async {
            active().await.iter().sum::<u64>() == 6
        })
        .await
    );
    assert!(
        active().await.iter().all(|n| *n > 0),
        "both queues lease ahead: {:?}",
        active().await
    );
    worker.shutdown().await.unwrap();
    assert_eq!(starts.len(), 1, "one handler ran; the jobs leased ahead never started");
    for q in &qs {
        let c = q.counts().await.unwrap();
        assert_eq!((c.active, c.pending), (0, 6), "queue {}", q.name());
    }
}

// A worker refuses, before it starts, no queue, a queue added twice, a weight of 0 or over MAX_WEIGHT, and queues of two clients.
#[tokio::test]
async fn bad_workers_are_refused() {
    let (server, client) = client().await;
    let q = client.queue(&unique("bad")).await.unwrap();
    let h = |_job: Job<u32>| async { Ok(()) };
    let refused = |r: echomq::Result<echomq::WorkerHandle>, name: &str| match r {
        Err(Error::InvalidOption { name: n, .. }) => assert_eq!(n, name),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("accepted"),
    };
    refused(Worker::new().spawn(), "queue");
    refused(Worker::new().queue(q.clone(), h).queue(q.clone(), h).spawn(), "queue");
    refused(Worker::new().queue_weighted(q.clone(), h, 0).spawn(), "weight");
    refused(
        Worker::new()
            .queue_weighted(q.clone(), h, echomq::worker::MAX_WEIGHT + 1)
            .spawn(),
        "weight",
    );
    let other = Client::connect(&server.url()).await.unwrap();
    let q2 = other.queue(&unique("other")).await.unwrap();
    refused(Worker::new().queue(q.clone(), h).queue(q2, h).spawn(), "queue");
    refused(Worker::new().queue(q, h).concurrency(0).spawn(), "concurrency");
}

// A paused queue of a worker gives nothing while the others are served, and its jobs run once it is resumed.
#[tokio::test]
async fn a_paused_queue_waits_for_resume() {
    let (_s, client) = client().await;
    let qs = queues(&client, 2).await;
    let (paused, open) = (qs[0].clone(), qs[1].clone());
    paused.pause().await.unwrap();
    let mut w = Worker::new().poll_interval(Duration::from_secs(30));
    for q in &qs {
        w = w.queue(q.clone(), |_job: Job<u32>| async { Ok(()) });
    }
    let worker = w.spawn().unwrap();
    let held = paused.enqueue(&1u32).await.unwrap();
    let served = open.enqueue(&2u32).await.unwrap();
    assert!(common::completes(&open, &served).await);
    assert_eq!(paused.job(&held).await.unwrap().state, JobState::Pending);
    paused.resume().await.unwrap();
    assert!(common::completes(&paused, &held).await);
    worker.shutdown().await.unwrap();
}

// A queue that goes idle while the wake-up blocks on the others is heard at once (a push to the worker's own wake list ends the wait), not after the poll interval.
#[tokio::test]
async fn a_queue_gone_idle_is_heard_at_once() {
    let (_s, client) = client().await;
    let qs = queues(&client, 2).await;
    let worker = Worker::new()
        .poll_interval(Duration::from_secs(30))
        .queue(qs[0].clone(), |_job: Job<u32>| async {
            // Long enough for the wake-up to block on the other queue alone.
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok(())
        })
        .queue(qs[1].clone(), |_job: Job<u32>| async { Ok(()) })
        .spawn()
        .unwrap();
    for n in [1u32, 2, 3] {
        let id = qs[0].enqueue(&n).await.unwrap();
        let info = qs[0].wait(&id, Duration::from_secs(5)).await.unwrap();
        assert_eq!(info.state, JobState::Completed);
    }
    worker.shutdown().await.unwrap();
}
