//! Flows against a real server: a parent enqueued once, only after every
//! child it waits on ended, reading their results; each edge's failure
//! policy; a child of several parents; cancel and remove; children added
//! to a step that waits; fencing and retention;
//! bad graphs refused with nothing written; a queue without flows left as
//! it was; handlers reading their children's results in a worker.

mod common;

use std::time::Duration;

use common::{complete_as_old_process, past, raw, setup, setup_with, snapshot};
use echomq::flow::{ChildOutcome, FlowSpec, MAX_STEPS, OnChildFailure, Step, StepState};
use echomq::{Consumer, EnqueueOptions, Error, HandlerError, Job, JobState, Lease, Queue, QueueOptions, Retention};
use serde_json::{Value, json};

const LEASE: Duration = Duration::from_secs(30);

/// Claims up to `n` pending jobs, sorted by id.
async fn claim(q: &Queue, n: usize) -> Vec<Lease> {
    let mut l = q.claim(n, LEASE).await.unwrap();
    l.sort_by(|a, b| a.id().cmp(b.id()));
    l
}

fn ids(leases: &[Lease]) -> Vec<&str> {
    leases.iter().map(Lease::id).collect()
}

/// The worked order: charge and reserve in parallel, then email, then ship.
fn order(id: &str) -> FlowSpec {
    let o = json!({"order": 42});
    FlowSpec::new()
        .id(id)
        .step(Step::new("charge", &o).unwrap().kind("charge"))
        .step(Step::new("reserve", &o).unwrap().kind("reserve"))
        .step(
            Step::new("email", &o)
                .unwrap()
                .kind("email")
                .after("charge")
                .after("reserve"),
        )
        .step(Step::new("ship", &o).unwrap().kind("ship").after("email"))
}

// Only the leaves are pending at first; each parent becomes pending only
// when its last child completes, once, and reads its children's results.
#[tokio::test]
async fn a_parent_runs_once_after_all_its_children() {
    let (s, q) = setup("flow-order").await;
    let flow = q.add_flow(&order("o1")).await.unwrap();
    assert_eq!(flow.id(), "o1");
    let st = flow.status().await.unwrap();
    let states: Vec<_> = st.steps.iter().map(|s| (s.name.as_str(), s.state)).collect();
    assert_eq!(
        states,
        [
            ("charge", StepState::Pending),
            ("reserve", StepState::Pending),
            ("email", StepState::Waiting),
            ("ship", StepState::Waiting),
        ]
    );
    assert_eq!(st.steps[0].job_id, "o1:charge");
    assert!(
        matches!(q.job("o1:email").await, Err(Error::JobNotFound(_))),
        "a waiting step is no job"
    );

    let leaves = claim(&q, 10).await;
    assert_eq!(ids(&leaves), ["o1:charge", "o1:reserve"]);
    assert_eq!(leaves[0].kind(), Some("charge"));
    q.complete_with_result(&leaves[0], &json!({"receipt": "r-1"}))
        .await
        .unwrap();
    assert!(claim(&q, 10).await.is_empty(), "email waits for reserve");
    assert_eq!(flow.status().await.unwrap().state("email"), Some(StepState::Waiting));
    q.complete_with_result(&leaves[1], &"held").await.unwrap();

    let email = claim(&q, 10).await;
    assert_eq!(ids(&email), ["o1:email"]);
    assert_eq!(email[0].kind(), Some("email"));
    assert_eq!(email[0].decode::<Value>().unwrap(), json!({"order": 42}));
    let kids = flow.child_results::<Value>("email").await.unwrap();
    let got: Vec<_> = kids
        .iter()
        .map(|c| (c.name.as_str(), c.job_id.as_str(), &c.outcome))
        .collect();
    assert_eq!(
        got,
        [
            (
                "charge",
                "o1:charge",
                &ChildOutcome::Completed(json!({"receipt": "r-1"}))
            ),
            ("reserve", "o1:reserve", &ChildOutcome::Completed(json!("held"))),
        ]
    );
    q.complete(&email[0]).await.unwrap();
    let ship = claim(&q, 10).await;
    assert_eq!(ids(&ship), ["o1:ship"]);
    // a child with no result reads as null
    let kids = flow.child_results::<Option<String>>("ship").await.unwrap();
    assert_eq!(kids[0].outcome, ChildOutcome::Completed(None));
    q.complete(&ship[0]).await.unwrap();

    let st = flow.status().await.unwrap();
    assert!(st.is_ended());
    assert_eq!(st.count(StepState::Completed), 4);
    assert!(claim(&q, 10).await.is_empty(), "each parent was enqueued once");
    // the record now expires after its keep time (a day by default)
    let mut c = raw(&s).await;
    let ttl: i64 = redis::cmd("PTTL")
        .arg(format!("emq:{{{}}}:flow:o1", q.name()))
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(ttl > 86_000_000 && ttl <= 86_400_000, "{ttl}");
}

