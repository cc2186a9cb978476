//! One list-then-watch loop: every pod of a scope into the index, or the
//! finished pods of one phase; and the settings of them all.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PartialObjectMeta, WatchEvent, WatchParams};
use tracing::{info, warn};

use super::ClusterMetrics;
use super::finished::{FinishedChange, FinishedPod, FinishedPods};
use super::health::WatchHealth;
use super::index::{PodIndex, Relist, Scope, Seen};
use crate::owner::Finished;

/// What one watch feeds: the index of every pod, or the finished pods of
/// one phase.
#[derive(Clone)]
pub(super) enum Feed {
    Pods(Arc<PodIndex>),
    Finished {
        pods: Arc<FinishedPods>,
        phase: Finished,
    },
}

impl Feed {
    pub(super) fn index(&self) -> &PodIndex {
        match self {
            Self::Pods(index) => index,
            Self::Finished { pods, phase } => pods.of(*phase),
        }
    }

    /// What the watch is, in logs.
    pub(super) fn name(&self) -> &'static str {
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
    pub(super) fn field_selector(&self) -> Option<String> {
        match self {
            Self::Pods(_) => None,
            Self::Finished { phase, .. } => Some(format!("status.phase={phase}")),
        }
    }

    pub(super) fn added(&self, metadata: &ObjectMeta) {
        self.index().apply(metadata, Seen::Whole);
        if let Self::Finished { pods, phase } = self {
            pods.notify(|| FinishedPod::of(metadata, *phase).map(FinishedChange::Finished));
        }
    }

    pub(super) fn modified(&self, metadata: &ObjectMeta) {
        self.index().apply(metadata, Seen::Changed);
    }

    pub(super) fn deleted(&self, metadata: &ObjectMeta) {
        self.index().delete(metadata);
        if let Self::Finished { pods, phase } = self {
            pods.notify(|| FinishedPod::of(metadata, *phase).map(FinishedChange::Gone));
        }
    }

    pub(super) fn replace(&self, relist: Relist<'_>) {
        let scope = relist.scope().clone();
        relist.finish();
        self.relisted(&scope);
    }

    /// Tell a subscriber that `scope` was listed anew, wholly or in part:
    /// changes were not sent one by one.
    pub(super) fn relisted(&self, scope: &Scope) {
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
    pub(super) fn report_size(&self, metrics: &dyn ClusterMetrics) {
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
pub(super) const WATCH_TIMEOUT_SECONDS: u32 = 290;

/// A watch stream that stays quiet this much longer than its own time-out
/// is a dead connection.
pub(super) const WATCH_IDLE_MARGIN: Duration = Duration::from_secs(10);

/// Pods per page of a relist.
pub(super) const LIST_PAGE: u32 = 500;

impl WatchSettings {
    /// One scope per namespace named, each once: two watches of one
    /// namespace would feed one index, and one's relist could put back a
    /// pod the other had just seen deleted.
    pub fn scopes(&self) -> Vec<Scope> {
        if self.namespaces.is_empty() {
            return vec![Scope::All];
        }
        let mut scopes: Vec<Scope> = Vec::new();
        for namespace in &self.namespaces {
            let scope = Scope::Namespace(namespace.clone());
            if !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
        scopes
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
pub(super) struct Watch {
    pub(super) api: Api<PartialObjectMeta<Pod>>,
    /// `--owner-selector`.
    pub(super) selector: Option<String>,
    pub(super) scope: Scope,
    pub(super) feed: Feed,
    pub(super) health: Arc<WatchHealth>,
    pub(super) metrics: Arc<dyn ClusterMetrics>,
}

/// Why a watch stream ended.
pub(super) enum Ended {
    /// The server closed it at its time-out: resume from the last version.
    Closed,
    /// 410 Gone: the version is too old, relist.
    Expired,
    /// A failure: resume after a backoff.
    Failed,
}

impl Watch {
    pub(super) async fn run(self) {
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

    /// List every pod of the scope, page by page, into the index, each
    /// namespace swapped in whole once the list has passed it ([`Relist`]).
    /// Returns the list's resourceVersion.
    pub(super) async fn relist(&self) -> Result<String, kube::Error> {
        let mut relist = self.feed.index().relist(&self.scope);
        let mut params = ListParams::default().limit(LIST_PAGE);
        if let Some(selector) = &self.selector {
            params = params.labels(selector);
        }
        if let Some(fields) = self.feed.field_selector() {
            params = params.fields(&fields);
        }
        let version = loop {
            let page = match self.api.list_metadata(&params).await {
                Ok(page) => page,
                Err(error) => {
                    // The namespaces listed so far are in the index
                    // already: a subscriber must read the snapshot anew.
                    if relist.changed_the_index() {
                        self.feed.relisted(&self.scope);
                    }
                    return Err(error);
                }
            };
            for pod in &page.items {
                relist.add(&pod.metadata);
            }
            match page.metadata.continue_.filter(|token| !token.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break page.metadata.resource_version.unwrap_or_default(),
            }
        };
        self.feed.replace(relist);
        self.feed.report_size(&*self.metrics);
        self.health.heard();
        if !self.health.synced.swap(true, Ordering::SeqCst) {
            info!(scope = ?self.scope, watch = self.feed.name(), pods = self.feed.index().len(), "owner cache synced");
        }
        Ok(version)
    }

    /// Watch from `version` until the stream ends; how it ended and the
    /// version to resume from (`None`: relist).
    pub(super) async fn watch(&self, mut version: String) -> (Ended, Option<String>) {
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
            self.feed.report_size(&*self.metrics);
            self.health.heard();
        }
    }

    pub(super) fn failed(&self, what: &str) {
        let was_failing = self.health.failing.swap(true, Ordering::SeqCst);
        self.metrics.count_watch_failure(self.scope.label());
        if !was_failing {
            warn!(scope = ?self.scope, watch = self.feed.name(), "{what}; cache hits are checked live until the watch recovers");
        }
    }
}

/// Exponential backoff with jitter between failed watches: 0.5 s doubling
/// to 30 s.
#[derive(Default)]
pub(super) struct Backoff {
    pub(super) failures: u32,
}

impl Backoff {
    pub(super) fn next(&mut self) -> Duration {
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

    pub(super) fn reset(&mut self) {
        self.failures = 0;
    }
}
