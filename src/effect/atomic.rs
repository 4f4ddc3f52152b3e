//! Atomic completion: effects in Valkey applied in the same script that
//! completes the job (module docs, section 3).

use super::{MAX_EFFECT_COUNTER, MAX_EFFECT_KEY_BYTES, MAX_EFFECT_VALUE_BYTES, MAX_EFFECTS};
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::queue::{Outcome, Queue, Settled};
use crate::store;
use crate::store::complete::{Completed, Effect};

/// The effect as a command, for error messages.
fn describe(effect: &Effect) -> String {
    let text = |b: &[u8]| {
        let s = String::from_utf8_lossy(b);
        if s.chars().count() > 40 {
            format!("{:?}…", s.chars().take(40).collect::<String>())
        } else {
            format!("{s:?}")
        }
    };
    match effect {
        Effect::IncrBy { key, by } => format!("INCRBY {key} {by}"),
        Effect::HIncrBy { key, field, by } => format!("HINCRBY {key} {} {by}", text(field)),
        Effect::HSet { key, field, value } => format!("HSET {key} {} {}", text(field), text(value)),
        Effect::SAdd { key, member } => format!("SADD {key} {}", text(member)),
    }
}

fn counter(effect: &Effect) -> Option<i64> {
    match effect {
        Effect::IncrBy { by, .. } | Effect::HIncrBy { by, .. } => Some(*by),
        _ => None,
    }
}

fn blobs(effect: &Effect) -> Vec<&[u8]> {
    match effect {
        Effect::IncrBy { .. } => vec![],
        Effect::HIncrBy { field, .. } => vec![field],
        Effect::HSet { field, value, .. } => vec![field, value],
        Effect::SAdd { member, .. } => vec![member],
    }
}

/// Effects in Valkey applied by [`Queue::complete_with`] in the same script
/// that completes the job: all of them with the acknowledgement, or none.
/// Build with the chained methods; applied in order.
///
/// Each target key must lie in the queue's user-key space
/// `PREFIX:{QUEUE}:user:*`: name it with [`Queue::user_key`]. That keeps
/// the script in the queue's hash slot (Valkey Cluster) and away from
/// echomq's own keys and from other applications' keys.
///
/// ```
/// # fn demo(queue: &echomq::Queue) -> echomq::Result<()> {
/// let effects = echomq::Effects::new()
///     .incr_by(queue.user_key("sent")?, 1)
///     .hincr_by(queue.user_key("sent-by-domain")?, "example.com", 1)
///     .hset(queue.user_key("last-sent")?, "user-17", "2024-05-01")
///     .sadd(queue.user_key("welcomed")?, "user-17");
/// assert_eq!(effects.len(), 4);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effects {
    ops: Vec<Effect>,
}

impl Effects {
    /// No effects (`complete_with` then behaves as `complete`).
    pub fn new() -> Self {
        Self::default()
    }

    /// `INCRBY key by`: adds `by` to the integer at `key` (a missing key
    /// counts as 0). The value and `by` must stay within ±(2^53 − 1)
    /// ([`MAX_EFFECT_COUNTER`]).
    pub fn incr_by(mut self, key: impl Into<String>, by: i64) -> Self {
        self.ops.push(Effect::IncrBy { key: key.into(), by });
        self
    }

    /// `HINCRBY key field by`: adds `by` to the integer in a hash field
    /// (limits as [`incr_by`](Self::incr_by)).
    pub fn hincr_by(mut self, key: impl Into<String>, field: impl Into<Vec<u8>>, by: i64) -> Self {
        self.ops.push(Effect::HIncrBy {
            key: key.into(),
            field: field.into(),
            by,
        });
        self
    }

    /// `HSET key field value`.
    pub fn hset(mut self, key: impl Into<String>, field: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        self.ops.push(Effect::HSet {
            key: key.into(),
            field: field.into(),
            value: value.into(),
        });
        self
    }

    /// `SADD key member`.
    pub fn sadd(mut self, key: impl Into<String>, member: impl Into<Vec<u8>>) -> Self {
        self.ops.push(Effect::SAdd {
            key: key.into(),
            member: member.into(),
        });
        self
    }

