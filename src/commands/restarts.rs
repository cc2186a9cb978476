//! `serve --release-restarted`: what the earlier runs of a restarted
//! worker container made is released by the server, as `release` releases
//! it, without the worker's help.
//!
//! A worker container restarted in its pod (an OOM kill, a crash, `kill
//! 1`) keeps its pod, so the garbage collector keeps everything the pod
//! owns, and the agents of the dead process run on (trap 3). A worker pod
//! opts in with the label `<prefix>/release-on-restart: <container>` (or
//! several, `a.b`: a container name never holds a dot). Once a container it
//! names has restarted, every object the pod owns that was made before the
//! container's newest run started is released; nothing made by the
//! current run is.
//!
//! How a child's run is known. The kubelet records when the newest run of
//! the container started (`state.running.startedAt`, or the
//! `lastTerminationState` of a container waiting to start again), on the
//! node's clock, to the second; the API server records when it created
//! the child (`creationTimestamp`), on its own clock, to the second. Under
//! a bound `m` on the two clocks' difference (`--restart-clock-margin`), a
//! child with `created + 1 s + m <= started` was made before the run
//! started: by an earlier one. A child created after `started + 1 s + m`
//! is the current run's; one between is kept and counted as unproven (a
//! leak is recoverable; deleting a live agent is not). No status the
//! kubelet writes comes before the container it reports has started, so
//! nothing ownerguard sees at admission can date a child's run better than
//! that: a create by the new process in the second before the kubelet's
//! report looks like the old run's to every cache, and only the clocks
//! tell them apart.
//!
//! The node's clock ahead of the API server's is the dangerous direction
//! (it makes new children look old): the API server's time of the status
//! write that first showed a run (its `managedFields` entry) bounds it, and
//! a pod whose kubelet reports a start later than that by more than the
//! margin is held, its children kept and counted.
//!
//! The rule reads only the current status: a restart ownerguard did not
//! see (it was down, its watch was cut) is seen at the next list, and the
//! newest run's start bounds every earlier run, however many were missed.
//! A worker that restarts again before a release is done gets a new pass
//! with the later start. Several opted-in containers: the token names the
//! pod, not the container, so a restart of any of them releases what was
//! made before it.
//!
//! One replica releases, the holder of a Lease of its own (the reaper's
//! way: a pass bounded by a third of the Lease, stopped when it is lost).
//! Only the opted-in pods are watched (a label selector), whole, for
//! their container statuses.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease as LeaseObject;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::commands::reaper::{Lease, LeaseSettings, first_few, left_resource, pod_ref};
use crate::commands::release::{Made, Owner, ReleaseError, Released, delete_owned_made};
use crate::observe::Metrics;
use crate::observe::events::PodEvent;

/// The label that opts a worker pod in, under the key prefix.
pub const OPT_IN: &str = "release-on-restart";

/// `--restart-clock-margin`'s default: what NTP keeps two nodes within,
/// many times over.
pub const DEFAULT_CLOCK_MARGIN: Duration = Duration::from_secs(2);

/// How the release of restarted workers runs.
#[derive(Debug, Clone)]
pub struct RestartSettings {
    /// The owner labels' key prefix: the opt-in label is under it.
    pub key_prefix: String,
    /// The bound on the difference between a node's clock and the API
    /// server's.
    pub clock_margin: Duration,
    /// The namespaces watched; empty for all.
    pub namespaces: Vec<String>,
    /// The Lease that makes one replica the one that releases.
    pub lease: LeaseSettings,
    /// After a pass that left something, how long until it is tried again.
    pub retry_after: Duration,
}

impl RestartSettings {
    /// The opt-in label's key.
    pub fn label(&self) -> String {
        format!("{}/{OPT_IN}", self.key_prefix)
    }
}

/// The containers an opt-in label's value names: one or more container
/// names (DNS-1123 labels) joined by `.`.
///
/// # Errors
///
/// Why the value names no container, in words for an Event.
pub fn opted_in(value: &str) -> Result<Vec<&str>, String> {
    let names: Vec<&str> = value.split('.').collect();
    for name in &names {
        let valid = !name.is_empty()
            && name.len() <= 63
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !name.starts_with('-')
            && !name.ends_with('-');
        if !valid {
            return Err(format!(
                "'{value}' is not a container name, nor names joined by '.'"
            ));
        }
    }
    Ok(names)
}

/// The newest run of a container as its status says: whether the
/// container has run before it, and when it started (node clock).
#[derive(Debug, Clone, PartialEq, Eq)]
struct NewestRun {
    restarted: bool,
    started: Option<Timestamp>,
    /// The runtime's id of that run, when the status names it.
    id: String,
}

fn newest_run(status: &ContainerStatus) -> NewestRun {
    let state = status.state.as_ref();
    let last = status
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref());
    // A reset restart count (a node rebooted, its logs gone) still leaves
    // the earlier run in lastTerminationState.
    let after_an_earlier_run = status.restart_count >= 1 || last.is_some();
    let (restarted, started, id) = if let Some(running) = state.and_then(|s| s.running.as_ref()) {
        (
            after_an_earlier_run,
            running.started_at.as_ref().map(|t| t.0),
            status.container_id.clone(),
        )
    } else if let Some(terminated) = state.and_then(|s| s.terminated.as_ref()) {
        (
            after_an_earlier_run,
            terminated.started_at.as_ref().map(|t| t.0),
            terminated.container_id.clone(),
        )
    } else {
        // Waiting (to start again, in back-off): the newest run is the
        // one that ended, the current process is not there yet. That run
        // is the last state itself, so only the count says whether one
        // came before it: after the first run's crash (count 0) nothing
        // has restarted yet.
        (
            status.restart_count >= 1,
            last.and_then(|t| t.started_at.as_ref()).map(|t| t.0),
            last.and_then(|t| t.container_id.clone()),
        )
    };
    NewestRun {
        restarted,
        started,
        id: id.unwrap_or_default(),
    }
}

