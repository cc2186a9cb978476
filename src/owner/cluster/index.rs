//! The pod index fed by the watch: (namespace, name) -> (uid, terminating,
//! when it was last seen whole).
//!
//! Sized for the largest clusters (150,000 pods): only what a decision
//! reads is kept, pods are grouped by namespace so a namespace is stored
//! once, a canonical UUID is kept as 16 bytes rather than 36 characters,
//! and a namespace's names are packed into one text ([`Names`]), not one
//! allocation each.
//!
//! The index may be stale, the way any watch cache is: a pod created a
//! moment ago may not be there yet, and a pod deleted a moment ago may still
//! be. That is why a miss or a uid mismatch is always checked again live,
//! and why each entry carries its age: a hit older than `--cache-max-age`
//! is read live too. A relist after a 410 Gone is swapped in namespace by
//! namespace as the list passes each ([`Relist`]), so lookups never see a
//! half-filled namespace and no second index is held aside.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::time::Instant;

use super::packed::{Names, UidRef};
use crate::owner::ObservedPod;

/// A pod uid: 16 bytes when it is a canonical lowercase UUID (all that the
/// API server generates), else the text as it came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Uid {
    Uuid([u8; 16]),
    Other(Box<str>),
}

impl Uid {
    pub(super) fn new(text: &str) -> Self {
        parse_uuid(text).map_or_else(|| Self::Other(text.into()), Self::Uuid)
    }

    /// Borrowed, as a slot holds it.
    pub(super) fn as_ref(&self) -> UidRef<'_> {
        match self {
            Self::Uuid(bytes) => UidRef::Uuid(bytes),
            Self::Other(text) => UidRef::Other(text),
        }
    }
}

/// The 16 bytes of a canonical lowercase UUID (`8-4-4-4-12` hex digits);
/// `None` for anything else, which is then kept as text so that it
/// compares exactly as written.
pub(super) fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let bytes = text.as_bytes();
    if bytes.len() != 36 || [8, 13, 18, 23].iter().any(|&i| bytes[i] != b'-') {
        return None;
    }
    let mut out = [0u8; 16];
    let mut digits = bytes.iter().filter(|&&b| b != b'-');
    for byte in &mut out {
        let mut value = 0u8;
        for _ in 0..2 {
            let digit = match *digits.next()? {
                d @ b'0'..=b'9' => d - b'0',
                d @ b'a'..=b'f' => d - b'a' + 10,
                _ => return None,
            };
            value = value << 4 | digit;
        }
        *byte = value;
    }
    Some(out)
}

#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) uid: Uid,
    pub(super) terminating: bool,
    /// When the pod was last seen whole: listed, added, or read live
    /// ([`Stamp`]). A MODIFIED event does not count: on the watch of every
    /// pod it carries no phase, and a change that was lost (the deletion,
    /// the phase's own event) is what the age bounds.
    pub(super) confirmed: Stamp,
}

/// A moment, in tenths of a second since the index's epoch, rounded down:
/// an age computed from it is never smaller than the real one. Four bytes
/// rather than an `Instant`'s sixteen, in every entry; thirteen years.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Stamp(u32);

/// The unit of a [`Stamp`].
pub(super) const STAMP_TICK_MS: u64 = 100;

impl Stamp {
    pub(super) fn at(epoch: Instant, at: Instant) -> Self {
        let ms = at.saturating_duration_since(epoch).as_millis() / u128::from(STAMP_TICK_MS);
        Self(u32::try_from(ms).unwrap_or(u32::MAX))
    }

    #[cfg(test)]
    pub(super) fn from_ticks(ticks: u32) -> Self {
        Self(ticks)
    }

    /// How long before `now` this was.
    pub(super) fn age(self, epoch: Instant, now: Instant) -> Duration {
        now.saturating_duration_since(epoch)
            .saturating_sub(Duration::from_millis(u64::from(self.0) * STAMP_TICK_MS))
    }
}

