//! `lua/cancel.lua`: cancels waiting jobs at once and asks running ones to
//! stop.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new(
    "cancel",
    include_str!("../../lua/cancel.lua"),
    &["pending", "delayed", "cancelled"],
    false,
    &["prefix", "keep_failed"],
    );
