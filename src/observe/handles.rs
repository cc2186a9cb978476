//! The metrics every review touches, found without their family's lookup.
//!
//! prometheus-client finds a family's series by its label set in a
//! `HashMap` with the standard library's SipHash, and `bounded_label`
//! first looks the request's resource up in a set of its own: most of the
//! 2,100 instructions a review the metrics cost, for a few series that,
//! once made, are the same series for good (no family here is cleared).
//! [`Handles`] keeps a handle on each series already made (a `Counter` or
//! `Histogram` is a shared pointer to its value, so the handle counts into
//! the very series the registry encodes), in a table hashed with foldhash
//! and searched by the borrowed parts of the label set, so that a hit
//! neither allocates nor takes a lock for writing.
//!
//! Only series whose labels are bounded are kept (the caller decides):
//! the table then holds at most what the family holds.

use std::hash::{BuildHasher, Hash};
use std::sync::RwLock;

use hashbrown::HashTable;

/// Handles on the series of one family, keyed by `K`, their label set.
/// Each entry keeps its hash, which the table needs again when it grows.
pub(super) struct Handles<K, M> {
    table: RwLock<HashTable<(u64, K, M)>>,
    hasher: foldhash::fast::RandomState,
}

impl<K, M> Default for Handles<K, M> {
    fn default() -> Self {
        Self {
            table: RwLock::new(HashTable::new()),
            hasher: foldhash::fast::RandomState::default(),
        }
    }
}

impl<K, M> Handles<K, M> {
    /// The hash of a label set given as its parts: the caller hashes the
    /// same parts, borrowed, to find a series and, owned, to keep one.
    pub(super) fn hash(&self, parts: impl Hash) -> u64 {
        self.hasher.hash_one(parts)
    }

    /// Runs `use_it` on the series whose label set `is` says: by its
    /// handle when it has one, else on the series `make` gives (the
    /// family's, made or found by its lookup), whose handle is kept when
    /// `make` gives its label set too (a label set it cannot bound, it
    /// gives none of).
    pub(super) fn count(
        &self,
        hash: u64,
        is: impl Fn(&K) -> bool,
        make: impl FnOnce() -> (M, Option<K>),
        use_it: impl Fn(&M),
    ) {
        if self.with(hash, &is, &use_it) {
            return;
        }
        let (metric, key) = make();
        use_it(&metric);
        if let Some(key) = key {
            self.keep(hash, key, is, metric);
        }
    }

    /// Runs `use_it` on the series whose label set `is` says, if it has a
    /// handle here; false when it has none (or the table's lock was
    /// poisoned: the family's way is taken then).
    fn with(&self, hash: u64, is: impl Fn(&K) -> bool, use_it: impl FnOnce(&M)) -> bool {
        let Ok(table) = self.table.read() else {
            return false;
        };
        match table.find(hash, |(_, key, _)| is(key)) {
            Some((_, _, metric)) => {
                use_it(metric);
                true
            }
            None => false,
        }
    }

    /// Keeps `metric` as the handle of `key`, unless another thread kept
    /// one first (both point at the family's one series).
    fn keep(&self, hash: u64, key: K, is: impl Fn(&K) -> bool, metric: M) {
        let Ok(mut table) = self.table.write() else {
            return;
        };
        if table.find(hash, |(_, kept, _)| is(kept)).is_none() {
            table.insert_unique(hash, (hash, key, metric), |(kept_hash, _, _)| *kept_hash);
        }
    }

    /// How many series have a handle.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.table.read().map_or(0, |table| table.len())
    }
}
