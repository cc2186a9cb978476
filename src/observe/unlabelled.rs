//! The observe-only view of what pods create without the owner label:
//! before a team labels anything, which workers create objects nothing
//! ties to them (the leaks ownerguard exists to stop), counted by the
//! creating pod's workload and namespace.
//!
//! The chart's observe webhook (off by default, `failurePolicy: Ignore`)
//! sends `/observe` the CREATEs made with a pod-bound token of objects
//! without the owner label. The answer is always "allowed", written at
//! once: the creating pod's workload is resolved afterwards, on one task
//! of its own, from a bounded queue (full: counted as `unresolved`) and a
//! bounded cache, one metadata GET per pod at a time, so no create ever
//! waits on it and its cost does not grow with the rate of creates.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PartialObjectMeta};
use tokio::sync::mpsc;
use tracing::info;

use crate::admission::{AdmissionRequest, EXTRA_POD_NAME, EXTRA_POD_UID, ObjectHead};
use crate::observe::Metrics;

/// Creates waiting for their pod's workload: beyond it, counted at once
/// as `unresolved`.
pub const QUEUE: usize = 1024;
/// Pods whose workload is remembered (by uid); beyond it the cache starts
/// over, which costs a GET per pod again and nothing else.
pub const CACHED_PODS: usize = 10_000;
/// The bound of one pod's GET.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);
/// At most one GET this often (20 a second): a flood of creates by pods
/// never seen (or reviews sent to `/observe` by anyone who reaches the
/// port, naming made-up pods) costs the API server no more than that.
/// The queue waits meanwhile; the creates it cannot hold count as
/// `unresolved`.
pub const GET_INTERVAL: Duration = Duration::from_millis(50);
/// After a GET that failed (not a pod gone: an API server that does not
/// answer, or refuses), no GET for this long: the creates meanwhile count
/// as `unresolved`, and the queue never waits on a struggling API server.
pub const PAUSE_AFTER_FAILURE: Duration = Duration::from_secs(10);

/// One create of an object without the owner label by a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnlabelledCreate {
    /// The creating pod's namespace (its service account's).
    pub pod_namespace: String,
    pub pod_name: String,
    pub pod_uid: String,
    /// The resource created, as kubectl names it (`configmaps`,
    /// `jobs.batch`).
    pub resource: String,
    /// Whether the object carries any ownerReference (some owner's
    /// collection may still take it) or none (nothing ever will).
    pub referenced: bool,
}

impl UnlabelledCreate {
    /// What `request` shows, when it is a CREATE with a pod-bound token of
    /// an object without `owner_label`; `None` otherwise (a person, a
    /// controller, a labelled object, an UPDATE), and for a request whose
    /// pod identity or resource is no name Kubernetes accepts (the API
    /// server never sends one; anyone who reaches the port may): every
    /// string kept is short, and none can reach an API path it was not
    /// meant for.
    pub fn of(request: &AdmissionRequest, object: &ObjectHead, owner_label: &str) -> Option<Self> {
        if request.operation != crate::admission::Operation::Create
            || object
                .metadata
                .labels
                .as_ref()
                .is_some_and(|labels| labels.contains_key(owner_label))
        {
            return None;
        }
        let one = |key: &str| match request.user_info.extra.get(key).map(Vec::as_slice) {
            Some([value]) if !value.is_empty() => Some(value.to_string()),
            _ => None,
        };
        let (pod_name, pod_uid) = (one(EXTRA_POD_NAME)?, one(EXTRA_POD_UID)?);
        if !crate::k8s::names::is_pod_name(&pod_name) || !crate::k8s::names::is_uid(&pod_uid) {
            return None;
        }
        // A pod-bound token is its service account's, whose namespace is
        // the pod's.
        let pod_namespace = request
            .user_info
            .username
            .strip_prefix("system:serviceaccount:")?
            .split_once(':')?
            .0
            .to_string();
        let group = request.resource.group.as_str();
        if !crate::k8s::names::is_namespace(&pod_namespace)
            || !crate::k8s::names::is_namespace(request.resource.resource.as_str())
            || !(group.is_empty() || crate::k8s::names::is_pod_name(group))
        {
            return None;
        }
        let resource = if group.is_empty() {
            request.resource.resource.to_string()
        } else {
            format!("{}.{group}", request.resource.resource.as_str())
        };
        Some(Self {
            pod_namespace,
            pod_name,
            pod_uid,
            resource,
            referenced: !crate::decide::resolve::references(&object.metadata).is_empty(),
        })
    }
}

/// The workload a pod belongs to, as a person names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Workload {
    /// `Deployment`, `StatefulSet`, `Job`...; `Pod` for a pod no
    /// controller owns; `unresolved` when it could not be read.
    pub kind: String,
    pub name: String,
}

