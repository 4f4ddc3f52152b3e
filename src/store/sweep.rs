//! `lua/sweep.lua`: one bounded step of the consistency sweep, which repairs
//! what a torn write or a lost key left behind.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new(
    "sweep",
    include_str!("../../lua/sweep.lua"),
    &[
        "pending",
        "active",
        "delayed",
        "completed",
        "failed",
        "cancelled",
        "seq",
    ],
    // Phase "keys": the job hashes and dedup markers to check.
    true,
    &["prefix", "phase", "cursor", "count", "chain"],
    );
