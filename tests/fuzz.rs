//! A property-test campaign over the entry points: queue names, job ids,
//! dedup ids, lanes, kinds, payloads, every enqueue and queue option, consumer
//! settings, global caps and rate limits, and cron expressions, generated at random (and near the
//! edges: empty, huge, control characters, glob and brace characters,
//! durations up to `Duration::MAX`, NaN jitter).
//!
//! Properties: no call panics; none takes longer than [`CALL_BOUND`]; a
//! refusal is a typed error a user can act on (never a server error, which
//! would be a script raising on input it should have refused); whatever
//! is accepted reads back as sent; every key a queue writes lies inside
//! its own prefix and hash slot; and two queues never share a key.
//!
//! Short tier (CI): [`SHORT_TIER_CASES`] cases per property. Long tier:
//! `PROPTEST_CASES=5000 scripts/test --test fuzz`.

mod common;

use std::future::Future;
use std::time::Duration;

use echomq::schedule::Schedule;
use echomq::server::LocalServer;
use echomq::{
    Backoff, Client, Consumer, EnqueueOptions, Error, Job, JobState, Queue, QueueOptions, Retention, SweepCursor,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// Cases per property unless `PROPTEST_CASES` says otherwise.
const SHORT_TIER_CASES: u32 = 96;
/// The longest any single call may take here (the server is local).
const CALL_BOUND: Duration = Duration::from_secs(5);

fn runner() -> TestRunner {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SHORT_TIER_CASES);
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// Runs `f` to completion within [`CALL_BOUND`], or fails the case.
async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> Result<T, TestCaseError> {
    tokio::time::timeout(CALL_BOUND, f)
        .await
        .map_err(|_| TestCaseError::fail(format!("{what} took longer than {CALL_BOUND:?}")))
}

/// A refusal a user can act on; anything else (a server error, an
/// internal one) is a defect.
fn typed_refusal(e: &Error) -> bool {
    matches!(
        e,
        Error::InvalidQueueName { .. }
            | Error::InvalidId { .. }
            | Error::InvalidOption { .. }
            | Error::PayloadTooLarge { .. }
    )
}

/// Strings near the edges: any text, or text built from the characters
/// that key names, globs, hash tags and our separators care about.
fn edgy_string() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z0-9{}:*?\\[\\]\\\\ \\t\\n\\x00-é]{0,12}",
        "[a-z]{250,270}",
        Just(String::new()),
    ]
}

fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (0u64..5_000).prop_map(Duration::from_millis),
        any::<u64>().prop_map(Duration::from_millis),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        Just(Duration::MAX),
        Just(Duration::ZERO),
    ]
}

fn any_backoff() -> impl Strategy<Value = Backoff> {
    let jitter = prop_oneof![0.0f64..=1.0, any::<f64>(), Just(f64::NAN), Just(f64::INFINITY)];
    (
        any::<bool>(),
        any_duration(),
        any_duration(),
        proptest::option::of(jitter),
    )
        .prop_map(|(fixed, a, b, j)| {
            let b = if fixed {
                Backoff::fixed(a)
            } else {
                Backoff::exponential(a, b)
            };
            match j {
                Some(j) => b.jitter(j),
                None => b,
            }
        })
}

fn any_payload() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<String>().prop_map(serde_json::Value::from),
        (0usize..20_000).prop_map(|n| serde_json::Value::from("x".repeat(n))),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
            proptest::collection::btree_map(any::<String>(), inner, 0..6)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

/// The hash slot of `key` (CRC16/XMODEM of its hash tag, as Valkey Cluster computes it).
fn key_slot(key: &[u8]) -> u16 {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&n| n > 0)
                .map(|n| &rest[..n])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for &b in tag {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16_384
}

/// Every key on the server.
async fn all_keys(c: &mut redis::aio::MultiplexedConnection) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    let mut it: redis::AsyncIter<Vec<u8>> = redis::AsyncCommands::scan(c).await.unwrap();
    while let Some(k) = it.next_item().await {
        keys.push(k.unwrap());
    }
    keys
}

