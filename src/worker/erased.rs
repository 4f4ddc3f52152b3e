//! A queue's handler with its payload type erased, so one worker can hold
//! queues of different payload types and handlers side by side: it decodes
//! a lease's payload, and the decoded job runs the typed handler, whose
//! result comes back as the JSON the job keeps.

use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use super::handler::{Handler, HandlerError};
use super::job::Job;
use super::job_task::keepable;
use crate::lease::Lease;
use crate::queue::Queue;

/// What one handler call ends with: the result to keep (JSON), if any.
pub(super) type Outcome = Result<Option<String>, HandlerError>;

/// One handler call, as a boxed future.
pub(super) type Call = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// What the handler's [`Job`] is made of, besides the payload.
pub(super) struct JobParts {
    pub queue: Queue,
    pub lease: Arc<Lease>,
    pub cancel: CancellationToken,
    pub requested: Arc<AtomicBool>,
}

/// A decoded job, ready to run: calling it builds the [`Job`] and calls the
/// handler (inside the task that runs it, so a panic in the call itself is
/// a panicked attempt too).
pub(super) type Ready = Box<dyn FnOnce(JobParts) -> Call + Send>;

/// A queue's handler, whatever its payload type.
pub(super) trait ErasedHandler: Send + Sync + 'static {
    /// Decodes `lease`'s payload; `Err` says why it does not decode (the
    /// job then fails for good).
    fn decode(&self, lease: &Lease) -> Result<Ready, String>;
}

/// A typed handler of payload `T`.
pub(super) struct Typed<T, H> {
    handler: Arc<H>,
    _payload: PhantomData<fn() -> T>,
}

impl<T, H> Typed<T, H> {
    pub(super) fn new(handler: Arc<H>) -> Arc<Self> {
        Arc::new(Typed {
            handler,
            _payload: PhantomData,
        })
    }
}

impl<T, H> ErasedHandler for Typed<T, H>
where
    T: DeserializeOwned + Send + 'static,
    H: Handler<T>,
{
    fn decode(&self, lease: &Lease) -> Result<Ready, String> {
        let payload: T = lease.decode_payload().map_err(|e| e.to_string())?;
        let handler = self.handler.clone();
        Ok(Box::new(move |p: JobParts| {
            Box::pin(async move {
                let job = Job::new(p.queue, p.lease, payload, p.cancel, p.requested);
                handler.call(job).await.map(|v| keepable(&v))
            }) as Call
        }))
    }
}
