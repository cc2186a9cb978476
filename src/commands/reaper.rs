//! `serve --reap-finished`: what a finished owner pod owns is released, as
//! `release` releases it, once the pod has stayed finished for
//! `--reap-after` (so that a worker's own exit path goes first).
//!
//! A finished pod (Succeeded or Failed: completed, evicted, a Job's failed
//! try) keeps its object until something deletes it, and the garbage
//! collector keeps what it owns until then (trap 4). The reaper learns of
//! finished pods from the owner lookup's watches of `status.phase`
//! ([`FinishedPods`]), the same set the create-time rule reads, and calls
//! [`release`] with the pod's name and uid: the whole tuple, uid
//! preconditions, one failed delete not stopping the others.
//!
//! Only one replica reaps at a time: the one that holds a
//! `coordination.k8s.io` Lease ([`Lease`]), renewed every third of its
//! duration, taken over only once it has expired. As client-go's leader
//! election, expiry is timed on the local clock from when the record was
//! last seen to change, never from the holder's `renewTime` (another
//! node's clock, or a date in the future). A reap pass renews before each
//! owner when a third of the duration has gone, stops as soon as the Lease
//! is not held, and bounds each owner's release by that third, so that no
//! pass outlives the Lease. A release that left something is retried
//! after `retry_after`. A few dozen lines on the
//! Lease API rather than a crate: kube-rs has no leader election, the
//! crates that add one bring their own runtime assumptions, and this one
//! needs only "is it mine now".

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease as LeaseObject, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::commands::release::{Owner, ReleaseError, delete_owned};
use crate::deadline::after_now;
use crate::observe::Metrics;
use crate::observe::events::{PodEvent, PodRef};
use crate::owner::{FinishedChange, FinishedPods};

/// How the reaper runs.
#[derive(Debug, Clone)]
pub struct ReaperSettings {
    /// How long a pod stays finished before what it owns is released.
    pub after: Duration,
    /// The Lease that makes one replica the reaper.
    pub lease: LeaseSettings,
    /// After a release that left something (a failed delete, an API
    /// error), how long until it is tried again.
    pub retry_after: Duration,
}

/// `retry_after`'s default.
pub const DEFAULT_REAP_RETRY: Duration = Duration::from_secs(30);

/// `--reap-after`'s default: a worker's own exit path (its Job's
/// `ttlSecondsAfterFinished`, its controller) has had its minutes.
pub const DEFAULT_REAP_AFTER: Duration = Duration::from_secs(300);

/// The Lease of the reaper.
#[derive(Debug, Clone)]
pub struct LeaseSettings {
    pub namespace: String,
    pub name: String,
    /// This replica, as the Lease's holder: its pod name.
    pub identity: String,
    /// How long a holder that stops renewing keeps it.
    pub duration: Duration,
}

/// The Lease's default duration (client-go's leader election uses 15 s).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);

