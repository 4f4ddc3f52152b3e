//! The commands that change a queue: retry, remove, cancel, promote,
//! pause, resume, drain, obliterate.

use echomq::admin::{Cancel, MAX_IDS, Moved};
use echomq::{Error, Queue};
use serde_json::{Value, json};

use crate::ctx::{Ctx, Output};
use crate::exit::{FAILED, Failure};
use crate::render::{iso, table};

/// What a per-id command did to one job.
struct Row {
    id: String,
    /// Its JSON name (`retried`, `not_found`, …).
    outcome: &'static str,
    /// Its words for people.
    text: String,
    /// Whether the job ended as asked.
    ok: bool,
    /// The state of a job that had already finished (cancel).
    state: Option<&'static str>,
}

impl Row {
    fn new(id: String, outcome: &'static str, text: impl Into<String>, ok: bool) -> Row {
        Row {
            id,
            outcome,
            text: text.into(),
            ok,
            state: None,
        }
    }
}

/// The per-id commands.
#[derive(Debug, Clone, Copy)]
pub enum Action {
    /// `retry`
    Retry,
    /// `promote`
    Promote,
    /// `remove`
    Remove,
    /// `cancel`
    Cancel,
}

impl Action {
    fn name(self) -> &'static str {
        match self {
            Action::Retry => "retry",
            Action::Promote => "promote",
            Action::Remove => "remove",
            Action::Cancel => "cancel",
        }
    }

    /// The past tense of what it does to a job that is as it must be.
    fn done(self) -> &'static str {
        match self {
            Action::Retry => "retried",
            Action::Promote => "promoted",
            Action::Remove => "removed",
            Action::Cancel => "cancelled",
        }
    }
}

/// Runs `action` on `ids` (in calls of at most [`MAX_IDS`]): one row per
/// id; exits 1 unless every job ended as asked.
///
/// # Errors
/// A [`Failure`]: no such queue, a bad id, a server error.
pub async fn per_id(ctx: &Ctx, action: Action, ids: &[String]) -> Result<Output, Failure> {
    let q = ctx.open_given().await?;
    let mut rows = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(MAX_IDS) {
        let chunk: Vec<&str> = chunk.iter().map(String::as_str).collect();
        rows.extend(run_chunk(&q, action, &chunk).await.map_err(|e| ctx.err(e))?);
    }
    let done = rows.iter().filter(|r| r.ok).count();
    let results: Vec<Value> = rows
        .iter()
        .map(|r| {
            let mut v = json!({"id": r.id, "outcome": r.outcome});
            if let Some(s) = r.state {
                v["state"] = json!(s);
            }
            v
        })
        .collect();
    let json = json!({"queue": q.name(), "command": action.name(), "results": results});
    let cells: Vec<Vec<String>> = rows.iter().map(|r| vec![r.id.clone(), r.text.clone()]).collect();
    let mut text = table(&["ID", "OUTCOME"], &cells);
    let verb = match action {
        Action::Cancel => "cancelled or asked to stop",
        other => other.done(),
    };
    text.push_str(&format!("{done} of {} {verb} in queue {}\n", rows.len(), q.name()));
    let mut out = Output::ok(json, text);
    if done < rows.len() {
        out.code = FAILED;
    }
    Ok(out)
}

async fn run_chunk(q: &Queue, action: Action, ids: &[&str]) -> echomq::Result<Vec<Row>> {
    let moved = |(id, m): (String, Moved), wrong: &'static str, wrong_text: &str| match m {
        Moved::Done => Row::new(id, action.done(), action.done(), true),
        Moved::NotFound => Row::new(id, "not_found", "not found", false),
        Moved::WrongState => Row::new(id, wrong, wrong_text, false),
        Moved::DedupHeld => Row::new(
            id,
            "dedup_held",
            "its dedup id is held by another job: left failed",
            false,
        ),
        _ => Row::new(id, "unknown", "unknown answer", false),
    };
    Ok(match action {
        Action::Retry => q
            .retry_failed(ids)
            .await?
            .into_iter()
            .map(|m| moved(m, "not_failed", "not failed: left alone"))
            .collect(),
        Action::Promote => q
            .promote(ids)
            .await?
            .into_iter()
            .map(|m| moved(m, "not_delayed", "not delayed: left alone"))
            .collect(),
        Action::Remove => q
            .remove(ids)
            .await?
            .into_iter()
            .map(|(id, r)| match r {
                Ok(m) => moved((id, m), "wrong_state", "left alone"),
                Err(Error::JobActive(_)) => Row::new(id, "active", "active (leased to a worker): left alone", false),
                Err(e) => Row::new(id, "error", e.to_string(), false),
            })
            .collect(),
        Action::Cancel => q
            .cancel_many(ids)
            .await?
            .into_iter()
            .map(|(id, r)| match r {
                Ok(Cancel::Cancelled) => Row::new(id, "cancelled", "cancelled", true),
                Ok(Cancel::Requested) => Row::new(
                    id,
                    "requested",
                    "running: its consumer is asked to stop at its next renewal",
                    true,
                ),
                Ok(Cancel::Finished(state)) => Row {
                    text: format!("already {}: left alone", state.as_str()),
                    ok: state == echomq::JobState::Cancelled,
                    state: Some(state.as_str()),
                    ..Row::new(id, "finished", "", false)
                },
                Ok(_) => Row::new(id, "unknown", "unknown answer", false),
                Err(Error::JobNotFound(_)) => Row::new(id, "not_found", "not found", false),
                Err(e) => Row::new(id, "error", e.to_string(), false),
            })
            .collect(),
    })
}

