//! `ownerguard release`: delete what a worker pod owns in its namespace and
//! wait until its pods are gone, the worker library's `release_owned`.
//!
//! A worker container restarted in the same pod (OOM, crash) keeps its
//! pod, so the garbage collector leaves its agents running; the new process
//! has no step in flight, so everything its pod owns is an orphan. It calls
//! this at boot. Deleted: the pods, Jobs (with their pods) and ConfigMaps
//! of the namespace whose every reference is the owner's, the whole tuple
//! (`v1`, `Pod`, its name and uid: the garbage collector's reading), or
//! for a pod a released Job's. An object with another owner beside it
//! lives on with that owner, as the collector would keep it; objects of
//! another owner or without owner are left alone. Each delete carries a
//! uid precondition, so an object recreated under the same name in between
//! is never touched. One failed delete does not stop the others; an object
//! already being deleted is not deleted again.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    Api, DeleteParams, ListParams, PartialObjectMeta, Preconditions, PropagationPolicy,
};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::time::Instant;
use tracing::{info, warn};

/// Why a release failed.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// An empty or blank owner name or uid: refused before any request.
    #[error("release needs the owner pod's name and uid: {what} is empty")]
    InvalidOwner { what: &'static str },
    /// The owner pod is not in the namespace.
    #[error(
        "owner pod '{name}' not found in namespace '{namespace}': an ownerReference only holds in the \
         namespace of its owner, so the worker must run in the namespace of the objects it creates"
    )]
    OwnerNotFound { name: String, namespace: String },
    /// The owner pod has another uid. Which one is not said: the worker
    /// knows its own.
    #[error(
        "owner pod '{name}' does not have uid '{declared}': pass the uid of the running worker pod \
         (downward API metadata.uid)"
    )]
    OwnerUidMismatch { name: String, declared: String },
    /// An API call failed before anything could be deleted.
    #[error("cannot {action} in namespace '{namespace}': {source}")]
    Api {
        action: String,
        namespace: String,
        #[source]
        source: kube::Error,
    },
    /// Everything deletable was deleted, but these are left: deletes that
    /// failed, and pods still there when the time was up.
    #[error(
        "{} object(s) of pod '{owner}' left in namespace '{namespace}' (everything else released): {}",
        .left.len(), .left.join(", ")
    )]
    Incomplete {
        owner: String,
        namespace: String,
        /// `kind/name: why`, one per object left.
        left: Vec<String>,
    },
}

/// What was deleted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Released {
    pub pods: usize,
    pub jobs: usize,
    pub config_maps: usize,
}

/// Which of an owner's objects a release takes: all of them (`release`,
/// the reaper), or only those an earlier run of a restarted worker made
/// ([`crate::commands::restarts`]), told apart by when the API server
/// created them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Made {
    /// Everything the owner owns.
    #[default]
    Any,
    /// Objects created at or before `cutoff` (their `creationTimestamp`,
    /// the API server's clock). Those created after it but before
    /// `unproven_until` are kept and named as unproven: they may be of
    /// either run. The pods of a Job released go with it whenever they
    /// were made (the Job's controller made them, not the run).
    Before {
        cutoff: Timestamp,
        unproven_until: Timestamp,
    },
}

impl Made {
    /// Whether this release takes an object created at `created` (the
    /// other references aside).
    pub fn takes(self, created: Option<&Timestamp>) -> bool {
        self.verdict(created) == Verdict::Release
    }

    /// What this release does with an object created at `created`.
    fn verdict(self, created: Option<&Timestamp>) -> Verdict {
        match self {
            Self::Any => Verdict::Release,
            Self::Before {
                cutoff,
                unproven_until,
            } => match created {
                Some(at) if *at <= cutoff => Verdict::Release,
                // No creation time: nothing proves when it was made.
                None => Verdict::Unproven,
                Some(at) if *at < unproven_until => Verdict::Unproven,
                Some(_) => Verdict::Keep,
            },
        }
    }
}

/// What a release does with one object the owner owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Release,
    /// Kept: made by the current run.
    Keep,
    /// Kept: which run made it cannot be proven.
    Unproven,
}

/// The owner whose objects are released.
#[derive(Debug, Clone)]
pub struct Owner {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl Owner {
    /// Refuse an empty or blank namespace, name or uid, before any request.
    ///
    /// # Errors
    ///
    /// [`ReleaseError::InvalidOwner`] naming the blank field.
    pub fn validate(&self) -> Result<(), ReleaseError> {
        for (what, value) in [
            ("namespace", &self.namespace),
            ("name", &self.name),
            ("uid", &self.uid),
        ] {
            if value.trim().is_empty() {
                return Err(ReleaseError::InvalidOwner { what });
            }
        }
        Ok(())
    }
}

/// An owner as a reference names it, the whole tuple (SPEC §3 rule 6): a
/// reference that carries the uid under another kind or name is not the
/// owner's, and its object is not released.
#[derive(Debug, Clone, Copy)]
struct Tuple<'a> {
    api_version: &'a str,
    kind: &'a str,
    name: &'a str,
    uid: &'a str,
}

