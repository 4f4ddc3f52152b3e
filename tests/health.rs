//! The start-up self-check and the consistency sweep.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{raw, setup};
use echomq::SweepCursor;
use echomq::server::LocalServer;
use echomq::{Client, ClientOptions, Error, JobState, Queue, Reaper};

/// Runs one raw command (as the default user) and ignores its reply.
async fn run(c: &mut redis::aio::MultiplexedConnection, args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let _: redis::Value = cmd.query_async(c).await.unwrap();
}

// The self-check reports persistence settings, and an evicting server is refused unless allowed.
#[tokio::test]
async fn self_check_reports_and_refuses_eviction() {
    let server = LocalServer::builder().aof(true).appendfsync("always").start().unwrap();
    let q = Queue::connect(&server.url(), "check").await.unwrap();
    let r = q.self_check().await.unwrap();
    assert!(r.appendonly);
    assert_eq!(r.appendfsync, "always");
    assert_eq!(r.maxmemory_policy, "noeviction");
    // The servers' default, which a 100-byte payload exceeds.
    assert_eq!(r.hash_max_listpack_value, Some(64));
    assert!(r.unverified.is_empty(), "{:?}", r.unverified);
    assert!(r.durability().contains("power loss"));

    let lru = LocalServer::builder()
        .arg("maxmemory-policy", "allkeys-lru")
        .start()
        .unwrap();
    let e = Queue::connect(&lru.url(), "check").await.unwrap_err();
    assert!(
        matches!(e, Error::UnsafeServer(ref m) if m.contains("allkeys-lru")),
        "{e:?}"
    );
    let allowed = ClientOptions::new().allow_eviction(true);
    assert!(Client::connect_with(&lru.url(), allowed).await.is_ok());
}

// The sweep puts back jobs that a torn write left out of their set, and drops dangling members and hashes.
#[tokio::test]
async fn sweep_repairs_torn_state() {
    let (s, q) = setup("sweep").await;
    let ids = q.enqueue_bulk(&(0..10).collect::<Vec<u32>>()).await.unwrap();
    let leased = q.claim(2, Duration::from_secs(30)).await.unwrap();
    assert_eq!(q.sweep(3).await.unwrap().repaired, 0, "a healthy queue needs no repair");

    let mut c = raw(&s).await;
    let k = |s: &str| format!("emq:{{{}}}:{s}", q.name());
    // An active job missing from the active set would never be reaped: lost.
    let _: () = redis::cmd("ZREM")
        .arg(k("active"))
        .arg(leased[0].id())
        .query_async(&mut c)
        .await
        .unwrap();
    // A pending job also listed as completed.
    let _: () = redis::cmd("ZADD")
        .arg(k("completed"))
        .arg(1)
        .arg(&ids[5])
        .query_async(&mut c)
        .await
        .unwrap();
    // A pending member without a hash, and a hash without a payload.
    let _: () = redis::cmd("ZADD")
        .arg(k("pending"))
        .arg(1)
        .arg("ghost")
        .query_async(&mut c)
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(k("job:torn"))
        .arg("st")
        .arg("active")
        .query_async(&mut c)
        .await
        .unwrap();

    let r = q.sweep(3).await.unwrap();
    assert_eq!(r.repaired, 4, "{r:?}");
    assert_eq!(q.sweep(3).await.unwrap().repaired, 0, "the sweep did not converge");
    let counts = q.counts().await.unwrap();
    assert_eq!((counts.pending, counts.active, counts.completed), (8, 2, 0));
    assert!(matches!(q.job("torn").await, Err(Error::JobNotFound(_))));
    // The job put back into active is reaped (its deadline is "now") and runs again.
    common::past(&q, q.job(leased[0].id()).await.unwrap().deadline_ms.unwrap()).await;
    let rep = Reaper::new(q.clone()).run_once().await.unwrap();
    assert_eq!(rep.requeued, vec![(leased[0].id().to_owned(), 1)]);
    assert_eq!(q.job(leased[0].id()).await.unwrap().state, JobState::Pending);
}

