//! Operating a queue against a real server, one module per operation:
//! pause and resume, retry, remove (with drain and obliterate), listing,
//! cancel.

mod cancel;
#[path = "../common/mod.rs"]
mod common;
mod listing;
mod pause;
mod remove;
mod retry;
