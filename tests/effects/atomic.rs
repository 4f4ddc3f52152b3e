//! Atomic completion: effects applied with the acknowledgement, once;
//! nothing with a stale token; bad effects refused before any write.

use echomq::{Effects, Error, JobState, Outcome};
use redis::AsyncCommands;

use super::common::{raw, setup, snapshot};
use super::{LONG, SHORT, counter, redeliver};

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
