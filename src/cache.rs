//! The pod index fed by the watch: (namespace, name) -> (uid, terminating).
//!
//! Sized for the largest clusters (150,000 pods): only what a decision
//! reads is kept, pods are grouped by namespace so a namespace is stored
//! once, and a canonical UUID is kept as 16 bytes rather than 36 characters.
//!
//! The index may be stale, the way any watch cache is: a pod created a
//! moment ago may not be there yet, and a pod deleted a moment ago may still
//! be. That is why a miss or a uid mismatch is always checked again live
//! (see [`crate::owner::cluster`]): the cache is only trusted when it
//! agrees with the object. A relist after a dropped watch or a 410 Gone is
//! built aside and swapped in whole at its end (`InitDone`), so lookups
//! never see a half-filled index.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tracing::{info, warn};

use crate::metrics::Metrics;
use crate::owner::ObservedPod;

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
    pub fn covers(&self, namespace: &str) -> bool {
        match self {
            Self::All => true,
            Self::Namespace(ns) => ns == namespace,
        }
    }
}

/// A relist in progress: the pods listed so far, swapped in at the end.
#[derive(Default)]
pub struct Relist {
    pods: Pods,
}

impl Relist {
    pub fn add(&mut self, metadata: &ObjectMeta) {
        if let Some((namespace, name, entry)) = entry_of(metadata) {
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
#[derive(Default)]
pub struct PodIndex {
    pods: RwLock<Pods>,
}

fn entry_of(metadata: &ObjectMeta) -> Option<(&str, &str, Entry)> {
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
        })
    }

    /// Whether pod `name` of `namespace` is known with `uid`; `Some(pod)`
    /// only then. Avoids formatting the uid on the hot path.
    pub fn get_matching(&self, namespace: &str, name: &str, uid: &str) -> Option<ObservedPod> {
        // The allocation for the answer is made after the lock is released.
        let terminating = {
            let pods = self.pods.read().ok()?;
            let entry = pods.get(namespace)?.get(name)?;
            entry.uid.matches(uid).then_some(entry.terminating)?
        };
        Some(ObservedPod {
            uid: uid.to_string(),
            terminating,
        })
    }

    /// A pod was added or changed.
    pub fn apply(&self, metadata: &ObjectMeta) {
        let Some((namespace, name, entry)) = entry_of(metadata) else {
            return;
        };
        if let Ok(mut pods) = self.pods.write() {
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

    /// Replace everything `scope` covers by the result of a relist.
    pub fn replace(&self, scope: &Scope, relist: Relist) {
        let Ok(mut pods) = self.pods.write() else {
            return;
        };
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

/// Which pods the watch covers: `--namespace` (none: all) and
/// `--owner-selector`.
#[derive(Debug, Clone, Default)]
pub struct WatchSettings {
    pub namespaces: Vec<String>,
    pub selector: Option<String>,
}

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

/// One watch per scope, each marking itself synced after its first full
/// list.
pub struct Watches {
    pub index: Arc<PodIndex>,
    scopes: Vec<(Scope, Arc<AtomicBool>)>,
}

impl Watches {
    /// Whether every scope has listed its pods once: until then the index
    /// would answer "not found" for owners that exist.
    pub fn is_synced(&self) -> bool {
        self.scopes
            .iter()
            .all(|(_, synced)| synced.load(Ordering::SeqCst))
    }

    /// Whether the index covers `namespace` at all.
    pub fn covers(&self, namespace: &str) -> bool {
        self.scopes.iter().any(|(scope, _)| scope.covers(namespace))
    }

    /// Start the watches on `client`, in the background.
    pub fn spawn(client: kube::Client, settings: &WatchSettings, metrics: Arc<Metrics>) -> Self {
        let index = Arc::new(PodIndex::default());
        let mut scopes = Vec::new();
        for scope in settings.scopes() {
            let synced = Arc::new(AtomicBool::new(false));
            let api: Api<PartialObjectMeta<Pod>> = match &scope {
                Scope::All => Api::all(client.clone()),
                Scope::Namespace(ns) => Api::namespaced(client.clone(), ns),
            };
            let mut config = watcher::Config::default();
            if let Some(selector) = &settings.selector {
                config = config.labels(selector);
            }
            tokio::spawn(run(
                api,
                config,
                scope.clone(),
                index.clone(),
                synced.clone(),
                metrics.clone(),
            ));
            scopes.push((scope, synced));
        }
        Self { index, scopes }
    }
}

/// Feed `index` from one watch, forever. The watcher re-lists after a 410
/// Gone and reconnects after a drop, with kube's default backoff.
async fn run(
    api: Api<PartialObjectMeta<Pod>>,
    config: watcher::Config,
    scope: Scope,
    index: Arc<PodIndex>,
    synced: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
) {
    let stream = watcher::watcher(api, config).default_backoff();
    futures::pin_mut!(stream);
    let mut relist: Option<Relist> = None;
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => relist = Some(Relist::default()),
            Ok(Event::InitApply(pod)) => relist
                .get_or_insert_with(Relist::default)
                .add(&pod.metadata),
            Ok(Event::InitDone) => {
                index.replace(&scope, relist.take().unwrap_or_default());
                metrics.set_cache_pods(index.len());
                if !synced.swap(true, Ordering::SeqCst) {
                    info!(?scope, pods = index.len(), "owner cache synced");
                }
            }
            Ok(Event::Apply(pod)) => {
                index.apply(&pod.metadata);
                metrics.set_cache_pods(index.len());
            }
            Ok(Event::Delete(pod)) => {
                index.delete(&pod.metadata);
                metrics.set_cache_pods(index.len());
            }
            Err(error) => {
                warn!(?scope, %error, "pod watch failed; retrying, the cache keeps serving")
            }
        }
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
        index.apply(&meta("agents", "w-1", U1, false));
        assert_eq!(
            index.get("agents", "w-1"),
            Some(ObservedPod {
                uid: U1.into(),
                terminating: false
            })
        );
        assert!(index.get_matching("agents", "w-1", U1).is_some());
        assert!(index.get_matching("agents", "w-1", "other").is_none());
        assert_eq!(index.get("other", "w-1"), None);
        index.apply(&meta("agents", "w-1", U1, true));
        assert!(index.get("agents", "w-1").unwrap().terminating);
        index.delete(&meta("agents", "w-1", U1, true));
        assert_eq!(index.get("agents", "w-1"), None);
        assert!(index.is_empty());
    }

    #[test]
    fn late_delete_of_an_old_pod_keeps_its_successor() {
        let index = PodIndex::default();
        index.apply(&meta("agents", "w-1", "new-uid", false));
        index.delete(&meta("agents", "w-1", "old-uid", true));
        assert_eq!(
            index.get("agents", "w-1").map(|p| p.uid),
            Some("new-uid".to_string())
        );
    }

    #[test]
    fn relist_replaces_only_its_scope() {
        let index = PodIndex::default();
        index.apply(&meta("a", "gone", U1, false));
        index.apply(&meta("b", "kept", U1, false));
        let mut relist = Relist::default();
        relist.add(&meta("a", "fresh", U1, false));
        index.replace(&Scope::Namespace("a".into()), relist);
        assert_eq!(index.get("a", "gone"), None);
        assert!(index.get("a", "fresh").is_some());
        assert!(index.get("b", "kept").is_some());
        let mut relist = Relist::default();
        relist.add(&meta("c", "only", U1, false));
        index.replace(&Scope::All, relist);
        assert_eq!(index.len(), 1);
    }
}