async fn flush(c: &mut redis::aio::MultiplexedConnection) {
    let _: () = redis::cmd("FLUSHALL").query_async(c).await.unwrap();
}

/// Fails the case unless every key on the server belongs to one of
/// `bases` (a queue's `PREFIX:{NAME}:`), in its slot, and to one only.
fn confined(keys: &[Vec<u8>], bases: &[String]) -> Result<(), TestCaseError> {
    for k in keys {
        let owners: Vec<&String> = bases.iter().filter(|b| k.starts_with(b.as_bytes())).collect();
        prop_assert!(
            owners.len() == 1,
            "key {:?} belongs to {} of the queues {bases:?}",
            String::from_utf8_lossy(k),
            owners.len()
        );
        prop_assert_eq!(key_slot(k), key_slot(owners[0].as_bytes()));
    }
    Ok(())
}

/// Starts a private server and a runtime for one property.
fn env() -> (LocalServer, tokio::runtime::Runtime) {
    let server = LocalServer::start().expect("start a local server (run scripts/test to install one)");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    (server, rt)
}

// Any queue name (and key prefix) is either refused with a typed error or gives a queue whose every key, after a job's whole life, lies inside its prefix and slot.
#[test]
fn queue_names_are_refused_or_confined() {
    let (server, rt) = env();
    let (client, raw) = rt.block_on(async {
        (
            Client::connect(&server.url()).await.unwrap(),
            common::raw(&server).await,
        )
    });
    let strategy = (edgy_string(), proptest::option::of(edgy_string()));
    let accepted = std::sync::atomic::AtomicU32::new(0);
    runner()
        .run(&strategy, |(name, prefix)| {
            let mut raw = raw.clone();
            rt.block_on(async {
                flush(&mut raw).await;
                let opts = match &prefix {
                    Some(p) => QueueOptions::new().prefix(p.clone()),
                    None => QueueOptions::new(),
                };
                let q = match bounded("open", client.queue_with(&name, opts)).await? {
                    Ok(q) => q,
                    Err(e) => {
                        prop_assert!(typed_refusal(&e), "queue {name:?} prefix {prefix:?}: {e:?}");
                        return Ok(());
                    }
                };
                accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let opts = EnqueueOptions::new().dedup("d").lane("l");
                let id = bounded("enqueue", q.enqueue_with(&1u32, &opts)).await?.unwrap().id;
                let lease = bounded("claim", q.claim(1, Duration::from_secs(30))).await?.unwrap();
                prop_assert_eq!(lease.len(), 1);
                bounded("complete", q.complete(&lease[0])).await?.unwrap();
                prop_assert_eq!(q.job(&id).await.unwrap().state, JobState::Completed);
                let base = format!("{}:{{{name}}}:", prefix.as_deref().unwrap_or("emq"));
                confined(&all_keys(&mut raw).await, &[base])
            })
        })
        .unwrap();
    assert!(
        accepted.into_inner() > 0,
        "no generated name was valid: the property tested nothing"
    );
}