/// What to do for an opted-in pod, as its status says now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// No opted-in container has restarted with a known start: nothing.
    Nothing,
    /// Not this rule's to act on: the pod is being deleted (the collector
    /// takes what it owns) or has finished (the reaper's).
    NotRunning(&'static str),
    /// The node's clock is ahead of the API server's by more than the
    /// margin: the pod is held, its children kept, until another run.
    ClockAhead {
        by: SignedDuration,
        runs: String,
        /// The newest run held (`container=restarts/containerID`).
        newest: String,
    },
    /// Release what was made before `started`, the start of `container`'s
    /// newest run.
    Release {
        made: Made,
        container: String,
        restarts: i32,
        started: Timestamp,
        /// The runs this plan is for: a pass done for them is not redone.
        runs: String,
        /// The newest run (`container=restarts/containerID`): what a hold
        /// is for.
        newest: String,
    },
}

/// What an opted-in pod's status says to do. `reported` is the API
/// server's time of the status write that first showed the pod's newest
/// run (the latest `managedFields` time of the `status` subresource when
/// it was first seen); `unknown` gets the names the label gives that
/// the pod has no container of.
pub fn plan(pod: &Pod, names: &[&str], margin: Duration, reported: Option<Timestamp>) -> Plan {
    plan_with(pod, names, margin, reported, &mut Vec::new())
}

fn plan_with(
    pod: &Pod,
    names: &[&str],
    margin: Duration,
    reported: Option<Timestamp>,
    unknown: &mut Vec<String>,
) -> Plan {
    if pod.metadata.deletion_timestamp.is_some() {
        return Plan::NotRunning("being deleted");
    }
    let status = pod.status.as_ref();
    if let Some(phase @ ("Succeeded" | "Failed")) = status.and_then(|s| s.phase.as_deref()) {
        return Plan::NotRunning(if phase == "Succeeded" {
            "finished (Succeeded)"
        } else {
            "finished (Failed)"
        });
    }
    let statuses = status
        .into_iter()
        .flat_map(|s| {
            s.container_statuses
                .iter()
                .flatten()
                .chain(s.init_container_statuses.iter().flatten())
        })
        .collect::<Vec<_>>();
    let mut newest: Option<(Timestamp, &ContainerStatus, String)> = None;
    let mut runs = Vec::new();
    for name in names {
        let Some(container) = statuses.iter().find(|c| c.name == *name) else {
            unknown.push((*name).to_string());
            continue;
        };
        let run = newest_run(container);
        runs.push(format!("{name}={}/{}", container.restart_count, run.id));
        if !run.restarted {
            continue;
        }
        // No start time (a run the runtime lost): nothing until the next
        // status names one.
        let Some(started) = run.started else { continue };
        if newest.as_ref().is_none_or(|(at, ..)| started > *at) {
            newest = Some((started, container, runs.last().cloned().unwrap_or_default()));
        }
    }
    let Some((started, container, newest)) = newest else {
        return Plan::Nothing;
    };
    let margin = SignedDuration::try_from(margin).unwrap_or(SignedDuration::MAX);
    let second = SignedDuration::from_secs(1);
    if let Some(reported) = reported {
        // The kubelet wrote `started` at or before `reported` (API clock,
        // the second's floor): a start later than that by more than the
        // margin is the node's clock ahead. Both floors may hide up to a
        // second: not taken off, so that the doubt holds the pod.
        let ahead = started.duration_since(reported);
        if ahead > margin {
            return Plan::ClockAhead {
                by: ahead,
                runs: runs.join(","),
                newest,
            };
        }
    }
    let doubt = second.saturating_add(margin);
    let (Ok(cutoff), Ok(unproven_until)) = (started.checked_sub(doubt), started.checked_add(doubt))
    else {
        return Plan::Nothing;
    };
    Plan::Release {
        made: Made::Before {
            cutoff,
            unproven_until,
        },
        container: container.name.clone(),
        restarts: container.restart_count,
        started,
        runs: runs.join(","),
        newest,
    }
}

/// Each container's current run, as `plan` names runs.
fn current_runs(pod: &Pod) -> HashMap<String, String> {
    pod.status
        .iter()
        .flat_map(|s| {
            s.container_statuses
                .iter()
                .flatten()
                .chain(s.init_container_statuses.iter().flatten())
        })
        .map(|c| {
            let run = newest_run(c);
            (
                c.name.clone(),
                format!("{}={}/{}", c.name, c.restart_count, run.id),
            )
        })
        .collect()
}

/// The API server's time of the pod's latest status write.
fn status_written(pod: &Pod) -> Option<Timestamp> {
    pod.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|f| f.subresource.as_deref() == Some("status"))
        .filter_map(|f| f.time.as_ref().map(|t| t.0))
        .max()
}

/// What the releaser knows of one opted-in pod.
#[derive(Debug)]
struct Tracked {
    uid: String,
    /// The newest run as first seen (`container=restarts/containerID`),
    /// and the API server's time of the status write that showed it then.
    /// Kept while that run is the newest: another named container's change
    /// (a first start, a sidecar's new ID) writes the status again, and
    /// dating the newest run's start by that later write would hide a
    /// node that was ahead when it started.
    newest: String,
    reported: Option<Timestamp>,
    /// The runs whose pass is done (a pass is not redone for them).
    done: Option<String>,
    /// A pass due (not before the instant), for these runs.
    due: Option<(Instant, Plan)>,
    /// The names its label gives that are no container of it, said once.
    warned_unknown: bool,
    /// An Event to record on it, by the Lease's holder (not by every
    /// replica).
    tell: Option<String>,
    /// The node it runs on: its Lease dates the node's clock.
    node: Option<String>,
    /// The runs whose pass was put off for a node's clock that could not
    /// be dated, told in an Event: once for those runs, not at every try.
    told_undated: Option<String>,
    /// Each container's current run (`name` to
    /// `name=restarts/containerID`), whatever the label names: a hold of a
    /// run of a container that has another one now is stale.
    containers: HashMap<String, String>,
}

