//! Producer dedup against a real server: markers with a TTL, and debounce
//! (`replace_waiting`), where a newer enqueue replaces the payload and due
//! time of the waiting job that holds the dedup id.

mod common;

use std::time::Duration;

use common::{eventually, past, raw, setup, snapshot};
use echomq::{EnqueueOptions, EnqueueStatus, Error, JobState, Queue};

const LEASE: Duration = Duration::from_secs(30);

/// The full name of key `suffix` of queue `q`.
fn key(q: &Queue, suffix: &str) -> String {
    format!("emq:{{{}}}:{suffix}", q.name())
}

/// The score of `id` in the queue's zset `set`, if it is there.
async fn zscore(s: &echomq::server::LocalServer, q: &Queue, set: &str, id: &str) -> Option<u64> {
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg(key(q, set))
        .arg(id)
        .query_async(&mut raw(s).await)
        .await
        .unwrap();
    score.map(|s| s as u64)
}

/// Field `field` of job `id`'s hash.
async fn field(s: &echomq::server::LocalServer, q: &Queue, id: &str, field: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg(key(q, &format!("job:{id}")))
        .arg(field)
        .query_async(&mut raw(s).await)
        .await
        .unwrap()
}

/// The marker's remaining TTL in ms (-1 none, -2 no marker).
async fn marker_pttl(s: &echomq::server::LocalServer, q: &Queue, dedup: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key(q, &format!("de:{dedup}")))
        .query_async(&mut raw(s).await)
        .await
        .unwrap()
}

// With a TTL marker, replacing restarts the marker's TTL at the new
// enqueue's; the marker stands for its TTL whatever the job does, then the
// next enqueue makes a new job.
#[tokio::test]
async fn a_ttl_marker_is_restarted_by_a_replace_and_then_expires() {
    let (s, q) = setup("dedup-ttl-replace").await;
    let opts = |ttl_ms: u64| {
        EnqueueOptions::new()
            .dedup_for("report-7", Duration::from_millis(ttl_ms))
            .replace_waiting(true)
    };
    let first = q.enqueue_with(&1, &opts(300)).await.unwrap();
    assert_eq!(first.status, EnqueueStatus::Created);
    assert!((1..=300).contains(&marker_pttl(&s, &q, "report-7").await));
    // A replace sets the marker's TTL to the new one: longer...
    let longer = q.enqueue_with(&2, &opts(60_000)).await.unwrap();
    assert_eq!(
        (longer.status, longer.id.as_str()),
        (EnqueueStatus::Replaced, first.id.as_str())
    );
    assert!(marker_pttl(&s, &q, "report-7").await > 300);
    // ...or shorter.
    let shorter = q.enqueue_with(&3, &opts(300)).await.unwrap();
    assert_eq!(shorter.status, EnqueueStatus::Replaced);
    let ttl = marker_pttl(&s, &q, "report-7").await;
    assert!((1..=300).contains(&ttl), "{ttl}");
    assert_eq!(q.job(&first.id).await.unwrap().decode::<u32>().unwrap(), 3);
    assert_eq!(
        field(&s, &q, &first.id, "dd").await,
        None,
        "a TTL marker is not released at finish"
    );
    // Finishing the job leaves the marker: the next enqueue is deduplicated
    // (the completed holder is not waiting) and writes nothing...
    let l = q.claim(1, LEASE).await.unwrap().remove(0);
    assert_eq!(l.decode::<u32>().unwrap(), 3);
    q.complete(&l).await.unwrap();
    let before = snapshot(&s, q.name()).await;
    let again = q.enqueue_with(&4, &opts(300)).await.unwrap();
    assert_eq!(
        (again.status, again.id.as_str()),
        (EnqueueStatus::Deduplicated, first.id.as_str())
    );
    assert_eq!(snapshot(&s, q.name()).await, before);
    // ...until its TTL runs out; then a new job is made.
    let ttl = marker_pttl(&s, &q, "report-7").await.max(0) as u64;
    past(&q, q.server_time_ms().await.unwrap() + ttl).await;
    assert!(
        eventually(Duration::from_secs(2), || async {
            marker_pttl(&s, &q, "report-7").await == -2
        })
        .await
    );
    let later = q.enqueue_with(&5, &opts(300)).await.unwrap();
    assert_eq!(later.status, EnqueueStatus::Created);
    assert_ne!(later.id, first.id);
}