// Any job id, dedup id, lane, payload and enqueue option is either refused with a typed error, or stored so that it reads back as sent and runs through claim and settle.
#[test]
fn enqueue_inputs_are_refused_or_kept() {
    let (server, rt) = env();
    let (q, raw) = rt.block_on(async {
        let q = echomq::Queue::connect(&server.url(), "fuzz").await.unwrap();
        (q, common::raw(&server).await)
    });
    // Each option is set now and then, mostly to a sane value and
    // sometimes to an edge, so both refusals and accepted jobs come up.
    use proptest::option::weighted as sometimes;
    let text = || prop_oneof![3 => "[a-z0-9._-]{1,20}", 1 => edgy_string()];
    let time = || prop_oneof![3 => (0u64..10_000).prop_map(Duration::from_millis), 1 => any_duration()];
    let count = || prop_oneof![3 => 0u32..100, 1 => any::<u32>()];
    let options = (
        sometimes(0.3, text()),
        sometimes(0.3, text()),
        sometimes(0.3, text()),
        sometimes(0.3, time()),
        any::<i8>(),
        sometimes(0.3, count()),
        sometimes(0.3, count()),
        sometimes(0.3, time()),
        sometimes(0.3, any_backoff()),
        sometimes(0.3, time()),
    );
    let strategy = (
        options,
        any_payload(),
        any_duration(),
        edgy_string(),
        sometimes(0.3, text()),
        // an expiry (discard_after), and a unique mode: a set of states
        // (any of the 128, the empty one refused) with a period or not
        sometimes(0.3, time()),
        sometimes(0.3, (any::<u8>(), sometimes(0.5, time()))),
    );
    let accepted = std::sync::atomic::AtomicU32::new(0);
    runner()
        .run(
            &strategy,
            |(o, payload, retry_delay, error_text, kind, expiry, unique)| {
                let (id, dedup, lane, delay, priority, attempts, stalls, timeout, backoff, dedup_ttl) = o;
                let mut opts = EnqueueOptions::new().priority(priority);
                if let Some(k) = kind.clone() {
                    opts = opts.kind(k);
                }
                if let Some(v) = id.clone() {
                    opts = opts.id(v);
                }
                match (dedup, dedup_ttl, unique) {
                    (Some(d), _, Some((mask, period))) => {
                        let states: Vec<JobState> = JobState::ALL
                            .into_iter()
                            .enumerate()
                            .filter(|(i, _)| mask & (1 << i) != 0)
                            .map(|(_, s)| s)
                            .collect();
                        let mut mode = echomq::Unique::by_states(&states);
                        if let Some(p) = period {
                            mode = mode.within(p);
                        }
                        opts = opts.unique(d, mode);
                    }
                    (Some(d), Some(ttl), None) => opts = opts.dedup_for(d, ttl),
                    (Some(d), None, None) => opts = opts.dedup(d),
                    _ => {}
                }
                if let Some(v) = expiry {
                    opts = opts.discard_after(v);
                }
                if let Some(v) = lane {
                    opts = opts.lane(v);
                }
                if let Some(v) = delay {
                    opts = opts.delay(v);
                }
                if let Some(v) = attempts {
                    opts = opts.max_attempts(v);
                }
                if let Some(v) = stalls {
                    opts = opts.max_stalls(v);
                }
                if let Some(v) = timeout {
                    opts = opts.timeout(v);
                }
                if let Some(v) = backoff {
                    opts = opts.backoff(v);
                }
                let mut raw = raw.clone();
                rt.block_on(async {
                    flush(&mut raw).await;
                    let got = match bounded("enqueue", q.enqueue_with(&payload, &opts)).await? {
                        Ok(got) => got,
                        Err(e) => {
                            prop_assert!(typed_refusal(&e), "{opts:?}: {e:?}");
                            return Ok(());
                        }
                    };
                    accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if let Some(id) = &id {
                        prop_assert_eq!(&got.id, id);
                    }
                    let info = bounded("job", q.job(&got.id)).await?.unwrap();
                    prop_assert_eq!(info.decode::<serde_json::Value>().unwrap(), payload.clone());
                    prop_assert_eq!(info.kind.as_deref(), kind.as_deref());
                    // Run it now whatever its delay, and retry it with any delay and error text.
                    if info.state == JobState::Delayed {
                        bounded("promote", q.promote(&[got.id.as_str()])).await?.unwrap();
                    }
                    let lease = bounded("claim", q.claim(1, Duration::from_secs(30))).await?.unwrap();
                    if lease.is_empty() && info.expires_at_ms.is_some() {
                        // its expiry passed before the claim: it ends expired
                        let state = bounded("job", q.job(&got.id)).await?.unwrap().state;
                        prop_assert_eq!(state, JobState::Expired, "{:?}", info);
                        return Ok(());
                    }
                    prop_assert_eq!(lease.len(), 1, "{:?}", info);
                    prop_assert_eq!(lease[0].decode::<serde_json::Value>().unwrap(), payload);
                    match bounded("retry", q.retry(&lease[0], Some(retry_delay), &error_text)).await? {
                        Ok(_) => {}
                        Err(e) => {
                            prop_assert!(typed_refusal(&e), "retry: {e:?}");
                            // Refused, nothing settled: the lease still holds.
                            bounded("fail", q.fail(&lease[0], &error_text)).await?.unwrap();
                        }
                    }
                    confined(&all_keys(&mut raw).await, &["emq:{fuzz}:".to_owned()])
                })
            },
        )
        .unwrap();
    assert!(
        accepted.into_inner() > 0,
        "no generated job was valid: the property tested nothing"
    );
}