/// Release forever: watch the opted-in pods, and while this replica holds
/// the Lease, release what earlier runs of their restarted containers made.
pub async fn run(
    client: kube::Client,
    settings: RestartSettings,
    metrics: Arc<Metrics>,
    events: Option<crate::observe::events::Events>,
) {
    let label = settings.label();
    let config = watcher::Config::default().labels(&label);
    // One watch per scope (all namespaces, or each of --namespace), each
    // event tagged with its scope: a relist replaces what its scope knew.
    let scopes: Vec<(Option<String>, Api<Pod>)> = if settings.namespaces.is_empty() {
        vec![(None, Api::all(client.clone()))]
    } else {
        // Each namespace once: a scope named twice would never count as
        // listed.
        settings
            .namespaces
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .map(|ns| (Some(ns.clone()), Api::namespaced(client.clone(), ns)))
            .collect()
    };
    let mut relisting: HashMap<Option<String>, std::collections::HashSet<(String, String)>> =
        HashMap::new();
    let mut changes = futures::stream::select_all(scopes.into_iter().map(|(scope, api)| {
        watcher::watcher(api, config.clone())
            .default_backoff()
            .map(move |event| (scope.clone(), event.map_err(|e| e.to_string())))
            .boxed()
    }));
    let mut lease = Lease::new(client.clone(), settings.lease.clone());
    let mut pods: HashMap<(String, String), Tracked> = HashMap::new();
    // The holds this replica knows, made or read from the Lease, by pod
    // uid. Kept apart from `pods`: a pod that leaves the watch (its label
    // taken off) and comes back is still held.
    let mut holds: HashMap<String, Holds> = HashMap::new();
    let mut tick = tokio::time::interval(lease.renew_every());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            change = changes.next() => match change {
                Some((_, Ok(watcher::Event::Apply(pod)))) => {
                    see(&mut pods, &pod, &settings, &label);
                }
                Some((scope, Ok(watcher::Event::InitApply(pod)))) => {
                    if let Some(seen) = relisting.get_mut(&scope) {
                        seen.insert(key_of(&pod));
                    }
                    see(&mut pods, &pod, &settings, &label);
                }
                Some((_, Ok(watcher::Event::Delete(pod)))) => {
                    pods.remove(&key_of(&pod));
                }
                Some((scope, Ok(watcher::Event::Init))) => {
                    relisting.insert(scope, std::collections::HashSet::new());
                }
                Some((scope, Ok(watcher::Event::InitDone))) => {
                    // Pods of the scope the list no longer has were
                    // deleted while the watch was away.
                    if let Some(seen) = relisting.remove(&scope) {
                        pods.retain(|key, _| {
                            scope.as_ref().is_some_and(|ns| *ns != key.0) || seen.contains(key)
                        });
                    }
                }
                Some((_, Err(error))) => {
                    // The watcher relists by itself (with its backoff): a
                    // restart missed meanwhile is in the list.
                    warn!(%error, "the watch of opted-in worker pods failed; it is retried");
                }
                None => return,
            },
            _ = tick.tick() => {
                let leader = lease.hold().await;
                metrics.set_restart_leader(leader);
                if leader {
                    let mut state = PassState { pods: &mut pods, holds: &mut holds };
                    pass(&client, &mut state, &mut lease, &settings, &metrics, events.as_ref()).await;
                }
            }
        }
    }
}

