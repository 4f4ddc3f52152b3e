//! `lua/marker_abandon.lua`: gives an effect marker back when the effect
//! surely did not happen.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new("marker_abandon", include_str!("../../lua/marker_abandon.lua"), &["marker"], false, &["token"]);
