//! Lifecycle events against a real server: every transition appends its
//! event in the script that makes it; readers resume from saved ids.

mod common;

use std::time::Duration;

use common::{past, raw, setup};
use echomq::{
    Consumer, EnqueueOptions, Error, EventCursor, EventKind, EventReader, EventSettings, HandlerError, Job, QueueEvent,
    Reaper,
};

/// The next `n` events (each must come within 5 s).
async fn take(reader: &mut EventReader, n: usize) -> Vec<QueueEvent> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let ev = reader
            .next_within(Duration::from_secs(5))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no event after {:?}", kinds(&out)));
        out.push(ev);
    }
    out
}

fn kinds(evs: &[QueueEvent]) -> Vec<&str> {
    evs.iter().map(|e| e.kind.as_str()).collect()
}

/// No event is waiting (checked without blocking).
async fn none_left(reader: &mut EventReader) {
    let ev = reader.next_within(Duration::ZERO).await.unwrap();
    assert!(ev.is_none(), "unexpected {ev:?}");
}

// A job's life, enqueue -> claim -> retry -> claim -> complete, appears in
// order with the attempt, token, lane, kind and error of each step.
#[tokio::test]
async fn a_jobs_life_appears_in_order_with_its_fields() {
    let (_s, q) = setup("ev-life").await;
    let mut r = q.events(EventCursor::Now).await.unwrap();
    let opts = EnqueueOptions::new().id("j1").lane("acme").kind("mail");
    q.enqueue_with(&1u32, &opts).await.unwrap();
    let first = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    q.retry(&first, Some(Duration::ZERO), "boom").await.unwrap();
    let second = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    q.complete(&second).await.unwrap();
    let evs = take(&mut r, 5).await;
    assert_eq!(kinds(&evs), ["enqueued", "claimed", "retried", "claimed", "completed"]);
    for e in &evs {
        assert_eq!(e.job_id.as_deref(), Some("j1"));
        assert_eq!(e.lane.as_deref(), Some("acme"));
        assert_eq!(e.job_kind.as_deref(), Some("mail"));
        assert!(e.at_ms > 0);
    }
    assert_eq!(evs[1].attempt, Some(1));
    assert_eq!(evs[1].token, Some(first.token()));
    assert_eq!(evs[2].error.as_deref(), Some("boom"));
    assert_eq!(evs[2].token, Some(first.token()));
    assert_eq!(evs[3].attempt, Some(2));
    assert_eq!(evs[4].token, Some(second.token()));
    assert!(evs.windows(2).all(|w| w[0].id < w[1].id || w[0].at_ms < w[1].at_ms));
    none_left(&mut r).await;
}

