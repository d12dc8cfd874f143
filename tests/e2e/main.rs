//! End-to-end tests: the real `weir` binary runs job specs over the real guest components.
//!
//! Prerequisites (`cargo xtask test` does both): the release binary
//! (`cargo build --release -p weir`, or set `WEIR_BIN`) and the components in
//! `build/operators/` (`cargo xtask guests`). Each test writes its own job spec, with absolute
//! paths, into a temporary directory.
//!
//! One test binary with a module per area, so that it links once.

mod bad_specs;
mod cache;
mod clickstream;
mod deploy;
mod event_time;
mod exactly_once;
mod isolation;
mod joins;
mod languages;
mod lifecycle;
mod postgres;
mod sandbox;
mod savepoint;
mod service;
mod state;
mod support;
mod tooling;
mod upgrade;
mod wordcount;