// A finished job's id left on the active set by a torn write is only taken off it by the reaper: the job stays finished, counts no stall and never runs again (issue 29 item 2).
#[tokio::test]
async fn the_reaper_reaps_only_jobs_whose_record_says_active() {
    let (s, q) = setup("reapstate").await;
    let ids = q.enqueue_bulk(&[1u32, 2]).await.unwrap();
    for lease in q.claim(2, Duration::from_secs(30)).await.unwrap() {
        if lease.id() == ids[0] {
            q.complete(&lease).await.unwrap();
        } else {
            q.fail(&lease, "no").await.unwrap();
        }
    }
    let mut c = raw(&s).await;
    let active = format!("emq:{{{}}}:active", q.name());
    // A torn write's leftover: the finished jobs' ids back on active, lapsed long ago.
    for id in &ids {
        run(&mut c, &["ZADD", &active, "1", id]).await;
    }
    let rep = Reaper::new(q.clone()).run_once().await.unwrap();
    assert!(rep.requeued.is_empty() && rep.failed.is_empty(), "{rep:?}");
    for (id, state) in ids.iter().zip([JobState::Completed, JobState::Failed]) {
        let job = q.job(id).await.unwrap();
        assert_eq!((job.state, job.stalls), (state, 0), "{id}");
    }
    let counts = q.counts().await.unwrap();
    assert_eq!((counts.pending, counts.active), (0, 0), "{counts:?}");
    assert!(
        q.claim(10, Duration::from_secs(30)).await.unwrap().is_empty(),
        "nothing runs again"
    );
}

// A queue whose name holds glob characters sweeps only its own jobs, never another queue's.
#[tokio::test]
async fn sweep_is_confined_to_its_queue() {
    let server = LocalServer::start().unwrap();
    let qa = Queue::connect(&server.url(), "a?").await.unwrap();
    let qb = Queue::connect(&server.url(), "ab").await.unwrap();
    qa.enqueue_bulk(&(0..10).collect::<Vec<u32>>()).await.unwrap();
    for l in qa.claim(10, Duration::from_secs(30)).await.unwrap() {
        qa.complete(&l).await.unwrap();
    }
    qb.enqueue_bulk(&(0..10).collect::<Vec<u32>>()).await.unwrap();
    let before = (qa.counts().await.unwrap(), qb.counts().await.unwrap());
    let r = qa.sweep(1000).await.unwrap();
    assert_eq!(r.repaired, 0, "{r:?}");
    assert_eq!(r.checked, 10 + 10, "its 10 hashes and 10 completed members");
    assert_eq!(before, (qa.counts().await.unwrap(), qb.counts().await.unwrap()));
    assert!(qa.claim(10, Duration::from_secs(30)).await.unwrap().is_empty());
}

// Malformed job keys (no score, a non-numeric score or finish time, a string under the job pattern) never wedge the sweep: it repairs or skips them and checks every key after them.
#[tokio::test]
async fn sweep_repairs_or_skips_malformed_jobs() {
    let (s, q) = setup("malformed").await;
    let ids = q.enqueue_bulk(&(0..6).collect::<Vec<u32>>()).await.unwrap();
    let mut c = raw(&s).await;
    let k = |s: &str| format!("emq:{{{}}}:{s}", q.name());
    // Torn: healthy jobs missing from pending, wherever SCAN meets them.
    for id in &ids {
        run(&mut c, &["ZREM", &k("pending"), id]).await;
    }
    // Pending jobs without a usable score, and not in pending either.
    run(&mut c, &["HSET", &k("job:nosc"), "p", "1", "st", "pending"]).await;
    run(
        &mut c,
        &["HSET", &k("job:badsc"), "p", "2", "st", "pending", "sc", "abc"],
    )
    .await;
    run(
        &mut c,
        &["HSET", &k("job:nansc"), "p", "3", "st", "pending", "sc", "nan"],
    )
    .await;
    // A finished job with a non-numeric finish time, missing from its set.
    run(
        &mut c,
        &[
            "HSET",
            &k("job:badft"),
            "p",
            "4",
            "st",
            "completed",
            "sc",
            "1",
            "ft",
            "x",
        ],
    )
    .await;
    // A string under the job pattern, also listed as pending (claim would HMGET it).
    run(&mut c, &["SET", &k("job:str"), "not a job"]).await;
    run(&mut c, &["ZADD", &k("pending"), "1", "str"]).await;

    let r = q.sweep(1).await.unwrap();
    assert_eq!(r.skipped, 1, "the string key is skipped: {r:?}");
    // 6 put back, 3 given a score and put back, 1 finished job put back, 1 member of a non-hash removed.
    assert_eq!(r.repaired, 6 + 3 * 2 + 1 + 1, "{r:?}");
    let again = q.sweep(1).await.unwrap();
    assert_eq!(
        (again.repaired, again.skipped),
        (0, 1),
        "the sweep did not converge: {again:?}"
    );

    let claimed: Vec<String> = q
        .claim(20, Duration::from_secs(30))
        .await
        .unwrap()
        .iter()
        .map(|l| l.id().to_owned())
        .collect();
    // The repaired jobs run after the healthy ones (priority 0, fresh mint numbers).
    assert_eq!(&claimed[..6], &ids[..]);
    let repaired: BTreeSet<&str> = claimed[6..].iter().map(String::as_str).collect();
    assert_eq!(repaired, BTreeSet::from(["nosc", "badsc", "nansc"]));
    assert_eq!(q.counts().await.unwrap().completed, 1);
    let left: String = redis::cmd("GET").arg(k("job:str")).query_async(&mut c).await.unwrap();
    assert_eq!(left, "not a job", "the sweep never deletes a key it cannot read");
}