// One child of three parents fails for good: the parent on a FailParent
// edge ends failed without running (and fails its own parent in turn), the
// one on a RunParent edge runs and reads the failure, the one on a
// DropEdge edge runs without it.
#[tokio::test]
async fn each_edge_says_what_a_failed_child_does() {
    let (_s, q) = setup("flow-policy").await;
    let spec = FlowSpec::new()
        .id("p")
        .step(Step::new("a", &1).unwrap())
        .step(Step::new("b", &2).unwrap())
        .step(Step::new("fails", &3).unwrap().after("a").after("b"))
        .step(
            Step::new("runs", &4)
                .unwrap()
                .after_with("a", OnChildFailure::RunParent)
                .after("b"),
        )
        .step(
            Step::new("drops", &5)
                .unwrap()
                .after_with("a", OnChildFailure::DropEdge)
                .after("b"),
        )
        .step(Step::new("top", &6).unwrap().after("fails"))
        .step(
            Step::new("top-runs", &7)
                .unwrap()
                .after_with("fails", OnChildFailure::RunParent),
        );
    let flow = q.add_flow(&spec).await.unwrap();
    let leaves = claim(&q, 10).await;
    assert_eq!(ids(&leaves), ["p:a", "p:b"]);
    q.fail(&leaves[0], "card declined").await.unwrap();
    let st = flow.status().await.unwrap();
    assert_eq!(
        st.state("fails"),
        Some(StepState::Failed),
        "failed without waiting for b"
    );
    assert_eq!(st.state("top"), Some(StepState::Failed), "and its parent with it");
    assert_eq!(st.state("runs"), Some(StepState::Waiting));
    // the failed parents have records, in the failed set, naming the child
    let info = q.job("p:fails").await.unwrap();
    assert_eq!(info.state, JobState::Failed);
    assert_eq!(info.last_error.as_deref(), Some("child a failed"));
    assert_eq!(
        q.job("p:top").await.unwrap().last_error.as_deref(),
        Some("child fails failed")
    );
    assert_eq!(q.counts().await.unwrap().failed, 3, "a, fails, top");
    // top-runs was released by the failure of `fails` (RunParent)
    let next = claim(&q, 10).await;
    assert_eq!(ids(&next), ["p:top-runs"]);
    let kids = flow.child_results::<Value>("top-runs").await.unwrap();
    assert_eq!(kids[0].outcome, ChildOutcome::Failed("child a failed".into()));
    q.complete(&next[0]).await.unwrap();

    q.complete_with_result(&leaves[1], &"b-done").await.unwrap();
    let parents = claim(&q, 10).await;
    assert_eq!(ids(&parents), ["p:drops", "p:runs"]);
    let runs = flow.child_results::<Value>("runs").await.unwrap();
    let got: Vec<_> = runs.iter().map(|c| (c.name.as_str(), c.outcome.clone())).collect();
    assert_eq!(
        got,
        [
            ("a", ChildOutcome::Failed("card declined".into())),
            ("b", ChildOutcome::Completed(json!("b-done")))
        ]
    );
    let drops = flow.child_results::<Value>("drops").await.unwrap();
    assert_eq!(drops.len(), 1, "the dropped edge is left out");
    assert_eq!(drops[0].name, "b");
    for l in &parents {
        q.complete(l).await.unwrap();
    }
    let st = flow.status().await.unwrap();
    assert!(st.is_ended());
    assert_eq!((st.count(StepState::Completed), st.count(StepState::Failed)), (4, 3));
    assert!(claim(&q, 10).await.is_empty());
    // a hand retry of the failed child runs it again, but its end was
    // written once: no parent runs again, none fails again
    q.retry_failed(&["p:a"]).await.unwrap();
    let again = claim(&q, 10).await;
    assert_eq!(ids(&again), ["p:a"]);
    q.complete(&again[0]).await.unwrap();
    assert_eq!(flow.status().await.unwrap().state("a"), Some(StepState::Failed));
    assert_eq!(q.job("p:fails").await.unwrap().state, JobState::Failed);
    assert!(claim(&q, 10).await.is_empty());
    // a parent that failed without running is a failed job: a hand retry
    // runs it, with its payload, and it reads its children as they ended
    q.retry_failed(&["p:top"]).await.unwrap();
    let top = claim(&q, 10).await;
    assert_eq!(ids(&top), ["p:top"]);
    assert_eq!(top[0].decode::<u64>().unwrap(), 6);
    let kids = flow.child_results::<Value>("top").await.unwrap();
    assert_eq!(kids[0].outcome, ChildOutcome::Failed("child a failed".into()));
    q.complete(&top[0]).await.unwrap();
    assert_eq!(
        flow.status().await.unwrap().state("top"),
        Some(StepState::Failed),
        "its end was written once"
    );
}

