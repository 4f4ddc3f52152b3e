//! `lua/obliterate.lua`: one bounded step of deleting every key of a queue.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new(
    "obliterate",
    include_str!("../../lua/obliterate.lua"),
    &["active", "meta"],
    true,
    &["prefix", "cursor", "count", "force"],
    );
