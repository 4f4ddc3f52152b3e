//! Flows whose steps are on several queues, against a real server: each
//! queue's state changes in its own atomic call, and what one queue tells
//! another (make this step, this step ended, cancel it) goes by message
//! through the queue's outbox and the relay. A step still runs once, after
//! all its children ended; a message delivered twice is applied once;
//! failure policies, cancel, a taken job id and bad queues as on one
//! queue; a worker on each queue moves a flow on with no call by hand; a
//! message of a newer build waits for one, holding back only its queue.

mod common;

use std::time::Duration;

use common::{complete_as_old_process, outbox, queues, raw, unique};
use echomq::flow::{ChildOutcome, FlowSpec, OnChildFailure, Step, StepState};
use echomq::{Client, ClientOptions, EnqueueOptions, Error, HandlerError, Job, JobState, Lease, Queue, Worker};
use serde_json::{Value, json};

const LEASE: Duration = Duration::from_secs(30);

async fn claim(q: &Queue) -> Vec<Lease> {
    let mut l = q.claim(10, LEASE).await.unwrap();
    l.sort_by(|a, b| a.id().cmp(b.id()));
    l
}

fn ids(leases: &[Lease]) -> Vec<&str> {
    leases.iter().map(Lease::id).collect()
}

// The worked order over three queues: charge on A and reserve on B run
// first, email on the flow's own queue H once both ended, ship on A after
// email. Each queue's end reaches the flow by the relay; a step is no job
// on its queue before its children ended, and each is made once, even
// when every message is delivered twice.
#[tokio::test]
async fn a_flow_over_three_queues_runs_in_order_and_each_step_once() {
    let (s, _client, qs) = queues("span", 3).await;
    let (h, a, b) = (&qs[0], &qs[1], &qs[2]);
    let o = json!({"order": 7});
    let spec = FlowSpec::new()
        .id("o")
        .step(Step::new("charge", &o).unwrap().on(a))
        .step(Step::new("reserve", &o).unwrap().on(b))
        .step(Step::new("email", &o).unwrap().after("charge").after("reserve"))
        .step(Step::new("ship", &o).unwrap().on(a).after("email"));
    let flow = h.add_flow(&spec).await.unwrap();
    // add_flow relayed the leaves' messages itself
    assert!(outbox(&s, h).await.is_empty());
    let st = flow.status().await.unwrap();
    let got: Vec<_> = st
        .steps
        .iter()
        .map(|s| (s.name.as_str(), s.queue.as_str(), s.state))
        .collect();
    assert_eq!(
        got,
        [
            ("charge", a.name(), StepState::Pending),
            ("reserve", b.name(), StepState::Pending),
            ("email", h.name(), StepState::Waiting),
            ("ship", a.name(), StepState::Waiting),
        ]
    );
    assert!(claim(h).await.is_empty());
    let charge = claim(a).await;
    assert_eq!(ids(&charge), ["o:charge"]);
    assert_eq!(charge[0].decode::<Value>().unwrap(), o);
    let reserve = claim(b).await;
    assert_eq!(ids(&reserve), ["o:reserve"]);

    a.complete_with_result(&charge[0], &json!({"receipt": 1}))
        .await
        .unwrap();
    // the end waits on A's outbox until it is relayed
    let pending = outbox(&s, a).await;
    assert_eq!(pending.len(), 1);
    assert_eq!(flow.status().await.unwrap().state("charge"), Some(StepState::Completed));
    assert_eq!(a.relay().await.unwrap(), 1);
    // delivered again (a relay that died before taking it off): applied once
    let mut c = raw(&s).await;
    let _: () = redis::cmd("RPUSH")
        .arg(format!("emq:{{{}}}:outbox", a.name()))
        .arg(&pending[0])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(a.relay().await.unwrap(), 1);
    assert!(claim(h).await.is_empty(), "email waits for reserve");
    assert_eq!(flow.status().await.unwrap().state("email"), Some(StepState::Waiting));

    b.complete_with_result(&reserve[0], &"held").await.unwrap();
    assert_eq!(b.relay().await.unwrap(), 1);
    let email = claim(h).await;
    assert_eq!(ids(&email), ["o:email"]);
    let kids = flow.child_results::<Value>("email").await.unwrap();
    let got: Vec<_> = kids.iter().map(|c| (c.name.as_str(), &c.outcome)).collect();
    assert_eq!(
        got,
        [
            ("charge", &ChildOutcome::Completed(json!({"receipt": 1}))),
            ("reserve", &ChildOutcome::Completed(json!("held"))),
        ]
    );

    h.complete(&email[0]).await.unwrap();
    // ship is made on A by message: not there before the relay
    let made = outbox(&s, h).await;
    assert_eq!(made.len(), 1);
    assert!(claim(a).await.is_empty());
    assert_eq!(h.relay().await.unwrap(), 1);
    // the same node message again: its receipt makes it a no-op
    let _: () = redis::cmd("RPUSH")
        .arg(format!("emq:{{{}}}:outbox", h.name()))
        .arg(&made[0])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(h.relay().await.unwrap(), 1);
    let ship = claim(a).await;
    assert_eq!(ids(&ship), ["o:ship"]);
    assert!(claim(a).await.is_empty(), "ship was made once");
    assert_eq!(flow.status().await.unwrap().state("ship"), Some(StepState::Active));
    a.complete(&ship[0]).await.unwrap();
    a.relay().await.unwrap();
    let st = flow.status().await.unwrap();
    assert!(st.is_ended(), "{st:?}");
    assert_eq!(st.count(StepState::Completed), 4);
    for q in [h, a, b] {
        assert!(outbox(&s, q).await.is_empty(), "{}", q.name());
    }
}

