//! `lua/schedule_remove.lua`: removes a cron schedule.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new(
    "schedule_remove",
    include_str!("../../lua/schedule_remove.lua"),
    &["schedules", "schedule"],
    false,
    &["name"],
    );
