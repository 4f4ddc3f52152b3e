//! `lua/reap.lua`: returns expired leases to pending (or fails or cancels
//! them) and promotes due delayed jobs.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new(
    "reap",
    include_str!("../../lua/reap.lua"),
    &["active", "pending", "delayed", "failed", "wake", "cancelled"],
    false,
    &["prefix", "limit", "keep_failed"],
    );
