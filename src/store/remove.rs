//! `lua/remove.lua`: deletes jobs that are not active, or drains pending and
//! delayed jobs.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new(
    "remove",
    include_str!("../../lua/remove.lua"),
    &["pending", "delayed", "completed", "failed", "cancelled"],
    false,
    &["prefix", "limit"],
    );
