//! `lua/limits.lua`: reads or sets the queue's global cap and the rate limits
//! of the queue and its lanes.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new(
    "limits",
    include_str!("../../lua/limits.lua"),
    &["limits", "rates", "pending", "wake"],
    false,
    &["prefix", "what", "lane", "value"],
    );
