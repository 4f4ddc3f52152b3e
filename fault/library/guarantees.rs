//! The library's deterministic tests that the negative controls break
//! (`tests/core/` and `tests/lanes/` of echomq), compiled as a target
//! of this crate. The negative controls build them with
//! `--cfg echomq_faults`; built here, that build compiles only the
//! library's own dependencies, not its dev-dependencies (an HTTP stack, a
//! certificate generator, a property-test engine, metrics exporters), which
//! halves it. `test = false` in Cargo.toml: `cargo test` leaves this target
//! alone (the same tests run in the library's own suite);
//! `tests/negative_controls.rs` builds and runs it by name.

#[path = "../../tests/core/main.rs"]
mod core;
#[path = "../../tests/lanes/main.rs"]
mod lanes;