fn key_of(pod: &Pod) -> (String, String) {
    (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

/// Take in a pod's new state: a plan due now when its runs call for one
/// that is not done.
fn see(
    pods: &mut HashMap<(String, String), Tracked>,
    pod: &Pod,
    settings: &RestartSettings,
    label: &str,
) {
    let (Some(namespace), Some(name), Some(uid)) = (
        pod.metadata.namespace.clone(),
        pod.metadata.name.clone(),
        pod.metadata.uid.clone(),
    ) else {
        return;
    };
    let value = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(label))
        .cloned()
        .unwrap_or_default();
    let key = (namespace.clone(), name.clone());
    let names = match opted_in(&value) {
        Ok(names) => names,
        Err(why) => {
            let tracked = pods.entry(key).or_insert_with(|| Tracked::new(&uid));
            if !tracked.warned_unknown {
                tracked.warned_unknown = true;
                warn!(%namespace, pod = %name, %why, "an opted-in pod's label names no container: nothing of it is released");
                tracked.tell = Some(format!(
                    "ownerguard releases nothing of this pod on a restart: its label {label}: {why}"
                ));
            }
            tracked.due = None;
            return;
        }
    };
    let tracked = pods.entry(key).or_insert_with(|| Tracked::new(&uid));
    if tracked.uid != uid {
        // Another pod under the name: nothing of the old one carries over.
        *tracked = Tracked::new(&uid);
    }
    let mut unknown = Vec::new();
    let first = plan_with(pod, &names, settings.clock_margin, None, &mut unknown);
    if !unknown.is_empty() && !tracked.warned_unknown {
        tracked.warned_unknown = true;
        warn!(%namespace, pod = %name, containers = ?unknown, "an opted-in pod's label names containers it does not have");
        tracked.tell = Some(format!(
            "ownerguard's label {label} names container(s) this pod does not have: {}",
            unknown.join(", ")
        ));
    }
    tracked.node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    tracked.containers = current_runs(pod);
    let newest = match &first {
        Plan::Release { newest, .. } | Plan::ClockAhead { newest, .. } => newest.as_str(),
        _ => "",
    };
    if newest != tracked.newest {
        // This run, first seen now: the status write that showed it.
        tracked.newest = newest.to_string();
        tracked.reported = status_written(pod);
    }
    let now = plan_with(
        pod,
        &names,
        settings.clock_margin,
        tracked.reported,
        &mut Vec::new(),
    );
    match &now {
        Plan::Release { runs, .. } | Plan::ClockAhead { runs, .. } => {
            let pending = match &tracked.due {
                Some((_, Plan::Release { runs: due, .. } | Plan::ClockAhead { runs: due, .. })) => {
                    Some(due.as_str())
                }
                _ => None,
            };
            // A pass already due for these runs keeps its time (a retry
            // keeps its backoff).
            if tracked.done.as_deref() != Some(runs.as_str()) && pending != Some(runs.as_str()) {
                tracked.due = Some((Instant::now(), now));
            }
        }
        Plan::Nothing | Plan::NotRunning(_) => tracked.due = None,
    }
}

impl Tracked {
    fn new(uid: &str) -> Self {
        Self {
            uid: uid.to_string(),
            newest: String::new(),
            reported: None,
            done: None,
            due: None,
            warned_unknown: false,
            tell: None,
            told_undated: None,
            node: None,
            containers: HashMap::new(),
        }
    }
}

/// One pass over the pods due, while the Lease is held.
async fn pass(
    client: &kube::Client,
    state: &mut PassState<'_>,
    lease: &mut Lease,
    settings: &RestartSettings,
    metrics: &Metrics,
    events: Option<&crate::observe::events::Events>,
) {
    let PassState { pods, holds } = state;
    // What the Lease remembers (another replica's holds, or this one's in
    // an earlier life), added to what this replica knows before any pass
    // looks at a pod: neither replaces the other.
    let prefix = held_key(&settings.key_prefix, "");
    for (key, value) in lease.annotations() {
        if let Some(uid) = key.strip_prefix(&prefix) {
            let known = holds.entry(uid.to_string()).or_default();
            known
                .runs
                .extend(value.split(HOLDS_SEPARATOR).map(str::to_string));
        }
    }
    for (key, tracked) in pods.iter_mut() {
        if let Some(note) = tracked.tell.take() {
            let owner = Owner {
                namespace: key.0.clone(),
                name: key.1.clone(),
                uid: tracked.uid.clone(),
            };
            record(events, &owner, true, "RestartReleaseNotConfigured", note);
        }
    }
    let now = Instant::now();
    let mut due: Vec<(Instant, (String, String))> = pods
        .iter()
        .filter_map(|(key, t)| {
            t.due
                .as_ref()
                .filter(|(at, _)| *at <= now)
                .map(|(at, _)| (*at, key.clone()))
        })
        .collect();
    // At most PASSES_PER_TICK a renewal, the oldest first: after a start or
    // a takeover, every restarted pod's pass comes again (what was done is
    // kept in memory only), and those must not flood the API server nor
    // hold the watch up; the rest wait for the next renewals.
    due.sort();
    for (_, key) in due.into_iter().take(PASSES_PER_TICK) {
        if !lease.renewed_within(lease.renew_every()) && !lease.hold().await {
            metrics.set_restart_leader(false);
            return;
        }
        let Some(tracked) = pods.get_mut(&key) else {
            continue;
        };
        let Some((_, plan)) = tracked.due.take() else {
            continue;
        };
        let owner = Owner {
            namespace: key.0.clone(),
            name: key.1.clone(),
            uid: tracked.uid.clone(),
        };
        match plan {
            Plan::ClockAhead { by, runs, newest } => {
                hold_pod(
                    &owner,
                    by,
                    &newest,
                    (metrics, events),
                    holds,
                    (&mut *lease, &settings.key_prefix),
                )
                .await;
                tracked.done = Some(runs);
            }
            Plan::Release {
                made,
                container,
                restarts,
                started,
                runs,
                newest,
            } => {
                // Held before, by this replica in an earlier life or by
                // the one that held the Lease: held still (the node's
                // clock may have been set right since, which would make
                // what the new run made look old).
                if holds
                    .get(&owner.uid)
                    .is_some_and(|h| h.runs.contains(&hold_value(&owner, &newest)))
                {
                    info!(namespace = %owner.namespace, pod = %owner.name,
                        "a restarted worker held for its node's clock before is held still");
                    tracked.done = Some(runs);
                    continue;
                }
                // The node's clock, dated by its own Lease: a node ahead
                // of the API server's clock beyond the margin makes new
                // children look old.
                if let Some(node) = &tracked.node {
                    match node_ahead(client, node, lease.renew_every()).await {
                        Ok(Some(ahead))
                            if ahead
                                > SignedDuration::try_from(settings.clock_margin)
                                    .unwrap_or(SignedDuration::MAX) =>
                        {
                            hold_pod(
                                &owner,
                                ahead,
                                &newest,
                                (metrics, events),
                                holds,
                                (&mut *lease, &settings.key_prefix),
                            )
                            .await;
                            tracked.done = Some(runs);
                            continue;
                        }
                        Ok(_) => {}
                        // The node's clock cannot be read: not trusted,
                        // the pass put off.
                        Err(why) => {
                            metrics.count_reap_failure("release");
                            if tracked.told_undated.as_deref() != Some(runs.as_str()) {
                                tracked.told_undated = Some(runs.clone());
                                record(
                                    events,
                                    &owner,
                                    true,
                                    "RestartReleaseWaiting",
                                    format!(
                                        "ownerguard releases nothing more of the earlier runs of container '{container}' until it can date its node's clock, tried again every {:?}: {why}",
                                        settings.retry_after
                                    ),
                                );
                            }
                            tracked.due = Some((
                                crate::deadline::after_now(settings.retry_after),
                                Plan::Release {
                                    made,
                                    container,
                                    restarts,
                                    started,
                                    runs,
                                    newest,
                                },
                            ));
                            continue;
                        }
                    }
                }
                let result = tokio::time::timeout(
                    lease.renew_every(),
                    delete_owned_made(
                        client.clone(),
                        &owner,
                        made,
                        Some(&children_of(&settings.key_prefix, &owner.name)),
                    ),
                )
                .await;
                let done = released(
                    &owner, &container, restarts, started, result, metrics, events,
                );
                if done {
                    tracked.done = Some(runs);
                } else {
                    tracked.due = Some((
                        crate::deadline::after_now(settings.retry_after),
                        Plan::Release {
                            made,
                            container,
                            restarts,
                            started,
                            runs,
                            newest,
                        },
                    ));
                }
            }
            Plan::Nothing | Plan::NotRunning(_) => {}
        }
    }
    keep_holds(client, pods, holds, lease, &settings.key_prefix).await;
}

/// What a pass reads and changes beside the Lease.
struct PassState<'a> {
    pods: &'a mut HashMap<(String, String), Tracked>,
    holds: &'a mut HashMap<String, Holds>,
}

/// The holds of one pod: its held runs (`hold_value`s; more than one
/// when several of its containers were held), and when it was last read
/// while not watched.
#[derive(Debug, Default)]
struct Holds {
    runs: std::collections::BTreeSet<String>,
    checked: Option<Instant>,
}