// A removed or cancelled child ends its node; a parent that fails on it
// does not run. Cancelling the flow ends its waiting and waiting-to-run
// steps now and asks a running one to stop; nothing it ends releases a
// parent, and the running job's later end changes nothing.
#[tokio::test]
async fn cancel_and_remove_end_steps_that_did_not_run() {
    let (_s, q) = setup("flow-cancel").await;
    let removed = q
        .add_flow(
            &FlowSpec::new()
                .id("r")
                .step(Step::new("child", &1).unwrap())
                .step(Step::new("parent", &2).unwrap().after("child")),
        )
        .await
        .unwrap();
    q.remove(&["r:child"]).await.unwrap();
    let st = removed.status().await.unwrap();
    assert_eq!(st.state("child"), Some(StepState::Removed));
    assert_eq!(st.state("parent"), Some(StepState::Failed));
    assert_eq!(
        q.job("r:parent").await.unwrap().last_error.as_deref(),
        Some("child child removed")
    );

    // a child cancelled by hand (Queue::cancel) fails its parent the same way
    let by_hand = q
        .add_flow(
            &FlowSpec::new()
                .id("h")
                .step(Step::new("child", &1).unwrap())
                .step(Step::new("parent", &2).unwrap().after("child")),
        )
        .await
        .unwrap();
    q.cancel("h:child").await.unwrap();
    assert_eq!(by_hand.status().await.unwrap().state("parent"), Some(StepState::Failed));
    assert_eq!(
        q.job("h:parent").await.unwrap().last_error.as_deref(),
        Some("child child cancelled")
    );

    let flow = q.add_flow(&order("c")).await.unwrap();
    let mut leaves = claim(&q, 1).await;
    assert_eq!(ids(&leaves), ["c:charge"]);
    let done = flow.cancel().await.unwrap();
    assert_eq!(
        (done.cancelled, done.requested),
        (3, 1),
        "reserve, email, ship; charge runs"
    );
    let st = flow.status().await.unwrap();
    for step in ["reserve", "email", "ship"] {
        assert_eq!(st.state(step), Some(StepState::Cancelled), "{step}");
    }
    assert_eq!(st.state("charge"), Some(StepState::Active));
    assert_eq!(q.job("c:ship").await.unwrap().state, JobState::Cancelled);
    // the running job completes anyway: its node ends, no parent runs
    q.complete(&leaves.remove(0)).await.unwrap();
    let st = flow.status().await.unwrap();
    assert_eq!(st.state("charge"), Some(StepState::Completed));
    assert!(st.is_ended());
    assert!(claim(&q, 10).await.is_empty());
    let again = flow.cancel().await.unwrap();
    assert_eq!((again.cancelled, again.requested), (0, 0));
}

