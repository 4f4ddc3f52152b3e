//! [`Lease`]: a claimed job, the only handle that can settle it, and its
//! payload as stored ([`RawPayload`]).

use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, Result};
use crate::limits::Limits;

/// A job leased to the caller by [`Queue::claim`](crate::Queue::claim): the
/// only way to settle it. It knows its queue (settling it through another
/// queue's handle is [`Error::WrongQueue`]) and carries the fencing token
/// its claim minted. Settling borrows the lease, so a settle whose reply
/// was lost can be sent again (it answers "already settled").
#[derive(Clone)]
pub struct Lease {
    /// The queue's key base `PREFIX:{NAME}:`: ids and tokens are per queue.
    pub(crate) queue: Arc<str>,
    pub(crate) id: String,
    pub(crate) token: u64,
    pub(crate) attempt: u64,
    pub(crate) failures: u64,
    pub(crate) limits: Limits,
    pub(crate) payload: Vec<u8>,
    pub(crate) deadline_ms: u64,
    pub(crate) claimed_ms: u64,
    /// The job's lane, if it has one.
    pub(crate) lane: Option<String>,
    /// The job's kind, if it has one (what a router routes by).
    pub(crate) kind: Option<String>,
    /// When the job's record was created (server ms; 0 for a record
    /// without one): tells incarnations of one id apart.
    pub(crate) created_ms: u64,
    /// The W3C traceparent the job was enqueued with
    /// ([`EnqueueOptions::traceparent`](crate::EnqueueOptions::traceparent)).
    pub(crate) traceparent: Option<String>,
    /// Set by [`Queue::extend`](crate::Queue::extend) when an operator
    /// asked to cancel the job.
    pub(crate) cancel_requested: bool,
}

/// Shows the payload's size, not its bytes: payloads may hold personal data.
impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("queue", &self.queue)
            .field("id", &self.id)
            .field("token", &self.token)
            .field("attempt", &self.attempt)
            .field("failures", &self.failures)
            .field("payload_bytes", &self.payload.len())
            .field("deadline_ms", &self.deadline_ms)
            .field("lane", &self.lane)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl Lease {
    /// The job id.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// The fencing token minted by this claim: unique within the queue,
    /// never reused, not even for a later job with the same id.
    pub fn token(&self) -> u64 {
        self.token
    }
    /// This delivery's number (1 on the first).
    pub fn attempt(&self) -> u64 {
        self.attempt
    }
    /// Handler failures recorded before this attempt.
    pub fn failures(&self) -> u64 {
        self.failures
    }
    /// The job's limits, fixed at enqueue.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
    /// When the job was stored (server ms): the same on every delivery,
    /// different for a later job stored under the same id.
    pub fn created_ms(&self) -> u64 {
        self.created_ms
    }
    /// [`Job::incarnation_key`](crate::Job::incarnation_key) for the
    /// low-level API: `{QUEUE}:ID@CREATED_MS`.
    pub fn incarnation_key(&self) -> String {
        // The base is `PREFIX:{NAME}:`, and neither part may hold a brace.
        let name = match (self.queue.find('{'), self.queue.rfind('}')) {
            (Some(a), Some(b)) if a < b => &self.queue[a + 1..b],
            _ => &self.queue,
        };
        crate::job::incarnation_key(name, &self.id, self.created_ms)
    }
    /// The job's lane, if it has one: this lease holds one of the lane's
    /// slots until it is settled, released, snoozed or reaped.
    pub fn lane(&self) -> Option<&str> {
        self.lane.as_deref()
    }
    /// The W3C traceparent the job was enqueued with
    /// ([`EnqueueOptions::traceparent`](crate::EnqueueOptions::traceparent)), if any.
    pub fn traceparent(&self) -> Option<&str> {
        self.traceparent.as_deref()
    }
    /// The job's kind ([`EnqueueOptions::kind`](crate::EnqueueOptions::kind),
    /// [`JobKind::KIND`](crate::JobKind::KIND)), if it has one.
    pub fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }
    /// The raw JSON payload.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }
    /// Decodes the payload.
    ///
    /// # Errors
    /// [`Error::Decode`] when it does not decode into `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T> {
        if crate::compression::is_compressed(&self.payload) {
            return Err(Error::Decode {
                id: self.id.clone(),
                source: crate::compression::undecodable(&self.payload),
            });
        }
        serde_json::from_slice(&self.payload).map_err(|source| Error::Decode {
            id: self.id.clone(),
            source,
        })
    }
    /// The payload as a handler of `T` takes it: decoded, or for a
    /// [`RawPayload`] the bytes as they are (a
    /// router decodes them once, as its kind's type).
    pub(crate) fn decode_payload<T: DeserializeOwned + 'static>(&self) -> Result<T> {
        use std::any::{Any, TypeId};
        if TypeId::of::<T>() == TypeId::of::<RawPayload>() {
            let raw: Box<dyn Any> = Box::new(RawPayload(self.payload.clone()));
            if let Ok(raw) = raw.downcast::<T>() {
                return Ok(*raw);
            }
        }
        self.decode()
    }
    /// The lease deadline on the server's clock (ms since the Unix epoch).
    pub fn deadline_ms(&self) -> u64 {
        self.deadline_ms
    }
    /// True once a renewal ([`Queue::extend`](crate::Queue::extend)) found
    /// that an operator asked to cancel the job
    /// ([`Queue::cancel`](crate::Queue::cancel)): stop, and settle it any
    /// way but complete (it then ends cancelled), or with
    /// [`Settle::Cancel`](crate::Settle::Cancel).
    pub fn cancel_requested(&self) -> bool {
        self.cancel_requested
    }
    /// When the claim ran, on the server's clock.
    pub fn claimed_ms(&self) -> u64 {
        self.claimed_ms
    }
    /// Refuses the lease unless it came from the queue with key base `base`.
    pub(crate) fn check_queue(&self, base: &str) -> Result<()> {
        if *self.queue == *base {
            return Ok(());
        }
        let name = |b: &str| b.trim_end_matches(':').to_owned();
        Err(Error::WrongQueue {
            id: self.id.clone(),
            leased_from: name(&self.queue),
            queue: name(base),
        })
    }
}

/// A job's payload as the bytes stored, not decoded: the payload type of a
/// handler that decodes it itself, as a [`KindRouter`](crate::KindRouter) does. A
/// [`Consumer`](crate::Consumer) and a [`Drain`](crate::testing::Drain)
/// hand it over without parsing it (decoded any other way, as with
/// [`Lease::decode`], it must be well-formed JSON).
#[derive(Clone, PartialEq, Eq)]
pub struct RawPayload(pub(crate) Vec<u8>);

impl RawPayload {
    /// The payload's JSON bytes, as enqueued.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
    /// Decodes the payload as a `T`.
    ///
    /// # Errors
    /// The decode error when the bytes are not a `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_slice(&self.0)
    }
}

/// Shows the payload's size, not its bytes: payloads may hold personal data.
impl fmt::Debug for RawPayload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawPayload").field("bytes", &self.0.len()).finish()
    }
}

impl<'de> Deserialize<'de> for RawPayload {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let raw = Box::<serde_json::value::RawValue>::deserialize(d)?;
        Ok(RawPayload(raw.get().as_bytes().to_vec()))
    }
}

impl Serialize for RawPayload {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let text = std::str::from_utf8(&self.0).map_err(serde::ser::Error::custom)?;
        let raw = serde_json::value::RawValue::from_string(text.to_owned()).map_err(serde::ser::Error::custom)?;
        raw.serialize(s)
    }
}