/// Between the held runs of one pod in its Lease annotation.
const HOLDS_SEPARATOR: char = ';';

/// Hold a restarted pod whose node's clock is ahead: nothing of it is
/// released for this run, remembered in memory and written into the
/// Lease at once, then counted once and told on the pod.
///
/// Written at once, not with the pass's other holds at its end: a pass
/// may stop before its end (the Lease not renewed between two pods) or
/// the replica with it, and the next holder, finding the node's clock set
/// right since, would release what the held run made.
async fn hold_pod(
    owner: &Owner,
    by: SignedDuration,
    newest: &str,
    (metrics, events): (&Metrics, Option<&crate::observe::events::Events>),
    holds: &mut HashMap<String, Holds>,
    (lease, key_prefix): (&mut Lease, &str),
) {
    let held = holds.entry(owner.uid.clone()).or_default();
    held.runs.insert(hold_value(owner, newest));
    let key = held_key(key_prefix, &owner.uid);
    let value = held_annotation(held);
    // Within the Lease's room for holds, as `keep_holds` counts it.
    let recorded = lease.annotations();
    let prefix = held_key(key_prefix, "");
    let room = recorded.contains_key(&key)
        || recorded.keys().filter(|k| k.starts_with(&prefix)).count() < MAX_RECORDED_HOLDS;
    if room
        && recorded.get(&key) != Some(&value)
        && let Err(error) = lease.annotate(vec![(key, Some(value))]).await
    {
        warn!(namespace = %owner.namespace, pod = %owner.name, %error,
            "cannot write a restarted worker's hold into the Lease; tried again at the end of a pass");
    }
    metrics.count_restart_kept("clock", 1);
    warn!(namespace = %owner.namespace, pod = %owner.name, ahead = %by,
        "a restarted worker's node reports a start ahead of the API server's clock beyond --restart-clock-margin: nothing of it is released");
    record(
        events,
        owner,
        true,
        "RestartReleaseHeld",
        format!(
            "ownerguard released nothing of this restarted pod: its node reports a start {by:#} ahead of the API server's clock, beyond --restart-clock-margin; what the pod owns is kept"
        ),
    );
}

/// The Lease annotation's value for one pod's holds: its held runs.
fn held_annotation(held: &Holds) -> String {
    held.runs
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(&HOLDS_SEPARATOR.to_string())
}

/// The Lease's annotation that remembers a held pod, by its uid.
fn held_key(key_prefix: &str, uid: &str) -> String {
    format!("held-restart.{key_prefix}/{uid}")
}

/// What the annotation holds: the pod (to find it again) and its newest
/// run held (`<namespace>/<name> <container>=<restarts>/<containerID>`).
fn hold_value(owner: &Owner, newest: &str) -> String {
    format!("{}/{} {newest}", owner.namespace, owner.name)
}

/// Holds the Lease's annotations may carry: about 110 KiB at their
/// longest, under the 256 KiB the API allows an object's annotations.
/// Past it a hold is kept in memory only (warned).
const MAX_RECORDED_HOLDS: usize = 256;

/// Pods no longer watched whose holds are checked in one pass (a GET
/// each): the rest wait for the next passes.
const UNWATCHED_CHECKS_PER_PASS: usize = 10;

/// Drop the holds of pods gone, or whose held container has run again
/// since (a new run is judged afresh), and write the others into the
/// Lease. A pod not watched (its label taken off, its namespace no longer
/// watched, not listed yet) keeps its holds until a read of it shows it
/// gone or replaced: the least recently read first, a few a pass.
async fn keep_holds(
    client: &kube::Client,
    pods: &HashMap<(String, String), Tracked>,
    holds: &mut HashMap<String, Holds>,
    lease: &mut Lease,
    key_prefix: &str,
) {
    let watched: HashMap<&str, &Tracked> = pods.values().map(|t| (t.uid.as_str(), t)).collect();
    // Watched: a held run is stale once its container runs another one.
    for (uid, held) in holds.iter_mut() {
        if let Some(tracked) = watched.get(uid.as_str()) {
            held.runs.retain(|value| {
                let newest = value.split_once(' ').map_or("", |(_, run)| run);
                let container = newest.split('=').next().unwrap_or_default();
                tracked
                    .containers
                    .get(container)
                    .is_none_or(|now| now == newest)
            });
        }
    }
    // Not watched: read, the least recently read first.
    let mut unwatched: Vec<(Option<Instant>, String)> = holds
        .iter()
        .filter(|(uid, _)| !watched.contains_key(uid.as_str()))
        .map(|(uid, held)| (held.checked, uid.clone()))
        .collect();
    unwatched.sort();
    for (_, uid) in unwatched.into_iter().take(UNWATCHED_CHECKS_PER_PASS) {
        let Some(held) = holds.get_mut(&uid) else {
            continue;
        };
        held.checked = Some(Instant::now());
        let pod = held
            .runs
            .iter()
            .next()
            .and_then(|value| value.split_once(' '))
            .map(|(pod, _)| pod.to_string());
        let gone = match pod.as_deref().and_then(|pod| pod.split_once('/')) {
            Some((namespace, name)) => {
                let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
                match tokio::time::timeout(Duration::from_secs(2), api.get_metadata_opt(name)).await
                {
                    Ok(Ok(found)) => {
                        found.is_none_or(|p| p.metadata.uid.as_deref() != Some(uid.as_str()))
                    }
                    // Unknown: kept.
                    _ => false,
                }
            }
            None => true,
        };
        if gone {
            held.runs.clear();
        }
    }
    holds.retain(|_, held| !held.runs.is_empty());

    let prefix = held_key(key_prefix, "");
    let recorded: HashMap<String, String> = lease
        .annotations()
        .into_iter()
        .filter(|(key, _)| key.starts_with(&prefix))
        .collect();
    let mut changes: Vec<(String, Option<String>)> = recorded
        .keys()
        .filter(|key| !holds.contains_key(&key[prefix.len()..]))
        .map(|key| (key.clone(), None))
        .collect();
    let mut room = MAX_RECORDED_HOLDS.saturating_sub(recorded.len() - changes.len());
    let mut unrecorded = 0;
    for (uid, held) in holds.iter() {
        let key = held_key(key_prefix, uid);
        let value = held_annotation(held);
        match recorded.get(&key) {
            Some(there) if *there == value => {}
            Some(_) => changes.push((key, Some(value))),
            None if room > 0 => {
                room -= 1;
                changes.push((key, Some(value)));
            }
            None => unrecorded += 1,
        }
    }
    if unrecorded > 0 {
        warn!(
            unrecorded,
            "the restart Lease holds as many holds as it may: the others are kept in this replica's memory only"
        );
    }
    if changes.is_empty() {
        return;
    }
    if let Err(error) = lease.annotate(changes).await {
        warn!(%error, "cannot write the holds of restarted workers into the Lease; tried again at the next pass");
    }
}