// A sweep runs as resumable bounded steps that end in a done cursor and find what the one-call sweep finds.
#[tokio::test]
async fn sweep_steps_are_bounded_and_resumable() {
    let (s, q) = setup("steps").await;
    let ids = q.enqueue_bulk(&(0..40).collect::<Vec<u32>>()).await.unwrap();
    let mut c = raw(&s).await;
    let pending = format!("emq:{{{}}}:pending", q.name());
    for id in &ids[..10] {
        run(&mut c, &["ZREM", &pending, id]).await;
    }
    let mut cursor = SweepCursor::default();
    assert!(!cursor.is_done());
    let (mut steps, mut checked, mut repaired) = (0, 0, 0);
    while !cursor.is_done() {
        let (next, r) = q.sweep_step(&cursor, 4).await.unwrap();
        assert!(next != cursor, "a step must move the cursor");
        cursor = next;
        steps += 1;
        checked += r.checked;
        repaired += r.repaired;
    }
    assert!(
        steps > 6,
        "40 job hashes in steps of about 4 take more than one step a phase ({steps})"
    );
    assert_eq!(repaired, 10);
    assert_eq!(checked, 40 + 40, "every hash and every pending member");
    let (same, r) = q.sweep_step(&cursor, 4).await.unwrap();
    assert!(same.is_done() && r.checked == 0, "a done cursor does nothing");
    assert_eq!(q.counts().await.unwrap().pending, 40);
    assert_eq!(q.sweep(4).await.unwrap().checked, 80);
}

/// Creates ACL user `user` with password `pw` and `rules` on `server`, and
/// returns its URL.
async fn acl_user(server: &LocalServer, user: &str, rules: &[&str]) -> String {
    let mut c = raw(server).await;
    let mut args = vec!["ACL", "SETUSER", user, "reset", "on", ">pw"];
    args.extend_from_slice(rules);
    run(&mut c, &args).await;
    format!("redis://{user}:pw@127.0.0.1:{}", server.port())
}

// A user denied INFO and CONFIG (-@dangerous) connects, runs jobs and sweeps, and the report says what it could not verify.
#[tokio::test]
async fn connects_without_dangerous_commands() {
    let server = LocalServer::start().unwrap();
    for (user, keys) in [("nd_all", "~*"), ("nd_emq", "~emq:*")] {
        let url = acl_user(&server, user, &[keys, "+@all", "-@dangerous"]).await;
        let q = Queue::connect(&url, &common::unique(user)).await.unwrap();
        let r = q.self_check().await.unwrap();
        assert!(
            r.server == "valkey" || r.server == "redis",
            "HELLO names the server: {r:?}"
        );
        assert_ne!(r.version, "unknown");
        assert_eq!(
            (r.appendfsync.as_str(), r.maxmemory_policy.as_str()),
            ("unknown", "unknown")
        );
        for item in [
            "appendfsync (CONFIG GET denied)",
            "eviction policy (INFO denied, CONFIG GET denied)",
            "append-only file (INFO denied, CONFIG GET denied)",
            "replicas (INFO denied)",
        ] {
            assert!(
                r.unverified.iter().any(|u| u == item),
                "{item} missing from {:?}",
                r.unverified
            );
        }
        assert!(r.durability().contains("could not be read"));

        let id = q.enqueue(&1u32).await.unwrap();
        let leases = q.claim(1, Duration::from_secs(30)).await.unwrap();
        assert_eq!(leases[0].id(), id);
        q.complete(&leases[0]).await.unwrap();
        assert_eq!(q.job(&id).await.unwrap().state, JobState::Completed);
        assert_eq!(q.sweep(100).await.unwrap().repaired, 0);
    }
}

