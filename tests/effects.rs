//! Exactly-once effects on at-least-once delivery (src/effect.rs) against a
//! real server: idempotency keys, effect markers and their fencing, atomic
//! completion, the demonstrations' readouts, and effects under SIGKILL.

mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::{eventually, past as wait_past, raw, setup, snapshot};
use echomq::{
    Backoff, Consumer, EffectMarker, Effects, EnqueueOptions, Error, Job, JobState, Lease, MarkerState, Once,
    OnceError, Outcome, Queue, Reaper,
};
use redis::AsyncCommands;
use tokio::sync::Mutex;

const LONG: Duration = Duration::from_secs(30);
const SHORT: Duration = Duration::from_millis(60);

/// The worker holding `old` "crashes": it never settles. After the lease
/// deadline the reaper requeues the job and a new claim redelivers it.
async fn redeliver(q: &Queue, old: &Lease, lease: Duration) -> Lease {
    wait_past(q, old.deadline_ms()).await;
    let report = Reaper::new(q.clone()).run_once().await.unwrap();
    assert!(report.requeued.iter().any(|(id, _)| id == old.id()), "{report:?}");
    let new = q.claim(1, lease).await.unwrap().remove(0);
    assert_eq!((new.id(), new.attempt()), (old.id(), old.attempt() + 1));
    assert!(new.token() > old.token());
    new
}

async fn counter(c: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    c.get::<_, Option<i64>>(key).await.unwrap().unwrap_or(0)
}

