//! The pods of one namespace, packed for the largest clusters.
//!
//! A `HashMap<Box<str>, Entry>` spends on every pod a heap allocation for
//! its name (with the allocator's header and rounding) plus a 16-byte
//! pointer to it in the table, and an enum for the uid: about 130 bytes a
//! pod once the table's spare capacity is counted. Here the names of a
//! namespace are written end to end into one `String`, the pods are fixed
//! 28-byte slots in one `Vec` that point into it (the uid as its 16 bytes,
//! where the name starts and how long it is, the stamp, two flags), and
//! the hash table holds only a slot's 4-byte position, so its spare
//! buckets cost 5 bytes each, not 33. A uid that
//! is no canonical UUID (never one the API server made, but the index does
//! not assume) goes into the same text, the slot saying where.
//!
//! Removing a pod leaves its name in the text as dead bytes; once they are
//! the larger half of it, the text is written anew from the live slots.
//! A name or uid too long for a slot's fields (no valid one is) is not
//! indexed: a miss is always asked live, so leaving a pod out costs a GET,
//! never a wrong answer.

use std::hash::BuildHasher;

use hashbrown::HashTable;

use super::index::{Entry, Hasher, Stamp, Uid};

/// Dead bytes below this are never worth a rewrite.
const COMPACT_AT_LEAST: usize = 4096;

const TERMINATING: u8 = 1;
/// `uid` holds where the uid's text is (offset, then length, both u32
/// little-endian), not a UUID's bytes.
const UID_IN_TEXT: u8 = 2;

#[derive(Debug, Clone, Copy)]
struct Slot {
    uid: [u8; 16],
    name_at: u32,
    confirmed: Stamp,
    name_len: u16,
    flags: u8,
}

/// A uid as a slot holds it, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum UidRef<'a> {
    Uuid(&'a [u8; 16]),
    Other(&'a str),
}

impl UidRef<'_> {
    pub(super) fn matches(self, text: &str) -> bool {
        match self {
            Self::Uuid(bytes) => super::index::parse_uuid(text).is_some_and(|b| b == *bytes),
            Self::Other(uid) => uid == text,
        }
    }

    /// The uid as the API server wrote it.
    pub(super) fn to_text(self) -> String {
        match self {
            Self::Other(uid) => uid.to_string(),
            Self::Uuid(b) => {
                let hex: String = b.iter().map(|byte| format!("{byte:02x}")).collect();
                format!(
                    "{}-{}-{}-{}-{}",
                    &hex[0..8],
                    &hex[8..12],
                    &hex[12..16],
                    &hex[16..20],
                    &hex[20..32]
                )
            }
        }
    }

    #[cfg(test)]
    pub(super) fn to_owned(self) -> Uid {
        match self {
            Self::Uuid(bytes) => Uid::Uuid(*bytes),
            Self::Other(text) => Uid::Other(text.into()),
        }
    }
}

/// A pod of the namespace, borrowed from its slot.
#[derive(Debug, Clone, Copy)]
pub(super) struct View<'a> {
    pub(super) uid: UidRef<'a>,
    pub(super) terminating: bool,
    pub(super) confirmed: Stamp,
}

/// The pods of one namespace by name.
#[derive(Debug, Default)]
pub(super) struct Names {
    /// The names (and any uid kept as text), end to end.
    text: String,
    /// Bytes of `text` that no slot points to any more.
    dead: usize,
    /// The pods, densely: a removal moves the last one into its place.
    slots: Vec<Slot>,
    /// Where each name's slot is, by the name's hash: four bytes a bucket.
    table: HashTable<u32>,
    hasher: Hasher,
}

impl Names {
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Where the slot of `name` is in `slots`.
    fn find(&self, name: &str) -> Option<usize> {
        let hash = self.hasher.hash_one(name);
        let (text, slots) = (&self.text, &self.slots);
        self.table
            .find(hash, |&at| name_of(text, &slots[at as usize]) == name)
            .map(|&at| at as usize)
    }