// A stale worker whose lease was reaped changes nothing (LeaseLost); the
// parent runs once, after the new owner completes the child, and reads its
// result even though retention deleted the child's record at once.
#[tokio::test]
async fn fencing_and_retention_keep_a_parent_exact() {
    let (_s, q) = setup_with("flow-fence", QueueOptions::new().keep_completed(Retention::None)).await;
    let flow = q
        .add_flow(
            &FlowSpec::new()
                .id("f")
                .step(Step::new("child", &1).unwrap())
                .step(Step::new("parent", &2).unwrap().after("child")),
        )
        .await
        .unwrap();
    let stale = q.claim(1, Duration::from_millis(50)).await.unwrap().remove(0);
    past(&q, stale.deadline_ms()).await;
    q.reap(10).await.unwrap();
    let fresh = claim(&q, 1).await.remove(0);
    assert!(matches!(q.complete(&stale).await, Err(Error::LeaseLost { .. })));
    assert_eq!(flow.status().await.unwrap().state("parent"), Some(StepState::Waiting));
    q.complete_with_result(&fresh, &"ok").await.unwrap();
    assert!(
        matches!(q.job("f:child").await, Err(Error::JobNotFound(_))),
        "retention deleted it"
    );
    let parent = claim(&q, 10).await;
    assert_eq!(ids(&parent), ["f:parent"]);
    let kids = flow.child_results::<String>("parent").await.unwrap();
    assert_eq!(kids[0].outcome, ChildOutcome::Completed("ok".into()));
    assert_eq!(flow.status().await.unwrap().state("child"), Some(StepState::Completed));
    q.complete(&parent[0]).await.unwrap();
    assert!(claim(&q, 10).await.is_empty(), "enqueued once");

    // a child the reaper fails (past its stall budget) ends its node too;
    // this parent runs on it and reads "stalled"
    let reaped = q
        .add_flow(
            &FlowSpec::new()
                .id("s")
                .step(
                    Step::new("child", &1)
                        .unwrap()
                        .options(EnqueueOptions::new().max_stalls(0)),
                )
                .step(
                    Step::new("parent", &2)
                        .unwrap()
                        .after_with("child", OnChildFailure::RunParent),
                ),
        )
        .await
        .unwrap();
    let lost = q.claim(1, Duration::from_millis(50)).await.unwrap().remove(0);
    past(&q, lost.deadline_ms()).await;
    q.reap(10).await.unwrap();
    let parent = claim(&q, 10).await;
    assert_eq!(ids(&parent), ["s:parent"]);
    let kids = reaped.child_results::<Value>("parent").await.unwrap();
    assert_eq!(kids[0].outcome, ChildOutcome::Failed("stalled".into()));
}

