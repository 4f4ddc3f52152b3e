//! Operator calls racing live traffic against a real server: pause across
//! two OS processes, obliterate under load, retention by age over 100,000
//! jobs, and listing while jobs move; and flows and batches under worker
//! crashes and a server restart.

#[path = "../common/mod.rs"]
mod common;
mod flows;
mod obliterate;
mod pause;
mod retention;
mod walks;