/// foldhash rather than SipHash: several times faster on short keys, and
/// still seeded per process, so names cannot be crafted in advance to
/// collide.
pub(super) type Hasher = foldhash::fast::RandomState;

pub(super) type Pods = HashMap<Box<str>, Names, Hasher>;

/// What one watch covers: every namespace, or one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    All,
    Namespace(String),
}

impl Scope {
    /// The `scope` label of the watch metrics: `all`, or the namespace.
    pub fn label(&self) -> &str {
        match self {
            Self::All => "all",
            Self::Namespace(namespace) => namespace,
        }
    }

    pub fn covers(&self, namespace: &str) -> bool {
        match self {
            Self::All => true,
            Self::Namespace(ns) => ns == namespace,
        }
    }
}

/// A relist in progress, swapped in namespace by namespace.
///
/// The API server lists in key order (`/registry/pods/<namespace>/<name>`,
/// the order its `continue` tokens page by), so a namespace's pods arrive
/// together: once the list moves past a namespace, that namespace is whole
/// and replaces the old one in the index. Lookups thus always read a
/// namespace whole, the old one or the new one, never half of either; and
/// the memory held aside is one namespace, not a second index (a relist of
/// 150,000 pods no longer doubles the index). Namespaces the list did not
/// reach are removed at [`Relist::finish`]. A list that failed midway
/// leaves each namespace whole too, the new ones and the old; the watch
/// lists again. Should a namespace come back later in the list (no API
/// server lists so), its pods are added to the one already swapped in: a
/// pod briefly missing is a miss, read live.
///
/// Each pod is stamped with the moment the list began: it was there then.
pub struct Relist<'a> {
    index: &'a PodIndex,
    scope: Scope,
    started: Stamp,
    /// The namespace being listed, not yet in the index.
    current: Option<(Box<str>, Names)>,
    /// The namespaces already swapped in.
    done: std::collections::HashSet<Box<str>, Hasher>,
    /// A namespace came back after the list had moved past it.
    out_of_order: bool,
}

impl Relist<'_> {
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    pub fn add(&mut self, metadata: &ObjectMeta) {
        let Some((namespace, name, entry)) = entry_of(metadata, self.started) else {
            return;
        };
        if !self.scope.covers(namespace) {
            return;
        }
        if self
            .current
            .as_ref()
            .is_none_or(|(listing, _)| &**listing != namespace)
        {
            self.swap_in_current();
            if self.done.contains(namespace) {
                self.add_late(namespace, name, entry);
                return;
            }
            self.current = Some((namespace.into(), Names::default()));
        }
        if let Some((_, names)) = &mut self.current {
            names.insert(name, &entry);
        }
    }

    /// A pod of a namespace already swapped in (the list was not in key
    /// order): into the live index, as the oldest of entries, since the
    /// stamp it had before went with the namespace it replaced, and a
    /// list must not make an old entry young. A live GET that finds it
    /// running makes it young again.
    fn add_late(&mut self, namespace: &str, name: &str, mut entry: Entry) {
        if !self.out_of_order {
            self.out_of_order = true;
            tracing::warn!(
                namespace,
                "the pod list came out of key order: its pods are indexed as the oldest entries"
            );
        }
        entry.confirmed = Stamp(0);
        if let Ok(mut pods) = self.index.pods.write() {
            insert(&mut pods, namespace, name, entry);
        }
    }

    /// Whether the index has been changed by this relist already: a
    /// relist that fails now has not left the index as it was.
    pub fn changed_the_index(&self) -> bool {
        !self.done.is_empty()
    }

    /// The namespace listed so far is whole: into the index, keeping the
    /// age of every pod the index already held with the same uid (a list
    /// says that a pod is there, not what phase it is in, so it does not
    /// make an old entry young).
    fn swap_in_current(&mut self) {
        let Some((namespace, mut names)) = self.current.take() else {
            return;
        };
        names.shrink_to_fit();
        if let Ok(mut pods) = self.index.pods.write() {
            if let Some(old) = pods.get(&namespace) {
                names.keep_older_stamps(old);
            }
            if names.is_empty() {
                pods.remove(&namespace);
            } else {
                pods.insert(namespace.clone(), names);
            }
        }
        self.done.insert(namespace);
    }

    /// The list is over: its last namespace swapped in, and every
    /// namespace of the scope it did not list removed.
    pub fn finish(mut self) {
        self.swap_in_current();
        if let Ok(mut pods) = self.index.pods.write() {
            let (scope, done) = (&self.scope, &self.done);
            pods.retain(|namespace, _| !scope.covers(namespace) || done.contains(namespace));
        }
    }
}