// Bad graphs and options get typed errors and write nothing.
#[tokio::test]
async fn bad_flows_are_refused_and_write_nothing() {
    let (s, q) = setup("flow-bad").await;
    q.add_flow(&order("taken")).await.unwrap();
    q.enqueue_with(&1, &EnqueueOptions::new().id("clash:b")).await.unwrap();
    let before = snapshot(&s, q.name()).await;
    let invalid = |r: Result<echomq::Flow, Error>, what: &str| match r {
        Err(Error::InvalidFlow(m)) => assert!(m.contains(what), "{m}"),
        other => panic!("{what}: {other:?}"),
    };
    let one = |n: &str| Step::new(n, &1).unwrap();
    invalid(q.add_flow(&FlowSpec::new()).await, "at least one step");
    invalid(
        q.add_flow(
            &FlowSpec::new()
                .step(one("a").after("b"))
                .step(one("b").after("c"))
                .step(one("c").after("a")),
        )
        .await,
        "cycle",
    );
    invalid(q.add_flow(&FlowSpec::new().step(one("a").after("a"))).await, "cycle");
    invalid(
        q.add_flow(&FlowSpec::new().step(one("a").after("ghost"))).await,
        "not a step",
    );
    invalid(
        q.add_flow(&FlowSpec::new().step(one("a")).step(one("a"))).await,
        "two steps",
    );
    invalid(
        q.add_flow(&FlowSpec::new().step(one("a")).step(one("b").after("a").after("a")))
            .await,
        "twice",
    );
    let mut big = FlowSpec::new();
    for i in 0..=MAX_STEPS {
        big = big.step(one(&i.to_string()));
    }
    invalid(q.add_flow(&big).await, "at most");
    for opts in [
        EnqueueOptions::new().id("x"),
        EnqueueOptions::new().delay(Duration::from_secs(1)),
        EnqueueOptions::new().dedup("d"),
        EnqueueOptions::new().discard_after(Duration::from_secs(1)),
    ] {
        invalid(
            q.add_flow(&FlowSpec::new().step(one("a").options(opts))).await,
            "cannot take",
        );
    }
    assert!(matches!(
        q.add_flow(&FlowSpec::new().id("a:b").step(one("a"))).await,
        Err(Error::InvalidId { what: "flow id", .. })
    ));
    assert!(matches!(q.flow("a:b"), Err(Error::InvalidId { .. })));
    assert!(matches!(
        q.add_flow(&FlowSpec::new().step(one(""))).await,
        Err(Error::InvalidId {
            what: "flow step name",
            ..
        })
    ));
    assert!(matches!(
        q.add_flow(&FlowSpec::new().step(one("a").kind(""))).await,
        Err(Error::InvalidId { what: "job kind", .. })
    ));
    let huge = Step::new("a", &"x".repeat(2 << 20)).unwrap();
    assert!(matches!(
        q.add_flow(&FlowSpec::new().step(huge)).await,
        Err(Error::PayloadTooLarge { .. })
    ));
    assert!(matches!(
        q.add_flow(&order("taken")).await,
        Err(Error::FlowExists(id)) if id == "taken"
    ));
    assert!(matches!(
        q.add_flow(&FlowSpec::new().id("clash").step(one("a")).step(one("b"))).await,
        Err(Error::FlowExists(id)) if id == "clash:b"
    ));
    let ghost = q.flow("never-added").unwrap();
    assert!(matches!(ghost.status().await, Err(Error::FlowNotFound(_))));
    assert!(matches!(ghost.cancel().await, Err(Error::FlowNotFound(_))));
    assert!(matches!(
        q.flow("taken").unwrap().child_results::<Value>("no-such-step").await,
        Err(Error::FlowNotFound(_))
    ));
    assert_eq!(snapshot(&s, q.name()).await, before);
}

// A queue that never had a flow writes no flow field or flag.
#[tokio::test]
async fn a_queue_without_flows_writes_nothing_for_them() {
    let (s, q) = setup("flow-none").await;
    let ids = q.enqueue_bulk(&[1, 2]).await.unwrap();
    let leases = claim(&q, 2).await;
    q.complete(&leases[0]).await.unwrap();
    q.fail(&leases[1], "no").await.unwrap();
    q.remove(&[ids[1].as_str()]).await.unwrap();
    let mut c = raw(&s).await;
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(format!("emq:{{{}}}:job:{}", q.name(), ids[0]))
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(!fields.iter().any(|f| f == "fl"), "{fields:?}");
    let fl: Option<String> = redis::cmd("HGET")
        .arg(format!("emq:{{{}}}:meta", q.name()))
        .arg("fl")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(fl, None);
}

// The worked order run by a worker: handlers routed by kind, the email
// handler reading the charge's and the reservation's results.
#[tokio::test]
async fn a_worker_runs_a_flow_and_parents_read_their_children() {
    let (_s, q) = setup("flow-worker").await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let worker = Consumer::new(q.clone(), move |job: Job<Value>| {
        let tx = tx.clone();
        async move {
            let step = job.kind().unwrap_or_default().to_owned();
            let kids = job.child_results::<Value>().await?;
            let seen: Vec<String> = kids
                .iter()
                .map(|c| match &c.outcome {
                    ChildOutcome::Completed(v) => format!("{}={v}", c.name),
                    other => format!("{}:{other:?}", c.name),
                })
                .collect();
            let _ = tx.send(format!("{step}[{}]", seen.join(",")));
            Ok::<_, HandlerError>(json!(format!("{step}-ok")))
        }
    })
    .concurrency(4)
    .spawn()
    .unwrap();
    let flow = q.add_flow(&order("w")).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let got = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("a step ran");
        seen.push(got.unwrap());
    }
    worker.shutdown().await.unwrap();
    let (leaves, rest) = seen.split_at(2);
    let mut leaves = leaves.to_vec();
    leaves.sort();
    assert_eq!(leaves, ["charge[]", "reserve[]"]);
    assert_eq!(
        rest,
        [
            r#"email[charge="charge-ok",reserve="reserve-ok"]"#,
            r#"ship[email="email-ok"]"#
        ]
    );
    assert!(flow.status().await.unwrap().is_ended());
}

