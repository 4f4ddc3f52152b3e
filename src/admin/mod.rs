//! Operating a queue: the calls an operator (a CLI, a dashboard, a deploy
//! script) makes on a queue rather than on one job's lease. They are
//! methods of [`Queue`](crate::Queue), each over its own script, so they
//! hold across every process that serves the queue.
//!
//! - `pause`: [`Queue::pause`](crate::Queue::pause),
//!   [`Queue::resume`](crate::Queue::resume),
//!   [`Queue::is_paused`](crate::Queue::is_paused).
//! - `list`: [`Queue::list`](crate::Queue::list), a state's jobs page by page.
//! - `search`: [`Queue::search`](crate::Queue::search), a state's jobs by
//!   kind, lane or error text, a bounded number read per call.
//! - `lifecycle`: [`Queue::retry_failed`](crate::Queue::retry_failed),
//!   [`Queue::retry_all_failed`](crate::Queue::retry_all_failed),
//!   [`Queue::remove`](crate::Queue::remove),
//!   [`Queue::drain`](crate::Queue::drain),
//!   [`Queue::obliterate`](crate::Queue::obliterate),
//!   [`Queue::promote`](crate::Queue::promote),
//!   [`Queue::promote_all`](crate::Queue::promote_all).
//! - `cancel`: [`Queue::cancel`](crate::Queue::cancel),
//!   [`Queue::cancel_many`](crate::Queue::cancel_many).
//! - Lanes and throttles are features of their own, with their operator
//!   calls: [`crate::lanes`] (caps, weights, inspection) and
//!   [`crate::throttle`] (the global cap, rate limits, a handler's hold).
//! - `history`: [`Queue::history`](crate::Queue::history), completed,
//!   failed and retried jobs and their waits per minute and per hour,
//!   counted by the workers and written with their announcements.
//! - `queues`: finding the queues on a server,
//!   [`Client::queue_names`](crate::Client::queue_names) and
//!   [`Client::queue_exists`](crate::Client::queue_exists).

mod cancel;
pub(crate) mod history;
mod lifecycle;
mod list;
mod pause;
pub(crate) mod queues;
mod search;
mod workers;

pub use self::cancel::Cancel;
pub use self::history::{Bucket, HOURS_KEPT, MINUTES_KEPT, Span};
pub use self::lifecycle::Moved;
pub use self::list::{ListCursor, Page};
pub use self::queues::DISCOVERY_STEP;
pub use self::search::{Filter, Found, MAX_SEARCH_SCAN, MAX_SEARCH_TEXT};
pub use self::workers::{ANNOUNCE_EVERY, FORGET_AFTER, WorkerInfo};

/// Most job ids one operator call takes.
pub const MAX_IDS: usize = 1_000;
