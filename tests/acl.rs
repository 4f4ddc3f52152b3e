//! A least-privilege ACL user (`echomq::acl::rules`) runs everything
//! echomq does, and nothing else.

mod common;

use std::time::Duration;

use echomq::server::LocalServer;
use echomq::{
    Client, Consumer, EffectMarker, Effects, EnqueueOptions, Error, HandlerError, Job, JobState, MarkerState,
    QueueOptions, Reaper, Worker,
};

/// Creates user `user` with password `pw` and `rules` (space-separated)
/// as the default user, and returns its URL.
async fn setuser(server: &LocalServer, user: &str, rules: &str) -> String {
    let mut c = common::raw(server).await;
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg(user).arg("reset").arg("on").arg(">pw");
    for rule in rules.split(' ') {
        cmd.arg(rule);
    }
    let () = cmd.query_async(&mut c).await.unwrap();
    format!("redis://{user}:pw@127.0.0.1:{}/", server.port())
}

/// Runs the core of echomq as the user of `url` on queue `name` with key
/// prefix `prefix`: enqueue (plain, with options, in bulk), a consumer
/// (claims, settles, waits in BLPOP), a reap, atomic completion and an
/// effect marker, the operator calls, and the sweep.
async fn run_core(url: &str, name: &str, prefix: &str) -> echomq::ServerReport {
    let client = Client::connect(url).await.unwrap();
    let report = client.self_check().await.unwrap();
    // HELLO (allowed before AUTH, so to every user) names the server.
    assert_ne!(report.version, "unknown", "{report:?}");
    let q = client
        .queue_with(name, QueueOptions::new().prefix(prefix).max_attempts(1))
        .await
        .unwrap();

    // A consumer: one job completes, one fails for good.
    let consumer = Consumer::new(q.clone(), |job: Job<u32>| async move {
        if *job.payload() == 13 {
            return Err(HandlerError::fail("unlucky"));
        }
        Ok(*job.payload() * 2)
    })
    .poll_interval(Duration::from_millis(200))
    .spawn()
    .unwrap();
    let ok = q.enqueue(&21u32).await.unwrap();
    let bad = q.enqueue(&13u32).await.unwrap();
    let info = q.wait(&ok, Duration::from_secs(10)).await.unwrap();
    assert_eq!(info.result_as::<u32>().unwrap(), Some(42));
    assert_eq!(
        q.wait(&bad, Duration::from_secs(10)).await.unwrap().state,
        JobState::Failed
    );
    // Once idle (waiting in BLPOP), an enqueue wakes it.
    let woken = q.enqueue(&1u32).await.unwrap();
    assert_eq!(
        q.wait(&woken, Duration::from_secs(10)).await.unwrap().state,
        JobState::Completed
    );
    consumer.shutdown().await.unwrap();

    // A worker over two queues: a queue that goes idle while the wake-up
    // blocks ends that wait with a push to the worker's own wake list (a
    // refused push would leave the next job waiting the 30 s poll).
    let q2 = client
        .queue_with(&format!("{name}-2"), QueueOptions::new().prefix(prefix))
        .await
        .unwrap();
    let worker = Worker::new()
        .poll_interval(Duration::from_secs(30))
        .queue(q.clone(), |_job: Job<u32>| async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok(())
        })
        .queue(q2.clone(), |_job: Job<u32>| async { Ok(()) })
        .spawn()
        .unwrap();
    for n in [1u32, 2] {
        let id = q.enqueue(&n).await.unwrap();
        assert_eq!(
            q.wait(&id, Duration::from_secs(10)).await.unwrap().state,
            JobState::Completed
        );
    }
    worker.shutdown().await.unwrap();

    // Enqueue options, bulk, dedup; pause and resume; promote.
    let delayed = q
        .enqueue_with(
            &2u32,
            &EnqueueOptions::new().id("later").delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    assert_eq!(q.counts().await.unwrap().delayed, 1);
    q.enqueue_with(&3u32, &EnqueueOptions::new().dedup_for("d", Duration::from_secs(60)))
        .await
        .unwrap();
    q.enqueue_bulk(&[4u32, 5]).await.unwrap();
    q.pause().await.unwrap();
    assert!(q.is_paused().await.unwrap());
    q.resume().await.unwrap();
    assert_eq!(q.promote_all().await.unwrap(), 1, "{delayed:?}");

    // A lease that expires is reaped.
    let leases = q.claim(1, Duration::from_millis(100)).await.unwrap();
    common::past(&q, leases[0].deadline_ms()).await;
    let reaped = Reaper::new(q.clone()).run_once().await.unwrap();
    assert_eq!(reaped.requeued.len(), 1, "{reaped:?}");

    // Atomic completion on a user key, and an effect marker.
    let mut leases = q.claim(2, Duration::from_secs(30)).await.unwrap();
    let total = q.user_key("total").unwrap();
    let lease = leases.pop().unwrap();
    q.complete_with(&lease, &Effects::new().incr_by(&total, 5))
        .await
        .unwrap();
    let lease = leases.pop().unwrap();
    let marker = EffectMarker::for_lease(&q, &lease, "mail").unwrap();
    assert_eq!(marker.claim().await.unwrap(), MarkerState::Fresh);
    marker.done().await.unwrap();
    q.extend(&mut leases_one(&q).await, Duration::from_secs(30))
        .await
        .unwrap();
    q.retry(&lease, None, "again").await.unwrap();

    // The operator calls.
    let page = q.list(JobState::Completed, None, 10).await.unwrap();
    assert!(!page.jobs.is_empty());
    assert_eq!(
        q.retry_all_failed().await.unwrap(),
        2,
        "the failed job and the retried one"
    );
    let pending = q.list(JobState::Pending, None, 1).await.unwrap().jobs;
    q.cancel(&pending[0].id).await.unwrap();
    q.remove(&[ok.as_str()]).await.unwrap();
    assert_eq!(q.sweep(1000).await.unwrap().repaired, 0);
    q.server_time_ms().await.unwrap();

    // Global cap and rate limits: set, read, claimed under, held.
    q.set_max_active(Some(5)).await.unwrap();
    let per_second = echomq::throttle::RateLimit::new(100, Duration::from_secs(1)).unwrap();
    q.set_rate_limit(Some(per_second)).await.unwrap();
    q.set_lane_default_rate_limit(Some(per_second)).await.unwrap();
    q.enqueue_with(&6u32, &EnqueueOptions::new().lane("l")).await.unwrap();
    let lease = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    q.rate_limited(&lease, Duration::from_millis(10)).await.unwrap();
    assert_eq!(q.throttles().await.unwrap().max_active, Some(5));
    q.lane_rate_limit("l").await.unwrap();
    q.clear_rate_hold().await.unwrap();

    q.drain().await.unwrap();
    q.obliterate(true).await.unwrap();
    report
}