// A step that ends again after its flow's record is gone (a hand retry
// past the keep time) makes no record again.
#[tokio::test]
async fn a_step_ending_after_its_flow_is_gone_writes_nothing() {
    let (s, q) = setup("flow-gone").await;
    let flow = q
        .add_flow(
            &FlowSpec::new()
                .id("g")
                .keep(Duration::from_millis(200))
                .step(Step::new("only", &1).unwrap()),
        )
        .await
        .unwrap();
    let l = claim(&q, 1).await;
    q.fail(&l[0], "no").await.unwrap();
    let st = flow.status().await.unwrap();
    assert!(st.is_ended());
    let ended = q.job("g:only").await.unwrap().finished_ms.unwrap();
    past(&q, ended + 200).await;
    assert!(matches!(flow.status().await, Err(Error::FlowNotFound(_))));
    q.retry_failed(&["g:only"]).await.unwrap();
    let again = claim(&q, 1).await;
    q.complete(&again[0]).await.unwrap();
    let mut c = raw(&s).await;
    let exists: i64 = redis::cmd("EXISTS")
        .arg(format!("emq:{{{}}}:flow:g", q.name()))
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(exists, 0, "no flow record made again");
}

// The sweep delivers the end of a step whose job ended without its end
// reaching the flow (as a process without flows would settle it): its
// parent runs; a step whose job is gone counts as removed, failing its
// parent on a FailParent edge. The maintenance walk finds flows too.
#[tokio::test]
async fn the_sweep_delivers_ends_a_flow_missed() {
    let (s, q) = setup("flow-sweep").await;
    let two = |id: &str| {
        FlowSpec::new()
            .id(id)
            .step(Step::new("child", &1).unwrap())
            .step(Step::new("parent", &2).unwrap().after("child"))
    };
    let done = q.add_flow(&two("d")).await.unwrap();
    let gone = q.add_flow(&two("x")).await.unwrap();
    let mut c = raw(&s).await;
    let base = format!("emq:{{{}}}:", q.name());
    // d:child completed by an old process: record and sets moved, the flow not
    complete_as_old_process(&s, &q, "d:child", Some("\"old\"")).await;
    let _: () = redis::pipe()
        // x:child's record lost altogether
        .cmd("DEL")
        .arg(format!("{base}job:x:child"))
        .ignore()
        .cmd("ZREM")
        .arg(format!("{base}pending"))
        .arg("x:child")
        .ignore()
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(claim(&q, 10).await.is_empty(), "both parents wait for ever");
    let report = q.sweep(100).await.unwrap();
    assert!(report.repaired >= 2, "{report:?}");
    let parent = claim(&q, 10).await;
    assert_eq!(ids(&parent), ["d:parent"]);
    let kids = done.child_results::<String>("parent").await.unwrap();
    assert_eq!(kids[0].outcome, ChildOutcome::Completed("old".into()));
    let st = gone.status().await.unwrap();
    assert_eq!(
        (st.state("child"), st.state("parent")),
        (Some(StepState::Removed), Some(StepState::Failed))
    );
    // the maintenance walk (sweep_queues) finds a flow the same way
    let walked = q.add_flow(&two("w")).await.unwrap();
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(format!("{base}job:w:child"))
        .arg("st")
        .arg("completed")
        .ignore()
        .cmd("ZREM")
        .arg(format!("{base}pending"))
        .arg("w:child")
        .ignore()
        .query_async(&mut c)
        .await
        .unwrap();
    echomq::maintenance::sweep_queues(std::slice::from_ref(&q), 100)
        .await
        .unwrap();
    assert_eq!(ids(&claim(&q, 10).await), ["w:parent"]);
    assert_eq!(
        walked.status().await.unwrap().state("child"),
        Some(StepState::Completed)
    );
    assert_eq!(done.status().await.unwrap().state("parent"), Some(StepState::Active));
}