/// Reap forever: learn finished pods from `finished`, release what each
/// owns after the grace period, while this replica holds the Lease.
pub async fn run(
    client: kube::Client,
    finished: Arc<FinishedPods>,
    settings: ReaperSettings,
    metrics: Arc<Metrics>,
    events: Option<crate::observe::events::Events>,
) {
    let mut changes = finished.subscribe();
    let mut lease = Lease::new(client.clone(), settings.lease.clone());
    // Finished pods by (namespace, name, uid): when what each owns is due.
    let mut pending: HashMap<(String, String, String), Instant> = HashMap::new();
    let after = settings.after;
    let seen = |pending: &mut HashMap<_, _>| {
        for pod in finished.snapshot() {
            pending
                .entry((pod.namespace, pod.name, pod.uid))
                .or_insert_with(|| after_now(after));
        }
    };
    seen(&mut pending);
    let mut tick = tokio::time::interval(lease.renew_every());
    loop {
        tokio::select! {
            change = changes.recv() => match change {
                Ok(FinishedChange::Finished(pod)) => {
                    pending
                        .entry((pod.namespace, pod.name, pod.uid))
                        .or_insert_with(|| after_now(after));
                }
                Ok(FinishedChange::Gone(pod)) => {
                    pending.remove(&(pod.namespace, pod.name, pod.uid));
                }
                Ok(FinishedChange::Relisted { .. }) | Err(RecvError::Lagged(_)) => {
                    // Changes may have been missed: the set as it is now.
                    let now: std::collections::HashSet<_> = finished
                        .snapshot()
                        .into_iter()
                        .map(|p| (p.namespace, p.name, p.uid))
                        .collect();
                    pending.retain(|key, _| now.contains(key));
                    seen(&mut pending);
                }
                Err(RecvError::Closed) => return,
            },
            _ = tick.tick() => {
                let leader = lease.hold().await;
                metrics.set_reaper_leader(leader);
                if !leader {
                    continue;
                }
                let now = Instant::now();
                let due: Vec<_> = pending
                    .iter()
                    .filter(|(_, due)| **due <= now)
                    .map(|(key, _)| key.clone())
                    .collect();
                for key in due {
                    // Renewed while the pass goes on; not held: the pass
                    // stops, the rest stays pending for whoever holds it.
                    if !lease.renewed_within(lease.renew_every()) && !lease.hold().await {
                        metrics.set_reaper_leader(false);
                        break;
                    }
                    let (namespace, name, uid) = key.clone();
                    // Still finished with that uid: a pod replaced meanwhile
                    // is another pod.
                    if finished.phase_of(&namespace, &name, &uid).is_none() {
                        pending.remove(&key);
                        continue;
                    }
                    let owner = Owner { namespace, name, uid };
                    let done = match tokio::time::timeout(
                        lease.renew_every(),
                        reap(&client, &owner, &metrics, events.as_ref()),
                    )
                    .await
                    {
                        Ok(done) => done,
                        Err(_) => {
                            metrics.count_reap_failure("release");
                            warn!(namespace = %owner.namespace, pod = %owner.name,
                                "reaping a finished owner pod took longer than a third of the Lease; retried later");
                            false
                        }
                    };
                    if done {
                        pending.remove(&key);
                    } else {
                        pending.insert(key, after_now(settings.retry_after));
                    }
                }
            }
        }
    }
}

/// Delete what `owner` owns, counting what went and what was left.
/// Whether it is done: `false` when something is left to retry.
async fn reap(
    client: &kube::Client,
    owner: &Owner,
    metrics: &Metrics,
    events: Option<&crate::observe::events::Events>,
) -> bool {
    match delete_owned(client.clone(), owner).await {
        Ok(released) => {
            metrics.count_reaped("pods", released.pods);
            metrics.count_reaped("jobs", released.jobs);
            metrics.count_reaped("configmaps", released.config_maps);
            let total = released.pods + released.jobs + released.config_maps;
            if let Some(events) = events.filter(|_| total > 0) {
                events.record(reaped_event(owner, &released));
            }
            info!(namespace = %owner.namespace, pod = %owner.name, pods = released.pods,
                jobs = released.jobs, config_maps = released.config_maps,
                "reaped what a finished owner pod owned");
            true
        }
        Err(ReleaseError::Incomplete { left, .. }) => {
            for object in &left {
                metrics.count_reap_failure(left_resource(object));
            }
            if let Some(events) = events {
                events.record(incomplete_event(owner, &left));
            }
            warn!(namespace = %owner.namespace, pod = %owner.name, left = ?left,
                "reaping a finished owner pod left objects behind; retried later");
            false
        }
        // Gone, or replaced under its name, since: nothing of it to reap.
        Err(ReleaseError::OwnerNotFound { .. } | ReleaseError::OwnerUidMismatch { .. }) => true,
        Err(error) => {
            metrics.count_reap_failure("release");
            warn!(namespace = %owner.namespace, pod = %owner.name, %error,
                "reaping a finished owner pod failed; retried later");
            false
        }
    }
}

