//! `lua/schedule_due.lua`: reads the schedules whose look time has come.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new(
    "schedule_due",
    include_str!("../../lua/schedule_due.lua"),
    &["schedules"],
    false,
    &["prefix", "limit"],
    );