/// Put one pod in `pods`; the namespace key is allocated only for a
/// namespace not seen yet.
pub(super) fn insert(pods: &mut Pods, namespace: &str, name: &str, entry: Entry) {
    match pods.get_mut(namespace) {
        Some(names) => names.insert(name, &entry),
        None => {
            let mut names = Names::default();
            names.insert(name, &entry);
            if !names.is_empty() {
                pods.insert(namespace.into(), names);
            }
        }
    }
}

/// The index. Readers take a shared lock for one hash lookup; the watch
/// takes the exclusive lock per event.
pub struct PodIndex {
    pub(super) pods: RwLock<Pods>,
    /// What the entries' stamps count from.
    pub(super) epoch: Instant,
}

impl Default for PodIndex {
    fn default() -> Self {
        Self {
            pods: RwLock::default(),
            epoch: Instant::now(),
        }
    }
}

/// A pod of the index, with how long ago it was last seen whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedPod {
    pub pod: ObservedPod,
    /// Since it was listed, added, or read live; a bound from above.
    pub age: Duration,
}

/// How a watch event or a list saw a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Whole: ADDED (a pod is created pending, not finished), or listed.
    Whole,
    /// A change (MODIFIED): its uid and deletion are current, but the age
    /// of the entry stays that of its last whole sighting.
    Changed,
}

pub(super) fn entry_of(metadata: &ObjectMeta, confirmed: Stamp) -> Option<(&str, &str, Entry)> {
    let (namespace, name, uid) = (
        metadata.namespace.as_deref()?,
        metadata.name.as_deref()?,
        metadata.uid.as_deref()?,
    );
    Some((
        namespace,
        name,
        Entry {
            uid: Uid::new(uid),
            terminating: metadata.deletion_timestamp.is_some(),
            confirmed,
        },
    ))
}

impl PodIndex {
    /// The pod `name` of `namespace`, as last seen.
    pub fn get(&self, namespace: &str, name: &str) -> Option<ObservedPod> {
        let pods = self.pods.read().ok()?;
        let entry = pods.get(namespace)?.get(name)?;
        Some(ObservedPod {
            uid: entry.uid.to_text(),
            terminating: entry.terminating,
            // This index does not know; see [`Watches::get`].
            finished: None,
        })
    }

    /// Whether pod `name` of `namespace` is known with `uid`; `Some(pod)`
    /// only then. Avoids formatting the uid on the hot path.
    pub fn get_matching(&self, namespace: &str, name: &str, uid: &str) -> Option<IndexedPod> {
        // The allocation for the answer is made after the lock is released.
        let (terminating, confirmed) = {
            let pods = self.pods.read().ok()?;
            let entry = pods.get(namespace)?.get(name)?;
            entry
                .uid
                .matches(uid)
                .then_some((entry.terminating, entry.confirmed))?
        };
        Some(IndexedPod {
            pod: ObservedPod {
                uid: uid.to_string(),
                terminating,
                finished: None,
            },
            age: confirmed.age(self.epoch, Instant::now()),
        })
    }