    pub(super) fn get(&self, name: &str) -> Option<View<'_>> {
        let at = self.find(name)?;
        Some(view(&self.text, &self.slots[at]))
    }

    /// Raise the stamp of `name` to `stamp` when `keep(view)` says so.
    pub(super) fn confirm(&mut self, name: &str, stamp: Stamp, keep: impl Fn(View<'_>) -> bool) {
        if let Some(at) = self.find(name)
            && keep(view(&self.text, &self.slots[at]))
        {
            let slot = &mut self.slots[at];
            slot.confirmed = slot.confirmed.max(stamp);
        }
    }

    /// Put `entry` under `name`, replacing what was there. A name or uid
    /// too long for a slot removes the old entry and indexes nothing.
    pub(super) fn insert(&mut self, name: &str, entry: &Entry) {
        // The common change (a MODIFIED of a pod with a UUID): in place,
        // nothing written to the text.
        if let (Some(at), Uid::Uuid(uid)) = (self.find(name), &entry.uid)
            && self.slots[at].flags & UID_IN_TEXT == 0
        {
            let slot = &mut self.slots[at];
            slot.uid = *uid;
            slot.confirmed = entry.confirmed;
            slot.flags = if entry.terminating { TERMINATING } else { 0 };
            return;
        }
        self.remove(name);
        let Ok(at) = u32::try_from(self.slots.len()) else {
            return;
        };
        let Some(slot) = self.write(name, entry) else {
            return;
        };
        self.slots.push(slot);
        let hash = self.hasher.hash_one(name);
        let (text, slots, hasher) = (&self.text, &self.slots, &self.hasher);
        self.table.insert_unique(hash, at, |&at| {
            hasher.hash_one(name_of(text, &slots[at as usize]))
        });
    }

    /// Remove the pod `name`, if `which(view)` says it is the one.
    pub(super) fn remove_if(&mut self, name: &str, which: impl Fn(View<'_>) -> bool) {
        let hash = self.hasher.hash_one(name);
        let (text, slots) = (&self.text, &self.slots);
        let Ok(found) = self
            .table
            .find_entry(hash, |&at| name_of(text, &slots[at as usize]) == name)
        else {
            return;
        };
        let at = *found.get() as usize;
        if !which(view(text, &slots[at])) {
            return;
        }
        found.remove();
        let removed = self.slots.swap_remove(at);
        self.dead += text_len(&removed);
        // The last slot now sits where the removed one was: point its
        // bucket there.
        if at < self.slots.len() {
            let moved = self.slots.len() as u32;
            let hash = self.hasher.hash_one(name_of(&self.text, &self.slots[at]));
            if let Some(bucket) = self.table.find_mut(hash, |&i| i == moved) {
                *bucket = at as u32;
            }
        }
        self.compact_if_mostly_dead();
    }

    pub(super) fn remove(&mut self, name: &str) {
        self.remove_if(name, |_| true);
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&str, View<'_>)> {
        self.slots
            .iter()
            .map(|slot| (name_of(&self.text, slot), view(&self.text, slot)))
    }

    /// For every pod `old` holds with the same uid, the older of the two
    /// stamps: a list says that a pod is there, not what phase it is in.
    pub(super) fn keep_older_stamps(&mut self, old: &Names) {
        let text = &self.text;
        for slot in &mut self.slots {
            if let Some(before) = old.get(name_of(text, slot))
                && before.uid == uid_of(text, slot)
            {
                slot.confirmed = slot.confirmed.min(before.confirmed);
            }
        }
    }

    /// Give back the spare capacity of the text, the slots and the table:
    /// for a namespace filled by a list, which does not grow again as fast.
    pub(super) fn shrink_to_fit(&mut self) {
        self.compact_if_mostly_dead();
        self.text.shrink_to_fit();
        self.slots.shrink_to_fit();
        let (text, slots, hasher) = (&self.text, &self.slots, &self.hasher);
        self.table
            .shrink_to_fit(|&at| hasher.hash_one(name_of(text, &slots[at as usize])));
    }

    /// Append the name (and a uid that is text) and make its slot; `None`
    /// when they do not fit its fields.
    fn write(&mut self, name: &str, entry: &Entry) -> Option<Slot> {
        let uid_text = match &entry.uid {
            Uid::Uuid(_) => "",
            Uid::Other(text) => text,
        };
        let name_len = u16::try_from(name.len()).ok()?;
        let name_at = u32::try_from(self.text.len()).ok()?;
        let uid_at = u32::try_from(self.text.len() + name.len()).ok()?;
        let uid_len = u32::try_from(uid_text.len()).ok()?;
        uid_at.checked_add(uid_len)?;
        let mut flags = if entry.terminating { TERMINATING } else { 0 };
        let uid = match &entry.uid {
            Uid::Uuid(bytes) => *bytes,
            Uid::Other(_) => {
                flags |= UID_IN_TEXT;
                let mut bytes = [0; 16];
                set_uid_span(&mut bytes, uid_at, uid_len);
                bytes
            }
        };
        self.text.push_str(name);
        self.text.push_str(uid_text);
        Some(Slot {
            uid,
            name_at,
            confirmed: entry.confirmed,
            name_len,
            flags,
        })
    }

    fn compact_if_mostly_dead(&mut self) {
        if self.dead < COMPACT_AT_LEAST || self.dead * 2 < self.text.len() {
            return;
        }
        let mut text = String::with_capacity(self.text.len() - self.dead);
        for slot in &mut self.slots {
            let old = *slot;
            // The new text is shorter than the old: every offset fits.
            slot.name_at = text.len() as u32;
            text.push_str(name_of(&self.text, &old));
            if let UidRef::Other(uid) = uid_of(&self.text, &old) {
                set_uid_span(&mut slot.uid, text.len() as u32, uid.len() as u32);
                text.push_str(uid);
            }
        }
        self.text = text;
        self.dead = 0;
    }
}

fn name_of<'a>(text: &'a str, slot: &Slot) -> &'a str {
    let at = slot.name_at as usize;
    &text[at..at + usize::from(slot.name_len)]
}

