//! `lua/enqueue.lua`: stores a batch of new jobs (dedup, debounce, delays,
//! lanes) and wakes consumers.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new(
    "enqueue",
    include_str!("../../lua/enqueue.lua"),
    &["seq", "pending", "delayed", "wake"],
    false,
    &["prefix", "jobs"],
    );