// Consumer and queue settings at any value, however extreme, are refused with a typed error or run; a consumer that starts also shuts down within the bound.
#[test]
fn settings_are_refused_or_run() {
    let (server, rt) = env();
    let client = rt.block_on(Client::connect(&server.url())).unwrap();
    // Half in range, half anywhere: both the refusals and the runs get exercised.
    let size = || prop_oneof![0usize..64, any::<usize>()];
    let count = || prop_oneof![0u32..64, any::<u32>()];
    // Each consumer setting is set in a third of the cases (left at its
    // default otherwise), so that about a third of the consumers are valid
    // and run: with every setting drawn, so few were that a run of 96 cases
    // at times had none (and proved nothing).
    fn of<S: Strategy>(s: S) -> impl Strategy<Value = Option<S::Value>> {
        proptest::option::weighted(0.35, s)
    }
    let strategy = (
        (of(size()), of(size()), of(any_duration()), of(any_duration())),
        (
            of(any_duration()),
            any_duration(),
            of(any_duration()),
            of(any_backoff()),
        ),
        (
            size(),
            count(),
            count(),
            any_duration(),
            any_backoff(),
            count(),
            any_duration(),
        ),
        (of(count()), count(), any_duration(), edgy_string()),
    );
    let started = std::sync::atomic::AtomicU32::new(0);
    runner()
        .run(&strategy, |(c, d, qo, lim)| {
            let (max_active, rate_jobs, rate_per, lane) = lim;
            let (concurrency, prefetch, lease, heartbeat) = c;
            let (poll, shutdown, reap, backoff) = d;
            let (max_payload, attempts, stalls, timeout, queue_backoff, keep, age) = qo;
            rt.block_on(async {
                let opts = QueueOptions::new()
                    .max_payload_bytes(max_payload)
                    .max_attempts(attempts)
                    .max_stalls(stalls)
                    .timeout(timeout)
                    .backoff(queue_backoff)
                    .keep_completed(Retention::Newest(keep))
                    .keep_failed(Retention::Within(age));
                let q = match bounded("open", client.queue_with("settings", opts)).await? {
                    Ok(q) => q,
                    Err(e) => {
                        prop_assert!(typed_refusal(&e), "{e:?}");
                        client.queue("settings").await.unwrap()
                    }
                };
                // Each setting is set or left at its default, so that some
                // combinations are valid and run.
                // Limits stored in the server: set, then cleared, or refused.
                let checks = [
                    bounded("max_active", q.set_max_active(max_active)).await?,
                    match echomq::throttle::RateLimit::new(rate_jobs, rate_per) {
                        Ok(r) => {
                            let set = bounded("rate", q.set_rate_limit(Some(r))).await?;
                            let lane = bounded("lane rate", q.set_lane_rate_limit(&lane, Some(r))).await?;
                            set.and(lane)
                        }
                        Err(e) => Err(e),
                    },
                ];
                for r in checks {
                    if let Err(e) = r {
                        prop_assert!(typed_refusal(&e), "limits: {e:?}");
                    }
                }
                bounded("clear", q.set_max_active(None)).await?.unwrap();
                bounded("clear", q.set_rate_limit(None)).await?.unwrap();
                let mut consumer = Consumer::new(q, |_job: Job<u32>| async { Ok(()) })
                    .shutdown_timeout(shutdown.min(Duration::from_secs(1)));
                if let Some(v) = concurrency {
                    consumer = consumer.concurrency(v);
                }
                if let Some(v) = prefetch {
                    consumer = consumer.prefetch(v);
                }
                if let Some(v) = lease {
                    consumer = consumer.lease(v);
                }
                if let Some(v) = heartbeat {
                    consumer = consumer.heartbeat(v);
                }
                if let Some(v) = poll {
                    consumer = consumer.poll_interval(v);
                }
                if let Some(v) = reap {
                    consumer = consumer.reap_interval(v);
                }
                if let Some(v) = backoff {
                    consumer = consumer.backoff(v);
                }
                match consumer.spawn() {
                    Ok(handle) => {
                        started.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        bounded("shutdown", handle.shutdown()).await?.unwrap()
                    }
                    Err(e) => prop_assert!(matches!(e, Error::InvalidOption { .. }), "{e:?}"),
                }
                Ok(())
            })
        })
        .unwrap();
    assert!(
        started.into_inner() > 0,
        "no generated consumer was valid: the property tested nothing"
    );
}

