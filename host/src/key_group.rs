//! Key groups, with Flink's formulas.
//!
//! A key belongs to key group `xxh3_64(key bytes) % max_parallelism` (XXH3, 64-bit, seed 0,
//! over the raw key bytes: fixed and documented, so a key's group never changes between
//! versions). Subtask `i` of `p` owns the contiguous range of key groups
//! `[ceil(i * max / p), ceil((i + 1) * max / p))`, and key group `g` is owned by subtask
//! `g * p / max`; state stored per key group can thus be redistributed to any parallelism up
//! to `max_parallelism`.

use std::ops::Range;

/// The key group of `key`.
pub fn key_group(key: &[u8], max_parallelism: u32) -> u32 {
    (xxhash_rust::xxh3::xxh3_64(key) % u64::from(max_parallelism)) as u32
}

/// The subtask that owns key group `group` (Flink's `computeOperatorIndexForKeyGroup`).
pub fn subtask_for_key_group(group: u32, max_parallelism: u32, parallelism: u32) -> u32 {
    (u64::from(group) * u64::from(parallelism) / u64::from(max_parallelism)) as u32
}

/// The key groups owned by `subtask` (Flink's `computeKeyGroupRangeForOperatorIndex`).
pub fn key_group_range(max_parallelism: u32, parallelism: u32, subtask: u32) -> Range<u32> {
    let (max, p, i) = (
        u64::from(max_parallelism),
        u64::from(parallelism),
        u64::from(subtask),
    );
    let start = (i * max).div_ceil(p);
    let end = ((i + 1) * max).div_ceil(p);
    start as u32..end as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_partition_all_key_groups_and_agree_with_owner() {
        for max in [1, 7, 128, 1000] {
            for p in 1..=max.min(40) {
                let mut next = 0;
                for i in 0..p {
                    let r = key_group_range(max, p, i);
                    assert_eq!(r.start, next, "max {max} p {p} i {i}");
                    assert!(!r.is_empty(), "every subtask owns a key group");
                    for g in r.clone() {
                        assert_eq!(subtask_for_key_group(g, max, p), i, "max {max} p {p} g {g}");
                    }
                    next = r.end;
                }
                assert_eq!(next, max);
            }
        }
    }

    #[test]
    fn hash_is_stable() {
        // Changing the hash would move every key to another key group and break restores.
        assert_eq!(
            key_group(b"hello", 128),
            (0x9555e8555c62dcfd_u64 % 128) as u32
        );
        assert!(key_group(b"", 128) < 128);
    }
}