// A handler's progress and its failure appear, with the progress value
// and the error text; a snooze and a rate limit say so too.
#[tokio::test]
async fn progress_failure_snooze_and_rate_limit_appear() {
    let (_s, q) = setup("ev-handler").await;
    let mut r = q.events(EventCursor::Now).await.unwrap();
    let c = Consumer::new(q.clone(), |job: Job<u32>| async move {
        job.progress(&serde_json::json!({"done": 1})).await.unwrap();
        Err::<(), _>(HandlerError::fail(std::io::Error::other("bad input")))
    })
    .spawn()
    .unwrap();
    q.enqueue(&1u32).await.unwrap();
    let evs = take(&mut r, 4).await;
    c.shutdown().await.unwrap();
    assert_eq!(kinds(&evs), ["enqueued", "claimed", "progress", "failed"]);
    assert_eq!(evs[2].progress.as_deref(), Some(r#"{"done":1}"#));
    assert!(evs[3].error.as_deref().unwrap().contains("bad input"));
    assert_eq!(evs[3].attempt, Some(1));

    q.enqueue(&2u32).await.unwrap();
    let lease = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    q.snooze(&lease, Duration::from_secs(60)).await.unwrap();
    q.promote_all().await.unwrap();
    let lease = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    q.rate_limited(&lease, Duration::from_millis(1)).await.unwrap();
    let evs = take(&mut r, 6).await;
    assert_eq!(
        kinds(&evs),
        ["enqueued", "claimed", "snoozed", "promoted", "claimed", "rate_limited"]
    );
    assert!(evs[2].due_ms.unwrap() > evs[2].at_ms);
}

// The reaper's work appears: a lapsed lease is stalled (and goes back),
// and a job out of stalls is stalled then failed with "stalled".
#[tokio::test]
async fn reaping_appears_as_stalled_then_failed() {
    let (_s, q) = setup("ev-reap").await;
    let mut r = q.events(EventCursor::Now).await.unwrap();
    q.enqueue_with(&1u32, &EnqueueOptions::new().id("a")).await.unwrap();
    q.enqueue_with(&2u32, &EnqueueOptions::new().id("b").max_stalls(0))
        .await
        .unwrap();
    let leases = q.claim(2, Duration::from_millis(50)).await.unwrap();
    past(&q, leases.iter().map(|l| l.deadline_ms()).max().unwrap()).await;
    Reaper::new(q.clone()).run_once().await.unwrap();
    let evs = take(&mut r, 7).await;
    let got: Vec<(&str, &str)> = evs
        .iter()
        .map(|e| (e.kind.as_str(), e.job_id.as_deref().unwrap()))
        .collect();
    assert_eq!(
        got,
        [
            ("enqueued", "a"),
            ("enqueued", "b"),
            ("claimed", "a"),
            ("claimed", "b"),
            ("stalled", "a"),
            ("stalled", "b"),
            ("failed", "b"),
        ]
    );
    assert_eq!(evs[6].error.as_deref(), Some("stalled"));
    none_left(&mut r).await;
}

// Operator calls appear: pause and resume (queue events, no job), cancel of
// a waiting job and of a running one, removal, and a retry by hand.
#[tokio::test]
async fn operator_calls_appear() {
    let (_s, q) = setup("ev-admin").await;
    let mut r = q.events(EventCursor::Now).await.unwrap();
    q.pause().await.unwrap();
    q.pause().await.unwrap(); // no change: no event
    q.resume().await.unwrap();
    for id in ["w", "x", "y"] {
        q.enqueue_with(&0u32, &EnqueueOptions::new().id(id)).await.unwrap();
    }
    q.cancel("w").await.unwrap();
    let running = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    assert_eq!(running.id(), "x");
    q.cancel("x").await.unwrap();
    q.remove(&["y"]).await.unwrap();
    q.fail(&running, "gave up").await.unwrap();
    let evs = take(&mut r, 10).await;
    assert_eq!(
        kinds(&evs),
        [
            "paused",
            "resumed",
            "enqueued",
            "enqueued",
            "enqueued",
            "cancelled",
            "claimed",
            "cancel_requested",
            "removed",
            "cancelled"
        ]
    );
    assert_eq!(evs[0].job_id, None);
    // The running job whose cancel was requested ends cancelled at its
    // settlement.
    assert_eq!(evs[9].job_id.as_deref(), Some("x"));
    assert_eq!(evs[9].error.as_deref(), Some("cancelled"));
    // A failed job retried by hand comes back as requeued.
    let lease = {
        q.enqueue_with(&0u32, &EnqueueOptions::new().id("z")).await.unwrap();
        q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0)
    };
    q.fail(&lease, "no").await.unwrap();
    q.retry_failed(&["z"]).await.unwrap();
    let evs = take(&mut r, 4).await;
    assert_eq!(kinds(&evs), ["enqueued", "claimed", "failed", "requeued"]);
}

// Turned off, no transition writes the stream (in every process: the
// setting is on the server); turned on again, events resume.
#[tokio::test]
async fn events_off_write_no_stream() {
    let (s, q) = setup("ev-off").await;
    assert_eq!(q.event_settings().await.unwrap(), EventSettings::default());
    q.set_events(&EventSettings::default().enabled(false)).await.unwrap();
    assert!(!q.event_settings().await.unwrap().is_enabled());
    q.enqueue(&1u32).await.unwrap();
    let lease = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    q.complete(&lease).await.unwrap();
    q.pause().await.unwrap();
    let mut c = raw(&s).await;
    let key = format!("emq:{{{}}}:events", q.name());
    let exists: u64 = redis::cmd("EXISTS").arg(&key).query_async(&mut c).await.unwrap();
    assert_eq!(exists, 0);
    q.set_events(&EventSettings::default()).await.unwrap();
    q.resume().await.unwrap();
    let len: u64 = redis::cmd("XLEN").arg(&key).query_async(&mut c).await.unwrap();
    assert_eq!(len, 1);
    assert!(matches!(
        q.set_events(&EventSettings::default().max_len(0)).await,
        Err(Error::InvalidOption { .. })
    ));
}

// The cap holds (approximately: trimming goes by whole blocks), and a
// reader resuming from an id trimmed away is told so, then reads on.
#[tokio::test]
async fn the_cap_holds_and_a_trimmed_cursor_is_reported() {
    let (s, q) = setup("ev-cap").await;
    q.set_events(&EventSettings::default().max_len(10)).await.unwrap();
    assert_eq!(q.event_settings().await.unwrap().cap(), 10);
    let mut r = q.events(EventCursor::Start).await.unwrap();
    q.enqueue(&0u32).await.unwrap();
    let saved = take(&mut r, 1).await.remove(0).id;
    q.enqueue_bulk(&vec![0u32; 600]).await.unwrap();
    let mut c = raw(&s).await;
    let len: u64 = redis::cmd("XLEN")
        .arg(format!("emq:{{{}}}:events", q.name()))
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(len <= 10 + 100, "{len} entries kept");
    // The cap counts events: each write of an entry of n trims to about cap / n entries.
    let mut all = q.events(EventCursor::Start).await.unwrap();
    let mut kept = 0;
    while all.next_within(Duration::ZERO).await.unwrap().is_some() {
        kept += 1;
    }
    assert!(kept <= 3 * 64, "{kept} events kept in {len} entries");
    let mut late = q.events(EventCursor::After(saved.clone())).await.unwrap();
    match late.next_within(Duration::from_secs(1)).await {
        Err(Error::EventsTrimmed { after, .. }) => assert_eq!(after, saved),
        other => panic!("{other:?}"),
    }
    // It reads on from the oldest event left.
    let next = late.next_within(Duration::from_secs(1)).await.unwrap().unwrap();
    assert_eq!(next.kind, EventKind::Enqueued);
}

// A reader that stops and a new one resuming from its saved id see every
// event exactly once, in the order a single reader sees them.
#[tokio::test]
async fn a_reader_resumes_from_a_saved_id_without_loss_or_duplicates() {
    let (_s, q) = setup("ev-resume").await;
    let mut whole = q.events(EventCursor::Start).await.unwrap();
    q.enqueue_bulk(&[1u32, 2, 3, 4, 5]).await.unwrap();
    let mut first = q.events(EventCursor::Start).await.unwrap();
    let mut seen = take(&mut first, 3).await;
    let saved = first.cursor().to_owned();
    drop(first);
    q.enqueue_bulk(&[6u32, 7, 8]).await.unwrap();
    let mut second = q.events(EventCursor::After(saved)).await.unwrap();
    seen.extend(take(&mut second, 5).await);
    none_left(&mut second).await;
    let all = take(&mut whole, 8).await;
    assert_eq!(seen, all);
    assert!(matches!(
        q.events(EventCursor::After("junk".into())).await,
        Err(Error::InvalidId { .. })
    ));
}

// A call's events of one kind share stream entries of up to 64 (one
// write each); readers see one event per job, in order, each with an id of
// its own that a new reader resumes after, mid-entry or not.
#[tokio::test]
async fn a_calls_events_share_entries_and_read_one_by_one() {
    let (s, q) = setup("ev-entries").await;
    let ids = q.enqueue_bulk(&vec![0u32; 150]).await.unwrap();
    let key = format!("emq:{{{}}}:events", q.name());
    let mut c = raw(&s).await;
    let len: u64 = redis::cmd("XLEN").arg(&key).query_async(&mut c).await.unwrap();
    assert_eq!(len, 3, "150 enqueues in entries of 64, 64 and 22");
    let mut r = q.events(EventCursor::Start).await.unwrap();
    let evs = take(&mut r, 150).await;
    none_left(&mut r).await;
    let seen: Vec<String> = evs.iter().filter_map(|e| e.job_id.clone()).collect();
    assert_eq!(seen, ids);
    assert!(evs.iter().all(|e| e.kind == EventKind::Enqueued));
    let distinct: std::collections::HashSet<&str> = evs.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(distinct.len(), 150);
    assert!(
        evs[0].id.ends_with(".0") && evs[64].id.ends_with(".0"),
        "{} {}",
        evs[0].id,
        evs[64].id
    );
    // Resuming after any of them gives exactly the rest.
    for at in [0, 62, 63, 64, 100, 149] {
        let mut again = q.events(EventCursor::After(evs[at].id.clone())).await.unwrap();
        let rest = take(&mut again, 149 - at).await;
        none_left(&mut again).await;
        assert_eq!(rest, evs[at + 1..], "after event {at}");
    }
    // A claim of many and its settlement: one entry each.
    let mut now = q.events(EventCursor::Now).await.unwrap();
    let leases = q.claim(64, Duration::from_secs(30)).await.unwrap();
    assert_eq!(leases.len(), 64);
    let complete = echomq::Settle::Complete;
    let items: Vec<_> = leases.iter().map(|l| (l, &complete)).collect();
    for r in q.settle_many(&items).await.unwrap() {
        r.unwrap();
    }
    let evs = take(&mut now, 128).await;
    assert!(evs[..64].iter().all(|e| e.kind == EventKind::Claimed));
    assert!(evs[64..].iter().all(|e| e.kind == EventKind::Completed));
    for (e, l) in evs[..64].iter().zip(&leases) {
        assert_eq!(e.job_id.as_deref(), Some(l.id()));
        assert_eq!(e.token, Some(l.token()));
    }
    let len: u64 = redis::cmd("XLEN").arg(&key).query_async(&mut c).await.unwrap();
    assert_eq!(len, 5);
}

// A settle-and-claim's completions and the claims after them share one
// entry, and read back in the order they happened, each with its kind.
#[tokio::test]
async fn a_settle_and_claim_is_one_entry() {
    let (s, q) = setup("ev-mixed").await;
    q.enqueue_bulk(&[1u32, 2, 3, 4, 5, 6]).await.unwrap();
    let leases = q.claim(3, Duration::from_secs(30)).await.unwrap();
    let key = format!("emq:{{{}}}:events", q.name());
    let mut c = raw(&s).await;
    let before: u64 = redis::cmd("XLEN").arg(&key).query_async(&mut c).await.unwrap();
    let mut now = q.events(EventCursor::Now).await.unwrap();
    let done = echomq::Settle::Complete;
    let items: Vec<_> = leases.iter().map(|l| (l, &done)).collect();
    let (settled, next) = q.settle_and_claim(&items, 3, Duration::from_secs(30)).await.unwrap();
    assert!(settled.iter().all(|r| r.is_ok()));
    assert_eq!(next.len(), 3);
    let after: u64 = redis::cmd("XLEN").arg(&key).query_async(&mut c).await.unwrap();
    assert_eq!(after, before + 1, "one entry for the call's six events");
    let evs = take(&mut now, 6).await;
    none_left(&mut now).await;
    assert_eq!(
        kinds(&evs),
        ["completed", "completed", "completed", "claimed", "claimed", "claimed"]
    );
    for (e, l) in evs[..3].iter().zip(&leases) {
        assert_eq!((e.job_id.as_deref(), e.token), (Some(l.id()), Some(l.token())));
    }
    for (e, l) in evs[3..].iter().zip(&next) {
        assert_eq!(
            (e.job_id.as_deref(), e.token, e.attempt),
            (Some(l.id()), Some(l.token()), Some(1))
        );
    }
}

// Errors of any text, a NUL among them, come back intact from batched
// entries: a batch of failures whose texts are NUL-free shares a
// NUL-joined entry, one with a NUL in a text a JSON one; lanes and kinds
// ride along in both.
#[tokio::test]
async fn batched_entries_keep_every_text() {
    let (s, q) = setup("ev-texts").await;
    let opts = EnqueueOptions::new().lane("l/1 é").kind("mail.v2");
    let jobs: Vec<_> = (0..6u32).map(|i| (i, opts.clone())).collect();
    q.enqueue_bulk_with(&jobs).await.unwrap();
    let key = format!("emq:{{{}}}:events", q.name());
    let mut c = raw(&s).await;
    for texts in [["plain", "with \"quotes\" and \\", "ünïcode\ttab"], ["a\0b", "", "\0"]] {
        let mut now = q.events(EventCursor::Now).await.unwrap();
        let leases = q.claim(3, Duration::from_secs(30)).await.unwrap();
        assert_eq!(leases.len(), 3);
        let settles: Vec<_> = texts
            .iter()
            .map(|t| echomq::Settle::Fail {
                reason: (*t).to_owned(),
            })
            .collect();
        let items: Vec<_> = leases.iter().zip(&settles).collect();
        for r in q.settle_many(&items).await.unwrap() {
            r.unwrap();
        }
        let evs = take(&mut now, 6).await;
        none_left(&mut now).await;
        for (e, (l, t)) in evs[3..].iter().zip(leases.iter().zip(texts)) {
            assert_eq!(e.kind, EventKind::Failed);
            assert_eq!(e.job_id.as_deref(), Some(l.id()));
            assert_eq!(e.error.as_deref().unwrap_or(""), t);
            assert_eq!(e.lane.as_deref(), Some("l/1 é"));
            assert_eq!(e.job_kind.as_deref(), Some("mail.v2"));
        }
        let last: redis::Value = redis::cmd("XREVRANGE")
            .arg(&key)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut c)
            .await
            .unwrap();
        let field = if texts[0].contains('\0') { b"v" } else { b"z" };
        assert!(
            contains_field(&last, field),
            "the failures' entry holds {}: {last:?}",
            String::from_utf8_lossy(field)
        );
    }
}