// A child on another queue that fails for good fails its parent on a
// third queue along a FailParent edge (the parent's record is written
// there, failed, without running), and runs one along a RunParent edge.
// A step whose job id its queue already holds fails there, as on one
// queue.
#[tokio::test]
async fn failures_travel_across_queues_along_their_edges() {
    let (s, _client, qs) = queues("fail", 3).await;
    let (h, a, b) = (&qs[0], &qs[1], &qs[2]);
    let spec = FlowSpec::new()
        .id("f")
        .step(Step::new("kid", &1).unwrap().on(a))
        .step(Step::new("strict", &2).unwrap().on(b).after("kid"))
        .step(
            Step::new("lenient", &3)
                .unwrap()
                .on(b)
                .after_with("kid", OnChildFailure::RunParent),
        );
    let flow = h.add_flow(&spec).await.unwrap();
    let kid = claim(a).await;
    a.fail(&kid[0], "card declined").await.unwrap();
    a.relay().await.unwrap();
    let st = flow.status().await.unwrap();
    assert_eq!(st.state("strict"), Some(StepState::Failed));
    let lenient = claim(b).await;
    assert_eq!(ids(&lenient), ["f:lenient"], "only the lenient parent runs");
    let kids = flow.child_results::<Value>("lenient").await.unwrap();
    assert_eq!(kids[0].outcome, ChildOutcome::Failed("card declined".into()));
    let strict = b.job("f:strict").await.unwrap();
    assert_eq!(strict.state, JobState::Failed);
    assert_eq!(strict.last_error.as_deref(), Some("child kid failed"));
    b.complete(&lenient[0]).await.unwrap();
    b.relay().await.unwrap();
    assert!(flow.status().await.unwrap().is_ended());

    // A's queue already holds the id a step would have there.
    a.enqueue_with(&0, &EnqueueOptions::new().id("t:kid")).await.unwrap();
    let spec = FlowSpec::new()
        .id("t")
        .step(Step::new("kid", &1).unwrap().on(a))
        .step(Step::new("up", &2).unwrap().after("kid"));
    let flow = h.add_flow(&spec).await.unwrap();
    // the step's message came back as its failure; the relay went on with it
    let st = flow.status().await.unwrap();
    assert_eq!(st.state("kid"), Some(StepState::Failed), "{st:?}");
    assert_eq!(st.state("up"), Some(StepState::Failed));
    let kids = flow.child_results::<Value>("up").await.unwrap();
    assert_eq!(
        kids[0].outcome,
        ChildOutcome::Failed("its job id was taken by another job".into())
    );
    assert_eq!(
        a.job("t:kid").await.unwrap().state,
        JobState::Pending,
        "the other job is left as it was"
    );
    drop(s);
}