/// The Event on a finished pod whose objects the reaper released.
fn reaped_event(owner: &Owner, released: &crate::commands::release::Released) -> PodEvent {
    PodEvent {
        pod: pod_ref(owner),
        warning: false,
        reason: "Reaped",
        action: "Release",
        note: format!(
            "ownerguard's reaper released what this finished pod owned: {} pod(s), {} Job(s), {} ConfigMap(s)",
            released.pods, released.jobs, released.config_maps
        ),
    }
}

/// The Event on a finished pod whose objects the reaper could not all
/// release: a warning naming what is left (the rest went), tried again.
fn incomplete_event(owner: &Owner, left: &[String]) -> PodEvent {
    let shown = first_few(left, "; ");
    PodEvent {
        pod: pod_ref(owner),
        warning: true,
        reason: "ReapIncomplete",
        action: "Release",
        note: format!(
            "ownerguard's reaper could not release {} object(s) this finished pod owns, the rest released; it tries again: {shown}",
            left.len()
        ),
    }
}

/// The first five of `items` joined by `separator`, and how many more:
/// an Event's note stays short whatever a release left.
pub(crate) fn first_few(items: &[String], separator: &str) -> String {
    const SHOWN: usize = 5;
    let mut text = items
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(separator);
    if items.len() > SHOWN {
        text.push_str(&format!("{separator}and {} more", items.len() - SHOWN));
    }
    text
}

pub(crate) fn pod_ref(owner: &Owner) -> PodRef {
    PodRef {
        namespace: owner.namespace.clone(),
        name: owner.name.clone(),
        uid: owner.uid.clone(),
    }
}

/// The resource of an object `release` left (`Job/step-1: why`).
pub(crate) fn left_resource(object: &str) -> &'static str {
    match object.split('/').next() {
        Some("Job") => "jobs",
        Some("ConfigMap") => "configmaps",
        _ => "pods",
    }
}

/// A `coordination.k8s.io/v1` Lease held by this replica, or not.
pub struct Lease {
    api: Api<LeaseObject>,
    settings: LeaseSettings,
    /// The record as last read (holder, renewTime, duration) and when, by
    /// the local clock, it was first seen so: another holder's Lease has
    /// expired once it has not changed for its duration since then.
    observed: Option<(Record, Instant)>,
    /// When this replica last wrote the Lease as its holder.
    renewed: Option<Instant>,
    /// The Lease as last read or written: what it carries beside its
    /// record (annotations) is kept across renewals.
    last: Option<LeaseObject>,
}

/// What says a holder is alive: it changes at every renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    holder: Option<String>,
    renew_time: Option<MicroTime>,
    duration_seconds: Option<i32>,
}

impl Record {
    fn of(spec: &LeaseSpec) -> Self {
        Self {
            holder: spec.holder_identity.clone(),
            renew_time: spec.renew_time.clone(),
            duration_seconds: spec.lease_duration_seconds,
        }
    }
}

impl Lease {
    pub fn new(client: kube::Client, settings: LeaseSettings) -> Self {
        Self {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            observed: None,
            renewed: None,
            last: None,
        }
    }

    /// The Lease's annotations as last read or written.
    pub fn annotations(&self) -> std::collections::BTreeMap<String, String> {
        self.last
            .as_ref()
            .and_then(|lease| lease.metadata.annotations.clone())
            .unwrap_or_default()
    }

    /// Set (`Some`) or remove (`None`) annotations of the Lease: an update
    /// of the Lease as last read, so that it fails (409) if another
    /// replica wrote it since. For the holder only: what it must remember
    /// across a takeover.
    ///
    /// # Errors
    ///
    /// The update's, in words; or that the Lease was never read.
    pub async fn annotate(&mut self, changes: Vec<(String, Option<String>)>) -> Result<(), String> {
        let Some(mut lease) = self.last.clone() else {
            return Err("the Lease was not read yet".into());
        };
        let annotations = lease.metadata.annotations.get_or_insert_default();
        for (key, value) in changes {
            match value {
                Some(value) => annotations.insert(key, value),
                None => annotations.remove(&key),
            };
        }
        let written = self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
            .map_err(|error| error.to_string())?;
        self.last = Some(written);
        Ok(())
    }