    /// A live GET that began at `asked` found pod `name` of `namespace`
    /// with `uid`, running: its entry, if it still holds that uid, counts
    /// as seen whole then. An entry the watch has removed or replaced
    /// since is left as it is: a live answer never brings a pod back.
    pub fn confirm(&self, namespace: &str, name: &str, uid: &str, asked: Instant) {
        let stamp = Stamp::at(self.epoch, asked);
        if let Ok(mut pods) = self.pods.write()
            && let Some(names) = pods.get_mut(namespace)
        {
            names.confirm(name, stamp, |entry| {
                entry.uid.matches(uid) && !entry.terminating
            });
        }
    }

    /// Whether pod `name` of `namespace` is known with `uid`.
    pub fn contains(&self, namespace: &str, name: &str, uid: &str) -> bool {
        self.pods.read().is_ok_and(|pods| {
            pods.get(namespace)
                .and_then(|names| names.get(name))
                .is_some_and(|entry| entry.uid.matches(uid))
        })
    }

    /// Every pod indexed, as (namespace, name, uid).
    pub fn entries(&self) -> Vec<(String, String, String)> {
        let Ok(pods) = self.pods.read() else {
            return Vec::new();
        };
        pods.iter()
            .flat_map(|(namespace, names)| {
                names.iter().map(move |(name, entry)| {
                    (namespace.to_string(), name.to_string(), entry.uid.to_text())
                })
            })
            .collect()
    }

