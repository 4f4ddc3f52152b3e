//! Negative controls of the fault suite, built only with `--cfg
//! echomq_faults` (never a normal build). `ECHOMQ_FAULT` is a
//! comma-separated list of `no-token-check`, `client-clock`,
//! `two-step-reaper`, `no-stall-increment`, `per-job-token`,
//! `no-lane-cap`, `no-global-cap`, `no-rate-limit`, `tick-twice`,
//! `cancel-keeps-waiting`, `flow-release-early`, `batch-end-early` and
//! `remote-end-twice`; each breaks one
//! guarantee, so the suite can assert that its checks notice.
//! `settler-panic` makes a consumer's settler panic on its first batch, so
//! a test can check how the consumer survives one of its own tasks dying.

pub(crate) fn active(name: &str) -> bool {
    std::env::var("ECHOMQ_FAULT").is_ok_and(|v| v.split(',').any(|f| f.trim() == name))
}

/// The script source with the active breakages applied.
pub(crate) fn apply(source: &str) -> String {
    let mut src = source.to_owned();
    if active("no-token-check") {
        src = src.replace("cur[1] == 'active' and cur[2] == token", "cur[1] == 'active'");
    }
    if active("no-stall-increment") {
        src = src.replace(
            "rcall('HINCRBY', jk, 's', '1')",
            "tonumber(rcall('HGET', jk, 's') or 0)",
        );
    }
    if active("client-clock") {
        // claims and extend count the lease from the caller's clock (the last ARGV).
        src = src.replace(
            "local deadline = now + lease",
            "local deadline = tonumber(call_argv[#call_argv]) + lease",
        );
    }
    if active("no-lane-cap") {
        // claims read no lane's cap: lanes still take turns, uncapped.
        src = src.replace("return tonumber(c[1] or c[2])", "return nil");
    }
    if active("no-global-cap") {
        // claims read no global cap: the queue leases past it.
        src = src.replace("local max = tonumber(lim[1])", "local max = nil");
    }
    if active("no-rate-limit") {
        // claims read no rate limit, the queue's or a lane's.
        src = src.replace(
            "if type(s) ~= 'string' then return nil end",
            "if true then return nil end",
        );
    }
    if active("tick-twice") {
        // a schedule's pass takes every tick offered, makes its job again
        // over the one already there, and never moves the last tick taken.
        src = src.replace("  if t > lt then", "  if t > 0 then");
        src = src.replace("if rcall('EXISTS', prefix .. 'job:' .. id) == 0 then", "if true then");
        src = src.replace("local sh = {'lt', int_s(lt)}", "local sh = {'lt', f[3] or int_s(lt)}");
    }
    if active("cancel-keeps-waiting") {
        // a cancel answers "cancelled" for a waiting job and leaves it to run.
        src = src.replace(
            "if st == 'pending' then from_pending(pending_key, id, job[4]) else rcall('ZREM', delayed_key, id) end",
            "",
        );
        src = src.replace(
            "finish(moves, prefix, jk, id, 'cancelled', now, keep, job[2], {'err', 'cancelled'})",
            "",
        );
    }
    if active("flow-release-early") {
        // a flow's parent is enqueued when one child is left, not none.
        src = src.replace("          elseif left == 0 then", "          elseif left <= 1 then");
    }
    if active("batch-end-early") {
        // a closed batch ends when one member is left to end, not none.
        src = src.replace(
            "(tonumber(b[4]) or 0) < n then return end",
            "(tonumber(b[4]) or 0) < n - 1 then return end",
        );
    }
    if active("remote-end-twice") {
        // a batch counts every end message of a member on another queue,
        // not only the first (src/relay.rs then delivers each twice).
        src = src.replace(
            "rcall('HDEL', bk, 'm:' .. num) == 0 then return true end",
            "rcall('HDEL', bk, 'm:' .. num) < 0 then return true end",
        );
    }
    if active("per-job-token") {
        // 0.1's scheme: the token is the job's own attempt count, which
        // starts again when a deleted job's id is enqueued again.
        src = src.replace("local token_s = int_s(token)", "local token_s = attempt");
    }
    src
}

/// The caller's clock in ms, sent as the last ARGV of claim and extend.
pub(crate) fn client_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
