//! Ending the live streams when the app shuts down.

use std::sync::Arc;

use tokio::sync::watch;

/// Ends the dashboard's live streams (`/events`) when the app shuts down.
///
/// A page holds a server-sent event stream open for as long as it is
/// shown, and a graceful shutdown (axum's `with_graceful_shutdown`) waits
/// for every open response to end: without this, one open dashboard tab
/// keeps the server, and the worker shutdown after it, waiting forever.
/// Give the dashboard a handle ([`DashboardOptions::shutdown`]) and
/// [`trigger`](Self::trigger) it in the graceful-shutdown signal: every
/// open stream ends at once, and one opened later ends as it starts (the
/// page stops updating and says so).
///
/// ```no_run
/// use echomq_dashboard::{DashboardOptions, Shutdown, Source};
///
/// # async fn demo(client: echomq::Client, worker: echomq::worker::WorkerHandle) -> Result<(), Box<dyn std::error::Error>> {
/// let stop = Shutdown::new();
/// let dashboard = echomq_dashboard::router(Source::from(client), DashboardOptions::new().shutdown(&stop));
/// let app = axum::Router::new().nest("/admin/queues", dashboard);
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
/// axum::serve(listener, app)
///     .with_graceful_shutdown(async move {
///         let _ = tokio::signal::ctrl_c().await;
///         stop.trigger(); // the live streams end, so the server can stop
///     })
///     .await?;
/// // Then the workers: their running jobs finish (or are released).
/// worker.shutdown().await?;
/// # Ok(()) }
/// ```
///
/// [`DashboardOptions::shutdown`]: crate::DashboardOptions::shutdown
#[derive(Debug, Clone)]
pub struct Shutdown(Arc<watch::Sender<bool>>);

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown(Arc::new(watch::Sender::new(false)))
    }
}

impl Shutdown {
    /// A handle not triggered yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ends every live stream of the dashboards given this handle (and of
    /// its clones), now and from now on. Triggering twice is harmless.
    pub fn trigger(&self) {
        self.0.send_replace(true);
    }

    /// Whether [`trigger`](Self::trigger) was called.
    pub fn is_triggered(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits until [`trigger`](Self::trigger) is called (at once if it was).
    pub async fn triggered(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives in `self`, so the channel cannot close here.
        let _ = rx.wait_for(|on| *on).await;
    }
}
