//! `schedules`: the cron schedules of a queue or of every queue, and
//! `schedules remove|pause|resume|run NAME`.

use echomq::{Missed, ScheduleInfo};
use serde_json::{Value, json};

use crate::ctx::{Ctx, Output};
use crate::exit::Failure;
use crate::render::{duration, stored_json, table, when_opt};

fn missed(m: Missed) -> &'static str {
    match m {
        Missed::RunLatest => "run-latest",
        Missed::Skip => "skip",
        _ => "unknown",
    }
}

fn schedule_json(queue: &str, s: &ScheduleInfo) -> Value {
    json!({
        "queue": queue,
        "name": s.name,
        "cron": s.cron,
        "time_zone": s.time_zone,
        "next_tick_ms": s.next_tick_ms,
        "done_through_ms": s.done_through_ms,
        "jobs": s.jobs,
        "last_missed_ms": s.last_missed_ms,
        "paused_ms": s.paused_ms,
        "missed": missed(s.missed),
        "grace_ms": u64::try_from(s.grace.as_millis()).unwrap_or(u64::MAX),
        "priority": s.priority,
        "limits": serde_json::to_value(s.limits).unwrap_or_default(),
        "created_ms": s.created_ms,
        "updated_ms": s.updated_ms,
        "payload": stored_json(&s.payload),
    })
}

/// Lists the schedules of the queue given, or of every queue.
///
/// # Errors
/// A [`Failure`]: no such queue, a server error.
pub async fn list(ctx: &Ctx) -> Result<Output, Failure> {
    let names = ctx.queue_names().await?;
    let mut all = Vec::new();
    let now = ctx.client.server_time_ms().await.map_err(|e| ctx.err(e))?;
    for name in &names {
        let q = ctx.open(name).await?;
        let schedules = q.schedules().await.map_err(|e| ctx.err(e))?;
        all.extend(schedules.into_iter().map(|s| (name.clone(), s)));
    }
    let json = json!({
        "prefix": ctx.prefix,
        "server_time_ms": now,
        "schedules": all.iter().map(|(q, s)| schedule_json(q, s)).collect::<Vec<_>>(),
    });
    let text = if names.is_empty() {
        ctx.no_queues()
    } else if all.is_empty() {
        format!(
            "no schedules in {}\n",
            match &ctx.queue {
                Some(q) => format!("queue {q}"),
                None => format!("the {} queues under prefix {:?}", names.len(), ctx.prefix),
            }
        )
    } else {
        let rows: Vec<Vec<String>> = all
            .iter()
            .map(|(q, s)| {
                vec![
                    q.clone(),
                    s.name.clone(),
                    s.cron.clone(),
                    s.time_zone.clone(),
                    if s.paused_ms.is_some() {
                        "paused".to_owned()
                    } else {
                        when_opt(s.next_tick_ms, now)
                    },
                    s.jobs.to_string(),
                    format!("{} (grace {})", missed(s.missed), duration(s.grace)),
                    when_opt(s.last_missed_ms, now),
                ]
            })
            .collect();
        table(
            &[
                "QUEUE",
                "NAME",
                "CRON",
                "ZONE",
                "NEXT TICK",
                "JOBS",
                "ON MISSED TICK",
                "LAST MISSED",
            ],
            &rows,
        )
    };
    Ok(Output::ok(json, text))
}

/// Removes schedule `name` of the queue given; exits 1 when there is none.
///
/// # Errors
/// A [`Failure`]: no such queue or schedule, a server error.
pub async fn remove(ctx: &Ctx, name: &str) -> Result<Output, Failure> {
    let q = ctx.open_given().await?;
    if !q.remove_schedule(name).await.map_err(|e| ctx.err(e))? {
        return Err(Failure::failed(format!("no schedule {name:?} in queue {}", q.name())));
    }
    Ok(Output::ok(
        json!({"queue": q.name(), "schedule": name, "removed": true}),
        format!(
            "removed schedule {name} of queue {}: it makes no more jobs (the jobs it made stay)\n",
            q.name()
        ),
    ))
}

/// Pauses (`paused`) or resumes schedule `name` of the queue given.
///
/// # Errors
/// A [`Failure`]: no such queue or schedule, a server error.
pub async fn pause(ctx: &Ctx, name: &str, paused: bool) -> Result<Output, Failure> {
    let q = ctx.open_given().await?;
    let changed = if paused {
        q.pause_schedule(name).await
    } else {
        q.resume_schedule(name).await
    }
    .map_err(|e| ctx.err(e))?;
    let (word, already) = if paused {
        ("paused: it makes no job until resumed", "already paused")
    } else {
        ("resumed: its next tick after now makes its job", "not paused")
    };
    Ok(Output::ok(
        json!({"queue": q.name(), "schedule": name, "paused": paused, "changed": changed}),
        format!(
            "schedule {name} of queue {}: {}\n",
            q.name(),
            if changed { word } else { already }
        ),
    ))
}

/// Enqueues schedule `name`'s job now.
///
/// # Errors
/// A [`Failure`]: no such queue or schedule, a server error.
pub async fn run_now(ctx: &Ctx, name: &str) -> Result<Output, Failure> {
    let q = ctx.open_given().await?;
    let done = q.run_schedule_now(name).await.map_err(|e| ctx.err(e))?;
    Ok(Output::ok(
        json!({"queue": q.name(), "schedule": name, "enqueued": done}),
        format!(
            "schedule {name} of queue {}: job {} enqueued now\n",
            q.name(),
            crate::ctx::shell_quote(&done.id)
        ),
    ))
}