// A user who may not load or run scripts is refused at connect with a typed error naming the refused command.
#[tokio::test]
async fn refuses_a_user_without_scripts_at_connect() {
    let server = LocalServer::start().unwrap();
    for (user, rules, needs) in [
        ("no_scripting", &["~*", "+@all", "-@scripting"][..], "command 'fcall'"),
        ("no_fcall", &["~*", "+@all", "-fcall"][..], "command 'fcall'"),
    ] {
        let url = acl_user(&server, user, rules).await;
        let name = common::unique(user);
        let connect = Queue::connect(&url, &name);
        let e = tokio::time::timeout(Duration::from_secs(5), connect)
            .await
            .expect("connect must fail at once, not retry")
            .unwrap_err();
        match &e {
            Error::NoPermission { needs: n, detail } => {
                assert_eq!(n, needs, "{e}");
                assert!(detail.starts_with("NOPERM"), "{detail}");
            }
            other => panic!("{user}: expected NoPermission, got {other:?}"),
        }
    }
}

// Keys of another type inside the queue's key space (a job key that is not
// a hash, a dedup marker that is not a string) never make a script raise
// part-way: claim, settle, reap and enqueue answer for the good jobs and
// skip the foreign keys.
#[tokio::test]
async fn foreign_keys_do_not_break_scripts() {
    let (s, q) = setup("foreign").await;
    let mut c = raw(&s).await;
    let k = |x: &str| format!("emq:{{{}}}:{x}", q.name());
    // A foreign "job" among the pending and active ids.
    let _: () = redis::cmd("SET")
        .arg(k("job:alien"))
        .arg("x")
        .query_async(&mut c)
        .await
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(k("pending"))
        .arg(0)
        .arg("alien")
        .query_async(&mut c)
        .await
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(k("active"))
        .arg(0)
        .arg("alien")
        .query_async(&mut c)
        .await
        .unwrap();
    // A dedup marker of another type.
    let _: () = redis::cmd("SADD")
        .arg(k("de:d1"))
        .arg("x")
        .query_async(&mut c)
        .await
        .unwrap();
    let d = q
        .enqueue_with(&1, &echomq::EnqueueOptions::new().dedup("d1"))
        .await
        .unwrap();
    assert_eq!(d.status, echomq::EnqueueStatus::Created);
    let good = q.enqueue(&2).await.unwrap();
    let leases = q.claim(10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(
        leases.len(),
        2,
        "the foreign pending id is dropped, the jobs are leased"
    );
    for l in &leases {
        q.complete(l).await.unwrap();
    }
    let rep = Reaper::new(q.clone()).run_once().await.unwrap();
    assert!(rep.requeued.is_empty() && rep.failed.is_empty(), "{rep:?}");
    assert_eq!(q.job(&good).await.unwrap().state, JobState::Completed);
    // The foreign key itself is left alone.
    let v: String = redis::cmd("GET").arg(k("job:alien")).query_async(&mut c).await.unwrap();
    assert_eq!(v, "x");
}

// A dedup marker that no waiting or running job holds (a torn write kept the marker and lost its job, or the id went to another job) is deleted by the sweep, so the dedup id works again; held and TTL markers stay.
#[tokio::test]
async fn sweep_frees_orphaned_dedup_markers() {
    let (s, q) = setup("markers").await;
    let held = q
        .enqueue_with(&1u32, &echomq::EnqueueOptions::new().dedup("held"))
        .await
        .unwrap();
    let plain = q.enqueue(&2u32).await.unwrap();
    let done = q.enqueue(&3u32).await.unwrap();
    let lease = q.claim(3, Duration::from_secs(30)).await.unwrap();
    let finished = lease.iter().find(|l| l.id() == done).unwrap();
    q.complete(finished).await.unwrap();
    assert_eq!(
        q.sweep(100).await.unwrap().repaired,
        0,
        "a healthy queue needs no repair"
    );

    let mut c = raw(&s).await;
    let mk = |d: &str| format!("emq:{{{}}}:de:{d}", q.name());
    run(&mut c, &["SET", &mk("lost"), "999"]).await; // its job was never stored
    run(&mut c, &["SET", &mk("finished"), &done]).await; // its id went to a job that finished
    run(&mut c, &["SET", &mk("other"), &plain]).await; // a live job that does not name it
    run(&mut c, &["SET", &mk("ttl"), "999", "PX", "60000"]).await; // expires by itself
    let r = q.sweep(2).await.unwrap();
    assert_eq!(r.repaired, 3, "{r:?}");
    assert_eq!(q.sweep(2).await.unwrap().repaired, 0, "the sweep did not converge");
    let again = |d: &'static str| {
        let q = q.clone();
        async move {
            q.enqueue_with(&0u32, &echomq::EnqueueOptions::new().dedup(d))
                .await
                .unwrap()
                .status
        }
    };
    assert_eq!(again("lost").await, echomq::EnqueueStatus::Created);
    assert_eq!(again("finished").await, echomq::EnqueueStatus::Created);
    assert_eq!(again("held").await, echomq::EnqueueStatus::Deduplicated, "{held:?}");
    assert_eq!(again("ttl").await, echomq::EnqueueStatus::Deduplicated);
}