    /// A new relist of what `scope` covers, its entries stamped now.
    pub fn relist(&self, scope: &Scope) -> Relist<'_> {
        Relist {
            index: self,
            scope: scope.clone(),
            started: Stamp::at(self.epoch, Instant::now()),
            current: None,
            done: Default::default(),
            out_of_order: false,
        }
    }

    /// A pod was added (`Seen::Whole`) or changed.
    pub fn apply(&self, metadata: &ObjectMeta, seen: Seen) {
        let now = Stamp::at(self.epoch, Instant::now());
        let Some((namespace, name, mut entry)) = entry_of(metadata, now) else {
            return;
        };
        if let Ok(mut pods) = self.pods.write() {
            if seen == Seen::Changed {
                // A change keeps the age of the pod's last whole sighting;
                // a change of a pod never seen whole (its ADDED lost, or a
                // new pod under the name) has none, so it is the oldest:
                // its first hit is read live.
                entry.confirmed = pods
                    .get(namespace)
                    .and_then(|names| names.get(name))
                    .filter(|old| old.uid == entry.uid.as_ref())
                    .map_or(Stamp(0), |old| old.confirmed);
            }
            insert(&mut pods, namespace, name, entry);
        }
    }

    /// A pod was deleted.
    pub fn delete(&self, metadata: &ObjectMeta) {
        let (Some(namespace), Some(name)) =
            (metadata.namespace.as_deref(), metadata.name.as_deref())
        else {
            return;
        };
        if let Ok(mut pods) = self.pods.write()
            && let Some(names) = pods.get_mut(namespace)
        {
            // Only the pod that was deleted: a newer pod of the same name
            // (another uid) may already be there.
            let uid = metadata.uid.as_deref();
            names.remove_if(name, |entry| uid.is_none_or(|uid| entry.uid.matches(uid)));
            if names.is_empty() {
                pods.remove(namespace);
            }
        }
    }

    /// How many pods are indexed.
    pub fn len(&self) -> usize {
        self.pods
            .read()
            .map(|pods| pods.values().map(Names::len).sum())
            .unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::owner::cluster) fn meta(
        namespace: &str,
        name: &str,
        uid: &str,
        terminating: bool,
    ) -> ObjectMeta {
        ObjectMeta {
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            uid: Some(uid.into()),
            deletion_timestamp: terminating
                .then(|| k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default())),
            ..Default::default()
        }
    }

    pub(in crate::owner::cluster) const U1: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000001";

    #[test]
    fn canonical_uuids_are_stored_as_bytes_and_compare_exactly() {
        assert!(matches!(Uid::new(U1), Uid::Uuid(_)));
        assert_eq!(Uid::new(U1).as_ref().to_text(), U1);
        assert_eq!(Uid::new(U1), Uid::new(U1));
        assert_ne!(Uid::new(U1), Uid::new(&U1.to_uppercase()));
        assert!(matches!(Uid::new("not-a-uuid"), Uid::Other(_)));
        assert!(matches!(Uid::new(&U1.to_uppercase()), Uid::Other(_)));
    }

    #[test]
    fn apply_then_get_then_delete() {
        let index = PodIndex::default();
        index.apply(&meta("agents", "w-1", U1, false), Seen::Whole);
        assert_eq!(index.get("agents", "w-1"), Some(ObservedPod::running(U1)));
        assert!(index.get_matching("agents", "w-1", U1).is_some());
        assert!(index.get_matching("agents", "w-1", "other").is_none());
        assert_eq!(index.get("other", "w-1"), None);
        index.apply(&meta("agents", "w-1", U1, true), Seen::Changed);
        assert!(index.get("agents", "w-1").unwrap().terminating);
        index.delete(&meta("agents", "w-1", U1, true));
        assert_eq!(index.get("agents", "w-1"), None);
        assert!(index.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn an_entry_ages_from_its_last_whole_sighting_not_its_last_change() {
        let index = PodIndex::default();
        let age = |index: &PodIndex| index.get_matching("agents", "w-1", U1).unwrap().age;
        index.apply(&meta("agents", "w-1", U1, false), Seen::Whole);
        tokio::time::advance(Duration::from_secs(10)).await;
        // A MODIFIED (a label, a status change) does not make it young: it
        // carries no phase, and the change that was lost is what ages.
        index.apply(&meta("agents", "w-1", U1, false), Seen::Changed);
        assert_eq!(age(&index), Duration::from_secs(10));
        // A live GET that found it running does, from when it was asked.
        let asked = Instant::now();
        tokio::time::advance(Duration::from_secs(2)).await;
        index.confirm("agents", "w-1", U1, asked);
        assert_eq!(age(&index), Duration::from_secs(2));
        // Not for another uid, and not a pod being deleted.
        index.confirm("agents", "w-1", "other", Instant::now());
        assert_eq!(age(&index), Duration::from_secs(2));
        index.apply(&meta("agents", "w-1", U1, true), Seen::Changed);
        index.confirm("agents", "w-1", U1, Instant::now());
        assert_eq!(age(&index), Duration::from_secs(2));
        // A live answer never brings back a pod the watch removed.
        index.delete(&meta("agents", "w-1", U1, true));
        index.confirm("agents", "w-1", U1, Instant::now());
        assert!(index.get("agents", "w-1").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_relist_keeps_the_age_of_a_pod_it_already_held() {
        let index = PodIndex::default();
        index.apply(&meta("agents", "old", U1, false), Seen::Whole);
        index.apply(&meta("agents", "replaced", U1, false), Seen::Whole);
        tokio::time::advance(Duration::from_secs(30)).await;
        let mut relist = index.relist(&Scope::All);
        tokio::time::advance(Duration::from_secs(1)).await;
        relist.add(&meta("agents", "old", U1, false));
        relist.add(&meta("agents", "replaced", "uid-2", false));
        relist.add(&meta("agents", "new", U1, false));
        relist.finish();
        let age = |name: &str, uid: &str| index.get_matching("agents", name, uid).unwrap().age;
        assert_eq!(age("old", U1), Duration::from_secs(31));
        // Another uid is another pod, and a new one is as old as the list.
        assert_eq!(age("replaced", "uid-2"), Duration::from_secs(1));
        assert_eq!(age("new", U1), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_list_out_of_key_order_makes_no_entry_younger_than_it_was() {
        let index = PodIndex::default();
        index.apply(&meta("a", "p1", U1, false), Seen::Whole);
        index.apply(&meta("a", "p2", U1, false), Seen::Whole);
        tokio::time::advance(Duration::from_secs(400)).await;
        let mut relist = index.relist(&Scope::All);
        relist.add(&meta("a", "p1", U1, false));
        relist.add(&meta("b", "x", U1, false));
        // "a" again, after the list had moved past it: p2's stamp went with
        // the namespace swapped out, so it is taken as the oldest.
        relist.add(&meta("a", "p2", U1, false));
        relist.finish();
        let age = |name: &str| index.get_matching("a", name, U1).unwrap().age;
        assert_eq!(age("p1"), Duration::from_secs(400));
        assert!(age("p2") >= Duration::from_secs(400), "{:?}", age("p2"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_of_a_pod_never_seen_whole_is_the_oldest_entry() {
        let index = PodIndex::default();
        tokio::time::advance(Duration::from_secs(400)).await;
        index.apply(&meta("agents", "w-1", U1, false), Seen::Changed);
        assert!(index.get_matching("agents", "w-1", U1).unwrap().age >= Duration::from_secs(400));
        // Nor under another uid than the one seen whole.
        index.apply(&meta("agents", "w-2", "uid-a", false), Seen::Whole);
        index.apply(&meta("agents", "w-2", U1, false), Seen::Changed);
        assert!(index.get_matching("agents", "w-2", U1).unwrap().age >= Duration::from_secs(400));
    }

    #[test]
    fn late_delete_of_an_old_pod_keeps_its_successor() {
        let index = PodIndex::default();
        index.apply(&meta("agents", "w-1", "new-uid", false), Seen::Whole);
        index.delete(&meta("agents", "w-1", "old-uid", true));
        assert_eq!(
            index.get("agents", "w-1").map(|p| p.uid),
            Some("new-uid".to_string())
        );
    }

    #[test]
    fn relist_replaces_only_its_scope() {
        let index = PodIndex::default();
        index.apply(&meta("a", "gone", U1, false), Seen::Whole);
        index.apply(&meta("b", "kept", U1, false), Seen::Whole);
        let mut relist = index.relist(&Scope::Namespace("a".into()));
        relist.add(&meta("a", "fresh", U1, false));
        // Outside its scope: not for this relist to add.
        relist.add(&meta("b", "stray", U1, false));
        relist.finish();
        assert_eq!(index.get("a", "gone"), None);
        assert!(index.get("a", "fresh").is_some());
        assert!(index.get("b", "kept").is_some());
        assert!(index.get("b", "stray").is_none());
        let mut relist = index.relist(&Scope::All);
        relist.add(&meta("c", "only", U1, false));
        relist.finish();
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn a_relist_swaps_in_each_namespace_whole_once_the_list_has_passed_it() {
        let index = PodIndex::default();
        for (namespace, name) in [("a", "old-1"), ("a", "old-2"), ("b", "old"), ("z", "gone")] {
            index.apply(&meta(namespace, name, U1, false), Seen::Whole);
        }
        let mut relist = index.relist(&Scope::All);
        relist.add(&meta("a", "new-1", U1, false));
        // Halfway through "a": lookups still read the old "a", whole.
        assert!(index.get("a", "old-1").is_some());
        assert!(index.get("a", "new-1").is_none());
        relist.add(&meta("a", "new-2", U1, false));
        relist.add(&meta("b", "new", U1, false));
        // The list has moved on to "b": "a" is the new one, whole; "b" is
        // still the old one.
        assert!(index.get("a", "old-1").is_none());
        assert!(index.get("a", "new-1").is_some() && index.get("a", "new-2").is_some());
        assert!(index.get("b", "old").is_some());
        assert!(index.get("b", "new").is_none());
        // A namespace that comes back (no API server lists so) is added to.
        relist.add(&meta("a", "late", U1, false));
        assert!(index.get("a", "late").is_some() && index.get("a", "new-1").is_some());
        assert!(relist.changed_the_index());
        // A namespace the list never reached stays until the end, then goes.
        assert!(index.get("z", "gone").is_some());
        relist.finish();
        assert!(index.get("z", "gone").is_none());
        assert!(index.get("b", "new").is_some() && index.get("b", "old").is_none());
        assert_eq!(index.len(), 4);
    }
}
