//! `lua/claim.lua`: promotes due delayed jobs, then leases up to N ready
//! jobs, each fenced by a newly minted token.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new(
    "claim",
    include_str!("../../lua/claim.lua"),
    &["pending", "active", "delayed", "wake", "token", "meta"],
    false,
    &["prefix", "lease", "max", "holder"],
    );
