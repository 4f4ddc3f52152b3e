//! `enqueue`: one job from the command line.

use std::io::Read as _;

use echomq::{EnqueueOptions, EnqueueStatus, QueueOptions};
use serde_json::json;

use crate::args::EnqueueArgs;
use crate::ctx::{Ctx, Output};
use crate::exit::Failure;

/// Enqueues one job into the queue given (which must exist unless
/// `create`), with the options given; the library checks each of them.
///
/// # Errors
/// A [`Failure`]: a payload that is not JSON, a bad option, no such queue,
/// a server error.
pub async fn enqueue(ctx: &Ctx, e: EnqueueArgs) -> Result<Output, Failure> {
    let text = if e.payload == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|err| Failure::failed(format!("cannot read the payload from stdin: {err}")))?;
        s
    } else {
        e.payload.clone()
    };
    let payload: serde_json::Value = serde_json::from_str(&text)
        .map_err(|err| Failure::failed(format!("the payload is not JSON: {err} (quote a string: '\"text\"')")))?;
    let q = if e.create {
        ctx.client
            .queue_with(ctx.queue_name(), QueueOptions::new().prefix(ctx.prefix.as_str()))
            .await
            .map_err(|err| ctx.err(err))?
    } else {
        ctx.open_given().await?
    };
    let mut opts = EnqueueOptions::new();
    if let Some(id) = e.id {
        opts = opts.id(id);
    }
    if let Some(d) = e.delay {
        opts = opts.delay(d);
    }
    if let Some(p) = e.priority {
        opts = opts.priority(p);
    }
    if let Some(l) = e.lane {
        opts = opts.lane(l);
    }
    if let Some(k) = e.kind {
        opts = opts.kind(k);
    }
    if let Some(n) = e.max_attempts {
        opts = opts.max_attempts(n);
    }
    opts = match (e.dedup, e.dedup_for) {
        (Some(d), Some(ttl)) => opts.dedup_for(d, ttl),
        (Some(d), None) => opts.dedup(d),
        _ => opts,
    };
    let done = q.enqueue_with(&payload, &opts).await.map_err(|err| ctx.err(err))?;
    let what = match done.status {
        EnqueueStatus::Created => "created",
        EnqueueStatus::Existing => "existing: a job with this id is there, nothing written",
        EnqueueStatus::Deduplicated => "deduplicated: the dedup id is held by this job, nothing written",
        EnqueueStatus::Replaced => "replaced the waiting job's payload",
        _ => "done",
    };
    Ok(Output::ok(
        json!({"queue": q.name(), "enqueued": done}),
        format!(
            "job {} of queue {}: {what}\n",
            crate::ctx::shell_quote(&done.id),
            q.name()
        ),
    ))
}