/// Whether an XRANGE-shaped reply's first entry has field `name`.
fn contains_field(v: &redis::Value, name: &[u8]) -> bool {
    let redis::Value::Array(entries) = v else { return false };
    let Some(redis::Value::Array(pair)) = entries.first() else {
        return false;
    };
    let Some(redis::Value::Array(fields)) = pair.get(1) else {
        return false;
    };
    fields
        .iter()
        .step_by(2)
        .any(|f| matches!(f, redis::Value::BulkString(b) if b == name))
}

// A reader started at a server time sees exactly the events from that millisecond on.
#[tokio::test]
async fn a_reader_starts_at_a_server_time() {
    let (_s, q) = setup("ev-since").await;
    q.enqueue_bulk(&[1u32, 2, 3]).await.unwrap();
    let t = q.server_time_ms().await.unwrap() + 1;
    past(&q, t - 1).await;
    let later = q.enqueue_bulk(&[4u32, 5]).await.unwrap();
    let mut r = q.events(EventCursor::Since(t)).await.unwrap();
    let seen = take(&mut r, 2).await;
    let ids: Vec<_> = seen.iter().filter_map(|e| e.job_id.clone()).collect();
    assert_eq!(ids, later, "{:?}", kinds(&seen));
    none_left(&mut r).await;
    // Nothing at or after a time still to come: the reader waits for new events.
    let mut future = q.events(EventCursor::Since(t + 3_600_000)).await.unwrap();
    none_left(&mut future).await;
}