impl Tuple<'_> {
    fn named_by(&self, reference: &OwnerReference) -> bool {
        // `/v1` is the core group's `v1` to the collector (rule 15).
        fn read(v: &str) -> &str {
            if crate::k8s::names::is_core_v1(v) {
                "v1"
            } else {
                v
            }
        }
        read(&reference.api_version) == read(self.api_version)
            && reference.kind == self.kind
            && reference.name == self.name
            && reference.uid == self.uid
    }
}

/// Release what `owner` owns; wait up to `timeout` for its pods to go.
///
/// # Errors
///
/// As [`delete_owned`], and [`ReleaseError::Incomplete`] naming the pods
/// still there after `timeout`.
pub async fn release(
    client: Client,
    owner: &Owner,
    timeout: Duration,
) -> Result<Released, ReleaseError> {
    release_and_wait_in(client, owner, Some(timeout), Made::Any, None)
        .await
        .map(|(released, _)| released)
}

/// Delete what `owner` owns, as [`release`] does, without waiting for the
/// pods to terminate (the reaper's way: its pass must stay shorter than
/// its Lease, and a pod's grace period is the pod's).
///
/// Every delete is attempted: one that fails is noted and the others go
/// on. A 403 on Jobs (listing or deleting them) is logged and Jobs are
/// skipped: a worker may not be allowed to touch them.
///
/// # Errors
///
/// [`ReleaseError`] when the owner is refused or not running with its uid,
/// or a listing fails (nothing is deleted then); [`ReleaseError::Incomplete`]
/// naming what is left when a delete failed.
pub async fn delete_owned(client: Client, owner: &Owner) -> Result<Released, ReleaseError> {
    delete_owned_made(client, owner, Made::Any, None)
        .await
        .map(|(released, _)| released)
}

/// Delete what `owner` owns and `made` takes, as [`delete_owned`] does,
/// among the objects `selector` (a label selector) lists, or all;
/// also the objects kept because their run cannot be proven
/// (`Kind/name`).
///
/// # Errors
///
/// As [`delete_owned`].
pub async fn delete_owned_made(
    client: Client,
    owner: &Owner,
    made: Made,
    selector: Option<&str>,
) -> Result<(Released, Vec<String>), ReleaseError> {
    release_and_wait_in(client, owner, None, made, selector).await
}