// Cancelling a flow sends a cancel to each step on another queue that has
// not ended: a pending one ends cancelled there, a waiting one is written
// cancelled there, a running one is asked to stop.
#[tokio::test]
async fn cancel_reaches_steps_on_other_queues() {
    let (_s, _client, qs) = queues("cancel", 3).await;
    let (h, a, b) = (&qs[0], &qs[1], &qs[2]);
    let spec = FlowSpec::new()
        .id("c")
        .step(Step::new("p1", &1).unwrap().on(a))
        .step(Step::new("p2", &2).unwrap().on(a))
        .step(Step::new("top", &3).unwrap().on(b).after("p1").after("p2"));
    let flow = h.add_flow(&spec).await.unwrap();
    let running = a.claim(1, LEASE).await.unwrap();
    assert_eq!(running.len(), 1);
    let c = flow.cancel().await.unwrap();
    assert_eq!((c.cancelled, c.requested, c.sent), (1, 0, 3), "{c:?}");
    let other = if running[0].id() == "c:p1" { "c:p2" } else { "c:p1" };
    assert_eq!(a.job(other).await.unwrap().state, JobState::Cancelled);
    assert_eq!(b.job("c:top").await.unwrap().state, JobState::Cancelled);
    assert!(a.job(running[0].id()).await.unwrap().cancel_requested_ms.is_some());
    // the running one ends cancelled on its next settlement but a completion
    a.fail(&running[0], "stopped").await.unwrap();
    a.relay().await.unwrap();
    let st = flow.status().await.unwrap();
    assert!(st.is_ended(), "{st:?}");
    assert_eq!(st.count(StepState::Cancelled), 3);
}

// A step on a queue of another prefix or another client is refused, and
// nothing is written.
#[tokio::test]
async fn a_step_on_a_foreign_queue_is_refused() {
    let (s, client, qs) = queues("bad", 1).await;
    let h = &qs[0];
    let other_prefix = client
        .queue_with("elsewhere", echomq::QueueOptions::new().prefix("other"))
        .await
        .unwrap();
    let other_client = Client::connect_with(&s.url(), ClientOptions::default()).await.unwrap();
    let other_link = other_client.queue("elsewhere").await.unwrap();
    for q in [&other_prefix, &other_link] {
        let spec = FlowSpec::new()
            .id("x")
            .step(Step::new("a", &1).unwrap().on(q))
            .step(Step::new("b", &1).unwrap().after("a"));
        let e = h.add_flow(&spec).await.unwrap_err();
        assert!(matches!(e, Error::InvalidFlow(_)), "{e:?}");
    }
    assert!(matches!(
        h.flow("x").unwrap().status().await,
        Err(Error::FlowNotFound(_))
    ));
    // a step "on" the flow's own queue is an ordinary step
    let spec = FlowSpec::new().id("y").step(Step::new("a", &1).unwrap().on(h));
    h.add_flow(&spec).await.unwrap();
    assert_eq!(ids(&claim(h).await), ["y:a"]);
}