// Any cron expression and time zone is refused with a typed error or stored; stored schedules compute their next ticks within the bound.
#[cfg(feature = "cron")]
#[test]
fn cron_expressions_are_refused_or_scheduled() {
    use echomq::schedule::Schedule;
    let (server, rt) = env();
    let q = rt.block_on(echomq::Queue::connect(&server.url(), "cron")).unwrap();
    let field = "(\\*|[0-9]{1,2}|[0-9]{1,2}-[0-9]{1,2}|\\*/[0-9]{1,3}|[A-Z]{3}|[0-9]{1,2}[LW#]?[0-9]?|\\?)";
    let near = format!("{field}( {field}){{4,6}}");
    let strategy = (
        prop_oneof![edgy_string(), "[a-z]{1,8}"],
        prop_oneof![
            edgy_string(),
            near.as_str(),
            "[0-5]?[0-9] [0-2]?[0-9] \\* \\* \\*",
            Just("*/5 * * * *".to_owned())
        ],
        proptest::option::of(prop_oneof![edgy_string(), Just("Europe/Paris".to_owned())]),
        proptest::option::of(any_duration()),
    );
    let accepted = std::sync::atomic::AtomicU32::new(0);
    runner()
        .run(&strategy, |(name, expr, zone, grace)| {
            let mut s = Schedule::new(name, expr);
            if let Some(g) = grace {
                s = s.grace(g);
            }
            if let Some(z) = zone {
                s = s.time_zone(z);
            }
            rt.block_on(async {
                match bounded("upsert", q.upsert_schedule(&s, &0u32)).await? {
                    Ok(_) => {
                        accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let ticks = s.ticks_after(std::time::SystemTime::now(), 3);
                        prop_assert!(ticks.is_ok(), "{s:?}: {ticks:?}");
                        bounded("remove", q.remove_schedule(s.name())).await?.unwrap();
                    }
                    Err(e) => prop_assert!(typed_refusal(&e), "{s:?}: {e:?}"),
                }
                Ok(())
            })
        })
        .unwrap();
    assert!(
        accepted.into_inner() > 0,
        "no generated schedule was valid: the property tested nothing"
    );
}