    /// How many effects are declared.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True when none are.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Checks every effect against `queue` before anything is sent.
    fn check(&self, queue: &Queue) -> Result<()> {
        if self.ops.len() > MAX_EFFECTS {
            return Err(Error::EffectRefused {
                index: MAX_EFFECTS + 1,
                effect: describe(&self.ops[MAX_EFFECTS]),
                reason: format!("at most {MAX_EFFECTS} effects per completion"),
            });
        }
        let user = format!("{}user:", queue.keys().base);
        for (i, op) in self.ops.iter().enumerate() {
            let key = op.key();
            let reason = if key.len() > MAX_EFFECT_KEY_BYTES {
                format!("the key is longer than {MAX_EFFECT_KEY_BYTES} bytes")
            } else if !key.starts_with(&user) || key.len() == user.len() {
                format!(
                    "only keys of this queue's user-key space {user}* may be written (name them with Queue::user_key)"
                )
            } else if counter(op).is_some_and(|by| by.abs() > MAX_EFFECT_COUNTER) {
                "the increment exceeds 2^53 - 1".to_owned()
            } else if blobs(op).iter().any(|b| b.len() > MAX_EFFECT_VALUE_BYTES) {
                format!("a field, value or member is longer than {MAX_EFFECT_VALUE_BYTES} bytes")
            } else {
                continue;
            };
            return Err(Error::EffectRefused {
                index: i + 1,
                effect: describe(op),
                reason,
            });
        }
        Ok(())
    }
}

impl Queue {
    /// The full name of a key for your own data in this queue's hash slot:
    /// `PREFIX:{QUEUE}:user:NAME`. Use it for atomic-completion
    /// [`Effects`], and to read the data back with any client.
    ///
    /// # Errors
    /// [`Error::InvalidId`] for an empty name, one longer than 256 bytes or
    /// one with control characters.
    pub fn user_key(&self, name: &str) -> Result<String> {
        crate::validate::id("user key name", name)?;
        Ok(format!("{}user:{name}", self.keys().base))
    }

    /// The idempotency key of job `job_id` of this queue, the same as
    /// [`Job::idempotency_key`](crate::Job::idempotency_key) hands the consumer's handler: `{QUEUE}:ID`.
    pub fn idempotency_key(&self, job_id: &str) -> String {
        crate::job::idempotency_key(self.name(), job_id)
    }

    /// Completes a leased job and applies `effects` in the same script:
    /// the effects and the acknowledgement commit together or not at all
    /// (atomic completion; module docs). A stale lease applies nothing
    /// ([`Error::LeaseLost`]); a repeat after success answers
    /// [`Outcome::AlreadySettled`] and applies nothing again. With no
    /// effects it is [`complete`](Self::complete).
    ///
    /// # Errors
    /// [`Error::EffectRefused`] when an effect targets a key outside the
    /// queue's hash slot or inside echomq's own keys, exceeds a limit, or
    /// meets a value of the wrong type or a counter out of range: nothing
    /// changed and the job is still leased. Otherwise as
    /// [`complete`](Self::complete).
    pub async fn complete_with(&self, lease: &Lease, effects: &Effects) -> Result<Settled> {
        lease.check_queue(self.base())?;
        effects.check(self)?;
        let keep = self.options().keep_completed.arg();
        let durability = self.options().durability;
        let (completed, confirmed) =
            store::complete::run(&mut self.conn(), self.keys(), lease, &keep, &effects.ops, durability).await?;
        match completed {
            Completed::Refused { index, reason } => {
                let effect = effects.ops.get(index.wrapping_sub(1)).map(describe).unwrap_or_default();
                Err(Error::EffectRefused { index, effect, reason })
            }
            Completed::Settled(settled, outbox) => {
                if settled.outcome == Outcome::Completed {
                    self.report_settled(1, confirmed);
                }
                if outbox {
                    // the end of another queue's step or member: relayed
                    // within RELAY_HOT_INTERVAL, as a settlement's
                    self.upkeep().heat(self.base());
                }
                Ok(settled)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Effects describe themselves as the command they run, values quoted and cut short.
    #[test]
    fn effects_describe_themselves() {
        let e = Effects::new()
            .incr_by("k", -3)
            .hset("h", "f", "x".repeat(100))
            .sadd("s", b"m".to_vec());
        assert_eq!(describe(&e.ops[0]), "INCRBY k -3");
        assert!(describe(&e.ops[1]).starts_with("HSET h \"f\" \"xxxx"));
        assert!(describe(&e.ops[1]).ends_with('…'));
        assert_eq!(describe(&e.ops[2]), "SADD s \"m\"");
    }
}