impl Workload {
    pub fn unresolved() -> Self {
        Self {
            kind: "unresolved".to_string(),
            name: String::new(),
        }
    }

    /// The workload of the pod `metadata` describes: its controller, and
    /// for a ReplicaSet the Deployment that names it (`<deployment>-<hash>`
    /// with the pod's `pod-template-hash`); the pod itself when no
    /// controller owns it.
    pub fn of_pod(metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Self {
        let pod_name = metadata.name.clone().unwrap_or_default();
        let Some(controller) = metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true))
        else {
            return Self {
                kind: "Pod".to_string(),
                name: pod_name,
            };
        };
        let hash = metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get("pod-template-hash"));
        if controller.kind == "ReplicaSet"
            && controller.api_version == "apps/v1"
            && let Some(deployment) = hash.and_then(|hash| {
                controller
                    .name
                    .strip_suffix(hash.as_str())
                    .and_then(|rest| rest.strip_suffix('-'))
            })
            && !deployment.is_empty()
        {
            return Self {
                kind: "Deployment".to_string(),
                name: deployment.to_string(),
            };
        }
        Self {
            kind: controller.kind.clone(),
            name: controller.name.clone(),
        }
    }
}

/// How many creates one workload made of one resource, since start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadCount {
    pub workload: Workload,
    pub resource: String,
    /// Whether the objects carried some ownerReference.
    pub referenced: bool,
    pub creates: u64,
}

/// Most (workload, resource, referenced) counts the tally keeps.
pub const MAX_TALLY_ENTRIES: usize = 10_000;

/// The counts by the creating pod's namespace, for the policy reports:
/// at most [`crate::observe::metrics::MAX_WORKLOAD_LABELS`] workloads and
/// [`MAX_TALLY_ENTRIES`] counts, the rest not kept (the metric counts
/// them as `other`).
#[derive(Debug, Default)]
struct Tally {
    by_namespace: std::collections::BTreeMap<String, Vec<WorkloadCount>>,
    workloads: std::collections::HashSet<(String, Workload)>,
    entries: usize,
}

impl Tally {
    fn add(&mut self, create: &UnlabelledCreate, workload: &Workload) {
        let key = (create.pod_namespace.clone(), workload.clone());
        if !self.workloads.contains(&key) {
            if self.workloads.len() >= crate::observe::metrics::MAX_WORKLOAD_LABELS {
                return;
            }
            self.workloads.insert(key);
        }
        let counts = self
            .by_namespace
            .entry(create.pod_namespace.clone())
            .or_default();
        match counts.iter_mut().find(|c| {
            &c.workload == workload
                && c.resource == create.resource
                && c.referenced == create.referenced
        }) {
            Some(count) => count.creates += 1,
            None if self.entries >= MAX_TALLY_ENTRIES => {}
            None => {
                self.entries += 1;
                counts.push(WorkloadCount {
                    workload: workload.clone(),
                    resource: create.resource.clone(),
                    referenced: create.referenced,
                    creates: 1,
                });
            }
        }
    }
}

/// Where creates are counted: the queue to the resolving task, or, with
/// no cluster to ask (`serve --pods`), straight to the metrics.
#[derive(Clone)]
pub struct UnlabelledCreates {
    queue: Option<mpsc::Sender<UnlabelledCreate>>,
    metrics: Arc<Metrics>,
    tally: Arc<std::sync::Mutex<Tally>>,
}

impl std::fmt::Debug for UnlabelledCreates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnlabelledCreates")
            .field("resolving", &self.queue.is_some())
            .finish_non_exhaustive()
    }
}

impl UnlabelledCreates {
    /// Resolve workloads with `client` on a task of their own.
    pub fn start(client: kube::Client, metrics: Arc<Metrics>) -> Self {
        let (sender, receiver) = mpsc::channel(QUEUE);
        let resolver = Resolver {
            client,
            cache: HashMap::new(),
            paused_until: None,
            last_get: None,
        };
        let tally = Arc::new(std::sync::Mutex::new(Tally::default()));
        let counted = Self {
            queue: Some(sender),
            metrics,
            tally,
        };
        tokio::spawn(resolve(resolver, receiver, counted.clone()));
        counted
    }

    /// Count without resolving: every create's workload `unresolved`.
    pub fn unresolved(metrics: Arc<Metrics>) -> Self {
        Self {
            queue: None,
            metrics,
            tally: Arc::default(),
        }
    }

    /// What was counted since start, by the creating pod's namespace.
    pub fn by_namespace(&self) -> std::collections::BTreeMap<String, Vec<WorkloadCount>> {
        self.tally
            .lock()
            .map(|tally| tally.by_namespace.clone())
            .unwrap_or_default()
    }