// One worker serving three queues runs the order with no call by hand:
// the maintenance of each queue relays its messages, and a parent on
// another queue than its flow's reads its children's results.
#[tokio::test]
async fn workers_move_a_flow_over_queues_on_their_own() {
    let (_s, _client, qs) = queues("work", 3).await;
    let (h, a, b) = (&qs[0], &qs[1], &qs[2]);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let mut worker = Worker::new();
    for q in [h, a, b] {
        let tx = tx.clone();
        worker = worker.queue(q.clone(), move |job: Job<Value>| {
            let tx = tx.clone();
            async move {
                let kids = job.child_results::<String>().await?;
                let got: Vec<String> = kids
                    .into_iter()
                    .map(|c| match c.outcome {
                        ChildOutcome::Completed(r) => r,
                        other => format!("{other:?}"),
                    })
                    .collect();
                let _ = tx.send(format!("{}{got:?}", job.id()));
                Ok::<_, HandlerError>(format!("{}-ok", job.id()))
            }
        });
    }
    let handle = worker.spawn().unwrap();
    let spec = FlowSpec::new()
        .id("w")
        .step(Step::new("charge", &1).unwrap().on(a))
        .step(Step::new("reserve", &2).unwrap().on(b))
        .step(Step::new("email", &3).unwrap().after("charge").after("reserve"))
        .step(Step::new("ship", &4).unwrap().on(b).after("email"));
    let flow = h.add_flow(&spec).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let got = tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("a step ran after {seen:?}"));

        seen.push(got.unwrap());
    }
    let (leaves, rest) = seen.split_at(2);
    let mut leaves = leaves.to_vec();
    leaves.sort();
    assert_eq!(leaves, ["w:charge[]", "w:reserve[]"]);
    assert_eq!(
        rest,
        [r#"w:email["w:charge-ok", "w:reserve-ok"]"#, r#"w:ship["w:email-ok"]"#]
    );
    // ship's end reaches the flow by the relay too
    assert!(
        common::eventually(Duration::from_secs(10), || async {
            flow.status().await.unwrap().is_ended()
        })
        .await,
        "{:?}",
        flow.status().await
    );
    handle.shutdown().await.unwrap();
}

// A step's end on a queue its worker's maintenance will not look at for
// seconds (a reap interval of a minute, its first look done, no relay of
// that queue in the workers' process before) still reaches its parent at
// once: the
// settlement's reply says it left a message on the outbox, and the worker
// relays it within RELAY_HOT_INTERVAL instead of at its next look.
#[tokio::test]
async fn a_steps_end_is_relayed_at_once_not_at_the_next_look() {
    let (s, producer, qs) = queues("prompt", 2).await;
    let (h, a) = (&qs[0], &qs[1]);
    // the workers on a client of their own: add_flow's relay, which
    // delivered the leaf to `a`, warmed only the producer's maintenance
    let workers = Client::connect(&s.url()).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let mut worker = Worker::new().reap_interval(Duration::from_secs(60));
    for q in [h, a] {
        let q = workers.queue(q.name()).await.unwrap();
        let tx = tx.clone();
        worker = worker.queue(q, move |job: Job<Value>| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(job.id().to_owned());
                Ok::<_, HandlerError>(json!(job.id()))
            }
        });
    }
    let handle = worker.spawn().unwrap();
    // The workers' first looks (each reads its queue's outbox length) are
    // behind us: from here the next look at `a` is its schedules' or its
    // idle look, 5 s away (maintenance::IDLE_INTERVAL).
    let looked = common::eventually(Duration::from_secs(10), || async {
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut raw(&s).await)
            .await
            .unwrap();
        let llen = stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_llen:calls="))
            .and_then(|v| v.split(',').next()?.parse::<u64>().ok());
        llen.unwrap_or(0) >= 2
    })
    .await;
    assert!(looked, "the workers never looked at their queues");
    let spec = FlowSpec::new()
        .id("p")
        .step(Step::new("leaf", &1).unwrap().on(a))
        .step(Step::new("top", &2).unwrap().after("leaf"));
    h.add_flow(&spec).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        // well inside the 5 s before the next look (the relay's hot
        // interval is 20 ms; the bound leaves room for a loaded machine)
        let got = tokio::time::timeout(Duration::from_secs(3), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("only {seen:?} ran: the leaf's end waited for a look"));
        seen.push(got.unwrap());
    }
    assert_eq!(seen, ["p:leaf", "p:top"]);
    handle.shutdown().await.unwrap();
    drop(producer);
}