// A replace of a pending job changes its payload only: it keeps its id,
// place in line, priority, limits, created time and dedup field, and no id
// is minted.
#[tokio::test]
async fn replace_updates_a_pending_job_in_place() {
    let (s, q) = setup("dedup-pending").await;
    let opts = EnqueueOptions::new()
        .dedup("refresh:user-9")
        .replace_waiting(true)
        .priority(5)
        .max_attempts(7);
    let first = q.enqueue_with(&1, &opts).await.unwrap();
    let other = q.enqueue(&100).await.unwrap();
    let fields = ["sc", "ct", "st", "lm", "dd"];
    let mut kept = Vec::new();
    for f in fields {
        kept.push(field(&s, &q, &first.id, f).await);
    }
    let score = zscore(&s, &q, "pending", &first.id).await.unwrap();
    let seq = field_seq(&s, &q).await;

    // The newer enqueue's own priority, limits and id are ignored.
    let newer = EnqueueOptions::new()
        .id("ignored")
        .dedup("refresh:user-9")
        .replace_waiting(true)
        .priority(-3)
        .max_attempts(2);
    let r = q.enqueue_with(&2, &newer).await.unwrap();
    assert_eq!((r.status, r.id.as_str()), (EnqueueStatus::Replaced, first.id.as_str()));
    let info = q.job(&first.id).await.unwrap();
    assert_eq!(info.decode::<u32>().unwrap(), 2);
    assert_eq!((info.state, info.limits.max_attempts), (JobState::Pending, 7));
    for (f, was) in fields.iter().zip(&kept) {
        assert_eq!(&field(&s, &q, &first.id, f).await, was, "field {f}");
    }
    assert_eq!(zscore(&s, &q, "pending", &first.id).await, Some(score));
    assert_eq!(zscore(&s, &q, "delayed", &first.id).await, None);
    assert_eq!(field_seq(&s, &q).await, seq, "no id minted");
    assert!(q.job("ignored").await.is_err());
    let c = q.counts().await.unwrap();
    assert_eq!((c.pending, c.delayed), (2, 0));
    // Priority 5 still runs before the later job of priority 0.
    let leases = q.claim(2, LEASE).await.unwrap();
    let got: Vec<(&str, u32)> = leases.iter().map(|l| (l.id(), l.decode().unwrap())).collect();
    assert_eq!(got, [(first.id.as_str(), 2), (other.as_str(), 100)]);
}

/// The queue's mint counter.
async fn field_seq(s: &echomq::server::LocalServer, q: &Queue) -> Option<String> {
    redis::cmd("GET")
        .arg(key(q, "seq"))
        .query_async(&mut raw(s).await)
        .await
        .unwrap()
}