/// `retry --all` or `promote --all`: every failed (delayed) job.
///
/// # Errors
/// A [`Failure`]: no such queue, a server error.
pub async fn all(ctx: &Ctx, action: Action) -> Result<Output, Failure> {
    let q = ctx.open_given().await?;
    let (moved, what) = match action {
        Action::Promote => (q.promote_all().await, "delayed"),
        _ => (q.retry_all_failed().await, "failed"),
    };
    let moved = moved.map_err(|e| ctx.err(e))?;
    Ok(Output::ok(
        json!({"queue": q.name(), "command": action.name(), "moved": moved}),
        format!("{} {moved} {what} jobs in queue {}\n", action.done(), q.name()),
    ))
}

/// `pause` (`paused`) or `resume`.
///
/// # Errors
/// A [`Failure`]: no such queue, a server error.
pub async fn pause(ctx: &Ctx, paused: bool) -> Result<Output, Failure> {
    let q = ctx.open_given().await?;
    let at = if paused { q.pause().await } else { q.resume().await }.map_err(|e| ctx.err(e))?;
    let text = if paused {
        format!(
            "paused queue {} at {}: no consumer leases its jobs until `echomq resume`\n",
            q.name(),
            iso(at)
        )
    } else {
        format!("resumed queue {} at {}\n", q.name(), iso(at))
    };
    Ok(Output::ok(
        json!({"queue": q.name(), "paused": paused, "server_time_ms": at}),
        text,
    ))
}

/// `drain`: removes every pending and delayed job; without `yes`, says
/// how many that is and exits 1.
///
/// # Errors
/// A [`Failure`]: no `--yes`, no such queue, a server error.
pub async fn drain(ctx: &Ctx, yes: bool) -> Result<Output, Failure> {
    let q = ctx.open_given().await?;
    if !yes {
        let c = q.counts().await.map_err(|e| ctx.err(e))?;
        return Err(Failure::failed(format!(
            "drain removes every pending and delayed job of queue {} (now {} pending, {} delayed); \
             run it again with --yes",
            q.name(),
            c.pending,
            c.delayed
        )));
    }
    let removed = q.drain().await.map_err(|e| ctx.err(e))?;
    Ok(Output::ok(
        json!({"queue": q.name(), "removed": removed}),
        format!("removed {removed} pending and delayed jobs from queue {}\n", q.name()),
    ))
}

/// `clean`: removes the jobs of a finished state that finished more than
/// `older_than` ago, at most `limit`.
///
/// # Errors
/// A [`Failure`]: a state that is not finished, no such queue, a server error.
pub async fn clean(
    ctx: &Ctx,
    state: crate::args::State,
    older_than: std::time::Duration,
    limit: u64,
) -> Result<Output, Failure> {
    let q = ctx.open_given().await?;
    let st = state.job_state();
    let removed = q.clean(st, older_than, limit).await.map_err(|e| ctx.err(e))?;
    Ok(Output::ok(
        json!({"queue": q.name(), "state": st, "removed": removed}),
        format!(
            "removed {removed} {} jobs of queue {} finished more than {} ago\n",
            st.as_str(),
            q.name(),
            crate::render::duration(older_than)
        ),
    ))
}

/// `obliterate`: deletes every key of the queue; without `yes`, says what
/// that is and exits 1; refused (exit 1) while jobs are active unless `force`.
///
/// # Errors
/// A [`Failure`]: no `--yes`, jobs active without `force`, no such queue,
/// a server error.
pub async fn obliterate(ctx: &Ctx, force: bool, yes: bool) -> Result<Output, Failure> {
    let q = ctx.open_given().await?;
    if !yes {
        let c = q.counts().await.map_err(|e| ctx.err(e))?;
        let held: Vec<String> = echomq::JobState::ALL
            .iter()
            .map(|s| format!("{} {}", c.of(*s), s.as_str()))
            .collect();
        let mut message = format!(
            "obliterate deletes every key of queue {} ({}, its schedules and user keys); run it again with --yes",
            q.name(),
            held.join(", ")
        );
        if c.active > 0 && !force {
            message.push_str(" and --force (jobs are active)");
        }
        return Err(Failure::failed(message));
    }
    match q.obliterate(force).await {
        Ok(deleted) => Ok(Output::ok(
            json!({"queue": q.name(), "deleted": deleted}),
            format!("obliterated queue {}: {deleted} keys deleted\n", q.name()),
        )),
        Err(Error::QueueActive { active, .. }) => Err(Failure::failed(format!(
            "queue {} has {active} active {}: obliterate refused, nothing deleted (with --force the \
             running jobs' records go too, and their workers' settlements find nothing)",
            q.name(),
            if active == 1 { "job" } else { "jobs" }
        ))),
        Err(e) => Err(ctx.err(e)),
    }
}