// A message this build does not know (a newer process wrote it) stays on
// its outbox with those behind it for the same queue; messages for other
// queues go on.
#[tokio::test]
async fn an_unknown_message_stays_and_blocks_only_its_queue() {
    let (s, _client, qs) = queues("unknown", 3).await;
    let (h, a, b) = (&qs[0], &qs[1], &qs[2]);
    let spec = FlowSpec::new()
        .id("u")
        .step(Step::new("x", &1).unwrap().on(a))
        .step(Step::new("y", &2).unwrap().on(b));
    // the newer message goes first, then the flow's own two
    let mut c = raw(&s).await;
    let newer = format!("{}\x1e1:z1:u", a.name());
    let _: () = redis::cmd("RPUSH")
        .arg(format!("emq:{{{}}}:outbox", h.name()))
        .arg(&newer)
        .query_async(&mut c)
        .await
        .unwrap();
    let flow = h.add_flow(&spec).await.unwrap();
    let st = flow.status().await.unwrap();
    assert_eq!(st.state("y"), Some(StepState::Pending));
    assert_eq!(ids(&claim(b).await), ["u:y"]);
    assert!(claim(a).await.is_empty(), "x waits behind the unknown message");
    let left = outbox(&s, h).await;
    assert_eq!(left.len(), 2);
    assert_eq!(left[0], newer.as_bytes());
    assert_eq!(h.relay().await.unwrap(), 0);
    // a newer process delivers it and takes it off: x goes on
    let _: () = redis::cmd("LPOP")
        .arg(format!("emq:{{{}}}:outbox", h.name()))
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(h.relay().await.unwrap(), 1);
    assert_eq!(ids(&claim(a).await), ["u:x"]);
}

// A child added to a waiting step may be on another queue: it is made
// there by message, and the step waits for it as for the others.
#[tokio::test]
async fn a_child_on_another_queue_is_added_to_a_waiting_step() {
    let (_s, _client, qs) = queues("extend", 2).await;
    let (h, a) = (&qs[0], &qs[1]);
    let spec = FlowSpec::new()
        .id("e")
        .step(Step::new("kid", &1).unwrap())
        .step(Step::new("top", &2).unwrap().after("kid"));
    let flow = h.add_flow(&spec).await.unwrap();
    flow.add_children("top", &[Step::new("far", &3).unwrap().on(a)])
        .await
        .unwrap();
    let far = claim(a).await;
    assert_eq!(ids(&far), ["e:far"], "made on its queue at once");
    let kid = claim(h).await;
    h.complete(&kid[0]).await.unwrap();
    assert!(claim(h).await.is_empty(), "top waits for far");
    a.complete_with_result(&far[0], &"there").await.unwrap();
    a.relay().await.unwrap();
    let top = claim(h).await;
    assert_eq!(ids(&top), ["e:top"]);
    let kids = flow.child_results::<Value>("top").await.unwrap();
    assert_eq!(kids[1].outcome, ChildOutcome::Completed(json!("there")));
}

