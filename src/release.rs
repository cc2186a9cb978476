//! `ownerguard release`: delete what a worker pod owns in its namespace and
//! wait until its pods are gone, the worker library's `release_owned`.
//!
//! A worker container restarted in the same pod (OOM, crash) keeps its
//! pod, so the garbage collector leaves its agents running; the new process
//! has no step in flight, so everything its pod owns is an orphan. It calls
//! this at boot. Deleted: the pods, Jobs (with their pods) and ConfigMaps
//! of the namespace whose `ownerReferences` name the owner's uid. Objects of
//! another owner or without owner are left alone. Each delete carries a uid
//! precondition, so an object recreated under the same name in between is
//! never touched.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
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
    /// The owner pod has another uid.
    #[error(
        "owner pod '{name}' has uid '{actual}', not '{declared}': pass the uid of the running worker pod \
         (downward API metadata.uid)"
    )]
    OwnerUidMismatch {
        name: String,
        declared: String,
        actual: String,
    },
    /// An API call failed.
    #[error("cannot {action} in namespace '{namespace}': {source}")]
    Api {
        action: String,
        namespace: String,
        #[source]
        source: kube::Error,
    },
    /// Pods still there when the time was up.
    #[error("{} pod(s) still there after {}s: {}", .pods.len(), .after.as_secs(), .pods.join(", "))]
    StillThere { pods: Vec<String>, after: Duration },
}

/// What was deleted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Released {
    pub pods: usize,
    pub jobs: usize,
    pub config_maps: usize,
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

/// Release what `owner` owns; wait up to `timeout` for its pods to go.
///
/// # Errors
///
/// [`ReleaseError`] when the owner is refused or not running with its uid
/// (nothing is deleted), an object cannot be listed or deleted, or a pod is
/// still there after `timeout`. A 403 on Jobs is logged and skipped.
pub async fn release(
    client: Client,
    owner: &Owner,
    timeout: Duration,
) -> Result<Released, ReleaseError> {
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
            actual,
        });
    }

    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let owned_jobs = match owned(&jobs, |uid| uid == owner.uid).await {
        Ok(jobs) => jobs,
        Err(kube::Error::Api(status)) if status.code == 403 => {
            warn!(%namespace, message = %status.message, "not allowed to list Jobs; Jobs are skipped");
            Vec::new()
        }
        Err(error) => return Err(api_error("list Jobs")(error)),
    };
    let job_uids: BTreeSet<String> = owned_jobs.iter().map(|(_, uid)| uid.clone()).collect();
    let owned_pods = owned(&pods, |uid| uid == owner.uid || job_uids.contains(uid))
        .await
        .map_err(api_error("list pods"))?;
    let config_maps: Api<ConfigMap> = Api::namespaced(client, namespace);
    let owned_config_maps = owned(&config_maps, |uid| uid == owner.uid)
        .await
        .map_err(api_error("list ConfigMaps"))?;

    // Jobs first, so that their controller does not replace the pods.
    let mut released = Released::default();
    for (name, uid) in &owned_jobs {
        released.jobs += usize::from(
            delete(&jobs, name, uid)
                .await
                .map_err(api_error("delete a Job"))?,
        );
    }
    for (name, uid) in &owned_pods {
        released.pods += usize::from(
            delete(&pods, name, uid)
                .await
                .map_err(api_error("delete a pod"))?,
        );
    }
    for (name, uid) in &owned_config_maps {
        released.config_maps += usize::from(
            delete(&config_maps, name, uid)
                .await
                .map_err(api_error("delete a ConfigMap"))?,
        );
    }

    let waiting: BTreeSet<String> = owned_pods.iter().map(|(_, uid)| uid.clone()).collect();
    wait_gone(&pods, &waiting, timeout)
        .await
        .map_err(|e| match e {
            WaitError::Api(source) => api_error("list pods")(source),
            WaitError::StillThere(pods) => ReleaseError::StillThere {
                pods,
                after: timeout,
            },
        })?;
    info!(%namespace, owner = %owner.name, pods = released.pods, jobs = released.jobs, config_maps = released.config_maps,
        "released the objects of a previous worker process");
    Ok(released)
}

/// (name, uid) of the objects of `api` with an ownerReference whose uid
/// `owned_by` accepts. Listed metadata-only.
async fn owned<K>(
    api: &Api<K>,
    owned_by: impl Fn(&str) -> bool,
) -> Result<Vec<(String, String)>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let list = api.list_metadata(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|item| {
            item.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|r| owned_by(&r.uid))
        })
        .filter_map(|item| Some((item.metadata.name?, item.metadata.uid?)))
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
    let deadline = Instant::now() + timeout;
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