/// Where a uid kept as text is in the text: offset, then length, both u32
/// little-endian in the first 8 of the slot's 16 uid bytes.
fn set_uid_span(uid: &mut [u8; 16], at: u32, len: u32) {
    uid[..4].copy_from_slice(&at.to_le_bytes());
    uid[4..8].copy_from_slice(&len.to_le_bytes());
}

/// `(offset, length)` of the uid in the text; `None` for a UUID's bytes.
fn uid_span(slot: &Slot) -> Option<(usize, usize)> {
    if slot.flags & UID_IN_TEXT == 0 {
        return None;
    }
    let word = |i: usize| {
        let mut bytes = [0; 4];
        bytes.copy_from_slice(&slot.uid[i..i + 4]);
        u32::from_le_bytes(bytes) as usize
    };
    Some((word(0), word(4)))
}

fn uid_of<'a>(text: &'a str, slot: &'a Slot) -> UidRef<'a> {
    match uid_span(slot) {
        None => UidRef::Uuid(&slot.uid),
        Some((at, len)) => UidRef::Other(&text[at..at + len]),
    }
}

/// The bytes of the text the slot points to.
fn text_len(slot: &Slot) -> usize {
    usize::from(slot.name_len) + uid_span(slot).map_or(0, |(_, len)| len)
}