/// A fresh lease of a new job, to renew.
async fn leases_one(q: &echomq::Queue) -> echomq::Lease {
    q.enqueue(&9u32).await.unwrap();
    q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0)
}

/// Runs `args` as the user of `url`, returning the server's error code.
async fn refused(url: &str, args: &[&str]) -> Option<String> {
    let mut c = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async::<redis::Value>(&mut c)
        .await
        .err()
        .and_then(|e| e.code().map(str::to_owned))
}

// The user of `acl::rules` runs the whole core (enqueue, consume, settle,
// reap, effects, operator calls, sweep) under the default prefix and its
// own, and cannot touch any key outside its prefix nor run anything else:
// every such command answers NOPERM. The self-check connects, listing
// what it could not verify; with `SELF_CHECK_COMMANDS` added it verifies
// everything.
#[tokio::test]
async fn least_privilege_user_runs_the_core_and_nothing_else() {
    let server = LocalServer::start().unwrap();
    for prefix in ["emq", "app.jobs"] {
        let user = format!("lp-{prefix}");
        let url = setuser(&server, &user, &echomq::acl::rules(prefix)).await;
        let report = run_core(&url, &common::unique("acl"), prefix).await;
        assert!(
            report.unverified.iter().any(|u| u.starts_with("appendfsync")),
            "{:?}",
            report.unverified
        );

        // Keys outside the prefix: read, write, script, wake-up wait.
        let other = "other:{q}:pending";
        for args in [
            &["GET", "other"][..],
            &["SET", "other", "1"],
            &["ZCARD", other],
            &["HGETALL", "emqx:{q}:job:1"],
            &["BLPOP", "other:{q}:wake", "0.01"],
            &["EVAL", "return 1", "1", other],
            // Commands the ACL leaves out.
            &["KEYS", "*"],
            &["FLUSHALL"],
            &["CONFIG", "GET", "maxmemory"],
            &["ACL", "LIST"],
            &["SUBSCRIBE", "ch"],
        ] {
            assert_eq!(
                refused(&url, args).await.as_deref(),
                Some("NOPERM"),
                "{user} ran {args:?}"
            );
        }
        // A queue under another prefix: its first script is refused.
        let client = Client::connect(&url).await.unwrap();
        let e = client
            .queue_with(&common::unique("acl"), QueueOptions::new().prefix("other"))
            .await
            .unwrap_err();
        assert!(matches!(e, Error::NoPermission { .. }), "{e:?}");
    }

    // With the self-check's commands, nothing is left unverified.
    let rules = format!("{} +info +config|get", echomq::acl::rules("emq"));
    assert_eq!(
        echomq::acl::SELF_CHECK_COMMANDS
            .iter()
            .map(|c| format!("+{c}"))
            .collect::<Vec<_>>()
            .join(" "),
        "+info +config|get"
    );
    let url = setuser(&server, "lp-checked", &rules).await;
    let report = run_core(&url, &common::unique("acl"), "emq").await;
    assert!(report.unverified.is_empty(), "{:?}", report.unverified);
}

// A user with every command but the @dangerous ones (what managed
// services often give) runs the same core.
#[tokio::test]
async fn user_without_dangerous_commands_runs_the_core() {
    let server = LocalServer::start().unwrap();
    let url = setuser(&server, "nd", "~* &* +@all -@dangerous").await;
    let report = run_core(&url, &common::unique("nd"), "emq").await;
    assert!(!report.unverified.is_empty());
    assert_eq!(
        refused(&url, &["CONFIG", "GET", "maxmemory"]).await.as_deref(),
        Some("NOPERM")
    );
}

// The README's ACL line is `acl::rules("emq")`.
#[test]
fn readme_shows_the_rules() {
    let readme = include_str!("../README.md");
    let line = readme
        .lines()
        .find(|l| l.starts_with("ACL SETUSER echomq on >PASSWORD "))
        .expect("the README shows an ACL SETUSER line");
    assert_eq!(
        line,
        format!("ACL SETUSER echomq on >PASSWORD {}", echomq::acl::rules("emq"))
    );
}
