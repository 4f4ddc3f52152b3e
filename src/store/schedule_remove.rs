//! `lua/schedule_remove.lua`: removes a cron schedule.

use super::Spec;
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "schedule_remove",
    include_str!("../../lua/schedule_remove.lua"),
    &["schedules", "schedule"],
    false,
    &["name"],
);

/// Removes schedule `name`; answers whether it existed.
pub(crate) async fn run(conn: &mut Conn, k: &Keys, name: &str) -> Result<bool> {
    let mut call = SPEC.call();
    call.key(&k.schedules).key(k.schedule(name)).arg(name);
    let existed: i64 = redis::FromRedisValue::from_redis_value(call.run_raw(conn).await?).map_err(|e| Error::Protocol {
        script: "schedule_remove",
        detail: e.to_string(),
    })?;
    Ok(existed == 1)
}
