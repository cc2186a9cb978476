//! The watches of every scope, as a lookup asks them: is this pod in the
//! index with that uid, and may the hit answer alone?
//!
//! Per scope (all namespaces, or each `--namespace`), three list-then-watch
//! loops ([`crate::owner::cluster::watch`]): one of every pod feeding the
//! index ([`PodIndex`]), and one per finished phase feeding
//! [`FinishedPods`]. A hit answers alone only when the pod is there with
//! the declared uid, the entry was seen whole within `--cache-max-age`
//! ([`IndexedPod::age`]), and every watch of its scope is trusted
//! ([`WatchHealth`]): a finished pod missed by a failed watch would answer
//! "running". Otherwise the lookup asks the API server (see
//! [`crate::owner::cluster`]).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PartialObjectMeta};
use tokio::time::Instant;

use super::ClusterMetrics;
use super::finished::FinishedPods;
use super::health::{ScopeHealth, WatchHealth, report_health};
use super::index::{IndexedPod, PodIndex, Scope};
use super::watch::{Feed, Watch, WatchSettings};
use crate::owner::Finished;

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
    /// running with `uid` (the index confirms it).
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
    pub fn spawn(
        client: kube::Client,
        settings: &WatchSettings,
        metrics: Arc<dyn ClusterMetrics>,
    ) -> Self {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::owner::cluster::finished::{FinishedChange, FinishedPod};
    use crate::owner::cluster::index::Seen;
    use crate::owner::cluster::index::tests::{U1, meta};
    use crate::owner::cluster::{DEFAULT_MAX_AGE, DEFAULT_SILENCE_LIMIT};
    use std::sync::atomic::Ordering;

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
        let mut relist = pods.failed.relist(&Scope::All);
        relist.add(&meta("agents", "later", "uid-3", false));
        failed.replace(relist);
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
        failed.replace(pods.failed.relist(&Scope::Namespace("agents".into())));
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
        // A relist that changed the set and then failed says so too.
        failed.relisted(&Scope::All);
        assert_eq!(
            changes.try_recv().unwrap(),
            FinishedChange::Relisted {
                scope: Scope::All,
                phase: Finished::Failed
            }
        );
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
    fn a_namespace_named_twice_is_watched_once() {
        let settings = WatchSettings {
            namespaces: vec!["a".into(), "b".into(), "a".into()],
            ..WatchSettings::default()
        };
        assert_eq!(
            settings.scopes(),
            vec![Scope::Namespace("a".into()), Scope::Namespace("b".into())]
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
