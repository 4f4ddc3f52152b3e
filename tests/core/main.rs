//! The at-least-once core against a real server: lifecycle, redelivery,
//! fencing, racing reapers, retries, the server clock, bad input, NOSCRIPT.

mod clock;
#[path = "../common/mod.rs"]
mod common;
mod consumer;
mod enqueue;
mod fencing;
mod json;
mod layout;
mod lifecycle;
mod robustness;
mod settle;

use std::time::Duration;

use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize, PartialEq, Clone)]
struct Email {
    to: String,
    n: u32,
}

fn email(n: u32) -> Email {
    Email {
        to: format!("u{n}@example.com"),
        n,
    }
}

const LEASE: Duration = Duration::from_secs(30);
