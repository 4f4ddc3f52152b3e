//! Handlers beyond plain closures: [`with_state`] hands application state
//! (a pool, a client, settings) to every call without globals, and with
//! feature `tower` any `tower::Service` is a handler (`handlers::service`), so the
//! usual layers (timeout, concurrency limit, tracing) compose.
//!
//! A closure that captures a clone of the state works too; `with_state`
//! saves the clone-per-call boilerplate and names the state in the
//! signature, which `async fn` handlers cannot capture:
//!
//! ```no_run
//! # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
//! use std::sync::Arc;
//! use echomq::{Consumer, HandlerError, Job, with_state};
//!
//! #[derive(Clone)]
//! struct App { greeting: Arc<str> }
//!
//! async fn greet(app: App, job: Job<String>) -> Result<String, HandlerError> {
//!     Ok(format!("{}, {}", app.greeting, job.payload()))
//! }
//!
//! let app = App { greeting: "hello".into() };
//! let worker = Consumer::new(queue, with_state(app, greet)).spawn()?;
//! # worker.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! The same in a closure, capturing the state:
//!
//! ```no_run
//! # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
//! # use std::sync::Arc;
//! # use echomq::{Consumer, HandlerError, Job};
//! let greeting: Arc<str> = "hello".into();
//! let worker = Consumer::new(queue, move |job: Job<String>| {
//!     let greeting = greeting.clone();
//!     async move { Ok::<_, HandlerError>(format!("{greeting}, {}", job.payload())) }
//! })
//! .spawn()?;
//! # worker.shutdown().await?;
//! # Ok(()) }
//! ```

use std::future::Future;

use crate::worker::Job;
use crate::worker::{Handler, HandlerError};

/// A handler that calls `f(state.clone(), job)` for each job; made by
/// [`with_state`].
#[derive(Clone)]
pub struct WithState<S, F> {
    state: S,
    f: F,
}

impl<S, F> std::fmt::Debug for WithState<S, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WithState").finish_non_exhaustive()
    }
}

/// A handler that gets a clone of `state` with each job: `f` is any
/// `Fn(S, Job<T>) -> impl Future<Output = Result<R, HandlerError>>`, such
/// as an `async fn handle(state: S, job: Job<T>)`. The state is cloned
/// once per job, so make it cheap to clone (an `Arc`, a pool handle). It
/// works per kind in a router as well:
///
/// ```no_run
/// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
/// use echomq::{Consumer, HandlerError, Job, JobKind, Kinds, with_state};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Invoice { n: u32 }
/// # impl JobKind for Invoice { const KIND: &'static str = "invoice"; }
/// #[derive(Clone)]
/// struct Db;
///
/// async fn bill(db: Db, job: Job<Invoice>) -> Result<(), HandlerError> {
///     let _ = (db, job.payload().n);
///     Ok(())
/// }
///
/// let router = Kinds::new().kind::<Invoice>(with_state(Db, bill)).build()?;
/// let worker = Consumer::new(queue, router).spawn()?;
/// # worker.shutdown().await?;
/// # Ok(()) }
/// ```
pub fn with_state<S, F>(state: S, f: F) -> WithState<S, F>
where
    S: Clone + Send + Sync + 'static,
{
    WithState { state, f }
}

impl<T, S, F, Fut, R> Handler<T> for WithState<S, F>
where
    S: Clone + Send + Sync + 'static,
    F: Fn(S, Job<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, HandlerError>> + Send + 'static,
    R: serde::Serialize + Send + 'static,
{
    type Output = R;
    type Future = Fut;
    fn call(&self, job: Job<T>) -> Fut {
        (self.f)(self.state.clone(), job)
    }
}

#[cfg(feature = "tower")]
pub use self::tower_handler::{ServiceHandler, service};

#[cfg(feature = "tower")]
mod tower_handler {
    use std::marker::PhantomData;
    use std::pin::Pin;
    use std::sync::{Mutex, PoisonError};

    use tower_service::Service;

    use super::*;

    /// A `tower::Service` as a [`Handler`]; made by [`service`].
    pub struct ServiceHandler<S, T> {
        /// The service each call clones: a clone's readiness is its own,
        /// and layers that share state between clones (a concurrency limit's
        /// semaphore) share it. Behind a lock because a service need not
        /// be `Sync` (a handler must be).
        service: Mutex<S>,
        _job: PhantomData<fn(T)>,
    }

    impl<S, T> std::fmt::Debug for ServiceHandler<S, T> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("ServiceHandler").finish_non_exhaustive()
        }
    }

    /// Any `tower::Service<Job<T>>` as a [`Handler`] of `T` (feature
    /// `tower`): its response is the job's result (kept with the job as a
    /// handler's `Ok` value is), its error the handler's error, converted
    /// with `Into<HandlerError>`: a layer's boxed error (a timeout's
    /// `Elapsed`, say) retries the job, and a service whose own error type
    /// is [`HandlerError`] chooses the outcome (fail, snooze) as a closure
    /// does. Each job is handled by a clone of the service, made ready
    /// first (`poll_ready`, then `call`), so layers such as
    /// `concurrency_limit` and `rate_limit` hold jobs back as they hold
    /// requests. A job waiting for readiness holds its lease and a place
    /// of the consumer's `concurrency`.
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use std::time::Duration;
    /// use echomq::{Consumer, Job, handlers::service};
    /// use tower::{BoxError, ServiceBuilder};
    ///
    /// let svc = ServiceBuilder::new()
    ///     .concurrency_limit(4)
    ///     .timeout(Duration::from_secs(10))
    ///     .service_fn(|job: Job<String>| async move {
    ///         Ok::<_, BoxError>(job.payload().len())
    ///     });
    /// let worker = Consumer::new(queue, service(svc)).spawn()?;
    /// # worker.shutdown().await?;
    /// # Ok(()) }
    /// ```
    pub fn service<S, T>(service: S) -> ServiceHandler<S, T>
    where
        S: Service<Job<T>> + Clone + Send + 'static,
    {
        ServiceHandler {
            service: Mutex::new(service),
            _job: PhantomData,
        }
    }

    impl<S, T, R, E> Handler<T> for ServiceHandler<S, T>
    where
        T: Send + 'static,
        S: Service<Job<T>, Response = R, Error = E> + Clone + Send + 'static,
        S::Future: Send + 'static,
        R: serde::Serialize + Send + 'static,
        E: Into<HandlerError> + 'static,
    {
        type Output = R;
        type Future = Pin<Box<dyn Future<Output = Result<R, HandlerError>> + Send>>;

        fn call(&self, job: Job<T>) -> Self::Future {
            let mut svc = self.service.lock().unwrap_or_else(PoisonError::into_inner).clone();
            Box::pin(async move {
                std::future::poll_fn(|cx| svc.poll_ready(cx))
                    .await
                    .map_err(Into::into)?;
                svc.call(job).await.map_err(Into::into)
            })
        }
    }
}
