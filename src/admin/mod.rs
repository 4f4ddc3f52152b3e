//! Operating a queue: the calls an operator (a CLI, a dashboard, a deploy
//! script) makes on a queue rather than on one job's lease. They are
//! methods of [`Queue`](crate::Queue), each over its own script, so they
//! hold across every process that serves the queue.
//!
//! - `pause`: [`Queue::pause`](crate::Queue::pause),
//!   [`Queue::resume`](crate::Queue::resume),
//!   [`Queue::is_paused`](crate::Queue::is_paused).
//! - `list`: [`Queue::list`](crate::Queue::list), a state's jobs page by page.
//! - `lifecycle`: [`Queue::retry_failed`](crate::Queue::retry_failed),
//!   [`Queue::retry_all_failed`](crate::Queue::retry_all_failed),
//!   [`Queue::remove`](crate::Queue::remove),
//!   [`Queue::drain`](crate::Queue::drain),
//!   [`Queue::obliterate`](crate::Queue::obliterate),
//!   [`Queue::promote`](crate::Queue::promote),
//!   [`Queue::promote_all`](crate::Queue::promote_all).
//! - `cancel`: [`Queue::cancel`](crate::Queue::cancel),
//!   [`Queue::cancel_many`](crate::Queue::cancel_many).
//! - `lanes`: [`Queue::set_lane_cap`](crate::Queue::set_lane_cap),
//!   [`Queue::set_lane_weight`](crate::Queue::set_lane_weight),
//!   [`Queue::set_lane_default_cap`](crate::Queue::set_lane_default_cap),
//!   [`Queue::set_lane_default_weight`](crate::Queue::set_lane_default_weight),
//!   [`Queue::lane`](crate::Queue::lane), [`Queue::lanes`](crate::Queue::lanes),
//!   [`Queue::lane_defaults`](crate::Queue::lane_defaults),
//!   [`Queue::list_lane`](crate::Queue::list_lane).
//! - `limits`: global concurrency and rate limits,
//!   [`Queue::set_max_active`](crate::Queue::set_max_active),
//!   [`Queue::set_rate_limit`](crate::Queue::set_rate_limit),
//!   [`Queue::set_lane_rate_limit`](crate::Queue::set_lane_rate_limit),
//!   [`Queue::set_lane_default_rate_limit`](crate::Queue::set_lane_default_rate_limit),
//!   [`Queue::clear_rate_hold`](crate::Queue::clear_rate_hold),
//!   [`Queue::claim_limits`](crate::Queue::claim_limits),
//!   [`Queue::lane_rate_limit`](crate::Queue::lane_rate_limit).
//! - `queues`: finding the queues on a server,
//!   [`Client::queue_names`](crate::Client::queue_names) and
//!   [`Client::queue_exists`](crate::Client::queue_exists).

mod cancel;
mod lifecycle;
mod list;
mod pause;
pub(crate) mod queues;

pub use self::cancel::Cancel;
pub use self::lifecycle::Moved;
pub use self::list::{ListCursor, Page};
pub use self::queues::DISCOVERY_STEP;

/// Most job ids one operator call takes.
pub const MAX_IDS: usize = 1_000;
