//! The library's deterministic tests that the negative controls break
//! (`tests/core/` and `tests/lanes/` of echomq, and its flows under
//! crashes, `tests/races/flows.rs`), compiled as a target
//! of this crate. The negative controls build them with
//! `--cfg echomq_faults`; built here, that build compiles only the
//! library's own dependencies, not its dev-dependencies (an HTTP stack, a
//! certificate generator, a property-test engine, metrics exporters), which
//! halves it. `test = false` in Cargo.toml: `cargo test` leaves this target
//! alone (the same tests run in the library's own suite);
//! `tests/negative_controls.rs` builds and runs it by name.

#[path = "../../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;
#[path = "../../tests/core/main.rs"]
mod core;
#[path = "../../tests/races/flows.rs"]
mod flows;
#[path = "../../tests/lanes/main.rs"]
mod lanes;