// A cron schedule's tick appears as its job's `enqueued`, with the
// schedule's kind (the fire path stores jobs as enqueue does).
#[cfg(feature = "cron")]
#[tokio::test]
async fn a_cron_tick_appears_as_enqueued_with_its_kind() {
    use echomq::schedule::{Schedule, Scheduler};
    let (_s, q) = setup("ev-cron").await;
    let mut r = q.events(EventCursor::Now).await.unwrap();
    q.upsert_schedule(&Schedule::new("tick", "* * * * * *").kind("beat"), &1u32)
        .await
        .unwrap();
    let scheduler = Scheduler::new(q.clone());
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            scheduler.run_once().await.unwrap();
            q.counts().await.unwrap().pending > 0
        })
        .await
    );
    let ev = take(&mut r, 1).await.remove(0);
    assert_eq!(ev.kind, EventKind::Enqueued);
    assert_eq!(ev.job_kind.as_deref(), Some("beat"));
}

// An event that cannot be written (a foreign key of another type at the
// stream's name) never tears the transition: the job's life goes on whole.
#[tokio::test]
async fn an_unwritable_stream_does_not_stop_the_transitions() {
    let (s, q) = setup("ev-foreign").await;
    let mut c = raw(&s).await;
    let key = format!("emq:{{{}}}:events", q.name());
    let () = redis::cmd("SET")
        .arg(&key)
        .arg("not a stream")
        .query_async(&mut c)
        .await
        .unwrap();
    q.enqueue_with(&1u32, &EnqueueOptions::new().id("f")).await.unwrap();
    let lease = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    q.complete(&lease).await.unwrap();
    assert_eq!(q.job("f").await.unwrap().state, echomq::JobState::Completed);
    assert_eq!(q.sweep(1000).await.unwrap().repaired, 0);
}
