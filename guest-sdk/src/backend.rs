//! The seam between the SDK runtime and whatever is on the other side of the WIT imports.
//!
//! In a component it is the host (`wit.rs`); under `cargo test` it is the in-memory store of
//! [`testing::Harness`](crate::testing::Harness). Everything above this trait — batch
//! decoding, the per-batch state caches, output buffering, timer changes — is the same code in
//! both, so an operator's unit tests exercise what runs in production.

use std::fmt;

use crate::{Level, Redistribution, Ttl};

/// The three keyed state kinds of the WIT `state` interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StateKind {
    Value,
    List,
    Map,
}

impl fmt::Display for StateKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StateKind::Value => "value",
            StateKind::List => "list",
            StateKind::Map => "map",
        })
    }
}

/// The WIT imports, one method each; buffers use the encodings of `wit/stream.wit`.
///
/// `keys` is the key table of the batch (or fired timers) being handled: the host knows it
/// already and ignores it, the in-memory backend needs it to resolve key slots.
pub(crate) trait Backend {
    /// Declares a state (the resource constructor); returns its handle.
    fn declare_state(&mut self, kind: StateKind, name: &str, ttl: Option<&Ttl>) -> usize;
    /// The state's values for every key slot of the current batch.
    fn load(&mut self, state: usize, keys: &[&[u8]]) -> Vec<u8>;
    /// The value of `map_key` in key slot `slot`'s map, as stored before this batch (map
    /// state only: the point read of a map a load sent as large).
    fn map_get(
        &mut self,
        state: usize,
        keys: &[&[u8]],
        slot: u32,
        map_key: &[u8],
    ) -> Option<Vec<u8>>;
    /// Key slot `slot`'s whole map, as stored before this batch, in the load encoding.
    fn map_entries(&mut self, state: usize, keys: &[&[u8]], slot: u32) -> Vec<u8>;
    /// Applies one batch's changes to the state.
    fn store(&mut self, state: usize, keys: &[&[u8]], changes: &[u8]);
    /// The values of key slots `slots` (in increasing order) of a value state.
    fn load_slots(&mut self, state: usize, keys: &[&[u8]], slots: &[u32]) -> Vec<u8>;
    /// Whether the host advises keeping values from batch to batch (its state is not in
    /// memory).
    fn write_back_advised(&mut self) -> bool;
    /// The host's id of each key of the current batch (`keys`).
    fn key_ids(&mut self, keys: &[&[u8]]) -> Vec<u32>;
    /// Applies changes of a value state by key id (its write-back).
    fn store_ids(&mut self, state: usize, changes: &[u8]);
    /// Sends output records.
    fn emit(&mut self, records: &[u8]);
    /// Registers and deletes timers.
    fn update_timers(&mut self, keys: &[&[u8]], changes: &[u8]);
    fn current_watermark(&mut self) -> Option<i64>;
    fn current_processing_time(&mut self) -> i64;
    fn log(&mut self, level: Level, message: &str);
    /// Declares a non-keyed operator state (the resource constructor); returns its handle.
    fn declare_operator_state(&mut self, name: &str, mode: Redistribution) -> usize;
    fn get_operator_state(&mut self, state: usize) -> Vec<Vec<u8>>;
    fn set_operator_state(&mut self, state: usize, elements: &[Vec<u8>]);
}
