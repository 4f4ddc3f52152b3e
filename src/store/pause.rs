//! `lua/pause.lua`: pauses or resumes a queue's claims.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new("pause", include_str!("../../lua/pause.lua"), &["meta", "wake"], false, &["paused"]);
