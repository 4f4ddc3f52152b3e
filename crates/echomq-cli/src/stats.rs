//! `stats`: jobs per state and whether paused, for one queue or all.

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
            Ok(q) => q.counts().await.map_err(|e| ctx.err(e)),
            Err(f) => Err(f),
        };
        match counts {
            Ok(c) => {
                docs.push(json!({
                    "queue": name,
                    "paused": c.paused,
                    "pending": c.pending,
                    "delayed": c.delayed,
                    "active": c.active,
                    "completed": c.completed,
                    "failed": c.failed,
                    "cancelled": c.cancelled,
                }));
                let paused = if c.paused { "yes" } else { "no" };
                let mut row = vec![name.clone(), paused.to_owned()];
                row.extend([c.pending, c.delayed, c.active, c.completed, c.failed, c.cancelled].map(|n| n.to_string()));
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
