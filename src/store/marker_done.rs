//! `lua/marker_done.lua`: records that the holder's effect finished.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new(
    "marker_done",
    include_str!("../../lua/marker_done.lua"),
    &["marker"],
    false,
    &["token", "ttl"],
    );
