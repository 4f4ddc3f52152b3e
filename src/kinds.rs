//! Routing by job kind: one queue, several kinds of job, each with its own
//! payload type and handler.
//!
//! A typed job names its kind ([`JobKind::KIND`]);
//! [`Queue::enqueue_job`](crate::Queue::enqueue_job) records it on the job;
//! a [`KindRouter`], built with [`Kinds`], is the [`Handler`] of a
//! [`Consumer`](crate::Consumer) (or of a [`Drain`](crate::testing::Drain))
//! and runs each job with its kind's handler. Each handler is any
//! [`Handler`] (an async closure, [`with_state`](crate::handlers::with_state),
//! a tower service), decoding its own payload type; its result is kept with
//! the job as usual.
//!
//! ```no_run
//! # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
//! use echomq::{Consumer, HandlerError, Job, JobKind, Kinds};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct SendEmail { to: String }
//! impl JobKind for SendEmail { const KIND: &'static str = "send_email"; }
//!
//! #[derive(Serialize, Deserialize)]
//! struct SendSms { number: String }
//! impl JobKind for SendSms { const KIND: &'static str = "send_sms"; }
//!
//! async fn send_email(job: Job<SendEmail>) -> Result<(), HandlerError> {
//!     println!("mail to {}", job.payload().to);
//!     Ok(())
//! }
//!
//! let router = Kinds::new()
//!     .kind::<SendEmail>(send_email)
//!     .kind::<SendSms>(|job: Job<SendSms>| async move {
//!         Ok::<_, HandlerError>(job.payload().number.len())
//!     })
//!     .build()?;
//! let worker = Consumer::new(queue.clone(), router).spawn()?;
//!
//! queue.enqueue_job(&SendEmail { to: "ada@example.com".into() }).await?;
//! queue.enqueue_job(&SendSms { number: "+441234".into() }).await?;
//! # worker.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! What a router does with each job:
//!
//! | the job | it |
//! | --- | --- |
//! | has a registered kind | decodes the payload as that kind's type, once, and runs its handler |
//! | has a registered kind, and its payload does not decode as that type | fails it for good at once, with a reason naming the kind and the decode error |
//! | has an unknown kind, or none | runs the [`fallback`](Kinds::fallback) handler if there is one; else fails it for good at once (no retry: no later attempt would know the kind either), with a reason naming the kind and the kinds the router knows |
//!
//! The consumer hands a router the payload's bytes untouched
//! ([`RawPayload`]), so each payload is parsed once, as its kind's type.
//! Registering a kind twice is an [`Error::InvalidOption`] from
//! [`Kinds::build`].

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::warn;

use crate::error::{Error, Result};
use crate::job::JobKind;
pub use crate::lease::RawPayload;
use crate::worker::Job;
use crate::worker::{Handler, HandlerError};

/// The future a route returns.
type RouteFuture = Pin<Box<dyn Future<Output = std::result::Result<Value, HandlerError>> + Send>>;

/// One kind's handler, its payload type erased.
trait Route: Send + Sync + 'static {
    fn call(&self, job: Job<RawPayload>) -> RouteFuture;
}

/// A handler of payload type `T`, decoding the raw payload first.
struct Typed<T, H> {
    handler: H,
    _payload: std::marker::PhantomData<fn() -> T>,
}

impl<T, H> Route for Typed<T, H>
where
    T: DeserializeOwned + Send + 'static,
    H: Handler<T>,
{
    fn call(&self, job: Job<RawPayload>) -> RouteFuture {
        let payload = match job.payload().decode::<T>() {
            Ok(p) => p,
            Err(e) => {
                let kind = job.kind().unwrap_or_default();
                warn!(kind, error = %e, "payload does not decode as its kind's type; failing the job");
                let reason = format!("job kind {kind:?}: undecodable payload: {e}");
                return Box::pin(std::future::ready(Err(HandlerError::fail(reason))));
            }
        };
        let call = self.handler.call(job.map_payload(|_| payload));
        Box::pin(async move { call.await.map(|out| to_value(&out)) })
    }
}

/// The raw payload handed on as it is (the fallback).
struct Untyped<H>(H);

impl<H: Handler<RawPayload>> Route for Untyped<H> {
    fn call(&self, job: Job<RawPayload>) -> RouteFuture {
        let call = self.0.call(job);
        Box::pin(async move { call.await.map(|out| to_value(&out)) })
    }
}

/// A handler's result as JSON. One that does not encode is dropped (the
/// work was done; the job completes without it), as a consumer does.
fn to_value<R: Serialize>(out: &R) -> Value {
    serde_json::to_value(out).unwrap_or_else(|e| {
        warn!(error = %e, "the handler's result cannot be kept; the job completes without it");
        Value::Null
    })
}

/// Builds a [`KindRouter`]: register a handler per kind, then
/// [`build`](Self::build) it (see the [module docs](self)).
#[must_use = "a router is built with build()"]
#[derive(Default)]
pub struct Kinds {
    routes: Vec<(String, Arc<dyn Route>)>,
    fallback: Option<Arc<dyn Route>>,
}

impl fmt::Debug for Kinds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kinds")
            .field("kinds", &self.routes.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("fallback", &self.fallback.is_some())
            .finish()
    }
}