    /// Count one create of `workload`: the metric and the tally. True the
    /// first time the workload is counted.
    fn count(&self, create: &UnlabelledCreate, workload: &Workload) -> bool {
        if let Ok(mut tally) = self.tally.lock() {
            tally.add(create, workload);
        }
        self.metrics.observe_unlabelled(create, workload)
    }

    /// Count `create`, never waiting.
    pub fn record(&self, create: UnlabelledCreate) {
        let create = match &self.queue {
            Some(queue) => match queue.try_send(create) {
                Ok(()) => return,
                Err(
                    mpsc::error::TrySendError::Full(create)
                    | mpsc::error::TrySendError::Closed(create),
                ) => create,
            },
            None => create,
        };
        self.count(&create, &Workload::unresolved());
    }
}

struct Resolver {
    client: kube::Client,
    /// By pod (namespace, name, uid): a pod's workload does not change
    /// (its controller reference is set at creation).
    cache: HashMap<(String, String, String), Workload>,
    /// No GET before this instant (a failed one paused them).
    paused_until: Option<tokio::time::Instant>,
    /// When the last GET started.
    last_get: Option<tokio::time::Instant>,
}

impl Resolver {
    async fn workload(&mut self, create: &UnlabelledCreate) -> Workload {
        let key = (
            create.pod_namespace.clone(),
            create.pod_name.clone(),
            create.pod_uid.clone(),
        );
        if let Some(workload) = self.cache.get(&key) {
            return workload.clone();
        }
        if let Some(last) = self.last_get {
            tokio::time::sleep_until(last + GET_INTERVAL).await;
        }
        let now = tokio::time::Instant::now();
        if self.paused_until.is_some_and(|until| now < until) {
            return Workload::unresolved();
        }
        self.last_get = Some(now);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &create.pod_namespace);
        let read = tokio::time::timeout(LOOKUP_TIMEOUT, api.get_metadata_opt(&create.pod_name));
        let workload = match read.await {
            // The pod of that uid: the token's pod, not a later one of its
            // name.
            Ok(Ok(Some(PartialObjectMeta { metadata, .. })))
                if metadata.uid.as_deref() == Some(create.pod_uid.as_str()) =>
            {
                Workload::of_pod(&metadata)
            }
            // Gone or replaced: not remembered, so that nothing stale is.
            Ok(Ok(_)) => return Workload::unresolved(),
            // Not readable now: paused a while.
            Ok(Err(_)) | Err(_) => {
                self.paused_until = Some(now + PAUSE_AFTER_FAILURE);
                return Workload::unresolved();
            }
        };
        if self.cache.len() >= CACHED_PODS {
            self.cache.clear();
        }
        self.cache.insert(key, workload.clone());
        workload
    }
}