// Removing a flow sends a remove to each step on another queue that has
// not ended: a pending job there is deleted.
#[tokio::test]
async fn remove_reaches_steps_on_other_queues() {
    let (_s, _client, qs) = queues("remove", 2).await;
    let (h, a) = (&qs[0], &qs[1]);
    let spec = FlowSpec::new()
        .id("r")
        .step(Step::new("leaf", &1).unwrap().on(a))
        .step(Step::new("top", &2).unwrap().on(a).after("leaf"));
    let flow = h.add_flow(&spec).await.unwrap();
    assert_eq!(a.job("r:leaf").await.unwrap().state, JobState::Pending);
    let r = flow.remove().await.unwrap();
    assert_eq!((r.removed, r.running, r.sent), (1, 0, 1), "{r:?}");
    assert!(matches!(a.job("r:leaf").await, Err(Error::JobNotFound(_))));
    assert!(claim(a).await.is_empty());
    assert!(matches!(flow.status().await, Err(Error::FlowNotFound(_))));
}

// Flows of two queues that mint the same number, each with a step on a
// third queue: a minted id of a flow with steps elsewhere names its queue
// ("N@QUEUE"), so neither flow takes the other's job id there.
#[tokio::test]
async fn minted_flow_ids_of_two_queues_do_not_collide_elsewhere() {
    let (_s, _client, qs) = queues("fmint", 3).await;
    let r = &qs[2];
    let mut ids = Vec::new();
    for h in &qs[..2] {
        let spec = FlowSpec::new()
            .step(Step::new("there", &json!(h.name())).unwrap().on(r))
            .step(Step::new("here", &1).unwrap().after("there"));
        let flow = h.add_flow(&spec).await.unwrap();
        assert_eq!(flow.id(), format!("1@{}", h.name()));
        let job = r.job(&flow.job_id("there")).await.unwrap();
        assert_eq!(job.state, JobState::Pending);
        assert_eq!(job.payload, serde_json::to_vec(&json!(h.name())).unwrap());
        ids.push(flow.job_id("there"));
    }
    assert_ne!(ids[0], ids[1]);
    // a flow on one queue keeps its plain number, and takes no step on
    // another queue later (its id names no queue)
    let plain = qs[0]
        .add_flow(
            &FlowSpec::new()
                .step(Step::new("a", &1).unwrap())
                .step(Step::new("top", &1).unwrap().after("a")),
        )
        .await
        .unwrap();
    assert_eq!(plain.id(), "2");
    let later = plain
        .add_children("top", &[Step::new("b", &1).unwrap().on(r)])
        .await
        .unwrap_err();
    assert!(matches!(later, Error::InvalidFlow(_)), "{later}");
}

// A queue whose name holds ':' (which no flow id may) mints "N@NAME" with
// it escaped, and a parent's handler reads its children's results by the
// job's flow field, not by cutting its id.
#[tokio::test]
async fn a_minted_id_escapes_the_queue_name_and_results_still_reach_the_parent() {
    let (_s, client, qs) = queues("fcolon", 1).await;
    let r = &qs[0];
    let h = client.queue(&unique("emails:high%")).await.unwrap();
    let spec = FlowSpec::new()
        .step(Step::new("there", &1).unwrap().on(r))
        .step(Step::new("here", &2).unwrap().after("there"));
    let flow = h.add_flow(&spec).await.unwrap();
    let escaped = h.name().replace('%', "%25").replace(':', "%3A");
    assert_eq!(flow.id(), format!("1@{escaped}"));
    assert!(h.flow(flow.id()).is_ok(), "the minted id is a valid flow id");
    let got: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let seen = got.clone();
    let worker = Worker::new()
        .queue(r.clone(), |_job: Job<Value>| async { Ok::<_, HandlerError>("done") })
        .queue(h.clone(), move |job: Job<Value>| {
            let seen = seen.clone();
            async move {
                for c in job.child_results::<String>().await? {
                    seen.lock().unwrap().push(format!("{}={:?}", c.name, c.outcome));
                }
                Ok::<_, HandlerError>(())
            }
        })
        .spawn()
        .unwrap();
    let ended = || async { flow.status().await.is_ok_and(|s| s.is_ended()) };
    assert!(common::eventually(Duration::from_secs(10), ended).await);
    worker.shutdown().await.unwrap();
    assert_eq!(
        *got.lock().unwrap(),
        [format!("there={:?}", ChildOutcome::Completed("done".to_owned()))]
    );
}