// Two queues, whatever their names, never share a key: every key written for either belongs to exactly one of them.
#[test]
fn two_queues_never_share_a_key() {
    let (server, rt) = env();
    let (client, raw) = rt.block_on(async {
        (
            Client::connect(&server.url()).await.unwrap(),
            common::raw(&server).await,
        )
    });
    let name = "[a-z:*?\\[\\]\\\\]{1,6}";
    runner()
        .run(&(name, name), |(a, b)| {
            let mut raw = raw.clone();
            rt.block_on(async {
                flush(&mut raw).await;
                let (Ok(qa), Ok(qb)) = (client.queue(&a).await, client.queue(&b).await) else {
                    return Ok(());
                };
                for q in [&qa, &qb] {
                    let opts = EnqueueOptions::new().dedup("x").lane("y");
                    q.enqueue_with(&1u32, &opts).await.unwrap();
                    q.enqueue_with(&2u32, &EnqueueOptions::new().delay(Duration::from_secs(60)))
                        .await
                        .unwrap();
                    let l = q.claim(1, Duration::from_secs(30)).await.unwrap();
                    q.fail(&l[0], "no").await.unwrap();
                }
                let bases = if a == b {
                    vec![format!("emq:{{{a}}}:")]
                } else {
                    vec![format!("emq:{{{a}}}:"), format!("emq:{{{b}}}:")]
                };
                confined(&all_keys(&mut raw).await, &bases)
            })
        })
        .unwrap();
}

/// Counts near the edges: small ones, the limits a caller may meet, and
/// the largest a `usize` holds (and an `i64`, where the server's integers end).
fn edgy_count() -> impl Strategy<Value = usize> {
    prop_oneof![
        0..3usize,
        Just(echomq::maintenance::MAX_SWEEP_BATCH),
        Just(echomq::maintenance::MAX_SWEEP_BATCH + 1),
        Just(echomq::schedule::MAX_PREVIEW_TICKS),
        Just(echomq::schedule::MAX_PREVIEW_TICKS + 1),
        Just(i64::MAX as usize),
        Just(i64::MAX as usize + 1),
        Just(usize::MAX),
        any::<usize>(),
    ]
}

// Any sweep batch and any preview count is refused with a typed error or answered within the call bound: none is sent to the server as an integer it cannot take, none loops without end (issue 29, items 3 and 4).
#[test]
fn counts_are_refused_or_bounded() {
    let (server, rt) = env();
    let q = rt.block_on(async { Queue::connect(&server.url(), &common::unique("counts")).await.unwrap() });
    let schedule = Schedule::new("every-second", "* * * * * *");
    runner()
        .run(&edgy_count(), |n| {
            rt.block_on(async {
                for (what, r) in [
                    ("sweep", bounded("sweep", q.sweep(n)).await?.map(|_| ())),
                    (
                        "sweep_step",
                        bounded("sweep_step", q.sweep_step(&SweepCursor::default(), n))
                            .await?
                            .map(|_| ()),
                    ),
                    (
                        "sweep_queues",
                        bounded(
                            "sweep_queues",
                            echomq::maintenance::sweep_queues(std::slice::from_ref(&q), n),
                        )
                        .await?
                        .map(|_| ()),
                    ),
                ] {
                    match r {
                        Ok(()) => prop_assert!((1..=echomq::maintenance::MAX_SWEEP_BATCH).contains(&n), "{what}({n})"),
                        Err(e) => prop_assert!(typed_refusal(&e), "{what}({n}): {e:?}"),
                    }
                }
                Ok(())
            })?;
            // A preview runs in the caller's thread: give it one of its own to time it.
            let (tx, rx) = std::sync::mpsc::channel();
            let s = schedule.clone();
            std::thread::spawn(move || {
                let _ = tx.send(s.ticks_after(std::time::SystemTime::now(), n).map(|t| t.len()));
            });
            match rx.recv_timeout(CALL_BOUND) {
                Ok(Ok(len)) => prop_assert!(len == n, "ticks_after({n}) gave {len}"),
                Ok(Err(e)) => prop_assert!(
                    typed_refusal(&e) && n > echomq::schedule::MAX_PREVIEW_TICKS,
                    "ticks_after({n}): {e:?}"
                ),
                Err(_) => prop_assert!(false, "ticks_after({n}) took longer than {CALL_BOUND:?}"),
            }
            Ok(())
        })
        .unwrap();
}