// Debounce restarts a delayed job's wait on the server's clock (later or
// earlier), moves it to pending when the newer enqueue has no delay and
// back to delayed when it has one: always in exactly one set.
#[tokio::test]
async fn debounce_restarts_the_wait_on_the_server_clock() {
    let (s, q) = setup("dedup-delayed").await;
    let debounce = |secs: u64| EnqueueOptions::new().debounce("reindex", Duration::from_secs(secs));
    let t0 = q.server_time_ms().await.unwrap();
    let first = q.enqueue_with(&1, &debounce(60)).await.unwrap();
    let t1 = q.server_time_ms().await.unwrap();
    assert_eq!(first.status, EnqueueStatus::Created);
    let due = zscore(&s, &q, "delayed", &first.id).await.unwrap();
    assert!((t0 + 60_000..=t1 + 60_000).contains(&due), "{due}");
    let created = field(&s, &q, &first.id, "ct").await;

    // The due time is the server's now plus each newer enqueue's window.
    for (n, secs) in [(2, 120), (3, 30)] {
        let t0 = q.server_time_ms().await.unwrap();
        let r = q.enqueue_with(&n, &debounce(secs)).await.unwrap();
        let t1 = q.server_time_ms().await.unwrap();
        assert_eq!((r.status, r.id.as_str()), (EnqueueStatus::Replaced, first.id.as_str()));
        let due = zscore(&s, &q, "delayed", &first.id).await.unwrap();
        assert!((t0 + secs * 1000..=t1 + secs * 1000).contains(&due), "{secs}s: {due}");
        let info = q.job(&first.id).await.unwrap();
        assert_eq!((info.state, info.deadline_ms), (JobState::Delayed, Some(due)));
        assert_eq!(info.decode::<u32>().unwrap(), n);
        assert_eq!(zscore(&s, &q, "pending", &first.id).await, None);
    }

    // A newer enqueue with no delay makes the job due now: pending.
    let now = EnqueueOptions::new().dedup("reindex").replace_waiting(true);
    let r = q.enqueue_with(&4, &now).await.unwrap();
    assert_eq!(r.status, EnqueueStatus::Replaced);
    let info = q.job(&first.id).await.unwrap();
    assert_eq!((info.state, info.deadline_ms), (JobState::Pending, None));
    assert!(zscore(&s, &q, "pending", &first.id).await.is_some());
    let c = q.counts().await.unwrap();
    assert_eq!((c.pending, c.delayed), (1, 0));

    // And one with a window delays it again.
    let t0 = q.server_time_ms().await.unwrap();
    let r = q.enqueue_with(&5, &debounce(10)).await.unwrap();
    assert_eq!(r.status, EnqueueStatus::Replaced);
    let info = q.job(&first.id).await.unwrap();
    assert_eq!(info.state, JobState::Delayed);
    assert!(info.deadline_ms.unwrap() >= t0 + 10_000);
    assert_eq!(zscore(&s, &q, "pending", &first.id).await, None);
    let c = q.counts().await.unwrap();
    assert_eq!((c.pending, c.delayed), (0, 1));
    assert_eq!(field(&s, &q, &first.id, "ct").await, created, "created time kept");
}

