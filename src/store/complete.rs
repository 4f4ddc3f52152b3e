//! `lua/complete.lua`: completes one lease and applies its declared effects
//! in the same script (atomic completion).

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new(
    "complete",
    include_str!("../../lua/complete.lua"),
    &["job", "active", "completed"],
    true,
    &["prefix", "id", "token", "keep_completed", "effects"],
    );