impl Kinds {
    /// A router with no kinds yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs jobs of kind `J::KIND` with `handler`, which gets their
    /// payloads decoded as `J`.
    pub fn kind<J: JobKind + Send + 'static>(self, handler: impl Handler<J>) -> Self {
        self.named::<J>(J::KIND, handler)
    }

    /// Runs jobs of kind `kind` with `handler`, which gets their payloads
    /// decoded as `T`: for a payload type that does not implement
    /// [`JobKind`] (a type from another crate, `serde_json::Value`, or one
    /// type under several kinds).
    pub fn named<T: DeserializeOwned + Send + 'static>(
        mut self,
        kind: impl Into<String>,
        handler: impl Handler<T>,
    ) -> Self {
        let route = Typed {
            handler,
            _payload: std::marker::PhantomData,
        };
        self.routes.push((kind.into(), Arc::new(route)));
        self
    }

    /// Runs jobs of a kind with no handler here, and jobs without a kind,
    /// with `handler`, which gets the payload undecoded
    /// ([`Job::kind`] tells the kind). Without a fallback such jobs fail
    /// for good at once.
    pub fn fallback(mut self, handler: impl Handler<RawPayload>) -> Self {
        self.fallback = Some(Arc::new(Untyped(handler)));
        self
    }

    /// The router.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a kind registered twice;
    /// [`Error::InvalidId`] for a kind that is not a valid kind (see
    /// [`MAX_KIND_BYTES`](crate::job::MAX_KIND_BYTES)).
    pub fn build(self) -> Result<KindRouter> {
        let mut routes = BTreeMap::new();
        for (kind, route) in self.routes {
            crate::validate::kind(&kind)?;
            if routes.contains_key(&kind) {
                return Err(Error::InvalidOption {
                    name: "kind",
                    reason: format!(
                        "kind {:?} is registered twice (one handler per kind)",
                        crate::error::excerpt(&kind)
                    ),
                });
            }
            routes.insert(kind, route);
        }
        Ok(KindRouter {
            routes: Arc::new(routes),
            fallback: self.fallback,
        })
    }
}

/// A [`Handler`] that runs each job with its kind's handler; built with
/// [`Kinds`] (see the [module docs](self)). Its payload type is
/// [`RawPayload`] and its output the kind handler's result as JSON.
#[derive(Clone)]
pub struct KindRouter {
    routes: Arc<BTreeMap<String, Arc<dyn Route>>>,
    fallback: Option<Arc<dyn Route>>,
}

impl fmt::Debug for KindRouter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KindRouter")
            .field("kinds", &self.routes.keys().collect::<Vec<_>>())
            .field("fallback", &self.fallback.is_some())
            .finish()
    }
}

impl KindRouter {
    /// The kinds it has handlers for, in order.
    pub fn kinds(&self) -> impl Iterator<Item = &str> {
        self.routes.keys().map(String::as_str)
    }

    /// Why a job of `kind` cannot run here.
    fn unroutable(&self, kind: Option<&str>) -> HandlerError {
        let known = self.kinds().map(|k| format!("{k:?}")).collect::<Vec<_>>().join(", ");
        let known = if known.is_empty() { "none".to_owned() } else { known };
        HandlerError::fail(match kind {
            Some(k) => format!("unknown job kind {k:?}: this worker handles {known}"),
            None => format!(
                "the job has no kind (enqueue it with Queue::enqueue_job or EnqueueOptions::kind): this worker handles {known}"
            ),
        })
    }
}

impl Handler<RawPayload> for KindRouter {
    type Output = Value;
    type Future = RouteFuture;

    fn call(&self, job: Job<RawPayload>) -> RouteFuture {
        let route = job.kind().and_then(|k| self.routes.get(k)).or(self.fallback.as_ref());
        match route {
            Some(route) => route.call(job),
            None => {
                let e = self.unroutable(job.kind());
                warn!(kind = job.kind(), error = %e, "failing a job no handler takes");
                Box::pin(std::future::ready(Err(e)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A kind registered twice, or an invalid kind, is a typed error at build time.
    #[test]
    fn build_refuses_duplicate_and_invalid_kinds() {
        let h = |_: Job<u32>| async { Ok::<_, HandlerError>(()) };
        let dup = Kinds::new().named::<u32>("a", h).named::<u32>("a", h).build();
        assert!(matches!(dup, Err(Error::InvalidOption { name: "kind", .. })), "{dup:?}");
        let bad = Kinds::new().named::<u32>("", h).build();
        assert!(matches!(bad, Err(Error::InvalidId { what: "job kind", .. })), "{bad:?}");
        let ok = Kinds::new().named::<u32>("b", h).named::<u32>("a", h).build().unwrap();
        assert_eq!(ok.kinds().collect::<Vec<_>>(), ["a", "b"]);
    }

    // A raw payload round-trips through serde as the same JSON text.
    #[test]
    fn raw_payload_round_trips() {
        let raw: RawPayload = serde_json::from_str(r#" {"a": [1, 2]} "#).unwrap();
        assert_eq!(raw.bytes(), br#"{"a": [1, 2]}"#);
        assert_eq!(serde_json::to_string(&raw).unwrap(), r#"{"a": [1, 2]}"#);
        assert_eq!(raw.decode::<serde_json::Value>().unwrap()["a"][1], 2);
    }
}