fn view<'a>(text: &'a str, slot: &'a Slot) -> View<'a> {
    View {
        uid: uid_of(text, slot),
        terminating: slot.flags & TERMINATING != 0,
        confirmed: slot.confirmed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const U1: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000001";

    fn entry(uid: &str, terminating: bool, stamp: u32) -> Entry {
        Entry {
            uid: Uid::new(uid),
            terminating,
            confirmed: Stamp::from_ticks(stamp),
        }
    }

    #[test]
    fn a_slot_is_28_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 28);
    }

    #[test]
    fn names_and_uids_read_back_as_written_through_churn_and_compaction() {
        let mut names = Names::default();
        // Churn far past the compaction threshold, with uids of both kinds.
        for round in 0..50 {
            for i in 0..200 {
                let uid = if i % 3 == 0 {
                    format!("odd-uid-{round}-{i}")
                } else {
                    U1.to_string()
                };
                names.insert(&format!("worker-{i}"), &entry(&uid, i % 2 == 0, round));
            }
            for i in (0..200).step_by(2) {
                names.remove(&format!("worker-{i}"));
            }
        }
        assert_eq!(names.len(), 100);
        // Dead bytes are bounded: never more than the live ones, beyond
        // the least worth a rewrite.
        let live: usize = names
            .iter()
            .map(|(name, view)| match view.uid {
                UidRef::Uuid(_) => name.len(),
                UidRef::Other(uid) => name.len() + uid.len(),
            })
            .sum();
        assert_eq!(names.text.len() - names.dead, live);
        assert!(
            names.text.len() <= 2 * live + COMPACT_AT_LEAST,
            "{}",
            names.text.len()
        );
        for i in (1..200).step_by(2) {
            let view = names.get(&format!("worker-{i}")).expect("kept");
            let uid = if i % 3 == 0 {
                format!("odd-uid-49-{i}")
            } else {
                U1.to_string()
            };
            assert!(view.uid.matches(&uid), "worker-{i}: {:?}", view.uid);
            assert!(!view.terminating);
            assert_eq!(view.confirmed, Stamp::from_ticks(49));
        }
        assert!(names.get("worker-0").is_none());
        let mut listed: Vec<_> = names.iter().map(|(name, _)| name.to_string()).collect();
        listed.sort();
        listed.dedup();
        assert_eq!(listed.len(), 100);
        names.shrink_to_fit();
        assert!(names.get("worker-199").is_some());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, bool, bool, u32),
        Remove(u8),
        RemoveIfUuid(u8),
        Confirm(u8, u32),
        Shrink,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0..40u8, any::<bool>(), any::<bool>(), 0..100u32)
                .prop_map(|(n, uuid, t, s)| Op::Insert(n, uuid, t, s)),
            2 => (0..40u8).prop_map(Op::Remove),
            1 => (0..40u8).prop_map(Op::RemoveIfUuid),
            1 => (0..40u8, 0..100u32).prop_map(|(n, s)| Op::Confirm(n, s)),
            1 => Just(Op::Shrink),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Against a `HashMap` of owned entries: whatever the churn, every
        /// name reads back what the map holds, and nothing else is there.
        #[test]
        fn it_reads_as_a_map_of_owned_entries(ops in proptest::collection::vec(op(), 1..400)) {
            let mut names = Names::default();
            let mut model: std::collections::HashMap<String, (Uid, bool, Stamp)> =
                Default::default();
            let name = |n: u8| format!("pod-{}-{}", n, "x".repeat(usize::from(n) * 7));
            for op in ops {
                match op {
                    Op::Insert(n, uuid, terminating, stamp) => {
                        let uid = if uuid { U1.to_string() } else { format!("text-uid-{n}-{stamp}") };
                        names.insert(&name(n), &entry(&uid, terminating, stamp));
                        model.insert(name(n), (Uid::new(&uid), terminating, Stamp::from_ticks(stamp)));
                    }
                    Op::Remove(n) => {
                        names.remove(&name(n));
                        model.remove(&name(n));
                    }
                    Op::RemoveIfUuid(n) => {
                        names.remove_if(&name(n), |view| view.uid.matches(U1));
                        if model.get(&name(n)).is_some_and(|(uid, ..)| *uid == Uid::new(U1)) {
                            model.remove(&name(n));
                        }
                    }
                    Op::Confirm(n, stamp) => {
                        names.confirm(&name(n), Stamp::from_ticks(stamp), |view| !view.terminating);
                        if let Some((_, false, old)) = model.get_mut(&name(n)) {
                            *old = (*old).max(Stamp::from_ticks(stamp));
                        }
                    }
                    Op::Shrink => names.shrink_to_fit(),
                }
                proptest::prop_assert_eq!(names.len(), model.len());
                for n in 0..40 {
                    let got = names
                        .get(&name(n))
                        .map(|view| (view.uid.to_owned(), view.terminating, view.confirmed));
                    proptest::prop_assert_eq!(got.as_ref(), model.get(&name(n)));
                }
            }
        }
    }

    #[test]
    fn a_name_too_long_for_a_slot_removes_the_old_entry_and_indexes_nothing() {
        let mut names = Names::default();
        let long = "a".repeat(usize::from(u16::MAX) + 1);
        names.insert(&long[..10], &entry(U1, false, 1));
        names.insert(&long, &entry(U1, false, 1));
        assert!(names.get(&long).is_none());
        assert!(names.get(&long[..10]).is_some());
    }

    #[test]
    fn remove_if_removes_only_the_pod_it_names() {
        let mut names = Names::default();
        names.insert("w", &entry(U1, false, 1));
        names.remove_if("w", |view| view.uid.matches("another"));
        assert!(names.get("w").is_some());
        names.remove_if("w", |view| view.uid.matches(U1));
        assert!(names.is_empty());
    }
}
