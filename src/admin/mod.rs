//! Operating a queue: the calls an operator (a CLI, a dashboard, a deploy
//! script) makes on a queue rather than on one job's lease. They are
//! methods of [`Queue`](crate::Queue), each over its own script, so they
//! hold across every process that serves the queue.
//!
//! - `pause`: [`Queue::pause`](crate::Queue::pause),
//!   [`Queue::resume`](crate::Queue::resume),
//!   [`Queue::is_paused`](crate::Queue::is_paused).

mod pause;