// Children added to a step that still waits: it then runs after the old
// and the new ones and reads all their results. Adding to a step that no
// longer waits, to an unknown step or flow, a taken name or an edge to an
// older step is refused and writes nothing.
#[tokio::test]
async fn children_are_added_to_a_step_that_waits() {
    let (_s, q) = setup("flow-extend").await;
    let flow = q.add_flow(&order("e")).await.unwrap();
    flow.add_children(
        "email",
        &[
            Step::new("gift", &1).unwrap(),
            Step::new("wrap", &2).unwrap().after("gift"),
        ],
    )
    .await
    .unwrap();
    let st = flow.status().await.unwrap();
    assert_eq!(st.steps.len(), 6);
    assert_eq!(st.state("gift"), Some(StepState::Pending));
    assert_eq!(st.state("wrap"), Some(StepState::Waiting));
    let first = claim(&q, 10).await;
    assert_eq!(ids(&first), ["e:charge", "e:gift", "e:reserve"]);
    for l in &first {
        q.complete(l).await.unwrap();
    }
    let wrap = claim(&q, 10).await;
    assert_eq!(ids(&wrap), ["e:wrap"], "email waits for wrap too");
    q.complete_with_result(&wrap[0], &"wrapped").await.unwrap();
    let email = claim(&q, 10).await;
    assert_eq!(ids(&email), ["e:email"]);
    let kids: Vec<String> = flow
        .child_results::<Value>("email")
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(kids, ["charge", "reserve", "wrap"]);

    let one = || [Step::new("late", &3).unwrap()];
    let e = flow.add_children("email", &one()).await.unwrap_err();
    assert!(
        matches!(&e, Error::InvalidFlow(m) if m.contains("no longer waits")),
        "{e:?}"
    );
    let e = flow.add_children("nope", &one()).await.unwrap_err();
    assert!(matches!(&e, Error::InvalidFlow(m) if m.contains("no step")), "{e:?}");
    let e = q.flow("gone").unwrap().add_children("ship", &one()).await.unwrap_err();
    assert!(matches!(e, Error::FlowNotFound(_)), "{e:?}");
    let e = flow
        .add_children("ship", &[Step::new("gift", &1).unwrap()])
        .await
        .unwrap_err();
    assert!(matches!(&e, Error::FlowExists(id) if id == "e:gift"), "{e:?}");
    let e = flow
        .add_children("ship", &[Step::new("late", &1).unwrap().after("charge")])
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidFlow(_)), "{e:?}");
    assert_eq!(flow.status().await.unwrap().steps.len(), 6, "nothing written");

    // a step of another flow's graph may gain children on another queue too
    q.complete(&email[0]).await.unwrap();
    let ship = claim(&q, 10).await;
    assert_eq!(ids(&ship), ["e:ship"]);
    q.complete(&ship[0]).await.unwrap();
    assert!(flow.status().await.unwrap().is_ended());
}

// Removing a flow deletes its record and every step that has not started
// (waiting steps, pending jobs); a running job is left to finish, and its
// end then releases and fails nothing.
#[tokio::test]
async fn remove_takes_a_flow_and_its_steps_that_did_not_start() {
    let (_s, q) = setup("flow-remove").await;
    let flow = q.add_flow(&order("r")).await.unwrap();
    let running = q.claim(1, LEASE).await.unwrap();
    assert_eq!(running.len(), 1);
    let r = flow.remove().await.unwrap();
    assert_eq!((r.removed, r.running, r.sent), (3, 1, 0), "{r:?}");
    assert!(matches!(flow.status().await, Err(Error::FlowNotFound(_))));
    let other = if running[0].id() == "r:charge" {
        "r:reserve"
    } else {
        "r:charge"
    };
    assert!(matches!(q.job(other).await, Err(Error::JobNotFound(_))));
    q.complete(&running[0]).await.unwrap();
    assert!(claim(&q, 10).await.is_empty(), "no parent is made");
    assert!(matches!(q.job("r:email").await, Err(Error::JobNotFound(_))));
    assert_eq!(q.job(running[0].id()).await.unwrap().state, JobState::Completed);
    assert!(matches!(flow.remove().await, Err(Error::FlowNotFound(_))));
}
