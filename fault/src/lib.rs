//! echomq's fault suite: the processes of a fault run and the checker.
//!
//! - [`history`]: the JSON-lines history every process appends to.
//! - [`state`]: the server's final state of a queue.
//! - [`check`]: the invariants I1–I11 of `RELIABILITY.md`, checked on the
//!   histories and the final state.
//! - [`aof`]: torn append-only-file tails, as a crash mid-write leaves them.
//! - [`args`]: the tiny `--name=value` parser of the binaries.
//! - [`proxy`]: a TCP proxy that cuts connections, drops an ack in flight
//!   or blackholes traffic, for loopback-only network faults.
//! - [`netns`]: a server in a network namespace, partitioned with iptables.
//! - [`harness`]: drives a run: server, worker/producer/reaper processes,
//!   faults, and the checker binary.
//! - [`scenarios`]: the fault scenarios, shared by the tests and the
//!   negative controls.
//!
//! Binaries: `fault-worker` (a consumer or a reaper), `fault-producer`,
//! `fault-check`. Scenarios: `tests/faults.rs`; negative controls:
//! `tests/negative_controls.rs`.
#![forbid(unsafe_code)]

pub mod aof;
pub mod args;
pub mod check;
pub mod groups;
pub mod harness;
pub mod history;
pub mod netns;
pub mod proxy;
pub mod scenarios;
pub mod state;