/// Passes at most each Lease renewal (5 s): 2 a second.
const PASSES_PER_TICK: usize = 10;

/// The label selector of what a worker labelled as its own: its name, or
/// `Self` (a name over 63 characters cannot be a label value). What it
/// owns without the label was not made through ownerguard and is kept.
fn children_of(key_prefix: &str, worker: &str) -> String {
    if worker.len() <= 63 {
        format!("{key_prefix}/owner-pod in ({worker},Self)")
    } else {
        format!("{key_prefix}/owner-pod in (Self)")
    }
}

/// How far the node's clock is ahead of the API server's, from its Lease
/// in `kube-node-lease`: the kubelet writes `renewTime` from its clock
/// (microseconds), the API server the time of that write into the
/// Lease's `managedFields` (its own clock, the second's floor). None when
/// the node has no Lease (a virtual kubelet's: the status write alone
/// dates it); an error when the Lease cannot be read, or is there but
/// does not date the clock (no `renewTime`, or no record of the write
/// that set it): the pass waits, as a Lease stripped of what dates the
/// clock must not pass for a node without one.
async fn node_ahead(
    client: &kube::Client,
    node: &str,
    within: Duration,
) -> Result<Option<SignedDuration>, String> {
    let leases: Api<LeaseObject> = Api::namespaced(client.clone(), "kube-node-lease");
    // Bounded: the pass runs between renewals of the restart Lease, and a
    // read that hangs must not hold those up.
    match tokio::time::timeout(within, leases.get_opt(node)).await {
        Ok(Ok(Some(lease))) => match lease_ahead(&lease) {
            Some(ahead) => Ok(Some(ahead)),
            None => {
                warn!(%node, "the node's Lease has no renewTime with a record of its write, which dates its clock: the release of its restarted worker waits");
                Err(format!(
                    "the Lease kube-node-lease/{node} has no renewTime with a record of the write that set it (managedFields)"
                ))
            }
        },
        Ok(Ok(None)) => Ok(None),
        // The Event is read in the worker's namespace: it says what the
        // operator must fix, the error's own text (which may name
        // ownerguard's identity or its transport) goes to the log only.
        Ok(Err(error)) => {
            warn!(%node, %error, "cannot read the node's Lease, which dates its clock: the release of its restarted worker waits");
            Err(match &error {
                kube::Error::Api(status) if status.code == 403 => format!(
                    "ownerguard may not get the Lease kube-node-lease/{node} (the chart's Role in kube-node-lease grants it)"
                ),
                kube::Error::Api(status) => format!(
                    "the Lease kube-node-lease/{node} cannot be read ({} {})",
                    status.code, status.reason
                ),
                _ => format!(
                    "the Lease kube-node-lease/{node} cannot be read (the API server did not answer; ownerguard's log has the error)"
                ),
            })
        }
        Err(_) => {
            warn!(%node, ?within, "reading the node's Lease, which dates its clock, took too long: the release of its restarted worker waits");
            Err(format!(
                "the Lease kube-node-lease/{node} could not be read in time"
            ))
        }
    }
}

fn lease_ahead(lease: &LeaseObject) -> Option<SignedDuration> {
    let renewed = lease.spec.as_ref()?.renew_time.as_ref()?.0;
    // The entry of the manager that wrote renewTime (the kubelet).
    let written = lease
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|f| {
            f.fields_v1
                .as_ref()
                .and_then(|fields| fields.0.get("f:spec"))
                .and_then(|spec| spec.get("f:renewTime"))
                .is_some()
        })
        .filter_map(|f| f.time.as_ref().map(|t| t.0))
        .max()?;
    // The API server recorded the write's second (its floor); the node's
    // clock said `renewed` just before the write. The second the floor
    // may hide is not taken off: the doubt holds the pod.
    Some(renewed.duration_since(written))
}

/// Count and tell what a pass did; whether it is done.
fn released(
    owner: &Owner,
    container: &str,
    restarts: i32,
    started: Timestamp,
    result: Result<Result<(Released, Vec<String>), ReleaseError>, tokio::time::error::Elapsed>,
    metrics: &Metrics,
    events: Option<&crate::observe::events::Events>,
) -> bool {
    let (namespace, name) = (&owner.namespace, &owner.name);
    match result {
        Ok(Ok((released, unproven))) => {
            metrics.count_reaped("pods", released.pods);
            metrics.count_reaped("jobs", released.jobs);
            metrics.count_reaped("configmaps", released.config_maps);
            metrics.count_restart_kept("unproven", unproven.len());
            let total = released.pods + released.jobs + released.config_maps;
            if total > 0 {
                record(
                    events,
                    owner,
                    false,
                    "RestartReleased",
                    format!(
                        "ownerguard released what earlier runs of container '{container}' (restart {restarts}, started {started}) made: {} pod(s), {} Job(s), {} ConfigMap(s)",
                        released.pods, released.jobs, released.config_maps
                    ),
                );
            }
            if !unproven.is_empty() {
                record(
                    events,
                    owner,
                    true,
                    "RestartChildrenKept",
                    format!(
                        "ownerguard kept {} object(s) made too near the restart of container '{container}' to tell which run made them (within --restart-clock-margin of its start): {}",
                        unproven.len(),
                        first_few(&unproven, ", ")
                    ),
                );
            }
            info!(%namespace, pod = %name, %container, restarts, %started, pods = released.pods, jobs = released.jobs,
                config_maps = released.config_maps, kept_unproven = unproven.len(),
                "released what earlier runs of a restarted worker made");
            true
        }
        Ok(Err(ReleaseError::Incomplete { left, .. })) => {
            for object in &left {
                metrics.count_reap_failure(left_resource(object));
            }
            record(
                events,
                owner,
                true,
                "RestartReleaseIncomplete",
                format!(
                    "ownerguard could not release {} object(s) that earlier runs of container '{container}' made, the rest released; it tries again: {}",
                    left.len(),
                    first_few(&left, ", ")
                ),
            );
            warn!(%namespace, pod = %name, left = ?left, "releasing what earlier runs of a restarted worker made left objects behind; retried later");
            false
        }
        // Gone, or replaced under its name: nothing of it to release.
        Ok(Err(ReleaseError::OwnerNotFound { .. } | ReleaseError::OwnerUidMismatch { .. })) => true,
        Ok(Err(error)) => {
            metrics.count_reap_failure("release");
            warn!(%namespace, pod = %name, %error, "releasing what earlier runs of a restarted worker made failed; retried later");
            false
        }
        Err(_) => {
            metrics.count_reap_failure("release");
            warn!(%namespace, pod = %name, "releasing what earlier runs of a restarted worker made took longer than a third of the Lease; retried later");
            false
        }
    }
}