// Obliterating the queue of a flow's steps ends them "removed" at home, the
// leased one as the waiting one, so the step after them fails (the default
// policy) instead of waiting for good; obliterating a flow's own queue makes
// none of its steps that were still to be made on another queue.
#[tokio::test]
async fn obliterating_a_queue_of_a_flow_tells_its_home_and_makes_nothing() {
    let (s, _client, qs) = queues("oblit", 3).await;
    let (h, a, b) = (&qs[0], &qs[1], &qs[2]);
    let spec = FlowSpec::new()
        .id("o")
        .step(Step::new("charge", &1).unwrap().on(a))
        .step(Step::new("reserve", &2).unwrap().on(a))
        .step(Step::new("email", &3).unwrap().after("charge").after("reserve"));
    let flow = h.add_flow(&spec).await.unwrap();
    let leased = a.claim(1, LEASE).await.unwrap();
    assert_eq!(leased.len(), 1);
    a.obliterate(true).await.unwrap();
    assert!(outbox(&s, a).await.is_empty());
    let st = flow.status().await.unwrap();
    assert_eq!(st.state("charge"), Some(StepState::Removed));
    assert_eq!(st.state("reserve"), Some(StepState::Removed));
    assert_eq!(st.state("email"), Some(StepState::Failed));
    // the stale worker's completion writes nothing
    assert!(matches!(a.complete(&leased[0]).await, Err(Error::JobNotFound(_))));

    // A flow whose step on B waits for one on H: H's completion leaves the
    // message that makes it on H's outbox (no process relays here), and
    // obliterating H drops it rather than make a job whose flow is gone.
    let spec = FlowSpec::new()
        .id("p")
        .step(Step::new("pack", &1).unwrap())
        .step(Step::new("ship", &2).unwrap().on(b).after("pack"));
    h.add_flow(&spec).await.unwrap();
    let pack = claim(h).await;
    assert_eq!(ids(&pack), ["p:pack"]);
    h.complete(&pack[0]).await.unwrap();
    assert_eq!(outbox(&s, h).await.len(), 1);
    h.obliterate(false).await.unwrap();
    assert!(matches!(b.job("p:ship").await, Err(Error::JobNotFound(_))));
    assert!(claim(b).await.is_empty());
}

// A step on another queue that an older process ended without sending its
// end home (its record moved, no message, no `fd`): the sweep of the
// step's queue sends it, and the relay brings it home, where the parent
// becomes pending with the child's result. A second sweep sends nothing.
#[tokio::test]
async fn the_sweep_sends_home_the_end_of_a_remote_step_an_old_process_missed() {
    let (s, _client, qs) = queues("rsweep", 2).await;
    let (h, a) = (&qs[0], &qs[1]);
    let spec = FlowSpec::new()
        .id("o")
        .step(Step::new("charge", &1).unwrap().on(a))
        .step(Step::new("email", &2).unwrap().after("charge"));
    let flow = h.add_flow(&spec).await.unwrap();
    // o:charge completed by an old process: record and sets moved, nothing told
    complete_as_old_process(&s, a, "o:charge", Some("\"paid\"")).await;
    assert!(outbox(&s, a).await.is_empty());
    assert!(a.sweep(100).await.unwrap().repaired >= 1);
    assert_eq!(outbox(&s, a).await.len(), 1);
    assert_eq!(a.relay().await.unwrap(), 1);
    assert_eq!(flow.status().await.unwrap().state("email"), Some(StepState::Pending));
    let email = claim(h).await;
    assert_eq!(ids(&email), ["o:email"]);
    a.sweep(100).await.unwrap();
    assert!(outbox(&s, a).await.is_empty(), "told once");
}
