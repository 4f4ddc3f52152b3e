//! `lua/to_pending.lua`: moves failed jobs (a retry by hand) or delayed ones
//! (run now) back to pending.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new(
    "to_pending",
    include_str!("../../lua/to_pending.lua"),
    &["from", "pending", "wake"],
    false,
    &["prefix", "limit", "state"],
    );