    /// How often to renew: a third of the duration, as client-go's
    /// elector retries, so that two missed renewals still hold it.
    pub fn renew_every(&self) -> Duration {
        (self.settings.duration / 3).max(Duration::from_millis(100))
    }

    /// Whether this replica wrote the Lease as its holder within `within`.
    pub fn renewed_within(&self, within: Duration) -> bool {
        self.renewed.is_some_and(|at| at.elapsed() < within)
    }

    /// Take or renew the Lease; whether this replica holds it now. Every
    /// write carries the read version, so two replicas never both win.
    pub async fn hold(&mut self) -> bool {
        let held = self.try_hold().await;
        if held {
            self.renewed = Some(Instant::now());
        } else {
            self.renewed = None;
        }
        held
    }

    async fn try_hold(&mut self) -> bool {
        let now = Timestamp::now();
        let current = match self.api.get_opt(&self.settings.name).await {
            Ok(current) => {
                self.last.clone_from(&current);
                current
            }
            Err(error) => {
                warn!(%error, lease = %self.settings.name, "cannot read the reaper's Lease");
                return false;
            }
        };
        let Some(mut lease) = current else {
            let lease = LeaseObject {
                metadata: ObjectMeta {
                    name: Some(self.settings.name.clone()),
                    namespace: Some(self.settings.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.last = Some(created);
                    true
                }
                Err(_) => false,
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let record = Record::of(&spec);
        let seen_at = match &self.observed {
            Some((observed, at)) if *observed == record => *at,
            _ => {
                let at = Instant::now();
                self.observed = Some((record, at));
                at
            }
        };
        let mine = spec.holder_identity.as_deref() == Some(self.settings.identity.as_str());
        let unheld = spec.holder_identity.as_deref().is_none_or(str::is_empty);
        let duration = Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
        );
        if !mine && !unheld && seen_at.elapsed() < duration {
            return false;
        }
        let transitions = spec
            .lease_transitions
            .unwrap_or(0)
            .saturating_add(i32::from(!mine));
        let mut renewed = self.spec(now, transitions);
        if mine {
            renewed.acquire_time = spec.acquire_time.clone().or(renewed.acquire_time);
        }
        lease.spec = Some(renewed);
        let name = self.settings.name.clone();
        match self
            .api
            .replace(&name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                if !mine {
                    info!(lease = %name, identity = %self.settings.identity, "took the reaper's Lease");
                }
                self.last = Some(written);
                true
            }
            // Another replica wrote it first (409), or the API failed: not
            // ours this round.
            Err(_) => false,
        }
    }

    fn spec(&self, now: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.settings.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.settings.duration.as_secs().max(1)).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> Owner {
        Owner {
            namespace: "agents".into(),
            name: "w-1".into(),
            uid: "u-1".into(),
        }
    }

    #[test]
    fn a_partial_reap_is_a_warning_on_the_pod_naming_what_is_left() {
        let left: Vec<String> = (0..7).map(|i| format!("ConfigMap/p-{i}: 500")).collect();
        let event = incomplete_event(&owner(), &left);
        assert!(event.warning);
        assert_eq!(event.reason, "ReapIncomplete");
        assert_eq!(event.pod.name, "w-1");
        assert!(
            event.note.contains("could not release 7 object(s)")
                && event.note.contains("ConfigMap/p-0: 500")
                && event.note.contains("and 2 more")
                && !event.note.contains("p-5"),
            "{}",
            event.note
        );
    }

    #[test]
    fn a_whole_reap_is_a_normal_event_counting_what_went() {
        let released = crate::commands::release::Released {
            pods: 2,
            jobs: 1,
            config_maps: 3,
        };
        let event = reaped_event(&owner(), &released);
        assert!(!event.warning);
        assert_eq!(event.reason, "Reaped");
        assert!(event.note.ends_with("2 pod(s), 1 Job(s), 3 ConfigMap(s)"));
    }
}
