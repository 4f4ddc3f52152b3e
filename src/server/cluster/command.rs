//! The helper's own blocking connections to the nodes, and its commands.

use std::time::Duration;

use crate::server::error::ServerError;
use crate::server::secrets::percent_encode;

/// Connect, read and write timeout of the helper's own connections.
const COMMAND_TIMEOUT: Duration = Duration::from_millis(1_000);

/// A connection to the node on `port` with the helper's timeouts.
pub(super) fn connect(port: u16, password: Option<&str>) -> Result<redis::Connection, ServerError> {
    let auth = password
        .map(|pw| format!(":{}@", percent_encode(pw)))
        .unwrap_or_default();
    let not_ready =
        |e: redis::RedisError| ServerError::NotReady(format!("the node on port {port} does not answer: {e}"));
    let client = redis::Client::open(format!("redis://{auth}127.0.0.1:{port}/")).map_err(not_ready)?;
    let con = client.get_connection_with_timeout(COMMAND_TIMEOUT).map_err(not_ready)?;
    con.set_read_timeout(Some(COMMAND_TIMEOUT)).map_err(not_ready)?;
    con.set_write_timeout(Some(COMMAND_TIMEOUT)).map_err(not_ready)?;
    Ok(con)
}

/// Runs `cmd` on `con` (the node on `port`), naming the command and the
/// node in the error.
pub(super) fn query<T: redis::FromRedisValue>(
    con: &mut redis::Connection,
    cmd: &redis::Cmd,
    port: u16,
) -> Result<T, ServerError> {
    cmd.query(con).map_err(|e| {
        let name: Vec<String> = cmd
            .args_iter()
            .take(2)
            .map(|a| match a {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => String::new(),
            })
            .collect();
        ServerError::Command(format!("{} on port {port}: {e}", name.join(" ")))
    })
}

/// `name:value` out of an `INFO`-style reply.
pub(super) fn field(text: &str, name: &str) -> Option<String> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_owned())
}
