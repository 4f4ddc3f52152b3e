//! `lua/lane_config.lua`: sets a lane's cap or weight (or the default of
//! lanes) and settles the lanes it changes.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new(
    "lane_config",
    include_str!("../../lua/lane_config.lua"),
    &["ring", "setting"],
    false,
    &["prefix", "lane", "value", "cursor", "count"],
    );
