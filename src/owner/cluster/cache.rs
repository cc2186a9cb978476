//! The pod index fed by the watch: (namespace, name) -> (uid, terminating),
//! and beside it the set of pods that have finished.
//!
//! Sized for the largest clusters (150,000 pods): only what a decision
//! reads is kept, pods are grouped by namespace so a namespace is stored
//! once, and a canonical UUID is kept as 16 bytes rather than 36 characters.
//!
//! A metadata-only watch carries no `status`, so it cannot tell a pod that
//! has finished (SPEC §3 rule 11). Two more metadata-only watches per
//! scope, with the field selectors `status.phase=Succeeded` and
//! `status.phase=Failed`, keep the finished pods apart ([`FinishedPods`]):
//! a small set, and the index of every pod stays as it was. The API server
//! filters a field-selected watch on each change, old object against new:
//! a pod that starts matching arrives as ADDED, one that stops matching
//! (deleted, or a phase that changed) as DELETED. One watch per phase
//! rather than one `!=` selector: field selectors have no set operator,
//! and `status.phase!=Pending,status.phase!=Running,status.phase!=Unknown`
//! would also select a pod with no phase, which has not finished; each
//! watch also knows its phase, which the denial names and `--record`
//! writes down. A later reaper (issue 16) subscribes to the same set
//! ([`FinishedPods::subscribe`]).
//!
//! The index may be stale, the way any watch cache is: a pod created a
//! moment ago may not be there yet, and a pod deleted a moment ago may still
//! be. That is why a miss or a uid mismatch is always checked again live
//! (see [`crate::owner::cluster`]): the cache is only trusted when it
//! agrees with the object, and only while its watch is healthy
//! ([`WatchHealth`]): once the watch has failed, or has said nothing (no
//! event, no bookmark) for longer than the silence limit, hits are checked
//! live too until it speaks again. A hit is trusted only while every watch
//! of its scope is, the finished ones included: a finished pod missed by a
//! failed watch would answer "running". A relist after a 410 Gone is built
//! aside and swapped in whole at its end, so lookups never see a
//! half-filled index.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PartialObjectMeta, WatchEvent, WatchParams};
use tokio::sync::broadcast;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::observe::metrics::Metrics;
use crate::owner::{Finished, ObservedPod};

/// A pod uid: 16 bytes when it is a canonical lowercase UUID (all that the
/// API server generates), else the text as it came.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Uid {
    Uuid([u8; 16]),
    Other(Box<str>),
}

impl Uid {
    fn new(text: &str) -> Self {
        parse_uuid(text).map_or_else(|| Self::Other(text.into()), Self::Uuid)
    }

    fn matches(&self, text: &str) -> bool {
        match self {
            Self::Uuid(bytes) => parse_uuid(text).is_some_and(|other| other == *bytes),
            Self::Other(uid) => &**uid == text,
        }
    }

