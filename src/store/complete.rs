//! `lua/complete.lua`: completes one lease and applies its declared effects
//! in the same script (atomic completion).

use super::Spec;
use super::call::fenced;
use super::codes::Code;
use crate::conn::Conn;
use crate::durability::{Confirmed, Durability};
use crate::error::Result;
use crate::keys::Keys;
use crate::lease::Lease;
use crate::settlement::{Outcome, Settled};

pub(super) static SPEC: Spec = Spec::new(
    "complete",
    include_str!("../../lua/complete.lua"),
    &["job", "active", "completed"],
    true,
    &["prefix", "id", "token", "keep_completed", "effects"],
);

/// One declared effect, checked by the caller (`effect/atomic.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Effect {
    IncrBy { key: String, by: i64 },
    HIncrBy { key: String, field: Vec<u8>, by: i64 },
    HSet { key: String, field: Vec<u8>, value: Vec<u8> },
    SAdd { key: String, member: Vec<u8> },
}

impl Effect {
    /// The key it writes.
    pub(crate) fn key(&self) -> &str {
        match self {
            Effect::IncrBy { key, .. }
            | Effect::HIncrBy { key, .. }
            | Effect::HSet { key, .. }
            | Effect::SAdd { key, .. } => key,
        }
    }

    /// The script's name for the operation and its two arguments.
    fn args(&self) -> (&'static str, Vec<u8>, Vec<u8>) {
        match self {
            Effect::IncrBy { by, .. } => ("incrby", by.to_string().into_bytes(), Vec::new()),
            Effect::HIncrBy { field, by, .. } => ("hincrby", field.clone(), by.to_string().into_bytes()),
            Effect::HSet { field, value, .. } => ("hset", field.clone(), value.clone()),
            Effect::SAdd { member, .. } => ("sadd", member.clone(), Vec::new()),
        }
    }
}

/// What a completion did.
pub(crate) enum Completed {
    /// Completed (effects applied), or already completed with this
    /// token; and whether the completion left a message on the queue's
    /// outbox (the job's end, for another queue's flow or batch).
    Settled(Settled, bool),
    /// Effect `index` (1-based) was refused for `reason`: nothing changed,
    /// the job is still leased.
    Refused { index: usize, reason: String },
}

/// Completes `lease` and applies `effects`, all or nothing;
/// `keep_completed` as `Retention::arg` writes it. Also says whether the
/// call is as durable as `durability` asks.
pub(crate) async fn run(
    conn: &mut Conn,
    k: &Keys,
    lease: &Lease,
    keep_completed: &str,
    effects: &[Effect],
    durability: Durability,
) -> Result<(Completed, Confirmed)> {
    let mut targets: Vec<&str> = Vec::new();
    let mut call = SPEC.call();
    call.key(k.job(&lease.id)).key(&k.active).key(&k.completed);
    call.arg(&k.base)
        .arg(&lease.id)
        .arg(lease.token)
        .arg(keep_completed)
        .arg(effects.len());
    for effect in effects {
        let index = match targets.iter().position(|t| *t == effect.key()) {
            Some(i) => i,
            None => {
                targets.push(effect.key());
                targets.len() - 1
            }
        };
        let (name, a, b) = effect.args();
        // KEYS[1..3] are the job's; effect targets follow.
        call.arg(name).arg(index + 4).arg(a).arg(b);
    }
    for t in &targets {
        call.key(*t);
    }
    let (mut r, confirmed) = call.run_confirmed(conn, durability).await?;
    let (code, server_ms) = (r.code()?, r.uint()?);
    // absent from the replies of a caller that does not hold the lease
    let outbox = r.remaining() > 0 && r.uint()? == 1;
    if code == Code::Refused {
        let index = r.uint()? as usize;
        let reason = r.string()?;
        return Ok((Completed::Refused { index, reason }, confirmed));
    }
    let outcome = match fenced("complete", &lease.id, lease.token, code)? {
        Code::Already => Outcome::AlreadySettled,
        _ => Outcome::Completed,
    };
    Ok((Completed::Settled(Settled { outcome, server_ms }, outbox), confirmed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::BatchOptions;
    use crate::server::LocalServer;
    use crate::{Client, Error};

    // The reply says when the completion left a message on the outbox: the
    // end of a member of another queue's batch does, a plain job's does
    // not, and a caller without the lease gets no flag (nothing written).
    #[tokio::test]
    async fn the_reply_says_when_an_end_went_to_the_outbox() {
        let server = LocalServer::start().unwrap();
        let client = Client::connect(&server.url()).await.unwrap();
        let (home, far) = (client.queue("c-home").await.unwrap(), client.queue("c-far").await.unwrap());
        let batch = home.open_batch(&BatchOptions::new().id("b")).await.unwrap();
        batch.on(&far).unwrap().add(&[1u32]).await.unwrap();
        let member = far.claim(1, std::time::Duration::from_secs(60)).await.unwrap().remove(0);
        far.enqueue(&2u32).await.unwrap();
        let plain = far.claim(1, std::time::Duration::from_secs(60)).await.unwrap().remove(0);
        let complete = |lease: &Lease| {
            let (far, lease) = (far.clone(), lease.clone());
            async move {
                let keep = far.options().keep_completed.arg();
                run(&mut far.conn(), far.keys(), &lease, &keep, &[], Durability::Primary)
                    .await
                    .map(|(c, _)| c)
            }
        };
        assert!(matches!(complete(&member).await, Ok(Completed::Settled(s, true)) if s.outcome == Outcome::Completed));
        assert!(matches!(complete(&member).await, Ok(Completed::Settled(s, false)) if s.outcome == Outcome::AlreadySettled));
        assert!(matches!(complete(&plain).await, Ok(Completed::Settled(_, false))));
        let mut stale = plain.clone();
        stale.token += 1;
        assert!(matches!(complete(&stale).await, Err(Error::LeaseLost { .. })));
    }

    // An effect's operation and arguments are as complete.lua takes them.
    #[test]
    fn effects_encode_as_the_script_takes_them() {
        let incr = Effect::IncrBy {
            key: "k".into(),
            by: -3,
        };
        assert_eq!(incr.args(), ("incrby", b"-3".to_vec(), Vec::new()));
    }
}
