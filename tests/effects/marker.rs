//! The effect marker: concurrent deliveries apply the effect once, a crash
//! between marker and effect is recovered, and its state machine.

use std::time::Duration;

use echomq::{EffectMarker, Error, Lease, MarkerState, Once, OnceError, Outcome, Reaper};
use redis::AsyncCommands;

use super::common::{past as wait_past, raw, setup};
use super::{LONG, SHORT, counter, redeliver};

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