// A holder that is active, completed, failed or gone is not replaced: the
// enqueue answers Deduplicated with its id and writes nothing.
#[tokio::test]
async fn a_holder_that_is_not_waiting_is_left_alone() {
    let (s, q) = setup("dedup-busy").await;
    let replace = |d: &str| {
        EnqueueOptions::new()
            .dedup_for(d, Duration::from_secs(600))
            .replace_waiting(true)
    };
    let check = |d: &'static str, holder: String| {
        let (s, q) = (&s, &q);
        async move {
            let before = snapshot(s, q.name()).await;
            let r = q
                .enqueue_with(&99, &replace(d).delay(Duration::from_secs(5)))
                .await
                .unwrap();
            assert_eq!((r.status, r.id), (EnqueueStatus::Deduplicated, holder), "{d}");
            assert_eq!(snapshot(s, q.name()).await, before, "{d}: something was written");
        }
    };
    // Active (and with a marker held until the job finishes, as debounce holds it).
    let a = q
        .enqueue_with(&1, &EnqueueOptions::new().debounce("a", Duration::ZERO))
        .await
        .unwrap();
    let active = q.claim(1, LEASE).await.unwrap().remove(0);
    assert_eq!(active.id(), a.id);
    let before = snapshot(&s, q.name()).await;
    let r = q
        .enqueue_with(&2, &EnqueueOptions::new().debounce("a", Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!((r.status, r.id.as_str()), (EnqueueStatus::Deduplicated, a.id.as_str()));
    assert_eq!(snapshot(&s, q.name()).await, before, "active: something was written");
    check("a2", {
        let id = q.enqueue_with(&1, &replace("a2")).await.unwrap().id;
        let l = q.claim(1, LEASE).await.unwrap().remove(0);
        assert_eq!(l.id(), id);
        id
    })
    .await;
    // Completed.
    let c = q.enqueue_with(&1, &replace("c")).await.unwrap().id;
    let l = q.claim(1, LEASE).await.unwrap().remove(0);
    assert_eq!(l.id(), c);
    q.complete(&l).await.unwrap();
    check("c", c).await;
    // Failed.
    let f = q.enqueue_with(&1, &replace("f")).await.unwrap().id;
    let l = q.claim(1, LEASE).await.unwrap().remove(0);
    assert_eq!(l.id(), f);
    q.fail(&l, "no").await.unwrap();
    check("f", f).await;
    // Gone: its record removed while its TTL marker stands.
    let g = q.enqueue_with(&1, &replace("g")).await.unwrap().id;
    q.remove(&[g.as_str()]).await.unwrap();
    check("g", g).await;
    assert_eq!(q.job(active.id()).await.unwrap().decode::<u32>().unwrap(), 1);
}

// A burst of debounced enqueues makes one job, which runs once, after the
// window of the last one, with the last payload.
#[tokio::test]
async fn a_debounced_job_runs_once_with_the_last_payload() {
    let (_s, q) = setup("dedup-once").await;
    let opts = EnqueueOptions::new().debounce("sync:42", Duration::from_millis(200));
    let first = q.enqueue_with(&1, &opts).await.unwrap();
    assert_eq!(first.status, EnqueueStatus::Created);
    for n in 2..=5 {
        let r = q.enqueue_with(&n, &opts).await.unwrap();
        assert_eq!((r.status, r.id.as_str()), (EnqueueStatus::Replaced, first.id.as_str()));
    }
    let c = q.counts().await.unwrap();
    assert_eq!((c.pending, c.delayed), (0, 1));
    let due = q.job(&first.id).await.unwrap().deadline_ms.unwrap();
    past(&q, due).await;
    let leases = q.claim(10, LEASE).await.unwrap();
    assert_eq!(leases.len(), 1);
    assert_eq!(
        (leases[0].id(), leases[0].decode::<u32>().unwrap()),
        (first.id.as_str(), 5)
    );
    assert_eq!(leases[0].attempt(), 1);
    q.complete(&leases[0]).await.unwrap();
    let c = q.counts().await.unwrap();
    assert_eq!((c.pending, c.delayed, c.active, c.completed), (0, 0, 0, 1));
    // The marker went with the job: the next burst makes a new job.
    let next = q.enqueue_with(&6, &opts).await.unwrap();
    assert_eq!(next.status, EnqueueStatus::Created);
    assert_ne!(next.id, first.id);
}

// Within one bulk call, a later job with the dedup id of an earlier one
// replaces it (with replace_waiting) or is deduplicated against it (without).
#[tokio::test]
async fn bulk_replaces_within_one_chunk() {
    let (s, q) = setup("dedup-bulk").await;
    let t0 = q.server_time_ms().await.unwrap();
    let jobs = [
        (1, EnqueueOptions::new().debounce("b", Duration::from_secs(60))),
        (2, EnqueueOptions::new()),
        (3, EnqueueOptions::new().debounce("b", Duration::from_secs(120))),
        (4, EnqueueOptions::new().dedup("b")),
    ];
    let answers = q.enqueue_bulk_with(&jobs).await.unwrap();
    let t1 = q.server_time_ms().await.unwrap();
    let statuses: Vec<EnqueueStatus> = answers.iter().map(|a| a.status).collect();
    assert_eq!(
        statuses,
        [
            EnqueueStatus::Created,
            EnqueueStatus::Created,
            EnqueueStatus::Replaced,
            EnqueueStatus::Deduplicated
        ]
    );
    let id = &answers[0].id;
    assert!(answers[2..].iter().all(|a| &a.id == id));
    let info = q.job(id).await.unwrap();
    assert_eq!((info.state, info.decode::<u32>().unwrap()), (JobState::Delayed, 3));
    let due = zscore(&s, &q, "delayed", id).await.unwrap();
    assert!((t0 + 120_000..=t1 + 120_000).contains(&due), "{due}");
    let c = q.counts().await.unwrap();
    assert_eq!((c.pending, c.delayed), (1, 1));
}

// Within one bulk call, a job made pending earlier in the call and then
// replaced with a delay leaves pending for delayed (the call collects its
// set moves, and applies them before a replace looks at the sets).
#[tokio::test]
async fn bulk_replace_moves_a_pending_job_of_the_same_call() {
    let (_s, q) = setup("dedup-bulk-move").await;
    let jobs = [
        (1, EnqueueOptions::new().dedup("m").replace_waiting(true)),
        (2, EnqueueOptions::new()),
        (3, EnqueueOptions::new().debounce("m", Duration::from_secs(60))),
    ];
    let answers = q.enqueue_bulk_with(&jobs).await.unwrap();
    let statuses: Vec<EnqueueStatus> = answers.iter().map(|a| a.status).collect();
    assert_eq!(
        statuses,
        [EnqueueStatus::Created, EnqueueStatus::Created, EnqueueStatus::Replaced]
    );
    let info = q.job(&answers[0].id).await.unwrap();
    assert_eq!((info.state, info.decode::<u32>().unwrap()), (JobState::Delayed, 3));
    let c = q.counts().await.unwrap();
    assert_eq!((c.pending, c.delayed), (1, 1));
    assert_eq!(q.sweep(1000).await.unwrap().repaired, 0);
}

// Bad debounce options answer typed errors before anything is written,
// also in a bulk call, and the queue keeps working.
#[tokio::test]
async fn bad_debounce_input_gets_typed_errors() {
    let (s, q) = setup("dedup-bad").await;
    let option = |e: Error| match e {
        Error::InvalidOption { name, .. } => name,
        other => panic!("{other:?}"),
    };
    let lone = EnqueueOptions::new().replace_waiting(true);
    let e = q.enqueue_with(&1, &lone).await.unwrap_err();
    assert!(e.to_string().contains("needs a dedup id"), "{e}");
    assert_eq!(option(e), "replace_waiting");
    let long = EnqueueOptions::new().debounce("x", echomq::limits::MAX_DELAY + Duration::from_secs(1));
    assert_eq!(option(q.enqueue_with(&1, &long).await.unwrap_err()), "delay");
    let both = EnqueueOptions::new()
        .debounce("x", Duration::from_secs(1))
        .run_at(std::time::SystemTime::now());
    assert_eq!(option(q.enqueue_with(&1, &both).await.unwrap_err()), "run_at");
    let zero_ttl = EnqueueOptions::new()
        .dedup_for("x", Duration::ZERO)
        .replace_waiting(true);
    assert_eq!(option(q.enqueue_with(&1, &zero_ttl).await.unwrap_err()), "dedup ttl");
    let empty = EnqueueOptions::new().debounce("", Duration::from_secs(1));
    assert!(matches!(
        q.enqueue_with(&1, &empty).await,
        Err(Error::InvalidId { what: "dedup id", .. })
    ));
    // One bad job in a bulk call: nothing is sent.
    let jobs = [
        (1, EnqueueOptions::new().debounce("ok", Duration::from_secs(1))),
        (2, EnqueueOptions::new().replace_waiting(true)),
    ];
    assert_eq!(option(q.enqueue_bulk_with(&jobs).await.unwrap_err()), "replace_waiting");
    assert!(snapshot(&s, q.name()).await.iter().all(|(k, _)| !k.contains(":job:")));
    // Turning replace off needs no dedup id, and the queue works on.
    let off = EnqueueOptions::new().replace_waiting(false);
    assert_eq!(q.enqueue_with(&3, &off).await.unwrap().status, EnqueueStatus::Created);
}

// A replace sets the marker as the newer enqueue asks: for its TTL (and
// then not released when the job finishes), or until the job finishes.
#[tokio::test]
async fn a_replace_sets_the_marker_as_the_newer_enqueue_asks() {
    let (s, q) = setup("dedup-marker-kind").await;
    let until_done = EnqueueOptions::new().debounce("m", Duration::from_secs(60));
    let for_ttl = EnqueueOptions::new()
        .dedup_for("m", Duration::from_secs(60))
        .replace_waiting(true);
    let id = q.enqueue_with(&1, &until_done).await.unwrap().id;
    assert_eq!(marker_pttl(&s, &q, "m").await, -1);
    assert_eq!(field(&s, &q, &id, "dd").await.as_deref(), Some("m"));
    assert_eq!(
        q.enqueue_with(&2, &for_ttl).await.unwrap().status,
        EnqueueStatus::Replaced
    );
    assert!(marker_pttl(&s, &q, "m").await > 0);
    assert_eq!(field(&s, &q, &id, "dd").await, None);
    // Back to until-finish, due now: finishing the job releases the marker.
    let now = EnqueueOptions::new().debounce("m", Duration::ZERO);
    assert_eq!(q.enqueue_with(&3, &now).await.unwrap().status, EnqueueStatus::Replaced);
    assert_eq!(marker_pttl(&s, &q, "m").await, -1);
    assert_eq!(field(&s, &q, &id, "dd").await.as_deref(), Some("m"));
    let l = q.claim(1, LEASE).await.unwrap().remove(0);
    assert_eq!((l.id(), l.decode::<u32>().unwrap()), (id.as_str(), 3));
    q.complete(&l).await.unwrap();
    assert_eq!(marker_pttl(&s, &q, "m").await, -2);
}

// A failed job retried by hand takes its dedup marker again, so a new enqueue of its dedup id is deduplicated against it; if another job took the id meanwhile, the retry leaves it failed and says so (issue 29 item 1).
#[tokio::test]
async fn a_retried_job_takes_its_dedup_id_again() {
    let (_s, q) = setup("dedupretry").await;
    let opts = EnqueueOptions::new().dedup("report-7");
    let first = q.enqueue_with(&1u32, &opts).await.unwrap().id;
    let lease = q.claim(1, LEASE).await.unwrap().pop().unwrap();
    q.fail(&lease, "boom").await.unwrap();
    let retried = q.retry_failed(&[first.as_str()]).await.unwrap();
    assert_eq!(retried, vec![(first.clone(), echomq::admin::Moved::Done)]);
    let again = q.enqueue_with(&2u32, &opts).await.unwrap();
    assert_eq!(
        (again.status, again.id.as_str()),
        (EnqueueStatus::Deduplicated, first.as_str())
    );
    assert_eq!(q.counts().await.unwrap().pending, 1, "one waiting job per dedup id");

    // It fails again, and a new job takes the dedup id before the retry.
    let lease = q.claim(1, LEASE).await.unwrap().pop().unwrap();
    q.fail(&lease, "boom").await.unwrap();
    let second = q.enqueue_with(&3u32, &opts).await.unwrap();
    assert_eq!(second.status, EnqueueStatus::Created);
    let retried = q.retry_failed(&[first.as_str()]).await.unwrap();
    assert_eq!(retried, vec![(first.clone(), echomq::admin::Moved::DedupHeld)]);
    assert_eq!(q.job(&first).await.unwrap().state, JobState::Failed);
    assert_eq!(q.retry_all_failed().await.unwrap(), 0, "retry_all_failed leaves it too");
    let counts = q.counts().await.unwrap();
    assert_eq!((counts.pending, counts.failed), (1, 1), "{counts:?}");
}

// The guide's Idempotency-Key table (docs/web-apps.md): a key replayed
// after its job finished is one job with `dedup_for` and with `id` (while
// the record is retained), but a second job with `dedup`.
#[tokio::test]
async fn an_idempotency_key_replayed_after_the_job_finished() {
    let (_s, q) = setup("replay").await;
    let day = Duration::from_secs(24 * 3600);
    let modes = [
        ("dedup_for", EnqueueOptions::new().dedup_for("k1", day)),
        ("id", EnqueueOptions::new().id("k2")),
        ("dedup", EnqueueOptions::new().dedup("k3")),
    ];
    for (mode, opts) in &modes {
        let first = q.enqueue_with(&mode, opts).await.unwrap();
        assert_eq!(first.status, EnqueueStatus::Created, "{mode}");
        // a replay while it waits
        let again = q.enqueue_with(&mode, opts).await.unwrap();
        assert_eq!(again.id, first.id, "{mode}");
        assert_ne!(again.status, EnqueueStatus::Created, "{mode}");
        let lease = q.claim(1, LEASE).await.unwrap().remove(0);
        assert_eq!(lease.id(), first.id);
        q.complete(&lease).await.unwrap();
        // a replay after it finished
        let late = q.enqueue_with(&mode, opts).await.unwrap();
        match *mode {
            "dedup_for" => assert_eq!(
                (late.status, late.id.as_str()),
                (EnqueueStatus::Deduplicated, first.id.as_str())
            ),
            "id" => assert_eq!(
                (late.status, late.id.as_str()),
                (EnqueueStatus::Existing, first.id.as_str())
            ),
            _ => {
                assert_eq!(late.status, EnqueueStatus::Created, "dedup frees the key at the finish");
                assert_ne!(late.id, first.id);
                let extra = q.claim(1, LEASE).await.unwrap().remove(0);
                q.complete(&extra).await.unwrap();
            }
        }
    }
}