async fn release_and_wait_in(
    client: Client,
    owner: &Owner,
    wait: Option<Duration>,
    made: Made,
    selector: Option<&str>,
) -> Result<(Released, Vec<String>), ReleaseError> {
    owner.validate()?;
    let namespace = owner.namespace.as_str();
    let api_error = |action: &str| {
        let (action, namespace) = (action.to_string(), namespace.to_string());
        move |source| ReleaseError::Api {
            action,
            namespace,
            source,
        }
    };

    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let owner_pod = pods
        .get_metadata_opt(&owner.name)
        .await
        .map_err(api_error("read the owner pod"))?;
    let actual = owner_pod
        .ok_or_else(|| ReleaseError::OwnerNotFound {
            name: owner.name.clone(),
            namespace: namespace.to_string(),
        })?
        .metadata
        .uid
        .unwrap_or_default();
    if actual != owner.uid {
        return Err(ReleaseError::OwnerUidMismatch {
            name: owner.name.clone(),
            declared: owner.uid.clone(),
        });
    }
    let worker = Tuple {
        api_version: "v1",
        kind: "Pod",
        name: &owner.name,
        uid: &owner.uid,
    };

    // The candidates, listed metadata-only (by `selector` when given).
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let config_maps: Api<ConfigMap> = Api::namespaced(client, namespace);
    let listed_jobs = match list_meta(&jobs, selector).await {
        Ok(jobs) => jobs,
        Err(kube::Error::Api(status)) if status.code == 403 => {
            warn!(%namespace, message = %status.message, "not allowed to list Jobs; Jobs are skipped");
            Vec::new()
        }
        Err(error) => return Err(api_error("list Jobs")(error)),
    };
    let listed_pods = list_meta(&pods, selector)
        .await
        .map_err(api_error("list pods"))?;
    let listed_config_maps = list_meta(&config_maps, selector)
        .await
        .map_err(api_error("list ConfigMaps"))?;

    // The other pods an object may name beside the owner: one that is
    // gone, going or finished owns nothing any more (a finished pod keeps
    // its dependents only as long as its object stays, which is what the
    // reaper ends), so an object shared with it is the owner's to release.
    // Listed only when some object that names the owner or a Job names
    // another pod too; unlisted, no other pod counts as gone.
    let shared = listed_jobs
        .iter()
        .chain(&listed_pods)
        .chain(&listed_config_maps)
        .any(|meta| {
            let references = meta.owner_references.as_deref().unwrap_or_default();
            references
                .iter()
                .any(|r| worker.named_by(r) || r.kind == "Job")
                && references
                    .iter()
                    .any(|r| r.kind == "Pod" && !worker.named_by(r))
        });
    let others = if shared {
        Some(co_owners(&pods).await.map_err(api_error("list pods"))?)
    } else {
        None
    };
    let gone = |r: &OwnerReference| {
        r.kind == "Pod"
            && crate::k8s::names::is_core_v1(&r.api_version)
            && others
                .as_ref()
                .is_some_and(|others| !others.running.contains(&r.uid))
    };

    // Jobs first, so that their controller does not replace the pods.
    let mut unproven = Vec::new();
    let by_creation =
        |meta: &ObjectMeta| made.verdict(meta.creation_timestamp.as_ref().map(|t| &t.0));
    let (owned_jobs, kept_jobs) = owned(listed_jobs, |r| worker.named_by(r), gone, by_creation);
    unproven.extend(kept_jobs.into_iter().map(|name| format!("Job/{name}")));
    let mut released = Released::default();
    let mut left = Vec::new();
    // The Jobs released (or already gone): their pods go too.
    let mut jobs_released = Vec::new();
    for Owned {
        name,
        uid,
        terminating,
    } in &owned_jobs
    {
        if *terminating {
            jobs_released.push((name, uid));
            continue;
        }
        match delete(&jobs, name, uid).await {
            Ok(deleted) => {
                released.jobs += usize::from(deleted);
                jobs_released.push((name, uid));
            }
            Err(kube::Error::Api(status)) if status.code == 403 => {
                warn!(%namespace, job = %name, message = %status.message, "not allowed to delete Jobs; Jobs are skipped");
                break;
            }
            Err(error) => left.push(failed("Job", name, &error)),
        }
    }

    let of_a_released_job = |r: &OwnerReference| {
        jobs_released.iter().any(|(name, uid)| {
            Tuple {
                api_version: "batch/v1",
                kind: "Job",
                name,
                uid,
            }
            .named_by(r)
        })
    };
    // Listed again once Jobs went: their controller may have made pods
    // since the first list.
    let listed_pods = if jobs_released.is_empty() {
        listed_pods
    } else {
        list_meta(&pods, selector)
            .await
            .map_err(api_error("list pods"))?
    };
    let (owned_pods, kept_pods) = owned(
        listed_pods,
        |r| worker.named_by(r) || of_a_released_job(r),
        gone,
        |meta| {
            let references = meta.owner_references.as_deref().unwrap_or_default();
            if references.iter().any(of_a_released_job) {
                Verdict::Release
            } else {
                by_creation(meta)
            }
        },
    );
    unproven.extend(kept_pods.into_iter().map(|name| format!("Pod/{name}")));
    let (owned_config_maps, kept_config_maps) = owned(
        listed_config_maps,
        |r| worker.named_by(r),
        gone,
        by_creation,
    );
    unproven.extend(
        kept_config_maps
            .into_iter()
            .map(|name| format!("ConfigMap/{name}")),
    );

    let mut waiting = BTreeSet::new();
    for Owned {
        name,
        uid,
        terminating,
    } in &owned_pods
    {
        if *terminating {
            waiting.insert(uid.clone());
            continue;
        }
        match delete(&pods, name, uid).await {
            Ok(deleted) => {
                released.pods += usize::from(deleted);
                waiting.insert(uid.clone());
            }
            Err(error) => left.push(failed("Pod", name, &error)),
        }
    }
    for Owned {
        name,
        uid,
        terminating,
    } in &owned_config_maps
    {
        if *terminating {
            continue;
        }
        match delete(&config_maps, name, uid).await {
            Ok(deleted) => released.config_maps += usize::from(deleted),
            Err(error) => left.push(failed("ConfigMap", name, &error)),
        }
    }

    if let Some(timeout) = wait {
        match wait_gone(&pods, &waiting, timeout).await {
            Ok(()) => {}
            Err(WaitError::Api(source)) => {
                left.push(format!("pods not confirmed gone: {}", short(&source)));
            }
            Err(WaitError::StillThere(still)) => left.extend(
                still
                    .into_iter()
                    .map(|name| format!("Pod/{name}: still there after {}s", timeout.as_secs())),
            ),
        }
    }
    if !left.is_empty() {
        return Err(ReleaseError::Incomplete {
            owner: owner.name.clone(),
            namespace: namespace.to_string(),
            left,
        });
    }
    info!(%namespace, owner = %owner.name, pods = released.pods, jobs = released.jobs, config_maps = released.config_maps,
        "released the objects of a previous worker process");
    Ok((released, unproven))
}

