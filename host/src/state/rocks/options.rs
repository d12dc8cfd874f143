//! The options of a subtask's database, and the compaction filter that drops expired entries.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use rocksdb::compaction_filter::Decision;
use rocksdb::merge_operator::MergeOperands;
use rocksdb::{BlockBasedOptions, Cache, DBCompressionType, Options};

use crate::clock::Clock;
use crate::state::StateConfig;
use crate::state::ttl::split;

use super::{META, TtlTable, list_elements};
use crate::state::StateKind;

/// The compaction filter that drops expired entries of states with a TTL: values and map
/// entries, and lists whose every element expired (a list with some live elements keeps its
/// expired ones until a read or a full snapshot cleans them up).
pub(super) fn ttl_filter(
    ttls: TtlTable,
    clock: Clock,
    watermark: Arc<AtomicI64>,
) -> impl FnMut(u32, &[u8], &[u8]) -> Decision + Send + 'static {
    move |_level, key, value| {
        if key.len() < 4 || key[..2] == META {
            return Decision::Keep;
        }
        let st = u16::from_be_bytes([key[2], key[3]]) as usize;
        let ttl = ttls
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(st)
            .copied()
            .flatten();
        let Some((ttl, kind)) = ttl else {
            return Decision::Keep;
        };
        let now = if ttl.event_time {
            watermark.load(Ordering::Relaxed)
        } else {
            clock.now_ms()
        };
        let expired = match kind {
            StateKind::List => {
                let mut live = false;
                let whole = list_elements(value, |e| live |= !ttl.expired(split(e).0, now));
                whole.is_some() && !live
            }
            _ => ttl.expired(split(value).0, now),
        };
        if expired {
            Decision::Remove
        } else {
            Decision::Keep
        }
    }
}

/// The options of a subtask's database; see the README's "State backends" for why.
pub(super) fn options(
    config: &StateConfig,
    filter: impl FnMut(u32, &[u8], &[u8]) -> Decision + Send + 'static,
) -> Options {
    let mut table = BlockBasedOptions::default();
    // Point lookups (value state) skip SST files without the key.
    table.set_bloom_filter(10.0, false);
    table.set_whole_key_filtering(true);
    match Cache::new_lru_cache(config.block_cache.as_u64() as usize) {
        Ok(cache) => table.set_block_cache(&cache),
        Err(e) => tracing::warn!("RocksDB block cache not created ({e}); using the default"),
    }
    // Index and filter blocks stay in memory with their table rather than in the block
    // cache: in the cache, data blocks evicted them, and every lookup read filter blocks of
    // megabytes again (random updates over 10M keys ran at a few thousand per second).
    table.set_cache_index_and_filter_blocks(false);
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.set_block_based_table_factory(&table);
    opts.set_write_buffer_size(config.write_buffer.as_u64() as usize);
    // A bloom filter over the memtable's keys too: a read of a key the memtable does not
    // hold (a new key, or one flushed long ago) skips its skip-list search.
    opts.set_memtable_prefix_bloom_ratio(0.1);
    opts.set_memtable_whole_key_filtering(true);
    opts.set_max_write_buffer_number(3);
    opts.set_compression_type(DBCompressionType::Lz4);
    opts.set_level_compaction_dynamic_level_bytes(true);
    opts.set_max_background_jobs(2);
    opts.set_compaction_filter("weir-ttl", filter);
    opts.set_merge_operator_associative("weir-list-append", append_lists);
    opts
}

/// The merge operator: a list row's merge operands are elements to append (each `u32` length
/// and bytes, as the row keeps them), so appending to a list is a merge, not a read and a
/// rewrite of the whole list. Only list rows are ever merged.
fn append_lists(_key: &[u8], list: Option<&[u8]>, appended: &MergeOperands) -> Option<Vec<u8>> {
    let len = list.map_or(0, <[u8]>::len) + appended.iter().map(<[u8]>::len).sum::<usize>();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(list.unwrap_or_default());
    for elements in appended {
        out.extend_from_slice(elements);
    }
    Some(out)
}
