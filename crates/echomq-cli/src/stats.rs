//! `stats`: jobs per state, whether paused, and the lag of the job next in
//! line, for one queue or all.

use echomq::JobState;
use serde_json::json;

use crate::ctx::{Ctx, Output};
use crate::exit::{FAILED, Failure};
use crate::render::table;

/// Counts of the queue given, or of every queue under the prefix. A
/// queue that cannot be opened (another layout) gets a row with its error,
/// and the command exits 1.
///
/// # Errors
/// A [`Failure`]: no such queue, or a server error.
pub async fn stats(ctx: &Ctx) -> Result<Output, Failure> {
    let names = ctx.queue_names().await?;
    let mut docs = Vec::new();
    let mut rows = Vec::new();
    let mut errors = Vec::new();
    for name in &names {
        let counts = match ctx.open(name).await {
            Ok(q) => match q.counts().await {
                Ok(c) => q.lag().await.map(|lag| (c, lag)).map_err(|e| ctx.err(e)),
                Err(e) => Err(ctx.err(e)),
            },
            Err(f) => Err(f),
        };
        match counts {
            Ok((c, lag)) => {
                let lag_ms = u64::try_from(lag.as_millis()).unwrap_or(u64::MAX);
                let mut doc = json!({
                    "queue": name,
                    "paused": c.paused,
                    "backlog": c.pending,
                    "lag_ms": lag_ms,
                });
                // a count per state, by its name
                for s in JobState::ALL {
                    doc[s.as_str()] = json!(c.of(s));
                }
                docs.push(doc);
                let paused = if c.paused { "yes" } else { "no" };
                let mut row = vec![name.clone(), paused.to_owned()];
                row.extend(JobState::ALL.map(|s| c.of(s).to_string()));
                row.push(crate::render::duration(lag));
                rows.push(row);
            }
            // A lost connection ends the command; a queue that cannot be
            // read is reported in its row.
            Err(f) if f.code != FAILED => return Err(f),
            Err(f) => {
                docs.push(json!({"queue": name, "error": f.message}));
                errors.push(format!("{name}: {}", f.message));
            }
        }
    }
    let mut text = if names.is_empty() {
        ctx.no_queues()
    } else {
        table(
            &[
                "QUEUE",
                "PAUSED",
                "PENDING",
                "DELAYED",
                "ACTIVE",
                "COMPLETED",
                "FAILED",
                "CANCELLED",
                "EXPIRED",
                "LAG",
            ],
            &rows,
        )
    };
    for e in &errors {
        text.push_str(&format!("error: {e}\n"));
    }
    let mut out = Output::ok(json!({"prefix": ctx.prefix, "queues": docs}), text);
    if !errors.is_empty() {
        out.code = FAILED;
    }
    Ok(out)
}
