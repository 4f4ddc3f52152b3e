//! Test-only hooks (feature `fault-injection`): a pause at a named point of
//! a relay batch, announced by a marker file, so a test's `SIGKILL` lands
//! exactly there; and the negative control, a relay that deletes its rows
//! before it enqueues them. Not for applications.

use std::path::PathBuf;

/// A point of a relay batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// The rows are locked, nothing enqueued yet.
    Locked,
    /// The rows are enqueued, not yet deleted.
    AfterEnqueue,
    /// (Negative control only) the rows are deleted and committed, not yet enqueued.
    AfterDelete,
}

impl FaultPoint {
    /// Parses `locked`, `after-enqueue` or `after-delete`.
    pub fn parse(s: &str) -> Option<FaultPoint> {
        match s {
            "locked" => Some(FaultPoint::Locked),
            "after-enqueue" => Some(FaultPoint::AfterEnqueue),
            "after-delete" => Some(FaultPoint::AfterDelete),
            _ => None,
        }
    }
}

/// The hooks a relay runs with.
#[derive(Debug, Clone, Default)]
pub struct FaultHooks {
    /// At this point, write this marker file and stop there for good (the
    /// test kills the process).
    pub pause_at: Option<(FaultPoint, PathBuf)>,
    /// Delete the rows (and commit) before enqueueing them.
    pub delete_before_enqueue: bool,
}

impl FaultHooks {
    pub(crate) async fn reached(&self, point: FaultPoint) {
        let Some((at, marker)) = &self.pause_at else { return };
        if *at != point {
            return;
        }
        if let Err(e) = std::fs::write(marker, std::process::id().to_string()) {
            tracing::error!(error = %e, marker = %marker.display(), "could not write the fault marker");
        }
        tracing::warn!(?point, "fault point reached; waiting to be killed");
        std::future::pending::<()>().await;
    }
}
