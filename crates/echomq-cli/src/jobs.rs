//! `jobs` (a page of a state's jobs) and `show` (one job's whole record).

use echomq::admin::ListCursor;
use echomq::{Error, JobInfo, JobState};
use serde_json::json;

use crate::args::State;
use crate::ctx::{Ctx, Output, shell_quote};
use crate::exit::Failure;
use crate::render::{compact, cut, job_json, job_text, table, when, when_opt};

/// Longest error or result text a table cell shows.
const CELL: usize = 60;

/// One page of the jobs in `state`, after `after`.
///
/// # Errors
/// A [`Failure`]: no such queue, or a server error.
pub async fn jobs(ctx: &Ctx, state: State, limit: u16, after: Option<ListCursor>) -> Result<Output, Failure> {
    let q = ctx.open_given().await?;
    let state = state.job_state();
    let page = q
        .list(state, after.as_ref(), usize::from(limit))
        .await
        .map_err(|e| ctx.err(e))?;
    let now = q.server_time_ms().await.map_err(|e| ctx.err(e))?;
    let next = page.next.as_ref().map(ToString::to_string);
    let json = json!({
        "queue": q.name(),
        "state": state.as_str(),
        "server_time_ms": now,
        "jobs": page.jobs.iter().map(job_json).collect::<Vec<_>>(),
        "next": next,
    });
    let mut text = if page.jobs.is_empty() {
        format!(
            "no {} jobs in queue {}{}\n",
            state.as_str(),
            q.name(),
            if after.is_some() { " after the cursor" } else { "" }
        )
    } else {
        let (headers, rows) = columns(state, &page.jobs, now);
        table(&headers, &rows)
    };
    if let Some(next) = &next {
        text.push_str(&format!("next page: --after {}\n", shell_quote(next)));
    }
    Ok(Output::ok(json, text))
}

/// The columns a state's listing shows.
fn columns(state: JobState, jobs: &[JobInfo], now: u64) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let error = |j: &JobInfo| j.last_error.as_deref().map_or_else(|| "-".to_owned(), |e| cut(e, CELL));
    let rows = jobs.iter();
    match state {
        JobState::Pending => (
            vec!["ID", "CREATED", "ATTEMPTS", "LAST ERROR"],
            rows.map(|j| vec![j.id.clone(), when(j.created_ms, now), j.attempts.to_string(), error(j)])
                .collect(),
        ),
        JobState::Delayed => (
            vec!["ID", "DUE", "ATTEMPTS", "FAILURES", "LAST ERROR"],
            rows.map(|j| {
                vec![
                    j.id.clone(),
                    when_opt(j.deadline_ms, now),
                    j.attempts.to_string(),
                    j.failures.to_string(),
                    error(j),
                ]
            })
            .collect(),
        ),
        JobState::Active => (
            vec!["ID", "HOLDER", "DEADLINE", "ATTEMPTS", "STARTED", "CANCEL"],
            rows.map(|j| {
                vec![
                    j.id.clone(),
                    j.holder.clone().unwrap_or_else(|| "-".to_owned()),
                    when_opt(j.deadline_ms, now),
                    j.attempts.to_string(),
                    when_opt(j.first_started_ms, now),
                    if j.cancel_requested_ms.is_some() {
                        "requested"
                    } else {
                        "-"
                    }
                    .to_owned(),
                ]
            })
            .collect(),
        ),
        JobState::Completed => (
            vec!["ID", "FINISHED", "ATTEMPTS", "RESULT"],
            rows.map(|j| {
                vec![
                    j.id.clone(),
                    when_opt(j.finished_ms, now),
                    j.attempts.to_string(),
                    j.result
                        .as_ref()
                        .map_or_else(|| "-".to_owned(), |r| cut(&compact(r), CELL)),
                ]
            })
            .collect(),
        ),
        _ => (
            vec!["ID", "FINISHED", "ATTEMPTS", "FAILURES", "STALLS", "LAST ERROR"],
            rows.map(|j| {
                vec![
                    j.id.clone(),
                    when_opt(j.finished_ms, now),
                    j.attempts.to_string(),
                    j.failures.to_string(),
                    j.stalls.to_string(),
                    error(j),
                ]
            })
            .collect(),
        ),
    }
}

/// Job `id`'s whole record.
///
/// # Errors
/// A [`Failure`]: no such queue or job, or a server error.
pub async fn show(ctx: &Ctx, id: &str) -> Result<Output, Failure> {
    let q = ctx.open_given().await?;
    let job = match q.job(id).await {
        Ok(job) => job,
        Err(Error::JobNotFound(_)) => {
            return Err(Failure::failed(format!("no job {id:?} in queue {}", q.name())));
        }
        Err(e) => return Err(ctx.err(e)),
    };
    let now = q.server_time_ms().await.map_err(|e| ctx.err(e))?;
    let json = json!({"queue": q.name(), "server_time_ms": now, "job": job_json(&job)});
    Ok(Output::ok(json, job_text(q.name(), &job, now)))
}
