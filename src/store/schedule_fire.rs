//! `lua/schedule_fire.lua`: takes a schedule's ticks and makes their jobs,
//! at most one per tick.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new(
    "schedule_fire",
    include_str!("../../lua/schedule_fire.lua"),
    &["schedules", "schedule", "seq", "pending", "wake"],
    false,
    &["prefix", "name", "cron", "tz", "next"],
    );
