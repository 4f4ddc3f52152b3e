//! `lua/marker_claim.lua`: claims a job's effect marker for the calling
//! attempt before the effect runs.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new(
    "marker_claim",
    include_str!("../../lua/marker_claim.lua"),
    &["job", "marker"],
    false,
    &["token", "ttl"],
    );
