//! `lua/settle.lua`: settles a batch of leases, each fenced by its token,
//! and optionally leases the next jobs in the same call.

use std::sync::Arc;

use super::Spec;
use super::call::fenced;
use super::claim::{Claim, Claimed, read_leases};
use super::codes::Code;
use crate::conn::Conn;
use crate::durability::{Confirmed, Durability};
use crate::error::{Error, Result, truncate};
use crate::job::delay_ms;
use crate::keys::Keys;
use crate::lease::Lease;
use crate::settlement::{MAX_ERROR_BYTES, MAX_RESULT_BYTES, Outcome, Settle, Settled};

pub(super) static SPEC: Spec = Spec::new(
    "settle",
    include_str!("../../lua/settle.lua"),
    &[
        "active",
        "pending",
        "delayed",
        "completed",
        "failed",
        "wake",
        "token",
        "meta",
        "cancelled",
        "expired",
    ],
    false,
    &["prefix", "keep_completed", "keep_failed", "items"],
);

/// One settlement of a lease, encoded as settle.lua takes an item.
pub(crate) struct Item<'a> {
    lease: &'a Lease,
    op: &'a Settle,
    /// The op letter.
    code: &'static str,
    delay: String,
    text: String,
}

impl<'a> Item<'a> {
    /// Encodes `op` for `lease`, or says why it cannot be sent.
    pub(crate) fn new(lease: &'a Lease, op: &'a Settle) -> Result<Item<'a>> {
        let (code, delay, text) = match op {
            Settle::Complete => ("c", "0".into(), String::new()),
            Settle::Return { result } => {
                if result.len() > MAX_RESULT_BYTES {
                    return Err(Error::PayloadTooLarge {
                        size: result.len(),
                        limit: MAX_RESULT_BYTES,
                    });
                }
                if serde_json::from_str::<serde::de::IgnoredAny>(result).is_err() {
                    return Err(Error::InvalidOption {
                        name: "result",
                        reason: "is not JSON text".into(),
                    });
                }
                ("c", "0".into(), result.clone())
            }
            Settle::Retry { delay, error } => (
                "r",
                match delay {
                    Some(d) => delay_ms("retry delay", *d)?.to_string(),
                    None => String::new(),
                },
                truncate(error, MAX_ERROR_BYTES),
            ),
            Settle::Fail { reason } => ("f", "0".into(), truncate(reason, MAX_ERROR_BYTES)),
            Settle::Release => ("l", "0".into(), String::new()),
            Settle::Snooze { delay } => ("s", delay_ms("snooze delay", *delay)?.to_string(), String::new()),
            Settle::Cancel { reason } => ("x", "0".into(), truncate(reason, MAX_ERROR_BYTES)),
            Settle::RateLimited { retry_after } => (
                "h",
                delay_ms("rate limited retry_after", *retry_after)?.to_string(),
                String::new(),
            ),
        };
        Ok(Item {
            lease,
            op,
            code,
            delay,
            text,
        })
    }

    /// What an applied item did, from its code and due time.
    fn outcome(&self, code: Code, due: u64) -> Result<Outcome> {
        let due_ms = (due > 0).then_some(due);
        Ok(match fenced("settle", &self.lease.id, self.lease.token, code)? {
            Code::Already => Outcome::AlreadySettled,
            Code::Failed => Outcome::Failed,
            Code::Cancelled => Outcome::Cancelled,
            Code::Expired => Outcome::Expired,
            _ => match self.op {
                Settle::Complete | Settle::Return { .. } => Outcome::Completed,
                Settle::Retry { .. } => Outcome::Retrying { due_ms },
                Settle::Fail { .. } => Outcome::Failed,
                Settle::Release => Outcome::Released,
                Settle::Snooze { .. } | Settle::RateLimited { .. } => Outcome::Snoozed { due_ms },
                Settle::Cancel { .. } => Outcome::Cancelled,
            },
        })
    }
}

/// One settle call.
pub(crate) struct Batch<'a> {
    /// The retention of completed jobs, as `Retention::arg` writes it.
    pub keep_completed: &'a str,
    /// The retention of failed (and cancelled) jobs, likewise.
    pub keep_failed: &'a str,
    /// The items in order; one that could not be encoded is not sent and
    /// answers with its own error in its place.
    pub items: Vec<Result<Item<'a>>>,
    /// The claim that follows the settlements, if any.
    pub claim: Option<Claim<'a>>,
    /// How durable the settlements must be (claims need nothing).
    pub durability: Durability,
}

/// What a settle call did.
pub(crate) struct Answer {
    /// One result per item, in order.
    pub settled: Vec<Result<Settled>>,
    /// What the claim leased (nothing without one).
    pub claimed: Claimed,
    /// Whether the settlements are as durable as the batch asked.
    pub confirmed: Confirmed,
    /// An item's end left a message on the queue's outbox (a step of a
    /// flow whose home is another queue): relay it.
    pub outbox: bool,
}

/// Sends the batch's encodable items, and its claim, in one call to the
/// queue whose key base is `queue`.
pub(crate) async fn run(conn: &mut Conn, k: &Keys, queue: &Arc<str>, batch: Batch<'_>) -> Result<Answer> {
    let sent = batch.items.iter().filter(|e| e.is_ok()).count();
    let mut call = SPEC.call();
    call.key(&k.active)
        .key(&k.pending)
        .key(&k.delayed)
        .key(&k.completed)
        .key(&k.failed)
        .key(&k.wake)
        .key(&k.token)
        .key(&k.meta)
        .key(&k.cancelled)
        .key(&k.expired);
    call.arg(&k.base)
        .arg(batch.keep_completed)
        .arg(batch.keep_failed)
        .arg(sent);
    for item in batch.items.iter().flatten() {
        call.arg(item.code)
            .arg(&item.lease.id)
            .arg(item.lease.token)
            .arg(&item.delay)
            .arg(&item.text);
    }
    if let Some(claim) = &batch.claim {
        claim.args(&mut call);
    }
    let (mut r, confirmed) = call.run_confirmed(conn, batch.durability).await?;
    let now = r.uint()?;
    // "" when every item got (OK, 0); else `code,due` per item sent; then
    // ";o" when the outbox was written to
    let reply = r.string()?;
    let (outcomes, outbox) = match reply.strip_suffix(";o") {
        Some(rest) => (rest.to_owned(), true),
        None => (reply, false),
    };
    let mut fields = outcomes.split(',');
    let mut settled = Vec::with_capacity(batch.items.len());
    for item in batch.items {
        let item = match item {
            Ok(item) => item,
            Err(e) => {
                settled.push(Err(e));
                continue;
            }
        };
        let (code, due) = if outcomes.is_empty() {
            (Code::Ok, 0)
        } else {
            let (code, due) = (fields.next(), fields.next());
            let bad = || r.malformed("a code and a due time for each item", &outcomes);
            let code = code.and_then(|c| c.parse().ok()).ok_or_else(bad)?;
            (Code::of(SPEC.name, code)?, due.and_then(|d| d.parse().ok()).ok_or_else(bad)?)
        };
        settled.push(item.outcome(code, due).map(|outcome| Settled {
            outcome,
            server_ms: now,
        }));
    }
    let claimed = match batch.claim {
        Some(_) => read_leases(&mut r, queue, now)?,
        None => Claimed::default(),
    };
    Ok(Answer {
        settled,
        claimed,
        confirmed,
        outbox,
    })
}
