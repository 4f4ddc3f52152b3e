//! `lua/list.lua`: one page of a set's job ids after a cursor.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new(
    "list",
    include_str!("../../lua/list.lua"),
    &["set"],
    false,
    &["order", "limit", "score", "id"],
    );
