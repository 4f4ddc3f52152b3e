//! `lua/lanes.lua`: reads lanes (named ones, or a step of the ring) with the
//! queue-wide defaults.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new(
    "lanes",
    include_str!("../../lua/lanes.lua"),
    &["ring", "held", "caps", "weights"],
    false,
    &["prefix", "cursor", "count"],
    );
