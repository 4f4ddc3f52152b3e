//! A web dashboard for [echomq] queues, as an axum [`Router`] you
//! mount in your own app, under any path and behind your own auth.
//!
//! It shows every queue with its counts per state, its throughput
//! (completed and failed jobs per second, counted from the queue's
//! lifecycle events) and a small chart of the last 60 sample periods (a
//! minute at the default period); a queue's history over the last hour,
//! day or week (completed, failed and retried jobs and the mean wait, as
//! its workers counted them: [`echomq::Queue::history`]), drawn as charts
//! with axes; a queue's jobs per state, page by page,
//! and its latest events (a live feed); a job's record (payload,
//! attempts, errors, progress, result, holder, lane, kind, and a timeline
//! from its events, or from its timestamps); a queue's cron schedules, its
//! lanes and throttles, and the workers serving it; and
//! it acts: retry, remove, cancel and run now a job (or every job of a
//! state, or the ticked ones), pause and resume a queue, pause, resume and
//! run a schedule; it finds a job by id or dedup id, and searches a
//! state's jobs by kind, lane and error text (a bounded number read per
//! page: the server keeps no index of those). Counts, throughput
//! and the feed update live over server-sent events, sampled once a second
//! by default. Pages are server-rendered HTML with a little embedded CSS
//! and JavaScript: no framework, no CDN, no fonts from elsewhere.
//!
//! ```no_run
//! use axum::Router;
//! use echomq_dashboard::{DashboardOptions, Source};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = echomq::Client::connect("redis://127.0.0.1:6379").await?;
//! // Every queue under the default prefix, found on the server; or
//! // `Source::queues([queue_a, queue_b])` for a fixed set.
//! let dashboard = echomq_dashboard::router(Source::discover(client, "emq"), DashboardOptions::new());
//! let app: Router = Router::new()
//!     // .route(...) your own routes
//!     .nest("/admin/queues", dashboard);
//!     // .layer(your_auth_layer) : the dashboard has no auth of its own
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```
//!
//! An open page holds a live stream open, which a graceful shutdown waits
//! for: give the router a [`Shutdown`] and trigger it in the shutdown
//! signal (its docs show the order: streams, HTTP, then workers).
//!
//! # Security
//!
//! - **Auth is the mounting app's job.** Anyone who reaches the router can
//!   see payloads and errors and move jobs. Put it behind your login (a
//!   tower layer on the nested router or on the whole app).
//! - **Cross-site request forgery**: every action is a POST form carrying
//!   a token (a random secret of the process, or
//!   [`DashboardOptions::csrf_secret`] for several processes behind one
//!   address), checked in constant time, and a POST whose `Sec-Fetch-Site`
//!   is not `same-origin` or whose `Origin` is not the request's `Host` (or
//!   one of [`DashboardOptions::allow_origin`]) is refused with 403.
//! - **Escaping**: job ids, queue names, payloads, errors, progress and
//!   results are user data; all of it is HTML-escaped, and ids in URLs are
//!   percent-encoded. Pages are sent with a Content-Security-Policy that
//!   allows only the dashboard's own script and style, and may not be
//!   framed.
//!
//! # Mounting
//!
//! Every link, form and fetch in the pages is relative, so the router
//! works under any path (`Router::nest`), and at the root too. Routes,
//! relative to the mount point: `/` (queues), `/{queue}?state=&after=&span=`
//! (the queue's history charts over `span`, a state's jobs, paged by
//! [`echomq::admin::ListCursor`], and the queue's latest events),
//! `/{queue}/jobs/{id}`, `/{queue}/find?q=` (a job by id or dedup id),
//! `/{queue}/search?state=&kind=&lane=&error=&after=` (a state's jobs by
//! kind, lane and error text, 1,000 read per page), `/{queue}/schedules`,
//! `/{queue}/lanes`, `/{queue}/workers`, `/events` (the live stream),
//! `/assets/*`, and the POST actions under `/{queue}/…` (a job's, a
//! state's bulk ones, the ticked jobs' at `selected`, a schedule's). A
//! queue named `events`, `assets` or `queues` has its pages there too: its
//! links percent-encode the name's first letter, so they do not meet the
//! dashboard's own paths. The paths of earlier versions,
//! `/queues/{queue}/…`, answer with a permanent redirect (308) to the same
//! page.
//!
//! axum's `nest` routes the mount point without its trailing slash only
//! (`/admin/queues`, not `/admin/queues/`): the nested router never sees
//! the slash form, so it cannot answer it. Route it in your app if you
//! want it, beside the `nest`:
//!
//! ```no_run
//! # fn demo(dashboard: axum::Router) {
//! use axum::response::Redirect;
//! let app: axum::Router = axum::Router::new()
//!     .route("/admin/queues/", axum::routing::get(|| async { Redirect::permanent("../queues") }))
//!     .nest("/admin/queues", dashboard);
//! # let _ = app; }
//! ```
//!
//! # Live updates and throughput
//!
//! The pages read `events` (server-sent events): every
//! [`DashboardOptions::sample_every`] it sends each queue's counts and
//! throughput (on a queue's page, its latest events too; on a job's page,
//! that job's state, so the page follows it to the end).
//!
//! Throughput comes from the queue's lifecycle event stream
//! ([`echomq::Queue::events`]): the `completed` and `failed` events,
//! counted per sample period by the server time in their ids. Retention
//! does not change it (a queue that keeps no completed records, or whose
//! `keep_completed` is full, still shows its rate). The router keeps one
//! reader per shown queue in its own state, shared by every open page:
//! each sample reads only the events added since the last one (one round
//! trip per 100 events, at most 5,000 events a sample; a queue writing
//! more skips ahead and its figures are marked as lower bounds), and
//! holds the window's counts and the latest 500 events in memory. The
//! reader starts when the dashboard first shows the queue, so the chart
//! fills from then on, and a job's timeline comes from its events only
//! when they are among those kept (otherwise from the record's
//! timestamps). A reader holds a connection of its own; one no page has
//! asked for in two minutes is closed at the next request.
//!
//! A queue whose events are off ([`echomq::Queue::set_events`]) falls back
//! to the growth of its completed count between two samples, and the page
//! says so ("events off: estimated from counts"): that count is of
//! *retained* jobs, so once retention holds it flat the estimate reads 0
//! while jobs still flow. Each open page costs one round of `counts` per
//! queue per sample, and with [`Source::discover`] a keyspace walk
//! ([`Client::queue_names`]) every few samples.

mod actions;
mod chart;
mod csrf;
mod feed;
mod html;
mod live;
mod moved;
mod pages;
mod shutdown;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::routing::{any, get, post};
use echomq::{Client, Queue, QueueOptions};

pub use self::shutdown::Shutdown;

/// Jobs on one page of a queue's listing, by default.
pub const DEFAULT_PAGE_SIZE: usize = 25;
/// Most jobs on one page.
pub const MAX_PAGE_SIZE: usize = 500;
/// How often the live stream samples counts, by default.
pub const DEFAULT_SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// The shortest sampling period (each sample reads every queue's counts).
pub const MIN_SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// The longest sampling period.
pub const MAX_SAMPLE_EVERY: Duration = Duration::from_secs(60);
/// The title pages carry, by default.
pub const DEFAULT_TITLE: &str = "echomq";
/// The shortest CSRF secret [`DashboardOptions::csrf_secret`] takes (bytes).
pub const MIN_CSRF_SECRET: usize = 32;

/// How the dashboard looks and behaves. A value with chained setters.
#[derive(Debug, Clone)]
pub struct DashboardOptions {
    title: String,
    page_size: usize,
    sample_every: Duration,
    // None: a random secret per router.
    csrf_secret: Option<String>,
    allowed_origins: Vec<String>,
    shutdown: Shutdown,
}

impl Default for DashboardOptions {
    fn default() -> Self {
        DashboardOptions {
            title: DEFAULT_TITLE.to_owned(),
            page_size: DEFAULT_PAGE_SIZE,
            sample_every: DEFAULT_SAMPLE_EVERY,
            csrf_secret: None,
            allowed_origins: Vec::new(),
            shutdown: Shutdown::new(),
        }
    }
}

impl DashboardOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// The title in the page header (default [`DEFAULT_TITLE`]); escaped
    /// like everything else.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = title.into();
        self
    }

    /// Jobs per page of a listing (default [`DEFAULT_PAGE_SIZE`]), held to
    /// 1 to [`MAX_PAGE_SIZE`].
    pub fn page_size(mut self, n: usize) -> Self {
        self.page_size = n.clamp(1, MAX_PAGE_SIZE);
        self
    }

    /// How often the live stream samples counts (default
    /// [`DEFAULT_SAMPLE_EVERY`]), held to [`MIN_SAMPLE_EVERY`] to
    /// [`MAX_SAMPLE_EVERY`].
    pub fn sample_every(mut self, every: Duration) -> Self {
        self.sample_every = every.clamp(MIN_SAMPLE_EVERY, MAX_SAMPLE_EVERY);
        self
    }

    /// The CSRF secret forms carry, instead of a random one per router:
    /// needed when several processes serve the dashboard behind one
    /// address (a form from one must pass in another). Keep it secret.
    ///
    /// # Errors
    /// [`echomq::Error::InvalidOption`] for a secret shorter than
    /// [`MIN_CSRF_SECRET`] bytes.
    pub fn csrf_secret(mut self, secret: impl Into<String>) -> echomq::Result<Self> {
        let secret = secret.into();
        if secret.len() < MIN_CSRF_SECRET {
            return Err(echomq::Error::InvalidOption {
                name: "csrf_secret",
                reason: format!("at least {MIN_CSRF_SECRET} bytes, got {}", secret.len()),
            });
        }
        self.csrf_secret = Some(secret);
        Ok(self)
    }

    /// Also accepts POSTs whose `Origin` is `origin` (as `https://host:port`),
    /// for a proxy that changes the `Host` header on the way.
    pub fn allow_origin(mut self, origin: impl Into<String>) -> Self {
        self.allowed_origins.push(origin.into());
        self
    }

    /// The handle whose [`Shutdown::trigger`] ends the dashboard's live
    /// streams, so that a graceful shutdown of the app is not held open by
    /// a browser tab (trigger it in axum's `with_graceful_shutdown`
    /// signal). Without one, the streams end only when their page closes.
    pub fn shutdown(mut self, handle: &Shutdown) -> Self {
        self.shutdown = handle.clone();
        self
    }
}

/// Which queues the dashboard shows.
#[derive(Debug, Clone)]
pub struct Source(SourceKind);

#[derive(Debug, Clone)]
enum SourceKind {
    Discover { client: Client, prefix: String },
    Fixed(Vec<Queue>),
}

impl Source {
    /// Every queue under key prefix `prefix` on `client`'s server, found by
    /// [`Client::queue_names`] (a keyspace walk; it sees queues created
    /// later too). A bad prefix shows as an error on the page.
    pub fn discover(client: Client, prefix: impl Into<String>) -> Self {
        Source(SourceKind::Discover {
            client,
            prefix: prefix.into(),
        })
    }

    /// Exactly these queues (no keyspace walk).
    pub fn queues(queues: impl IntoIterator<Item = Queue>) -> Self {
        Source(SourceKind::Fixed(queues.into_iter().collect()))
    }
}

impl From<Client> for Source {
    /// Every queue under the default prefix ([`echomq::keys::DEFAULT_PREFIX`]).
    fn from(client: Client) -> Self {
        Source::discover(client, echomq::keys::DEFAULT_PREFIX)
    }
}

impl From<Vec<Queue>> for Source {
    fn from(queues: Vec<Queue>) -> Self {
        Source::queues(queues)
    }
}

impl From<Queue> for Source {
    fn from(queue: Queue) -> Self {
        Source::queues([queue])
    }
}

/// What every handler shares.
pub(crate) struct Shared {
    source: SourceKind,
    pub(crate) opts: DashboardOptions,
    pub(crate) csrf: csrf::Csrf,
    // Discovered queues' handles, opened once (opening reads the server).
    opened: Mutex<HashMap<String, Queue>>,
    // Each shown queue's throughput and latest events, from its event
    // stream, shared by all pages and streams.
    pub(crate) feeds: feed::Feeds,
}

impl Shared {
    /// The queues to show, by name.
    pub(crate) async fn names(&self) -> echomq::Result<Vec<String>> {
        match &self.source {
            SourceKind::Discover { client, prefix } => client.queue_names(prefix).await,
            SourceKind::Fixed(queues) => Ok(queues.iter().map(|q| q.name().to_owned()).collect()),
        }
    }

    /// The handle on queue `name`, if it is one the dashboard shows. A name
    /// from a URL never creates a queue: discovered ones must exist.
    pub(crate) async fn queue(&self, name: &str) -> echomq::Result<Option<Queue>> {
        match &self.source {
            SourceKind::Fixed(queues) => Ok(queues.iter().find(|q| q.name() == name).cloned()),
            SourceKind::Discover { client, prefix } => {
                if let Some(q) = self.opened.lock().unwrap_or_else(|e| e.into_inner()).get(name) {
                    return Ok(Some(q.clone()));
                }
                if !client.queue_exists(prefix, name).await? {
                    return Ok(None);
                }
                let q = client
                    .queue_with(name, QueueOptions::new().prefix(prefix.clone()))
                    .await?;
                self.opened
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(name.to_owned(), q.clone());
                Ok(Some(q))
            }
        }
    }
}

/// The dashboard over `source` (a [`Client`], whose queues under the
/// default prefix it finds; a [`Queue`] or a `Vec` of them; or a
/// [`Source`]), to [`nest`](Router::nest) under any path of your app.
///
/// ```no_run
/// # async fn demo(queue: echomq::Queue) {
/// use echomq_dashboard::DashboardOptions;
/// let app: axum::Router = axum::Router::new()
///     .nest("/ops/jobs", echomq_dashboard::router(vec![queue], DashboardOptions::new().title("jobs")));
/// # let _ = app; }
/// ```
pub fn router(source: impl Into<Source>, opts: DashboardOptions) -> Router {
    let csrf = csrf::Csrf::new(opts.csrf_secret.clone(), opts.allowed_origins.clone());
    let shared = Arc::new(Shared {
        source: source.into().0,
        opts,
        csrf,
        opened: Mutex::new(HashMap::new()),
        feeds: feed::Feeds::default(),
    });
    Router::new()
        .route("/", get(pages::index))
        .route("/events", get(live::events))
        .route("/assets/dashboard.css", get(pages::css))
        .route("/assets/dashboard.js", get(pages::js))
        .route("/{queue}", get(pages::queue))
        .route("/{queue}/selected", post(actions::selected))
        .route("/{queue}/find", get(pages::find))
        .route("/{queue}/search", get(pages::search))
        .route("/{queue}/schedules", get(pages::schedules))
        .route("/{queue}/lanes", get(pages::lanes))
        .route("/{queue}/workers", get(pages::workers))
        .route("/{queue}/schedules/{name}/{action}", post(actions::schedule))
        .route("/{queue}/{action}", post(actions::queue))
        .route("/{queue}/jobs/{id}", get(pages::job))
        .route("/{queue}/flows/{id}", get(pages::flow))
        .route("/{queue}/jobs/{id}/{action}", post(actions::job))
        // The paths before queue pages moved to the root (0.3).
        .route("/queues/{queue}", any(moved::moved))
        .route("/queues/{queue}/{*rest}", any(moved::moved))
        .with_state(shared)
}