    fn to_text(&self) -> String {
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
}

/// The 16 bytes of a canonical lowercase UUID (`8-4-4-4-12` hex digits);
/// `None` for anything else, which is then kept as text so that it
/// compares exactly as written.
fn parse_uuid(text: &str) -> Option<[u8; 16]> {
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
struct Entry {
    uid: Uid,
    terminating: bool,
    /// When the pod was last seen whole: listed, added, or read live
    /// ([`Stamp`]). A MODIFIED event does not count: on the watch of every
    /// pod it carries no phase, and a change that was lost (the deletion,
    /// the phase's own event) is what the age bounds.
    confirmed: Stamp,
}

/// A moment, in tenths of a second since the index's epoch, rounded down:
/// an age computed from it is never smaller than the real one. Four bytes
/// rather than an `Instant`'s sixteen, in every entry; thirteen years.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Stamp(u32);

/// The unit of a [`Stamp`].
const STAMP_TICK_MS: u64 = 100;

impl Stamp {
    fn at(epoch: Instant, at: Instant) -> Self {
        let ms = at.saturating_duration_since(epoch).as_millis() / u128::from(STAMP_TICK_MS);
        Self(u32::try_from(ms).unwrap_or(u32::MAX))
    }

    /// How long before `now` this was.
    fn age(self, epoch: Instant, now: Instant) -> Duration {
        now.saturating_duration_since(epoch)
            .saturating_sub(Duration::from_millis(u64::from(self.0) * STAMP_TICK_MS))
    }
}

/// foldhash rather than SipHash: several times faster on short keys, and
/// still seeded per process, so names cannot be crafted in advance to
/// collide.
type Hasher = foldhash::fast::RandomState;
type Names = HashMap<Box<str>, Entry, Hasher>;
type Pods = HashMap<Box<str>, Names, Hasher>;

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

/// A relist in progress: the pods listed so far, swapped in at the end.
/// Each is stamped with the moment the list began: it was there then.
pub struct Relist {
    pods: Pods,
    started: Stamp,
}

impl Relist {
    pub fn add(&mut self, metadata: &ObjectMeta) {
        if let Some((namespace, name, entry)) = entry_of(metadata, self.started) {
            insert(&mut self.pods, namespace, name, entry);
        }
    }
}

/// Put one pod in `pods`; the namespace key is allocated only for a
/// namespace not seen yet.
fn insert(pods: &mut Pods, namespace: &str, name: &str, entry: Entry) {
    match pods.get_mut(namespace) {
        Some(names) => {
            names.insert(name.into(), entry);
        }
        None => {
            let mut names = Names::default();
            names.insert(name.into(), entry);
            pods.insert(namespace.into(), names);
        }
    }
}

/// The index. Readers take a shared lock for one hash lookup; the watch
/// takes the exclusive lock per event.
pub struct PodIndex {
    pods: RwLock<Pods>,
    /// What the entries' stamps count from.
    epoch: Instant,
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

fn entry_of(metadata: &ObjectMeta, confirmed: Stamp) -> Option<(&str, &str, Entry)> {
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
            && let Some(entry) = pods
                .get_mut(namespace)
                .and_then(|names| names.get_mut(name))
            && entry.uid.matches(uid)
            && !entry.terminating
        {
            entry.confirmed = entry.confirmed.max(stamp);
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

    /// A new relist, its entries stamped now.
    pub fn relist(&self) -> Relist {
        Relist {
            pods: Pods::default(),
            started: Stamp::at(self.epoch, Instant::now()),
        }
    }

    /// A pod was added (`Seen::Whole`) or changed.
    pub fn apply(&self, metadata: &ObjectMeta, seen: Seen) {
        let now = Stamp::at(self.epoch, Instant::now());
        let Some((namespace, name, mut entry)) = entry_of(metadata, now) else {
            return;
        };
        if let Ok(mut pods) = self.pods.write() {
            if seen == Seen::Changed
                && let Some(old) = pods.get(namespace).and_then(|names| names.get(name))
                && old.uid == entry.uid
            {
                entry.confirmed = old.confirmed;
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
            let same = match (names.get(name), metadata.uid.as_deref()) {
                (Some(entry), Some(uid)) => entry.uid.matches(uid),
                (Some(_), None) => true,
                (None, _) => false,
            };
            if same {
                names.remove(name);
            }
            if names.is_empty() {
                pods.remove(namespace);
            }
        }
    }

    /// Replace everything `scope` covers by the result of a relist. A pod
    /// the index already held with the same uid keeps its stamp: a list
    /// says that it is there, not what phase it is in, so it does not make
    /// an old entry young.
    pub fn replace(&self, scope: &Scope, mut relist: Relist) {
        let Ok(mut pods) = self.pods.write() else {
            return;
        };
        for (namespace, names) in &mut relist.pods {
            let Some(old) = pods.get(namespace) else {
                continue;
            };
            for (name, entry) in names.iter_mut() {
                if let Some(old) = old.get(name)
                    && old.uid == entry.uid
                {
                    entry.confirmed = entry.confirmed.min(old.confirmed);
                }
            }
        }
        match scope {
            Scope::All => *pods = relist.pods,
            Scope::Namespace(namespace) => {
                pods.remove(namespace.as_str());
                pods.extend(relist.pods.into_iter().filter(|(ns, _)| &**ns == namespace));
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

/// A pod that has finished, as a subscriber sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub phase: Finished,
}

impl FinishedPod {
    fn of(metadata: &ObjectMeta, phase: Finished) -> Option<Self> {
        Some(Self {
            namespace: metadata.namespace.clone()?,
            name: metadata.name.clone()?,
            uid: metadata.uid.clone()?,
            phase,
        })
    }
}

/// A change of the set of finished pods, for a subscriber (the reaper of
/// issue 16).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishedChange {
    /// The pod entered a finished phase (ADDED on the phase's watch).
    Finished(FinishedPod),
    /// The pod left the set: deleted, or no more in that phase.
    Gone(FinishedPod),
    /// The pods of `phase` in `scope` were listed anew (after a 410 Gone or
    /// a failure): changes may have been missed, read
    /// [`FinishedPods::snapshot`].
    Relisted { scope: Scope, phase: Finished },
}

/// How many changes a slow subscriber may fall behind before it is told
/// it lagged (and should read the snapshot again).
const FINISHED_CHANGES_BUFFER: usize = 1024;

/// The pods that have finished (phase `Succeeded` or `Failed`), by phase:
/// fed by the field-selected watches, read by every lookup that hits the
/// index (SPEC §3 rule 11), and open to subscribers.
///
/// Like the index, it may be stale: a pod that finished a moment ago may
/// not be here yet. The live GET reads the phase itself.
pub struct FinishedPods {
    succeeded: PodIndex,
    failed: PodIndex,
    changes: broadcast::Sender<FinishedChange>,
}

impl Default for FinishedPods {
    fn default() -> Self {
        Self {
            succeeded: PodIndex::default(),
            failed: PodIndex::default(),
            changes: broadcast::channel(FINISHED_CHANGES_BUFFER).0,
        }
    }
}

impl FinishedPods {
    fn of(&self, phase: Finished) -> &PodIndex {
        match phase {
            Finished::Succeeded => &self.succeeded,
            Finished::Failed => &self.failed,
        }
    }

    /// The phase pod `name` of `namespace` has finished in, when it is
    /// known finished with `uid` (a newer pod of the same name is another
    /// pod).
    pub fn phase_of(&self, namespace: &str, name: &str, uid: &str) -> Option<Finished> {
        Finished::ALL
            .into_iter()
            .find(|&phase| self.of(phase).contains(namespace, name, uid))
    }

    /// How many finished pods are known.
    pub fn len(&self) -> usize {
        self.succeeded.len() + self.failed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every finished pod known now.
    pub fn snapshot(&self) -> Vec<FinishedPod> {
        Finished::ALL
            .into_iter()
            .flat_map(|phase| {
                self.of(phase)
                    .entries()
                    .into_iter()
                    .map(move |(namespace, name, uid)| FinishedPod {
                        namespace,
                        name,
                        uid,
                        phase,
                    })
            })
            .collect()
    }

    /// The changes from now on. Take the [`FinishedPods::snapshot`] after
    /// subscribing, and again on [`FinishedChange::Relisted`] or when the
    /// receiver reports that it lagged.
    pub fn subscribe(&self) -> broadcast::Receiver<FinishedChange> {
        self.changes.subscribe()
    }

    /// Tell the subscribers, if there are any (nothing is built for none).
    fn notify(&self, change: impl FnOnce() -> Option<FinishedChange>) {
        if self.changes.receiver_count() > 0
            && let Some(change) = change()
        {
            // No receiver left in between: nobody to tell.
            let _ = self.changes.send(change);
        }
    }
}

/// What one watch feeds: the index of every pod, or the finished pods of
/// one phase.
#[derive(Clone)]
enum Feed {
    Pods(Arc<PodIndex>),
    Finished {
        pods: Arc<FinishedPods>,
        phase: Finished,
    },
}

impl Feed {
    fn index(&self) -> &PodIndex {
        match self {
            Self::Pods(index) => index,
            Self::Finished { pods, phase } => pods.of(*phase),
        }
    }

    /// What the watch is, in logs.
    fn name(&self) -> &'static str {
        match self {
            Self::Pods(_) => "pods",
            Self::Finished {
                phase: Finished::Succeeded,
                ..
            } => "Succeeded pods",
            Self::Finished {
                phase: Finished::Failed,
                ..
            } => "Failed pods",
        }
    }

    /// The field selector of the watch: finished pods of one phase only.
    fn field_selector(&self) -> Option<String> {
        match self {
            Self::Pods(_) => None,
            Self::Finished { phase, .. } => Some(format!("status.phase={phase}")),
        }
    }

    fn added(&self, metadata: &ObjectMeta) {
        self.index().apply(metadata, Seen::Whole);
        if let Self::Finished { pods, phase } = self {
            pods.notify(|| FinishedPod::of(metadata, *phase).map(FinishedChange::Finished));
        }
    }

    fn modified(&self, metadata: &ObjectMeta) {
        self.index().apply(metadata, Seen::Changed);
    }

    fn deleted(&self, metadata: &ObjectMeta) {
        self.index().delete(metadata);
        if let Self::Finished { pods, phase } = self {
            pods.notify(|| FinishedPod::of(metadata, *phase).map(FinishedChange::Gone));
        }
    }

    fn replace(&self, scope: &Scope, relist: Relist) {
        self.index().replace(scope, relist);
        if let Self::Finished { pods, phase } = self {
            pods.notify(|| {
                Some(FinishedChange::Relisted {
                    scope: scope.clone(),
                    phase: *phase,
                })
            });
        }
    }

    /// Set the size gauge of what this watch feeds.
    fn report_size(&self, metrics: &Metrics) {
        match self {
            Self::Pods(index) => metrics.set_cache_pods(index.len()),
            Self::Finished { pods, .. } => metrics.set_finished_pods(pods.len()),
        }
    }
}

/// Which pods the watch covers (`--namespace`, none: all;
/// `--owner-selector`), how long a silent watch stays trusted, and how old
/// an entry may be to answer alone.
#[derive(Debug, Clone)]
pub struct WatchSettings {
    pub namespaces: Vec<String>,
    pub selector: Option<String>,
    /// `--watch-silence-limit`.
    pub silence_limit: Duration,
    /// `--cache-max-age`.
    pub max_age: Duration,
}

impl Default for WatchSettings {
    fn default() -> Self {
        Self {
            namespaces: Vec::new(),
            selector: None,
            silence_limit: DEFAULT_SILENCE_LIMIT,
            max_age: DEFAULT_MAX_AGE,
        }
    }
}

/// The API server's watch cache sends each watcher a bookmark about every
/// minute: 90 s without one is a watch that has stopped speaking.
pub const DEFAULT_SILENCE_LIMIT: Duration = Duration::from_secs(90);

/// An entry older than this is read live again before it answers: the
/// bound on how long a lost event (a deletion, a phase) can keep a gone
/// owner alive in the cache, whatever the stream does. Five minutes costs
/// one GET per owner that keeps creating per five minutes (a thousand
/// active workers: about 3 GETs a second, well inside `--lookup-rate`).
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(300);

/// How long the API server keeps one watch open before the client starts
/// the next (client-go's reflector and kube's watcher use the same).
const WATCH_TIMEOUT_SECONDS: u32 = 290;

/// A watch stream that stays quiet this much longer than its own time-out
/// is a dead connection.
const WATCH_IDLE_MARGIN: Duration = Duration::from_secs(10);

/// Pods per page of a relist.
const LIST_PAGE: u32 = 500;

impl WatchSettings {
    pub fn scopes(&self) -> Vec<Scope> {
        if self.namespaces.is_empty() {
            vec![Scope::All]
        } else {
            self.namespaces
                .iter()
                .cloned()
                .map(Scope::Namespace)
                .collect()
        }
    }
}

/// What is known of one watch's health: whether its cache hits can be
/// trusted.
pub struct WatchHealth {
    /// Listed once: the index can answer at all.
    synced: AtomicBool,
    /// Failed since it last showed life: hits are checked live.
    failing: AtomicBool,
    /// When it last showed life (an event, a bookmark, a completed list),
    /// in milliseconds since `epoch`.
    last_heard_ms: AtomicU64,
    epoch: Instant,
}

impl WatchHealth {
    fn new() -> Self {
        Self {
            synced: AtomicBool::new(false),
            failing: AtomicBool::new(false),
            last_heard_ms: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    fn heard(&self) {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_heard_ms.store(now, Ordering::SeqCst);
        self.failing.store(false, Ordering::SeqCst);
    }

    /// How long since the watch last showed life.
    pub fn silence(&self) -> Duration {
        let heard = Duration::from_millis(self.last_heard_ms.load(Ordering::SeqCst));
        self.epoch.elapsed().saturating_sub(heard)
    }

    /// Whether a cache hit of this watch may answer alone: it has listed,
    /// has not failed since, and spoke within `silence_limit`.
    pub fn trusted(&self, silence_limit: Duration) -> bool {
        self.synced.load(Ordering::SeqCst)
            && !self.failing.load(Ordering::SeqCst)
            && self.silence() <= silence_limit
    }
}

/// The watches of one scope: every pod, then the finished pods of each
/// phase. A hit is trusted only while all of them are.
#[derive(Clone)]
struct ScopeHealth {
    watches: Vec<(&'static str, Arc<WatchHealth>)>,
}

impl ScopeHealth {
    fn synced(&self) -> bool {
        self.watches
            .iter()
            .all(|(_, health)| health.synced.load(Ordering::SeqCst))
    }

    fn trusted(&self, silence_limit: Duration) -> bool {
        self.watches
            .iter()
            .all(|(_, health)| health.trusted(silence_limit))
    }

    /// Listed, and every watch spoke within the limit, failed or not.
    fn recent(&self, silence_limit: Duration) -> bool {
        self.synced()
            && self
                .watches
                .iter()
                .all(|(_, health)| health.silence() <= silence_limit)
    }

    /// The watches not trusted now, for the log.
    fn untrusted(&self, silence_limit: Duration) -> Vec<&'static str> {
        self.watches
            .iter()
            .filter(|(_, health)| !health.trusted(silence_limit))
            .map(|(name, _)| *name)
            .collect()
    }

    /// The longest silence of its watches.
    fn silence(&self) -> Duration {
        self.watches
            .iter()
            .map(|(_, health)| health.silence())
            .max()
            .unwrap_or_default()
    }
}

/// The watches of every scope: one of all pods, and one per finished phase.
pub struct Watches {
    pub index: Arc<PodIndex>,
    /// The pods that have finished, fed by their own watches.
    pub finished: Arc<FinishedPods>,
    scopes: Vec<(Scope, ScopeHealth)>,
    silence_limit: Duration,
    max_age: Duration,
}

impl Watches {
    /// Whether every watch of every scope has listed once: until then the
    /// index would answer "not found" for owners that exist, or "running"
    /// for owners that have finished.
    pub fn is_synced(&self) -> bool {
        self.scopes.iter().all(|(_, health)| health.synced())
    }

    /// Whether the index covers `namespace` at all.
    pub fn covers(&self, namespace: &str) -> bool {
        self.scopes.iter().any(|(scope, _)| scope.covers(namespace))
    }

    /// Pod `name` of `namespace` as the watches last saw it, when it has
    /// `uid`: the index says whether it is being deleted, the set of
    /// finished pods whether it has finished.
    pub fn get(&self, namespace: &str, name: &str, uid: &str) -> Option<IndexedPod> {
        let mut hit = self.index.get_matching(namespace, name, uid)?;
        hit.pod.finished = self.finished.phase_of(namespace, name, uid);
        Some(hit)
    }

    /// Whether `hit` was seen whole recently enough to answer alone
    /// (`--cache-max-age`). An older one is read live: a lost deletion on a
    /// stream that keeps speaking (so that the silence limit never trips)
    /// makes a gone owner look alive for at most this long.
    pub fn young(&self, hit: &IndexedPod) -> bool {
        hit.age <= self.max_age
    }

    /// A live GET that began at `asked` found pod `name` of `namespace`
    /// running with `uid` ([`PodIndex::confirm`]).
    pub fn confirm(&self, namespace: &str, name: &str, uid: &str, asked: Instant) {
        self.index.confirm(namespace, name, uid, asked);
    }

    /// Whether a cache hit in `namespace` may answer alone (SPEC §4): every
    /// watch covering it (all pods, finished pods) is synced, has not
    /// failed since it last spoke, and spoke within the silence limit.
    /// Otherwise hits are checked live.
    pub fn trusted(&self, namespace: &str) -> bool {
        self.scopes
            .iter()
            .find(|(scope, _)| scope.covers(namespace))
            .is_some_and(|(_, health)| health.trusted(self.silence_limit))
    }

    /// Whether the watches covering `namespace` spoke within the silence
    /// limit, failed or not: their hit may still stand in for a live answer
    /// that could not be had (the API server unreachable), so that the
    /// staleness of any answer stays within the limit.
    pub fn recent(&self, namespace: &str) -> bool {
        self.scopes
            .iter()
            .find(|(scope, _)| scope.covers(namespace))
            .is_some_and(|(_, health)| health.recent(self.silence_limit))
    }

    /// Whether every watch may be trusted now (the health metric).
    pub fn all_trusted(&self) -> bool {
        self.scopes
            .iter()
            .all(|(_, health)| health.trusted(self.silence_limit))
    }

    /// Start the watches on `client`, in the background: per scope, one of
    /// every pod and one per finished phase.
    pub fn spawn(client: kube::Client, settings: &WatchSettings, metrics: Arc<Metrics>) -> Self {
        let index = Arc::new(PodIndex::default());
        let finished = Arc::new(FinishedPods::default());
        let mut scopes = Vec::new();
        for scope in settings.scopes() {
            let feeds =
                std::iter::once(Feed::Pods(index.clone())).chain(Finished::ALL.map(|phase| {
                    Feed::Finished {
                        pods: finished.clone(),
                        phase,
                    }
                }));
            let mut watches = Vec::new();
            for feed in feeds {
                let health = Arc::new(WatchHealth::new());
                let api: Api<PartialObjectMeta<Pod>> = match &scope {
                    Scope::All => Api::all(client.clone()),
                    Scope::Namespace(ns) => Api::namespaced(client.clone(), ns),
                };
                watches.push((feed.name(), health.clone()));
                let watch = Watch {
                    api,
                    selector: settings.selector.clone(),
                    scope: scope.clone(),
                    feed,
                    health,
                    metrics: metrics.clone(),
                };
                tokio::spawn(watch.run());
            }
            scopes.push((scope, ScopeHealth { watches }));
        }
        tokio::spawn(report_health(
            scopes.clone(),
            settings.silence_limit,
            metrics,
        ));
        Self {
            index,
            finished,
            scopes,
            silence_limit: settings.silence_limit,
            max_age: settings.max_age,
        }
    }
}

/// One list-then-watch loop feeding the index, or the finished pods of
/// one phase.
///
/// Written on kube's `list_metadata` and `watch_metadata` rather than its
/// `watcher`, because the watcher consumes bookmarks without a sign: the
/// health of the watch is read from bookmarks (SPEC §4), so they must be
/// seen here. The API server sends bookmarks to a field-selected watch as
/// to any other, so a quiet watch of finished pods still shows life.
struct Watch {
    api: Api<PartialObjectMeta<Pod>>,
    /// `--owner-selector`.
    selector: Option<String>,
    scope: Scope,
    feed: Feed,
    health: Arc<WatchHealth>,
    metrics: Arc<Metrics>,
}

/// Why a watch stream ended.
enum Ended {
    /// The server closed it at its time-out: resume from the last version.
    Closed,
    /// 410 Gone: the version is too old, relist.
    Expired,
    /// A failure: resume after a backoff.
    Failed,
}

impl Watch {
    async fn run(self) {
        let mut backoff = Backoff::default();
        let mut resource_version: Option<String> = None;
        loop {
            let version = match resource_version.take() {
                Some(version) => version,
                None => match self.relist().await {
                    Ok(version) => version,
                    Err(error) => {
                        self.failed(&format!("relist failed: {error}"));
                        tokio::time::sleep(backoff.next()).await;
                        continue;
                    }
                },
            };
            let (ended, version) = self.watch(version).await;
            resource_version = version;
            match ended {
                Ended::Closed => backoff.reset(),
                Ended::Expired => resource_version = None,
                Ended::Failed => tokio::time::sleep(backoff.next()).await,
            }
        }
    }

    /// List every pod of the scope, page by page, into a new index swapped
    /// in whole at the end. Returns the list's resourceVersion.
    async fn relist(&self) -> Result<String, kube::Error> {
        let mut relist = self.feed.index().relist();
        let mut params = ListParams::default().limit(LIST_PAGE);
        if let Some(selector) = &self.selector {
            params = params.labels(selector);
        }
        if let Some(fields) = self.feed.field_selector() {
            params = params.fields(&fields);
        }
        let version = loop {
            let page = self.api.list_metadata(&params).await?;
            for pod in &page.items {
                relist.add(&pod.metadata);
            }
            match page.metadata.continue_.filter(|token| !token.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break page.metadata.resource_version.unwrap_or_default(),
            }
        };
        self.feed.replace(&self.scope, relist);
        self.feed.report_size(&self.metrics);
        self.health.heard();
        if !self.health.synced.swap(true, Ordering::SeqCst) {
            info!(scope = ?self.scope, watch = self.feed.name(), pods = self.feed.index().len(), "owner cache synced");
        }
        Ok(version)
    }

    /// Watch from `version` until the stream ends; how it ended and the
    /// version to resume from (`None`: relist).
    async fn watch(&self, mut version: String) -> (Ended, Option<String>) {
        // Bookmarks are on by default: they are the watch's heartbeat.
        let mut params = WatchParams::default().timeout(WATCH_TIMEOUT_SECONDS);
        debug_assert!(params.bookmarks);
        if let Some(selector) = &self.selector {
            params = params.labels(selector);
        }
        if let Some(fields) = self.feed.field_selector() {
            params = params.fields(&fields);
        }
        let stream = match self.api.watch_metadata(&params, &version).await {
            Ok(stream) => stream,
            Err(kube::Error::Api(status)) if status.code == 410 => {
                self.failed("watch expired (410 Gone), relisting");
                return (Ended::Expired, None);
            }
            Err(error) => {
                self.failed(&format!("watch failed: {error}"));
                return (Ended::Failed, Some(version));
            }
        };
        futures::pin_mut!(stream);
        let idle = Duration::from_secs(u64::from(WATCH_TIMEOUT_SECONDS)) + WATCH_IDLE_MARGIN;
        loop {
            let event = match tokio::time::timeout(idle, stream.next()).await {
                Err(_) => {
                    self.failed("watch stream silent past its time-out");
                    return (Ended::Failed, Some(version));
                }
                Ok(None) => return (Ended::Closed, Some(version)),
                Ok(Some(Err(error))) => {
                    self.failed(&format!("watch stream broke: {error}"));
                    return (Ended::Failed, Some(version));
                }
                Ok(Some(Ok(event))) => event,
            };
            // On a field-selected watch, ADDED is also a pod that starts
            // matching (it finished) and DELETED one that stops.
            let metadata = match &event {
                WatchEvent::Added(pod) => {
                    self.feed.added(&pod.metadata);
                    &pod.metadata
                }
                WatchEvent::Modified(pod) => {
                    self.feed.modified(&pod.metadata);
                    &pod.metadata
                }
                WatchEvent::Deleted(pod) => {
                    self.feed.deleted(&pod.metadata);
                    &pod.metadata
                }
                WatchEvent::Bookmark(bookmark) => {
                    version.clone_from(&bookmark.metadata.resource_version);
                    self.health.heard();
                    continue;
                }
                WatchEvent::Error(status) if status.code == 410 => {
                    self.failed("watch expired (410 Gone), relisting");
                    return (Ended::Expired, None);
                }
                WatchEvent::Error(status) => {
                    self.failed(&format!("watch error {}: {}", status.code, status.message));
                    return (Ended::Failed, Some(version));
                }
            };
            if let Some(resource_version) = &metadata.resource_version {
                version.clone_from(resource_version);
            }
            self.feed.report_size(&self.metrics);
            self.health.heard();
        }
    }

    fn failed(&self, what: &str) {
        let was_failing = self.health.failing.swap(true, Ordering::SeqCst);
        self.metrics.count_watch_failure(self.scope.label());
        if !was_failing {
            warn!(scope = ?self.scope, watch = self.feed.name(), "{what}; cache hits are checked live until the watch recovers");
        }
    }
}

/// Every few seconds, the health of each scope's watches as a lookup would
/// judge it now: the gauge `ownerguard_owner_watch_healthy`, and a log line
/// when it changes (silence is a change that no event announces).
async fn report_health(
    scopes: Vec<(Scope, ScopeHealth)>,
    silence_limit: Duration,
    metrics: Arc<Metrics>,
) {
    let mut trusted: Vec<Option<bool>> = vec![None; scopes.len()];
    let mut tick = tokio::time::interval(HEALTH_REPORT_INTERVAL);
    loop {
        tick.tick().await;
        for ((scope, health), was) in scopes.iter().zip(trusted.iter_mut()) {
            let now = health.trusted(silence_limit);
            metrics.set_watch_healthy(scope.label(), now);
            if health.synced() && *was != Some(now) {
                if now {
                    info!(?scope, "pod watches healthy: cache hits answer alone");
                } else {
                    let watches = health.untrusted(silence_limit).join(", ");
                    warn!(?scope, %watches, silent_for = ?health.silence(), "pod watch failing or silent: cache hits are checked live");
                }
                *was = Some(now);
            }
        }
    }
}

/// How often the watch-health gauge is set.
const HEALTH_REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// Exponential backoff with jitter between failed watches: 0.5 s doubling
/// to 30 s.
#[derive(Default)]
struct Backoff {
    failures: u32,
}

impl Backoff {
    fn next(&mut self) -> Duration {
        let base = Duration::from_millis(500) * 2u32.saturating_pow(self.failures.min(6));
        self.failures = self.failures.saturating_add(1);
        let base = base.min(Duration::from_secs(30));
        // Up to a quarter of jitter, from the clock's nanoseconds: enough
        // to spread replicas that failed together.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let jitter = base.mul_f64(f64::from(nanos % 250) / 1000.0);
        base + jitter
    }

    fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(namespace: &str, name: &str, uid: &str, terminating: bool) -> ObjectMeta {
        ObjectMeta {
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            uid: Some(uid.into()),
            deletion_timestamp: terminating
                .then(|| k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default())),
            ..Default::default()
        }
    }

    const U1: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000001";

    #[test]
    fn canonical_uuids_are_stored_as_bytes_and_compare_exactly() {
        assert!(matches!(Uid::new(U1), Uid::Uuid(_)));
        assert_eq!(Uid::new(U1).to_text(), U1);
        assert!(Uid::new(U1).matches(U1));
        assert!(!Uid::new(U1).matches(&U1.to_uppercase()));
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
        let mut relist = index.relist();
        tokio::time::advance(Duration::from_secs(1)).await;
        relist.add(&meta("agents", "old", U1, false));
        relist.add(&meta("agents", "replaced", "uid-2", false));
        relist.add(&meta("agents", "new", U1, false));
        index.replace(&Scope::All, relist);
        let age = |name: &str, uid: &str| index.get_matching("agents", name, uid).unwrap().age;
        assert_eq!(age("old", U1), Duration::from_secs(31));
        // Another uid is another pod, and a new one is as old as the list.
        assert_eq!(age("replaced", "uid-2"), Duration::from_secs(1));
        assert_eq!(age("new", U1), Duration::from_secs(1));
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
        let mut relist = index.relist();
        relist.add(&meta("a", "fresh", U1, false));
        index.replace(&Scope::Namespace("a".into()), relist);
        assert_eq!(index.get("a", "gone"), None);
        assert!(index.get("a", "fresh").is_some());
        assert!(index.get("b", "kept").is_some());
        let mut relist = index.relist();
        relist.add(&meta("c", "only", U1, false));
        index.replace(&Scope::All, relist);
        assert_eq!(index.len(), 1);
    }

    fn finished_feed(pods: &Arc<FinishedPods>, phase: Finished) -> Feed {
        Feed::Finished {
            pods: pods.clone(),
            phase,
        }
    }

    #[test]
    fn finished_pods_are_kept_by_phase_and_uid() {
        let pods = Arc::new(FinishedPods::default());
        let (succeeded, failed) = (
            finished_feed(&pods, Finished::Succeeded),
            finished_feed(&pods, Finished::Failed),
        );
        succeeded.added(&meta("agents", "done", U1, false));
        failed.added(&meta("agents", "evicted", "uid-2", false));
        assert_eq!(
            pods.phase_of("agents", "done", U1),
            Some(Finished::Succeeded)
        );
        assert_eq!(
            pods.phase_of("agents", "evicted", "uid-2"),
            Some(Finished::Failed)
        );
        // Another pod of the same name (another uid) has not finished.
        assert_eq!(pods.phase_of("agents", "done", "uid-9"), None);
        assert_eq!(pods.phase_of("other", "done", U1), None);
        assert_eq!(pods.len(), 2);
        // Leaving the selection (DELETED) takes it out of its phase only.
        failed.deleted(&meta("agents", "evicted", "uid-2", false));
        assert_eq!(pods.phase_of("agents", "evicted", "uid-2"), None);
        assert_eq!(pods.len(), 1);
        // A relist of one phase and one scope leaves the other phase alone.
        let mut relist = pods.failed.relist();
        relist.add(&meta("agents", "later", "uid-3", false));
        failed.replace(&Scope::All, relist);
        assert_eq!(
            pods.phase_of("agents", "done", U1),
            Some(Finished::Succeeded)
        );
        assert_eq!(
            pods.phase_of("agents", "later", "uid-3"),
            Some(Finished::Failed)
        );
    }

    #[test]
    fn a_subscriber_hears_pods_finish_leave_and_relists() {
        let pods = Arc::new(FinishedPods::default());
        let failed = finished_feed(&pods, Finished::Failed);
        // Nobody listens yet: nothing is built, nothing kept.
        failed.added(&meta("agents", "before", "uid-0", false));
        let mut changes = pods.subscribe();
        failed.added(&meta("agents", "w-1", U1, false));
        // A change inside the phase (a label, a deletionTimestamp) is not
        // a pod that finished.
        failed.modified(&meta("agents", "w-1", U1, true));
        failed.deleted(&meta("agents", "w-1", U1, true));
        failed.replace(&Scope::Namespace("agents".into()), pods.failed.relist());
        let pod = FinishedPod {
            namespace: "agents".into(),
            name: "w-1".into(),
            uid: U1.into(),
            phase: Finished::Failed,
        };
        assert_eq!(
            changes.try_recv().unwrap(),
            FinishedChange::Finished(pod.clone())
        );
        assert_eq!(changes.try_recv().unwrap(), FinishedChange::Gone(pod));
        assert_eq!(
            changes.try_recv().unwrap(),
            FinishedChange::Relisted {
                scope: Scope::Namespace("agents".into()),
                phase: Finished::Failed
            }
        );
        assert!(changes.try_recv().is_err());
        assert!(pods.snapshot().is_empty());
        failed.added(&meta("b", "w-2", "uid-2", false));
        assert_eq!(
            pods.snapshot(),
            vec![FinishedPod {
                namespace: "b".into(),
                name: "w-2".into(),
                uid: "uid-2".into(),
                phase: Finished::Failed
            }]
        );
    }

    #[test]
    fn a_hit_carries_the_phase_of_the_finished_set_and_trust_needs_every_watch() {
        let health = || Arc::new(WatchHealth::new());
        let (pods, succeeded, failed) = (health(), health(), health());
        let watches = Watches {
            index: Arc::new(PodIndex::default()),
            finished: Arc::new(FinishedPods::default()),
            scopes: vec![(
                Scope::All,
                ScopeHealth {
                    watches: vec![
                        ("pods", pods.clone()),
                        ("Succeeded pods", succeeded.clone()),
                        ("Failed pods", failed.clone()),
                    ],
                },
            )],
            silence_limit: DEFAULT_SILENCE_LIMIT,
            max_age: DEFAULT_MAX_AGE,
        };
        watches
            .index
            .apply(&meta("agents", "w-1", U1, false), Seen::Whole);
        finished_feed(&watches.finished, Finished::Succeeded)
            .added(&meta("agents", "w-1", U1, false));
        assert_eq!(
            watches.get("agents", "w-1", U1).unwrap().pod.finished,
            Some(Finished::Succeeded)
        );
        assert_eq!(watches.get("agents", "w-1", "uid-9"), None);
        // Ready and trusted only once all three have listed.
        for health in [&pods, &succeeded] {
            health.synced.store(true, Ordering::SeqCst);
            health.heard();
        }
        assert!(!watches.is_synced());
        assert!(!watches.trusted("agents"));
        failed.synced.store(true, Ordering::SeqCst);
        failed.heard();
        assert!(watches.is_synced());
        assert!(watches.trusted("agents"));
        // One finished watch failing: hits are checked live.
        failed.failing.store(true, Ordering::SeqCst);
        assert!(!watches.trusted("agents"));
        assert!(watches.recent("agents"));
        assert_eq!(
            watches.scopes[0].1.untrusted(DEFAULT_SILENCE_LIMIT),
            vec!["Failed pods"]
        );
    }
}
