//! `lua/settle.lua`: settles a batch of leases, each fenced by its token,
//! and optionally leases the next jobs in the same call.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new(
    "settle",
    include_str!("../../lua/settle.lua"),
    &[
        "active",
        "pending",
        "delayed",
        "completed",
        "failed",
        "wake",
        "token",
        "meta",
        "cancelled",
    ],
    false,
    &["prefix", "keep_completed", "keep_failed", "items"],
    );
