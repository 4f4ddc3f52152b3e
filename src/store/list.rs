//! `lua/list.lua`: one page of a set's job ids after a cursor.

use super::Spec;
use crate::conn::Conn;
use crate::error::Result;

pub(super) static SPEC: Spec = Spec::new(
    "list",
    include_str!("../../lua/list.lua"),
    &["set"],
    false,
    &["order", "limit", "score", "id"],
);

/// The order of a set's page.
#[derive(Clone, Copy)]
pub(crate) enum Order {
    /// Oldest score first.
    Asc,
    /// Newest first.
    Desc,
}

/// Up to `limit` members of `set` strictly after `after` (the last
/// `(score, id)` shown; `None` from the start), as `(id, score)` pairs.
pub(crate) async fn run(
    conn: &mut Conn,
    set: &str,
    order: Order,
    limit: usize,
    after: Option<(&str, &str)>,
) -> Result<Vec<(String, String)>> {
    let mut call = SPEC.call();
    call.key(set)
        .arg(match order {
            Order::Asc => "asc",
            Order::Desc => "desc",
        })
        .arg(limit);
    let (score, id) = after.unwrap_or_default();
    call.arg(score).arg(id);
    let mut r = call.run(conn).await?;
    let mut listed = Vec::new();
    while r.remaining() > 0 {
        listed.push((r.string()?, r.string()?));
    }
    Ok(listed)
}
