//! `lua/layout.lua`: stamps a new queue with the layout version and answers
//! the version found.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new("layout", include_str!("../../lua/layout.lua"), &["meta"], false, &["version"]);