// The idempotency key is the same on every delivery (handler error, crash), and {QUEUE}:ID never collides.
#[tokio::test]
async fn idempotency_key_is_stable_across_redeliveries() {
    let (s, q) = setup("idkey").await;
    let opts = EnqueueOptions::new()
        .backoff(Backoff::Fixed(Duration::from_millis(5)))
        .max_attempts(5);
    let id = q.enqueue_with(&1u32, &opts).await.unwrap().id;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let consumer = Consumer::new(q.clone(), move |job: Job<u32>| {
        let seen = seen2.clone();
        async move {
            seen.lock().await.push((job.attempt(), job.idempotency_key()));
            if job.attempt() < 3 {
                Err("not yet".into())
            } else {
                Ok(())
            }
        }
    })
    .spawn()
    .unwrap();
    let done = eventually(Duration::from_secs(10), || async {
        q.job(&id).await.unwrap().state == JobState::Completed
    })
    .await;
    consumer.shutdown().await.unwrap();
    assert!(done);
    let seen = seen.lock().await.clone();
    let want = format!("{{{}}}:{id}", q.name());
    assert_eq!(seen.iter().map(|(a, _)| *a).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert!(seen.iter().all(|(_, k)| *k == want), "{seen:?}");
    assert_eq!(q.idempotency_key(&id), want);

    // A crash redelivery (lease reaped) keeps the key too.
    let id2 = q.enqueue(&2u32).await.unwrap();
    let first = q.claim(1, SHORT).await.unwrap().remove(0);
    let second = redeliver(&q, &first, LONG).await;
    assert_eq!(q.idempotency_key(first.id()), q.idempotency_key(second.id()));
    assert_eq!(q.idempotency_key(second.id()), format!("{{{}}}:{id2}", q.name()));

    // Queue names may hold ':' and ids too; the braces keep the pairs apart.
    let a = Queue::connect(&s.url(), "t:a").await.unwrap();
    let b = Queue::connect(&s.url(), "t").await.unwrap();
    assert_ne!(a.idempotency_key("b"), b.idempotency_key("a:b"));
}

// Concurrent deliveries of one job (attempts 1, 2, 3) running the guarded effect at once apply it exactly once.
#[tokio::test]
async fn concurrent_deliveries_apply_the_effect_once() {
    let (s, q) = setup("fx-concurrent").await;
    let mut c = raw(&s).await;
    let jobs = 20;
    q.enqueue_bulk(&(0..jobs).collect::<Vec<u32>>()).await.unwrap();
    // Three live leases per job: two reaped (stale) and the current one.
    let mut attempts: Vec<Vec<Lease>> = q.claim(64, SHORT).await.unwrap().into_iter().map(|l| vec![l]).collect();
    for round in 0..2 {
        let deadline = attempts.iter().map(|a| a[round].deadline_ms()).max().unwrap();
        wait_past(&q, deadline).await;
        assert_eq!(
            Reaper::new(q.clone()).run_once().await.unwrap().requeued.len(),
            jobs as usize
        );
        for l in q.claim(64, if round == 1 { LONG } else { SHORT }).await.unwrap() {
            attempts.iter_mut().find(|a| a[0].id() == l.id()).unwrap().push(l);
        }
    }
    let mut runs = Vec::new();
    for leases in &attempts {
        for l in leases {
            let (q, key) = (q.clone(), format!("effects:{}", l.id()));
            let marker = EffectMarker::for_lease(&q, l, "credit").unwrap();
            let mut c = c.clone();
            let attempt = l.attempt();
            runs.push(tokio::spawn(async move {
                let token = marker.token();
                let r = marker
                    .once(|state| async move {
                        assert_eq!(state, MarkerState::Fresh);
                        c.incr::<_, _, i64>(&key, 1).await.map_err(|e| e.to_string())?;
                        Ok::<u64, String>(token)
                    })
                    .await;
                (attempt, token, r)
            }));
        }
    }
    for run in runs {
        match run.await.unwrap() {
            (3, token, Ok(Once::Ran(ran))) if ran == token => {}
            (1 | 2, _, Err(OnceError::Claim(Error::LeaseLost { .. }))) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    for leases in &attempts {
        assert_eq!(counter(&mut c, &format!("effects:{}", leases[0].id())).await, 1);
        // A repeat by the current attempt is skipped; a late stale one is still refused.
        let m3 = EffectMarker::for_lease(&q, &leases[2], "credit").unwrap();
        assert_eq!(
            m3.once(|_| async { Err::<(), _>("must not run") }).await.unwrap(),
            Once::Skipped {
                token: leases[2].token()
            }
        );
        let m1 = EffectMarker::for_lease(&q, &leases[0], "credit").unwrap();
        assert!(matches!(m1.claim().await, Err(Error::LeaseLost { token, .. }) if token == leases[0].token()));
    }

    // An older attempt that finished before it was reaped leaves "done" for the newer one.
    let id = q.enqueue(&99u32).await.unwrap();
    let l1 = q.claim(1, SHORT).await.unwrap().remove(0);
    let m1 = EffectMarker::for_lease(&q, &l1, "credit").unwrap();
    let key = format!("effects:{id}");
    m1.once(|_| async { c.clone().incr::<_, _, i64>(&key, 1).await.map_err(|e| e.to_string()) })
        .await
        .unwrap();
    let l2 = redeliver(&q, &l1, LONG).await;
    let m2 = EffectMarker::for_lease(&q, &l2, "credit").unwrap();
    assert_eq!(m2.claim().await.unwrap(), MarkerState::Done { token: l1.token() });
    assert_eq!(counter(&mut c, &key).await, 1);
}

// A crash after claiming the marker and before the effect is recovered: the next delivery is told "orphaned" and performs it once.
#[tokio::test]
async fn crash_between_marker_and_effect_is_recovered() {
    let (s, q) = setup("fx-crash").await;
    let mut c = raw(&s).await;
    let id = q.enqueue(&"charge").await.unwrap();
    let ledger = format!("ledger:{id}");
    let l1 = q.claim(1, SHORT).await.unwrap().remove(0);
    let m1 = EffectMarker::for_lease(&q, &l1, "charge").unwrap();
    assert_eq!(m1.claim().await.unwrap(), MarkerState::Fresh);
    // ... the worker dies here: no effect, no done, no settle.
    let l2 = redeliver(&q, &l1, LONG).await;
    let m2 = EffectMarker::for_lease(&q, &l2, "charge").unwrap();
    let key = m2.idempotency_key();
    assert_eq!(key, format!("{{{}}}:{id}:charge", q.name()));
    let l1_token = l1.token();
    let ran = m2
        .once(|state| {
            let mut c = c.clone();
            let (ledger, key) = (ledger.clone(), key.clone());
            async move {
                assert_eq!(state, MarkerState::Orphaned { token: l1_token });
                // Resolve "orphaned" with the external system's own record.
                let applied: bool = c.sismember(&ledger, &key).await.map_err(|e| e.to_string())?;
                if !applied {
                    c.sadd::<_, _, ()>(&ledger, &key).await.map_err(|e| e.to_string())?;
                }
                Ok::<bool, String>(!applied)
            }
        })
        .await
        .unwrap();
    assert_eq!(ran, Once::Ran(true));
    assert_eq!(q.complete(&l2).await.unwrap().outcome, Outcome::Completed);
    let n: u64 = c.scard(&ledger).await.unwrap();
    assert_eq!(n, 1);
    // The dead attempt, were it to come back, can neither record nor give back the effect.
    for r in [m1.done().await, m1.abandon().await] {
        assert!(
            matches!(
                r,
                Err(Error::MarkerLost {
                    token,
                    holder,
                    done: true,
                    ..
                }) if token == l1.token() && holder == l2.token()
            ),
            "{r:?}"
        );
    }
}

// The marker's states and fences: fresh, repeat, done, orphaned (repeatable), abandon, stale and foreign callers, TTL.
#[tokio::test]
async fn marker_state_machine() {
    let (s, q) = setup("fx-states").await;
    let mut c = raw(&s).await;
    let id = q.enqueue(&0u8).await.unwrap();
    let l1 = q.claim(1, SHORT).await.unwrap().remove(0);
    let m1 = EffectMarker::for_lease(&q, &l1, "mail")
        .unwrap()
        .ttl(Duration::from_secs(60));
    assert_eq!(m1.key(), format!("emq:{{{}}}:fx:mail:{id}", q.name()));
    assert_eq!(m1.claim().await.unwrap(), MarkerState::Fresh);
    assert_eq!(
        m1.claim().await.unwrap(),
        MarkerState::Fresh,
        "a repeat answers the same"
    );
    let pttl: i64 = c.pttl(m1.key()).await.unwrap();
    assert!((50_000..=60_000).contains(&pttl), "{pttl}");
    // Another effect of the same job has its own marker.
    let other = EffectMarker::for_lease(&q, &l1, "sms").unwrap();
    assert_eq!(other.claim().await.unwrap(), MarkerState::Fresh);
    // The effect surely did not happen: give "sms" back; the next attempt starts fresh.
    other.abandon().await.unwrap();
    other.abandon().await.unwrap();

    // Attempt 1 dies holding "mail"; attempt 2 takes over, and hears "orphaned" again if it asks again.
    let l2 = redeliver(&q, &l1, SHORT).await;
    let m2 = EffectMarker::for_lease(&q, &l2, "mail").unwrap();
    let orphaned_by_1 = MarkerState::Orphaned { token: l1.token() };
    assert_eq!(m2.claim().await.unwrap(), orphaned_by_1);
    assert_eq!(m2.claim().await.unwrap(), orphaned_by_1);
    assert_eq!(
        EffectMarker::for_lease(&q, &l2, "sms").unwrap().claim().await.unwrap(),
        MarkerState::Fresh
    );
    // The stale attempt is refused and its done is fenced out.
    assert!(matches!(m1.claim().await, Err(Error::LeaseLost { token, .. }) if token == l1.token()));
    assert!(matches!(
        m1.done().await,
        Err(Error::MarkerLost {
            holder,
            done: false,
            ..
        }) if holder == l2.token()
    ));
    // Attempt 2 dies too; attempt 3 is told about 2, the last holder.
    let l3 = redeliver(&q, &l2, LONG).await;
    let m3 = EffectMarker::for_lease(&q, &l3, "mail").unwrap();
    assert_eq!(m3.claim().await.unwrap(), MarkerState::Orphaned { token: l2.token() });
    m3.done().await.unwrap();
    m3.done().await.unwrap();
    assert_eq!(m3.claim().await.unwrap(), MarkerState::Done { token: l3.token() });
    assert!(matches!(m3.abandon().await, Err(Error::MarkerLost { done: true, .. })));
    let v: String = c.get(m3.key()).await.unwrap();
    assert_eq!(v, format!("done:{}", l3.token()));

    // After completion no attempt may claim; a missing job is a typed error.
    q.complete(&l3).await.unwrap();
    assert!(matches!(m3.claim().await, Err(Error::LeaseLost { .. })));
    let ghost = EffectMarker::new(&q, "no-such-job", 1, "mail").unwrap();
    assert!(matches!(ghost.claim().await, Err(Error::JobNotFound(_))));
    // Bad input never reaches the server.
    assert!(matches!(
        EffectMarker::new(&q, &id, 1, "a:b"),
        Err(Error::InvalidId {
            what: "effect name",
            ..
        })
    ));
    assert!(matches!(
        EffectMarker::new(&q, &id, 0, "mail"),
        Err(Error::InvalidOption { .. })
    ));
    // A value echomq did not write is reported, not overwritten.
    let id = q.enqueue(&1u8).await.unwrap();
    let l = q.claim(1, LONG).await.unwrap().remove(0);
    let m = EffectMarker::for_lease(&q, &l, "mail").unwrap();
    c.set::<_, _, ()>(m.key(), "something else").await.unwrap();
    assert!(matches!(m.claim().await, Err(Error::Protocol { .. })));
    let v: String = c.get(m.key()).await.unwrap();
    assert_eq!(v, "something else", "job {id}");
}

// Atomic completion applies every declared effect with the acknowledgement, once; a repeat applies nothing again.
#[tokio::test]
async fn atomic_completion_applies_effects_with_the_ack() {
    let (s, q) = setup("fx-atomic").await;
    let mut c = raw(&s).await;
    q.enqueue(&1u8).await.unwrap();
    let lease = q.claim(1, LONG).await.unwrap().remove(0);
    let n = q.user_key("orders").unwrap();
    let h = q.user_key("by-country").unwrap();
    let last = q.user_key("last").unwrap();
    let set = q.user_key("customers").unwrap();
    let own = q.user_key("total").unwrap();
    assert_eq!(n, format!("emq:{{{}}}:user:orders", q.name()));
    let effects = Effects::new()
        .incr_by(&n, 5)
        .incr_by(&n, -2)
        .hincr_by(&h, "se", 7)
        .hset(&last, "customer", "ada")
        .hset(&last, "cents", "100")
        .hincr_by(&last, "cents", 25)
        .sadd(&set, "ada")
        .incr_by(&own, 9_007_199_254_740_991);
    let done = q.complete_with(&lease, &effects).await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(counter(&mut c, &n).await, 3);
    assert_eq!(counter(&mut c, &own).await, 9_007_199_254_740_991);
    let by: i64 = c.hget(&h, "se").await.unwrap();
    let (who, cents): (String, i64) = redis::cmd("HMGET")
        .arg(&last)
        .arg("customer")
        .arg("cents")
        .query_async(&mut c)
        .await
        .unwrap();
    let members: Vec<String> = c.smembers(&set).await.unwrap();
    assert_eq!(
        (by, who.as_str(), cents, members),
        (7, "ada", 125, vec!["ada".to_owned()])
    );
    assert_eq!(q.job(lease.id()).await.unwrap().state, JobState::Completed);

    // The reply was "lost" and the worker completes again: nothing is applied twice.
    let again = q.complete_with(&lease, &effects).await.unwrap();
    assert_eq!(again.outcome, Outcome::AlreadySettled);
    assert_eq!(counter(&mut c, &n).await, 3);
    assert_eq!(counter(&mut c, &own).await, 9_007_199_254_740_991);
    let cents: i64 = c.hget(&last, "cents").await.unwrap();
    assert_eq!(cents, 125);
    // No effects: exactly `complete`.
    q.enqueue(&2u8).await.unwrap();
    let l = q.claim(1, LONG).await.unwrap().remove(0);
    assert_eq!(
        q.complete_with(&l, &Effects::new()).await.unwrap().outcome,
        Outcome::Completed
    );
}

// Atomic completion with a stale token (the job was reaped and redelivered) applies no effect and changes nothing.
#[tokio::test]
async fn atomic_completion_with_a_stale_token_applies_nothing() {
    let (s, q) = setup("fx-stale").await;
    let mut c = raw(&s).await;
    q.enqueue(&1u8).await.unwrap();
    let old = q.claim(1, SHORT).await.unwrap().remove(0);
    let new = redeliver(&q, &old, LONG).await;
    let n = q.user_key("paid").unwrap();
    let effects = Effects::new().incr_by(&n, 1).sadd(q.user_key("seen").unwrap(), "x");
    let before = snapshot(&s, q.name()).await;
    assert!(matches!(
        q.complete_with(&old, &effects).await,
        Err(Error::LeaseLost { token, .. }) if token == old.token()
    ));
    assert_eq!(
        before,
        snapshot(&s, q.name()).await,
        "a stale completion changed something"
    );
    assert_eq!(counter(&mut c, &n).await, 0);
    // The current owner's completion applies the effect, once.
    q.complete_with(&new, &effects).await.unwrap();
    assert!(matches!(
        q.complete_with(&old, &effects).await,
        Err(Error::LeaseLost { .. })
    ));
    assert_eq!(counter(&mut c, &n).await, 1);
}

// Effects outside the queue's user-key space (another slot, another prefix, echomq's own keys), on the wrong type or out of range are refused before anything is written.
#[tokio::test]
async fn atomic_completion_refuses_bad_effects() {
    let (s, q) = setup("fx-refuse").await;
    let mut c = raw(&s).await;
    let id = q.enqueue(&1u8).await.unwrap();
    let lease = q.claim(1, LONG).await.unwrap().remove(0);
    let name = q.name().to_owned();
    let k = |n: &str| q.user_key(n).unwrap();
    c.set::<_, _, ()>(k("text"), "abc").await.unwrap();
    c.set::<_, _, ()>(k("big"), 9_007_199_254_740_990i64).await.unwrap();
    c.set::<_, _, ()>(k("padded"), "007").await.unwrap();
    let ok = Effects::new().incr_by(k("good"), 1);
    let cases: Vec<(Effects, usize, &str)> = vec![
        (ok.clone().incr_by("plain-key", 1), 2, "user-key space"),
        (ok.clone().incr_by("emq:{other}:user:x", 1), 2, "user-key space"),
        // Another application's key in the same slot, and this queue's internals (0.1 let both through).
        (
            ok.clone().incr_by(format!("other-app:{{{name}}}:x"), 1),
            2,
            "user-key space",
        ),
        (
            ok.clone().incr_by(format!("foo:{{{name}}}:seq"), 1),
            2,
            "user-key space",
        ),
        (
            ok.clone().incr_by(format!("emq:{{{name}}}:seq"), 1),
            2,
            "user-key space",
        ),
        (
            ok.clone().incr_by(format!("emq:{{{name}}}:user:"), 1),
            2,
            "user-key space",
        ),
        (
            ok.clone().sadd(format!("emq:{{{name}}}:pending"), "x"),
            2,
            "user-key space",
        ),
        (
            ok.clone().hset(format!("emq:{{{name}}}:job:{id}"), "st", "completed"),
            2,
            "user-key space",
        ),
        (ok.clone().sadd(k("text"), "m"), 2, "holds a string, not a set"),
        (ok.clone().incr_by(k("text"), 1), 2, "not an integer"),
        (ok.clone().incr_by(k("padded"), 1), 2, "not an integer"),
        (ok.clone().incr_by(k("big"), 2), 2, "2^53"),
        (ok.clone().incr_by(k("big"), 1).incr_by(k("big"), 1), 3, "2^53"),
        (ok.clone().incr_by(k("n"), 1 << 53), 2, "2^53"),
        (
            ok.clone().hset(k("h"), "f", "x").hincr_by(k("h"), "f", 1),
            3,
            "not an integer",
        ),
        (
            ok.clone().sadd(k("fresh"), "m").hset(k("fresh"), "f", "v"),
            3,
            "holds a set, not a hash",
        ),
        (
            (0..=64).fold(Effects::new(), |e, i| e.sadd(k("many"), i.to_string())),
            65,
            "at most 64",
        ),
    ];
    let before = snapshot(&s, &name).await;
    for (effects, index, why) in cases {
        match q.complete_with(&lease, &effects).await {
            Err(Error::EffectRefused { index: i, reason, .. }) if i == index && reason.contains(why) => {}
            other => panic!("{effects:?}: expected refusal of effect {index} ({why}), got {other:?}"),
        }
    }
    assert_eq!(
        before,
        snapshot(&s, &name).await,
        "a refused completion wrote something"
    );
    assert_eq!(q.job(&id).await.unwrap().state, JobState::Active);
    // The job is still leased, and completing it properly works.
    q.complete_with(&lease, &ok).await.unwrap();
    assert_eq!(counter(&mut c, &k("good")).await, 1);
}

// delivery_modes: a crash loses the job under at-most-once (1 lost, never run again) and runs it twice under at-least-once (0 lost).
#[test]
fn delivery_modes_readout() {
    let r = run_example("delivery_modes", &[]);
    let rows: Vec<(String, String, u64, i64, u64)> = r["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["mode"].as_str().unwrap().to_owned(),
                row["crash"].as_str().unwrap().to_owned(),
                row["deliveries"].as_u64().unwrap(),
                row["runs"].as_i64().unwrap(),
                row["lost"].as_u64().unwrap(),
            )
        })
        .collect();
    let want = [
        ("at-most-once", "before the effect", 1, 0, 1),
        ("at-most-once", "after the effect, before the ack", 1, 1, 0),
        ("at-least-once", "before the effect", 2, 1, 0),
        ("at-least-once", "after the effect, before the ack", 2, 2, 0),
    ];
    let want: Vec<_> = want
        .iter()
        .map(|&(m, c, d, n, l)| (m.to_owned(), c.to_owned(), d, n, l))
        .collect();
    assert_eq!(rows, want);
}

// crash_window: only a crash between the effect and its record duplicates; asking the provider or atomic completion never does.
#[test]
fn crash_window_readout() {
    let r = run_example("crash_window", &[]);
    let plain: Vec<(&str, i64)> = r["plain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| (row["crash"].as_str().unwrap(), row["effects"].as_i64().unwrap()))
        .collect();
    assert_eq!(
        plain,
        [
            ("after lease", 1),
            ("after effect", 2),
            ("after complete", 1),
            ("no crash", 1)
        ]
    );
    let marker: Vec<(&str, i64, i64)> = r["marker"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let n = |k: &str| row[k].as_i64().unwrap();
            (row["crash"].as_str().unwrap(), n("redo"), n("ask"))
        })
        .collect();
    assert_eq!(
        marker,
        [
            ("after lease", 1, 1),
            ("after marker claim", 1, 1),
            ("after effect", 2, 1),
            ("after mark done", 1, 1),
            ("after complete", 1, 1),
            ("no crash", 1, 1),
        ]
    );
    let atomic: Vec<i64> = r["atomic"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["effects"].as_i64().unwrap())
        .collect();
    assert_eq!(atomic, [1, 1, 1]);
}

// idempotent_consumer: replaying a job 1, 2, 3 times multiplies a naive consumer's effects and leaves the idempotent ones at 1.
#[test]
fn idempotent_consumer_readout() {
    let r = run_example("idempotent_consumer", &[]);
    let rows: Vec<[i64; 4]> = r["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| ["deliveries", "non_idempotent", "marker", "atomic"].map(|k| row[k].as_i64().unwrap()))
        .collect();
    assert_eq!(rows, [[1, 1, 1, 1], [2, 2, 1, 1], [3, 3, 1, 1]]);
}

// Under random SIGKILLs of worker processes, every job completes and its marker-guarded external effect happens exactly once.
#[test]
fn effects_under_kills_are_exactly_once_with_the_marker() {
    let jobs = 300;
    let r = run_example("effect_worker", &["--jobs", &jobs.to_string()]);
    let run = |mode: &str| {
        r["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|run| run["mode"] == mode)
            .unwrap()
            .clone()
    };
    let n = |run: &serde_json::Value, k: &str| run[k].as_u64().unwrap();
    let (guarded, unguarded) = (run("guarded"), run("unguarded"));
    assert!(n(&guarded, "kills") > 0, "{guarded}");
    assert_eq!(n(&guarded, "completed"), jobs, "{guarded}");
    assert_eq!(
        (n(&guarded, "once"), n(&guarded, "missing"), n(&guarded, "duplicated")),
        (jobs, 0, 0),
        "seed {}: {guarded}",
        r["seed"]
    );
    assert_eq!(n(&guarded, "effects"), jobs);
    // Without the marker nothing is lost either (at-least-once); duplicates depend on where kills land.
    assert_eq!(n(&unguarded, "completed"), jobs, "{unguarded}");
    assert_eq!(n(&unguarded, "missing"), 0, "{unguarded}");
}

/// Runs an example binary (building it if needed) and returns its
/// `readout: {json}` line. The example starts its own private server.
fn run_example(name: &str, args: &[&str]) -> serde_json::Value {
    // scripts/test and CI run `cargo test --all-features`, which has built
    // the examples already: with the same features this build is a no-op.
    let features = "--all-features";
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let build = Command::new(cargo)
        // --workspace, as scripts/test's `cargo test --workspace`: the same
        // features unify, so the example it built is reused (with the root
        // package alone, redis, rcgen and echomq were rebuilt: 16 s).
        .args([
            "build",
            "--quiet",
            "--workspace",
            "--message-format=json",
            "--example",
            name,
            features,
        ])
        .arg("--manifest-path")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .output()
        .expect("run cargo build");
    assert!(
        build.status.success(),
        "building example {name} failed:\n{}",
        String::from_utf8_lossy(&build.stderr)
    );
    let exe = String::from_utf8_lossy(&build.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["target"]["name"] == name)
        .find_map(|m| m["executable"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("cargo did not report the {name} executable"));
    let out = Command::new(&exe)
        .args(args)
        .env_remove("ECHOMQ_URL")
        .output()
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{stdout}");
    let line = stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("readout: "))
        .unwrap_or_else(|| panic!("{name} printed no readout:\n{stdout}"));
    serde_json::from_str(line).unwrap()
}

// The idempotency key names the id; the incarnation key also tells apart a job stored again under that id, after its record was deleted or after the id counter went back (lost writes), and is the same on every delivery of one job.
#[tokio::test]
async fn incarnation_keys_differ_when_an_id_is_minted_again() {
    let opts = echomq::QueueOptions::new().keep_completed(echomq::Retention::None);
    let (s, q) = common::setup_with("incarnation", opts).await;
    let id = q.enqueue(&1u32).await.unwrap();
    let first = q.claim(1, Duration::from_millis(50)).await.unwrap().remove(0);
    let again = redeliver(&q, &first, LONG).await;
    assert_eq!(
        first.incarnation_key(),
        again.incarnation_key(),
        "stable across redeliveries"
    );
    assert!(
        first
            .incarnation_key()
            .starts_with(&format!("{}@", q.idempotency_key(&id)))
    );
    q.complete(&again).await.unwrap(); // and its record is deleted
    // The counter goes back, as after a torn append-only file: the id is minted again.
    let mut c = common::raw(&s).await;
    let _: () = redis::cmd("DECR")
        .arg(format!("emq:{{{}}}:seq", q.name()))
        .query_async(&mut c)
        .await
        .unwrap();
    common::past(&q, first.created_ms()).await;
    let id2 = q.enqueue(&2u32).await.unwrap();
    assert_eq!(id2, id, "the id was minted again");
    let second = q.claim(1, LONG).await.unwrap().remove(0);
    assert_eq!(q.idempotency_key(second.id()), q.idempotency_key(first.id()));
    assert_ne!(second.incarnation_key(), first.incarnation_key());
    assert!(second.created_ms() > first.created_ms());
}
