//! `lua/progress.lua`: records a running job's progress, fenced like a
//! settlement.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new("progress", include_str!("../../lua/progress.lua"), &["job"], false, &["token", "value"]);
