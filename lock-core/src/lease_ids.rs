//! Maps keyed by lease id, with a hash that suits them.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map from lease ids to `V`. Every grant inserts into such maps and every release
/// removes from them; the ids are this client's own counter, never chosen from
/// outside, so they need no keyed hash (the default one costs more than the rest of an
/// insert).
pub(crate) type LeaseIdMap<V> = HashMap<u64, V, BuildHasherDefault<LeaseIdHasher>>;

/// Hashes `u64` ids with the finalizer of SplitMix64: a few multiplications and
/// shifts after which every bit of the hash depends on every bit of the id, so the
/// table's buckets (its low bits) and tags (its high bits) spread whatever the ids.
#[derive(Default)]
pub(crate) struct LeaseIdHasher(u64);

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Hasher for LeaseIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys use this hasher, through `write_u64`; other input still
        // hashes, a byte at a time.
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = mix(self.0 ^ id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(id: u64) -> u64 {
        let mut hasher = LeaseIdHasher::default();
        hasher.write_u64(id);
        hasher.finish()
    }

    #[test]
    fn ids_spread_over_the_buckets_and_the_tags() {
        let mut map = LeaseIdMap::default();
        for id in 1..=10_000u64 {
            map.insert(id, id);
        }
        assert_eq!(map.len(), 10_000);
        assert!((1..=10_000u64).all(|id| map.get(&id) == Some(&id)));
        // Consecutive ids, and ids that share their low bits, spread over the buckets of
        // a 1024-bucket table.
        for ids in [
            (1..=1024u64).collect::<Vec<_>>(),
            (1..=1024u64).map(|n| n << 20).collect(),
        ] {
            let buckets: std::collections::HashSet<u64> =
                ids.iter().map(|&id| hash(id) & 1023).collect();
            // As many as random hashes fill (about 1024 × (1 − 1/e) ≈ 647), not a few.
            assert!(buckets.len() > 580, "{} of 1024 buckets", buckets.len());
        }
        let tags: std::collections::HashSet<u64> = (1..=128u64).map(|id| hash(id) >> 57).collect();
        assert!(tags.len() > 64, "only {} of 128 tags", tags.len());
    }
}
