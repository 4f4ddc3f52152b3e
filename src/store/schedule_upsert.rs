//! `lua/schedule_upsert.lua`: creates or updates a cron schedule.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new(
    "schedule_upsert",
    include_str!("../../lua/schedule_upsert.lua"),
    &["schedules", "schedule"],
    false,
    &[
        "name", "cron", "tz", "payload", "priority", "limits", "missed", "grace", "kind",
    ],
    );