async fn resolve(
    mut resolver: Resolver,
    mut queue: mpsc::Receiver<UnlabelledCreate>,
    counted: UnlabelledCreates,
) {
    // The task holds a sender of its own queue (in `counted`): it ends
    // with the process, not when the last webhook is dropped.
    while let Some(create) = queue.recv().await {
        let workload = resolver.workload(&create).await;
        if counted.count(&create, &workload) {
            info!(
                namespace = %create.pod_namespace,
                workload = %format_args!("{}/{}", workload.kind, workload.name),
                resource = %create.resource,
                referenced = create.referenced,
                "a workload creates objects without the owner label"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    use serde_json::json;

    fn pod(labels: &[(&str, &str)], references: &[(&str, &str, &str, bool)]) -> ObjectMeta {
        ObjectMeta {
            name: Some("p-0".into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            owner_references: Some(
                references
                    .iter()
                    .map(|(api_version, kind, name, controller)| OwnerReference {
                        api_version: api_version.to_string(),
                        kind: kind.to_string(),
                        name: name.to_string(),
                        uid: "u".into(),
                        controller: Some(*controller),
                        block_owner_deletion: None,
                    })
                    .collect(),
            ),
            ..ObjectMeta::default()
        }
    }

    fn workload(kind: &str, name: &str) -> Workload {
        Workload {
            kind: kind.into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_pods_workload_is_its_controller_and_a_replicasets_deployment() {
        let hash = [("pod-template-hash", "7d9f8c6b5")];
        let rs = ("apps/v1", "ReplicaSet", "web-7d9f8c6b5", true);
        assert_eq!(
            Workload::of_pod(&pod(&hash, &[rs])),
            workload("Deployment", "web")
        );
        // A ReplicaSet of its own (no hash, or a name that is not the
        // Deployment's): the ReplicaSet.
        assert_eq!(
            Workload::of_pod(&pod(&[], &[rs])),
            workload("ReplicaSet", "web-7d9f8c6b5")
        );
        let other = ("apps/v1", "ReplicaSet", "web", true);
        assert_eq!(
            Workload::of_pod(&pod(&hash, &[other])),
            workload("ReplicaSet", "web")
        );
        let only_hash = ("apps/v1", "ReplicaSet", "-7d9f8c6b5", true);
        assert_eq!(
            Workload::of_pod(&pod(&hash, &[only_hash])),
            workload("ReplicaSet", "-7d9f8c6b5")
        );
        let job = ("batch/v1", "Job", "step-3", true);
        assert_eq!(
            Workload::of_pod(&pod(&[], &[job])),
            workload("Job", "step-3")
        );
        // Only the controller reference names the workload.
        let co_owner = ("v1", "Pod", "worker-0", false);
        assert_eq!(
            Workload::of_pod(&pod(&[], &[co_owner])),
            workload("Pod", "p-0")
        );
        assert_eq!(
            Workload::of_pod(&pod(&[], &[co_owner, job])),
            workload("Job", "step-3")
        );
        assert_eq!(Workload::of_pod(&pod(&[], &[])), workload("Pod", "p-0"));
    }

    fn review(operation: &str, labels: serde_json::Value, user: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "operation": operation,
                "kind": {"group": "batch", "version": "v1", "kind": "Job"},
                "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
                "namespace": "agents", "userInfo": user,
                "object": {"metadata": {"name": "j", "labels": labels}}}
        }))
        .unwrap()
    }

    fn of(body: &[u8]) -> Option<UnlabelledCreate> {
        let review = crate::admission::Review::from_json(body).unwrap();
        let request = &review.request;
        UnlabelledCreate::of(request, request.object.as_ref()?, "ownerguard.io/owner-pod")
    }

    #[test]
    fn only_a_pods_create_of_an_object_without_the_owner_label_counts() {
        let token = |name: &str, uid: &str| {
            json!({"username": "system:serviceaccount:workers:runner",
                "extra": {EXTRA_POD_NAME: [name], EXTRA_POD_UID: [uid]}})
        };
        assert_eq!(
            of(&review("CREATE", json!({"a": "b"}), token("w-0", "u0"))),
            Some(UnlabelledCreate {
                // The pod's namespace is its service account's, which may
                // differ from the object's.
                pod_namespace: "workers".into(),
                pod_name: "w-0".into(),
                pod_uid: "u0".into(),
                resource: "jobs.batch".into(),
                referenced: false,
            })
        );
        let labelled = json!({"ownerguard.io/owner-pod": "w-0"});
        assert_eq!(of(&review("CREATE", labelled, token("w-0", "u0"))), None);
        assert_eq!(of(&review("UPDATE", json!({}), token("w-0", "u0"))), None);
        let person = json!({"username": "alice"});
        assert_eq!(of(&review("CREATE", json!({}), person)), None);
        // Identities the API server never sends.
        assert_eq!(of(&review("CREATE", json!({}), token("W_0", "u0"))), None);
        let not_a_service_account = json!({"username": "bob",
            "extra": {EXTRA_POD_NAME: ["w-0"], EXTRA_POD_UID: ["u0"]}});
        assert_eq!(
            of(&review("CREATE", json!({}), not_a_service_account)),
            None
        );
        // What only a client that reaches the port sends: names that could
        // reach another API path, or hold memory, are not counted.
        let long = "a".repeat(1 << 20);
        for (namespace, uid) in [
            ("x/../../api/v1/namespaces/agents/pods/real-2?y=", "u0"),
            ("a b", "u0"),
            (long.as_str(), "u0"),
            ("workers", "u/0"),
            ("workers", long.as_str()),
        ] {
            let user = json!({"username": format!("system:serviceaccount:{namespace}:w"),
                "extra": {EXTRA_POD_NAME: ["w-0"], EXTRA_POD_UID: [uid]}});
            assert_eq!(
                of(&review("CREATE", json!({}), user)),
                None,
                "{namespace:.40} {uid:.40}"
            );
        }
        for (group, resource) in [("", long.as_str()), ("batch", "jobs/x"), ("a b", "jobs")] {
            let mut body: serde_json::Value =
                serde_json::from_slice(&review("CREATE", json!({}), token("w-0", "u0"))).unwrap();
            body["request"]["resource"] =
                json!({"group": group, "version": "v1", "resource": resource});
            assert_eq!(
                of(&serde_json::to_vec(&body).unwrap()),
                None,
                "{group} {resource:.40}"
            );
        }
    }
}