/// `Kind/name: why` of a delete that failed.
fn failed(kind: &str, name: &str, error: &kube::Error) -> String {
    warn!(kind, name, %error, "delete failed; going on with the others");
    format!("{kind}/{name}: {}", short(error))
}

/// An API error in a few words: its code and message, not its debug form.
fn short(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("{} {}", status.code, status.message),
        other => other.to_string(),
    }
}

/// An object `owned` found.
struct Owned {
    name: String,
    uid: String,
    /// Already being deleted (a `deletionTimestamp`): not deleted again.
    terminating: bool,
}

/// The running pods of the namespace, by uid.
struct CoOwners {
    running: BTreeSet<String>,
}

/// Which pods of the namespace still own what they own: there, not being
/// deleted, not finished. Metadata carries no phase: the finished ones
/// are listed by `status.phase`, as the audit lists them.
async fn co_owners(pods: &Api<Pod>) -> Result<CoOwners, kube::Error> {
    let mut running: BTreeSet<String> = pods
        .list_metadata(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.uid)
        .collect();
    for phase in ["Succeeded", "Failed"] {
        let finished = pods
            .list_metadata(&ListParams::default().fields(&format!("status.phase={phase}")))
            .await?;
        for pod in finished.items {
            if let Some(uid) = pod.metadata.uid {
                running.remove(&uid);
            }
        }
    }
    Ok(CoOwners { running })
}

/// The objects of `api` with a reference `owned_by` accepts and every
/// other reference to a pod that `gone` says owns nothing any more: the
/// garbage collector deletes a dependent only once no owner of it is
/// left, so one with a running pod (or any other object) as owner beside
/// the released one is that owner's too and stays. Of those, the ones
/// `verdict` releases, and the names of those it keeps as unproven.
fn owned(
    listed: Vec<ObjectMeta>,
    owned_by: impl Fn(&OwnerReference) -> bool,
    gone: impl Fn(&OwnerReference) -> bool,
    verdict: impl Fn(&ObjectMeta) -> Verdict,
) -> (Vec<Owned>, Vec<String>) {
    let mut released = Vec::new();
    let mut unproven = Vec::new();
    for meta in listed {
        let theirs = meta.owner_references.as_deref().is_some_and(|references| {
            references.iter().any(&owned_by) && references.iter().all(|r| owned_by(r) || gone(r))
        });
        if !theirs {
            continue;
        }
        let (Some(name), Some(uid)) = (meta.name.clone(), meta.uid.clone()) else {
            continue;
        };
        match verdict(&meta) {
            Verdict::Release => released.push(Owned {
                terminating: meta.deletion_timestamp.is_some(),
                name,
                uid,
            }),
            Verdict::Unproven if meta.deletion_timestamp.is_none() => unproven.push(name),
            Verdict::Unproven | Verdict::Keep => {}
        }
    }
    (released, unproven)
}

/// The metadata of the objects of `api` (those `selector` selects, when
/// given).
async fn list_meta<K>(api: &Api<K>, selector: Option<&str>) -> Result<Vec<ObjectMeta>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut params = ListParams::default();
    if let Some(selector) = selector {
        params = params.labels(selector);
    }
    Ok(api
        .list_metadata(&params)
        .await?
        .items
        .into_iter()
        .map(|item| item.metadata)
        .collect())
}

/// Delete one object if it still has `uid`. `Ok(false)` when it is already
/// gone or was replaced (404, 409).
async fn delete<K>(api: &Api<K>, name: &str, uid: &str) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(false),
        Err(error) => Err(error),
    }
}

enum WaitError {
    Api(kube::Error),
    StillThere(Vec<String>),
}

/// Poll until no pod of `uids` is left, up to `timeout`.
async fn wait_gone(
    pods: &Api<Pod>,
    uids: &BTreeSet<String>,
    timeout: Duration,
) -> Result<(), WaitError> {
    if uids.is_empty() {
        return Ok(());
    }
    let deadline = crate::deadline::after_now(timeout);
    loop {
        let list: kube::core::ObjectList<PartialObjectMeta<Pod>> = pods
            .list_metadata(&ListParams::default())
            .await
            .map_err(WaitError::Api)?;
        let left: Vec<String> = list
            .items
            .into_iter()
            .filter(|pod| {
                pod.metadata
                    .uid
                    .as_ref()
                    .is_some_and(|uid| uids.contains(uid))
            })
            .filter_map(|pod| pod.metadata.name)
            .collect();
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(WaitError::StillThere(left));
        }
        tokio::time::sleep(
            Duration::from_millis(250).min(deadline.saturating_duration_since(Instant::now())),
        )
        .await;
    }
}