/// Up to five of `objects`, and how many more.
fn record(
    events: Option<&crate::observe::events::Events>,
    owner: &Owner,
    warning: bool,
    reason: &'static str,
    note: String,
) {
    if let Some(events) = events {
        events.record(PodEvent {
            pod: pod_ref(owner),
            warning,
            reason,
            action: "Release",
            note,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
        PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};

    const MARGIN: Duration = Duration::from_secs(2);

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_780_000_000 + second).unwrap()
    }

    fn running(name: &str, restarts: i32, started: i64) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            restart_count: restarts,
            container_id: Some(format!("containerd://{name}-{restarts}")),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(Time(at(started))),
                }),
                ..ContainerState::default()
            }),
            last_state: (restarts > 0).then(|| ContainerState {
                terminated: Some(ContainerStateTerminated {
                    started_at: Some(Time(at(started - 100))),
                    finished_at: Some(Time(at(started - 1))),
                    container_id: Some(format!("containerd://{name}-{}", restarts - 1)),
                    ..ContainerStateTerminated::default()
                }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        }
    }

    /// A container waiting in CrashLoopBackOff after the run that started
    /// at `started` and ended at `finished`, `restarts` the count.
    fn backing_off(name: &str, restarts: i32, started: i64, finished: i64) -> ContainerStatus {
        let mut status = running(name, restarts, 0);
        status.state = Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("CrashLoopBackOff".into()),
                ..ContainerStateWaiting::default()
            }),
            ..ContainerState::default()
        });
        status.last_state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                started_at: Some(Time(at(started))),
                finished_at: Some(Time(at(finished))),
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        });
        status
    }

    fn pod(statuses: Vec<ContainerStatus>) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some("Running".into()),
                container_statuses: Some(statuses),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    /// Whether a child created at `created` (API clock) goes.
    fn goes(plan: &Plan, created: Timestamp) -> Option<bool> {
        match plan {
            Plan::Release {
                made: Made::Before { cutoff, .. },
                ..
            } => Some(created <= *cutoff),
            _ => None,
        }
    }

    #[test]
    fn the_label_names_containers_joined_by_dots() {
        assert_eq!(opted_in("worker"), Ok(vec!["worker"]));
        assert_eq!(
            opted_in("worker.sidecar-1"),
            Ok(vec!["worker", "sidecar-1"])
        );
        for bad in ["", "Worker", "a..b", "-a", "a-", "a_b", &"a".repeat(64)] {
            assert!(opted_in(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_container_that_never_restarted_releases_nothing() {
        let p = pod(vec![running("worker", 0, 0)]);
        assert_eq!(plan(&p, &["worker"], MARGIN, None), Plan::Nothing);
    }

    #[test]
    fn what_was_made_before_the_new_run_by_more_than_the_margin_goes_and_nothing_after() {
        // The new run started at 100 (node clock): a child created at 97
        // (API clock) is older by more than a second and the margin.
        let p = pod(vec![running("worker", 1, 100)]);
        let plan = plan(&p, &["worker"], MARGIN, Some(at(101)));
        assert_eq!(goes(&plan, at(97)), Some(true));
        assert_eq!(goes(&plan, at(98)), Some(false));
        assert_eq!(goes(&plan, at(100)), Some(false));
        assert_eq!(goes(&plan, at(150)), Some(false));
        let Plan::Release {
            made: Made::Before { unproven_until, .. },
            container,
            restarts,
            ..
        } = plan
        else {
            panic!("{plan:?}")
        };
        // Between: kept, counted as unproven.
        assert_eq!(unproven_until, at(103));
        assert_eq!((container.as_str(), restarts), ("worker", 1));
    }

    /// A margin longer than any timestamp's range (a `Duration` built in
    /// code) doubts every child: nothing is released, and nothing
    /// overflows. The longest a flag takes (Go's 292 years) releases
    /// nothing made within those years.
    #[test]
    fn a_margin_past_the_calendar_releases_nothing() {
        let p = pod(vec![running("worker", 1, 100)]);
        assert_eq!(
            plan(&p, &["worker"], Duration::MAX, Some(at(101))),
            Plan::Nothing
        );
        let plan = plan(
            &p,
            &["worker"],
            crate::k8s::duration::LONGEST,
            Some(at(101)),
        );
        assert_eq!(goes(&plan, at(-1_000_000_000)), Some(false), "{plan:?}");
    }

    /// The guarantee, under the stated clock bound: whatever the node's
    /// clock is off by (within the margin), whatever second fractions the
    /// truncations dropped, no child the current run made is released.
    #[test]
    fn no_child_of_the_current_run_is_ever_released_within_the_clock_bound() {
        let margin_ms = 2_000_i64;
        for skew_ms in (-margin_ms..=margin_ms).step_by(250) {
            for start_ms in (100_000..101_000).step_by(125) {
                // The run really started at start_ms (true time); the node
                // writes its clock's time, truncated to the second.
                let node_start = (start_ms + skew_ms).div_euclid(1000);
                let p = pod(vec![running("worker", 1, node_start)]);
                let plan = plan(&p, &["worker"], MARGIN, None);
                // A child of the current run is made at or after the start;
                // the API server stamps its own time, truncated.
                for after_ms in (0..4_000).step_by(50) {
                    let created = (start_ms + after_ms).div_euclid(1000);
                    assert_eq!(
                        goes(&plan, at(created)),
                        Some(false),
                        "skew {skew_ms} ms, start {start_ms} ms, child {after_ms} ms after"
                    );
                }
            }
        }
    }

    #[test]
    fn a_crash_looping_container_dates_its_dead_run() {
        // Waiting to start again: the newest run is the one that ended.
        let status = backing_off("worker", 3, 200, 210);
        let plan = plan(&pod(vec![status]), &["worker"], MARGIN, None);
        assert_eq!(goes(&plan, at(190)), Some(true));
        assert_eq!(
            goes(&plan, at(205)),
            Some(false),
            "the dead run's own children wait for the next run"
        );
    }

    #[test]
    fn the_first_runs_crash_is_no_restart_until_the_next_run_starts() {
        // Back-off after the first run crashed: its count is 0, its last
        // state is that very run. What was made around the pod's start
        // (before the first run, by whoever labelled it) is neither
        // released nor counted.
        let status = backing_off("worker", 0, 200, 210);
        assert_eq!(
            plan(&pod(vec![status]), &["worker"], MARGIN, None),
            Plan::Nothing
        );
    }

    #[test]
    fn a_reset_restart_count_still_shows_the_earlier_run() {
        let mut status = running("worker", 0, 100);
        status.last_state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                started_at: Some(Time(at(10))),
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        });
        let plan = plan(&pod(vec![status]), &["worker"], MARGIN, None);
        assert_eq!(goes(&plan, at(50)), Some(true));
    }

    #[test]
    fn a_run_with_no_start_time_waits() {
        let mut status = running("worker", 2, 0);
        status.state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                reason: Some("ContainerStatusUnknown".into()),
                exit_code: 137,
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        });
        assert_eq!(
            plan(&pod(vec![status]), &["worker"], MARGIN, None),
            Plan::Nothing
        );
    }

    #[test]
    fn the_latest_restart_of_several_opted_in_containers_counts() {
        let p = pod(vec![running("worker", 1, 100), running("helper", 4, 300)]);
        let plan = plan(&p, &["worker", "helper"], MARGIN, None);
        assert_eq!(goes(&plan, at(250)), Some(true));
        // Only the containers named count.
        let only = super::plan(&p, &["worker"], MARGIN, None);
        assert_eq!(goes(&only, at(250)), Some(false));
        assert_eq!(goes(&only, at(90)), Some(true));
    }

    #[test]
    fn a_name_the_pod_has_no_container_of_is_reported_and_releases_nothing() {
        let p = pod(vec![running("worker", 1, 100)]);
        let mut unknown = Vec::new();
        assert_eq!(
            plan_with(&p, &["wroker"], MARGIN, None, &mut unknown),
            Plan::Nothing
        );
        assert_eq!(unknown, ["wroker"]);
    }

    #[test]
    fn a_pod_being_deleted_or_finished_is_not_this_rules() {
        let mut p = pod(vec![running("worker", 1, 100)]);
        p.metadata.deletion_timestamp = Some(Time(at(200)));
        assert!(matches!(
            plan(&p, &["worker"], MARGIN, None),
            Plan::NotRunning(_)
        ));
        let mut p = pod(vec![running("worker", 1, 100)]);
        p.status.as_mut().unwrap().phase = Some("Failed".into());
        assert!(matches!(
            plan(&p, &["worker"], MARGIN, None),
            Plan::NotRunning(_)
        ));
    }

    #[test]
    fn a_node_clock_ahead_beyond_the_margin_holds_the_pod() {
        // The kubelet reports a start at 160 in a status the API server
        // wrote at 100: its clock is a minute ahead.
        let p = pod(vec![running("worker", 1, 160)]);
        assert!(matches!(
            plan(&p, &["worker"], MARGIN, Some(at(100))),
            Plan::ClockAhead { .. }
        ));
        // Within the margin: released as usual.
        assert!(matches!(
            plan(&p, &["worker"], MARGIN, Some(at(158))),
            Plan::Release { .. }
        ));
    }

    #[test]
    fn a_node_lease_dates_the_nodes_clock() {
        let lease = |renewed: i64, written: i64| LeaseObject {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                managed_fields: Some(vec![
                    ManagedFieldsEntry {
                        time: Some(Time(at(written))),
                        fields_v1: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1(
                            serde_json::json!({"f:spec": {"f:renewTime": {}}}),
                        )),
                        ..ManagedFieldsEntry::default()
                    },
                    // Another manager's later write dates nothing.
                    ManagedFieldsEntry {
                        time: Some(Time(at(written + 500))),
                        ..ManagedFieldsEntry::default()
                    },
                ]),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
                renew_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                    at(renewed),
                )),
                ..Default::default()
            }),
        };
        // In step: the write is recorded within the second of the renewal.
        assert!(lease_ahead(&lease(100, 100)).unwrap() <= SignedDuration::ZERO);
        // A minute ahead.
        assert_eq!(
            lease_ahead(&lease(160, 100)),
            Some(SignedDuration::from_secs(60))
        );
        // Behind: negative, never held.
        assert!(lease_ahead(&lease(40, 100)).unwrap() < SignedDuration::ZERO);
        assert_eq!(lease_ahead(&LeaseObject::default()), None);
    }

    #[test]
    fn the_status_write_time_is_the_latest_status_entry() {
        let mut p = pod(vec![]);
        let entry = |subresource: Option<&str>, second: i64| ManagedFieldsEntry {
            subresource: subresource.map(String::from),
            time: Some(Time(at(second))),
            ..ManagedFieldsEntry::default()
        };
        p.metadata.managed_fields = Some(vec![
            entry(None, 500),
            entry(Some("status"), 100),
            entry(Some("status"), 120),
        ]);
        assert_eq!(status_written(&p), Some(at(120)));
    }
}
