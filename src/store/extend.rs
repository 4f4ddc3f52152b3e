//! `lua/extend.lua`: renews a lease (the heartbeat), and tells of an
//! operator's cancel request.

use super::Spec;

pub(crate) static SPEC: Spec = Spec::new(
    "extend",
    include_str!("../../lua/extend.lua"),
    &["job", "active"],
    false,
    &["id", "token", "lease"],
    );