// Promotion moves only jobs whose record says delayed: a finished job that a torn write left on delayed is not run again.
#[tokio::test]
async fn promotion_skips_finished_jobs_left_on_delayed() {
    let (s, q) = setup("torn-delayed").await;
    let id = q.enqueue(&1u32).await.unwrap();
    let lease = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    q.complete(&lease).await.unwrap();
    let mut c = raw(&s).await;
    run(&mut c, &["ZADD", &format!("emq:{{{}}}:delayed", q.name()), "0", &id]).await;
    let rep = Reaper::new(q.clone()).run_once().await.unwrap();
    assert_eq!(rep.promoted, 0);
    assert!(
        q.claim(1, Duration::from_secs(30)).await.unwrap().is_empty(),
        "ran again"
    );
    let counts = q.counts().await.unwrap();
    assert_eq!((counts.delayed, counts.pending, counts.completed), (0, 0, 1));
    assert_eq!(q.job(&id).await.unwrap().state, JobState::Completed);
}

// A consumer's maintenance sweeps its queue when it starts, and again as soon as it finds its connection made anew after a server restart.
#[tokio::test]
async fn maintenance_sweeps_at_start_and_after_a_restart() {
    let mut s = LocalServer::builder().aof(true).appendfsync("always").start().unwrap();
    let q = Queue::connect(&s.url(), &common::unique("restart-sweep"))
        .await
        .unwrap();
    let mk = |d: &str| format!("emq:{{{}}}:de:{d}", q.name());
    let mut c = raw(&s).await;
    run(&mut c, &["SET", &mk("before"), "999"]).await;
    let url = s.url();
    let gone = move |key: String| {
        let url = url.clone();
        async move {
            let Ok(mut c) = redis::Client::open(url)
                .unwrap()
                .get_multiplexed_async_connection()
                .await
            else {
                return false;
            };
            !redis::cmd("EXISTS")
                .arg(key)
                .query_async::<bool>(&mut c)
                .await
                .unwrap_or(true)
        }
    };
    let worker = echomq::Consumer::new(q.clone(), |_job: echomq::Job<u32>| async { Ok(()) })
        .spawn()
        .unwrap();
    assert!(
        common::eventually(Duration::from_secs(10), || gone(mk("before"))).await,
        "the start-up sweep did not run"
    );
    // A marker written now would wait for the next periodic sweep (10 minutes)...
    run(&mut c, &["SET", &mk("after"), "999"]).await;
    s.restart().unwrap();
    // ...but the restart makes the maintenance sweep at once.
    assert!(
        common::eventually(Duration::from_secs(10), || gone(mk("after"))).await,
        "no sweep after the restart"
    );
    worker.shutdown().await.unwrap();
}

// A claim leases only jobs whose record says pending: a finished job that a torn write left on pending is not run again.
#[tokio::test]
async fn claims_skip_finished_jobs_left_on_pending() {
    let (s, q) = setup("torn-pending").await;
    let id = q.enqueue(&1u32).await.unwrap();
    let lease = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    q.complete(&lease).await.unwrap();
    let mut c = raw(&s).await;
    run(&mut c, &["ZADD", &format!("emq:{{{}}}:pending", q.name()), "0", &id]).await;
    assert!(
        q.claim(1, Duration::from_secs(30)).await.unwrap().is_empty(),
        "ran again"
    );
    let counts = q.counts().await.unwrap();
    assert_eq!((counts.pending, counts.active, counts.completed), (0, 0, 1));
    assert_eq!(q.job(&id).await.unwrap().state, JobState::Completed);
}
