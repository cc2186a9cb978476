//! A map for the few names one object carries: an array in place while
//! it holds few entries (a review names one owner and a reference or
//! two), a hash map past that (an object may carry up to
//! `MAX_REFERENCES` of them, so a scan alone would be quadratic).
//!
//! Why: a hash map allocates its table at the first insert, and a review
//! built several for one or two entries each; the allocation and its
//! free cost more than the lookups they serve (docs/performance.md).

use std::hash::Hash;

use super::Map;

/// How many entries stay in place before the map moves to a hash map:
/// also how many lookups `merge_lookups` merges by a scan.
pub(super) const IN_PLACE: usize = 8;

/// A map whose every key keeps the first value inserted under it: what
/// the checks of one review ask ("the uid this name was first seen with").
pub(crate) struct FirstSeen<K, V> {
    in_place: [Option<(K, V)>; IN_PLACE],
    len: usize,
    spilled: Option<Map<K, V>>,
}

impl<K: Copy + Eq + Hash, V: Copy> FirstSeen<K, V> {
    pub(crate) fn new() -> Self {
        Self {
            in_place: [None; IN_PLACE],
            len: 0,
            spilled: None,
        }
    }

    /// The value first inserted under `key`.
    pub(crate) fn get(&self, key: K) -> Option<V> {
        if let Some(map) = &self.spilled {
            return map.get(&key).copied();
        }
        self.in_place[..self.len]
            .iter()
            .flatten()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }

    /// The value first inserted under `key`, if any; otherwise `value`
    /// is now that value, and `None` is returned.
    pub(crate) fn first_or_insert(&mut self, key: K, value: V) -> Option<V> {
        if let Some(map) = &mut self.spilled {
            return match map.entry(key) {
                std::collections::hash_map::Entry::Occupied(first) => Some(*first.get()),
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(value);
                    None
                }
            };
        }
        if let Some(first) = self.get(key) {
            return Some(first);
        }
        if self.len < IN_PLACE {
            self.in_place[self.len] = Some((key, value));
            self.len += 1;
        } else {
            let mut map: Map<K, V> = self.in_place.iter().flatten().copied().collect();
            map.insert(key, value);
            self.spilled = Some(map);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Whatever the keys and however many (past the in-place ones),
        /// it answers as a hash map filled with `entry().or_insert()`.
        #[test]
        fn answers_as_a_map_that_keeps_the_first_value(
            inserts in proptest::collection::vec((0u8..24, any::<u16>()), 0..40),
            probes in proptest::collection::vec(0u8..24, 0..24),
        ) {
            let mut few = FirstSeen::new();
            let mut map = HashMap::new();
            for (key, value) in inserts {
                let before = map.get(&key).copied();
                prop_assert_eq!(few.first_or_insert(key, value), before);
                map.entry(key).or_insert(value);
            }
            for key in probes {
                prop_assert_eq!(few.get(key), map.get(&key).copied());
            }
        }
    }
}
