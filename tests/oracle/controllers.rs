//! The controllers' side (SPEC §3 rule 12, issue 14 items 3 and 4): what
//! Kubernetes' built-in controllers make from an object the API server
//! stored, sent back through ownerguard as the API server would, so that
//! "a workload admitted whose controller is then refused" fails a
//! property, not a review.
//!
//! Each controller below is written from its own code (kubernetes/kubernetes,
//! the 1.34 line; the function is named at each); none from `src/`. What
//! matters to ownerguard is which labels, annotations and ownerReferences
//! the made object carries, and who sends it: the controller's service
//! account in kube-system, with no pod identity.
//!
//! | made by (user) | from | labels | annotations | ownerReferences |
//! |---|---|---|---|---|
//! | deployment-controller | Deployment | pod template's + `pod-template-hash` | the Deployment's (but the skipped ones) + revision, desired/max replicas | Deployment, controller, blocking |
//! | replicaset-controller | ReplicaSet | pod template's | pod template's | ReplicaSet, controller, blocking |
//! | job-controller | Job | pod template's (+ job-name, controller-uid) | pod template's | Job, controller, blocking |
//! | cronjob-controller | CronJob | Job template's | Job template's + scheduled timestamp | CronJob, controller, blocking |
//! | statefulset-controller | StatefulSet | revision: pod template's + `controller.kubernetes.io/hash`; claims: claim template's, then the selector's `matchLabels` over them; pod: pod template's + pod-name, pod-index, revision hash | revision: the StatefulSet's; claims: claim template's; pod: pod template's | revision, pod: StatefulSet, controller, blocking; claims: the claim template's own (none) |
//! | daemon-set-controller | DaemonSet | revision: pod template's + `controller-revision-hash`; pod: pod template's + revision hash, generation | revision: the DaemonSet's; pod: pod template's | DaemonSet, controller, blocking |
//! | ephemeral-volume-controller | Pod | the claim template's, verbatim | the claim template's | the Pod, `controller: true`, `blockOwnerDeletion: true` |
//! | resource-claim-controller | Pod + ResourceClaimTemplate | the template's `spec.metadata.labels` | its `spec.metadata.annotations` + `resource.kubernetes.io/pod-claim-name` | the Pod, `controller: true`, `blockOwnerDeletion: true` |
//!
//! [`Cluster`] plays the API server around them: a CREATE is sent to
//! `/mutate` and, patched, to `/validate` only when the chart's
//! objectSelector sends it (the object carries the owner-pod label), each
//! answer judged by the oracle; what is admitted is stored with a uid and
//! its generated name, a pod joins the pods that exist, and
//! [`Cluster::reconcile`] walks every controller to the leaves.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::{Hook, Pod, Settings, apply_patch, judge};

/// The prefix of the users the controllers run as (kube-controller-manager
/// with `--use-service-account-credentials`).
pub const CONTROLLER_USER_PREFIX: &str = "system:serviceaccount:kube-system:";

/// One object a controller makes, as it sends it to the API server.
#[derive(Clone, Debug)]
pub struct Made {
    /// The controller's service account in kube-system.
    pub controller: &'static str,
    /// The Kubernetes function that builds it.
    pub source: &'static str,
    pub object: Value,
}

// ---------------------------------------------------------------------------
// Templates: the oracle's own reading of SPEC §3 rule 12.

/// A template of an object: metadata that a controller stamps on what it
/// makes from it.
#[derive(Clone, Debug)]
pub struct TemplateView {
    /// JSON pointer of the template's `metadata`.
    pub pointer: String,
    /// Which template it is across an update: its pointer, or for one of a
    /// list, the list and the name (a volume's, a claim template's): a
    /// volume inserted in front moves the others, it changes none.
    pub identity: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Labels the controller sets over the template's: a StatefulSet's
    /// `spec.selector.matchLabels` on its claims.
    pub added: BTreeMap<String, String>,
}

impl TemplateView {
    /// Label `key` of what is made from it.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.added
            .get(key)
            .or_else(|| self.labels.get(key))
            .map(String::as_str)
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key).map(String::as_str)
    }
}

/// A map of strings, `Some(empty)` when absent; `None` when of another
/// shape (then the template is none: left alone).
fn string_map(value: Option<&Value>) -> Option<BTreeMap<String, String>> {
    match value {
        None | Some(Value::Null) => Some(BTreeMap::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect(),
        Some(_) => None,
    }
}

fn view(object: &Value, pointer: String, added: &BTreeMap<String, String>) -> Option<TemplateView> {
    let metadata = object.pointer(&pointer)?.as_object()?;
    Some(TemplateView {
        labels: string_map(metadata.get("labels"))?,
        annotations: string_map(metadata.get("annotations"))?,
        added: added.clone(),
        identity: pointer.clone(),
        pointer,
    })
}

/// `view` of a template of a list whose entries are named at `name`.
fn named_view(
    object: &Value,
    pointer: String,
    list: &str,
    name: &str,
    added: &BTreeMap<String, String>,
) -> Option<TemplateView> {
    let mut found = view(object, pointer, added)?;
    if let Some(name) = object.pointer(name).and_then(Value::as_str) {
        found.identity = format!("{list}[name={name}]");
    }
    Some(found)
}

/// Every template of `object`, by the shapes rule 12 names: pod templates
/// (`spec.template`, `spec.jobTemplate`, `spec.jobTemplate.spec.template`),
/// `spec.volumeClaimTemplates[i]` (with the selector's labels), each
/// `volumes[i].ephemeral.volumeClaimTemplate` of a pod spec, and a
/// `resource.k8s.io` ResourceClaimTemplate's `spec.metadata`.
pub fn templates(object: &Value) -> Vec<TemplateView> {
    let none = BTreeMap::new();
    let mut found: Vec<TemplateView> = [
        "/spec/template/metadata",
        "/spec/jobTemplate/metadata",
        "/spec/jobTemplate/spec/template/metadata",
    ]
    .into_iter()
    .filter_map(|p| view(object, p.to_string(), &none))
    .collect();
    let selector = string_map(object.pointer("/spec/selector/matchLabels"))
        .filter(|_| {
            object
                .pointer("/spec/selector")
                .is_some_and(Value::is_object)
        })
        .unwrap_or_default();
    let count = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_array)
            .map_or(0, Vec::len)
    };
    for i in 0..count("/spec/volumeClaimTemplates") {
        found.extend(named_view(
            object,
            format!("/spec/volumeClaimTemplates/{i}/metadata"),
            "/spec/volumeClaimTemplates",
            &format!("/spec/volumeClaimTemplates/{i}/metadata/name"),
            &selector,
        ));
    }
    for spec in [
        "/spec",
        "/spec/template/spec",
        "/spec/jobTemplate/spec/template/spec",
    ] {
        for i in 0..count(&format!("{spec}/volumes")) {
            found.extend(named_view(
                object,
                format!("{spec}/volumes/{i}/ephemeral/volumeClaimTemplate/metadata"),
                &format!("{spec}/volumes"),
                &format!("{spec}/volumes/{i}/name"),
                &none,
            ));
        }
    }
    let api = object["apiVersion"].as_str().unwrap_or("");
    if object["kind"] == "ResourceClaimTemplate" && api.starts_with("resource.k8s.io/") {
        found.extend(view(object, "/spec/metadata".into(), &none));
    }
    found
}

// ---------------------------------------------------------------------------
// What each controller makes.

fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn map_at(object: &Value, pointer: &str) -> Map<String, Value> {
    object
        .pointer(pointer)
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// `metav1.NewControllerRef(owner, kind)`: controller and blocking.
fn controller_ref(owner: &Value) -> Value {
    json!({
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

fn with(mut map: Map<String, Value>, key: &str, value: &str) -> Map<String, Value> {
    map.insert(key.into(), json!(value));
    map
}

/// Metadata with `labels`/`annotations` only when the controller sets them
/// (a nil map in Go is absent in JSON).
fn metadata(
    name: (&str, &str),
    namespace: &str,
    labels: Option<Map<String, Value>>,
    annotations: Option<Map<String, Value>>,
    owner_references: Vec<Value>,
) -> Value {
    let mut meta = Map::new();
    let (key, value) = name;
    meta.insert(key.into(), json!(value));
    meta.insert("namespace".into(), json!(namespace));
    if let Some(labels) = labels {
        meta.insert("labels".into(), Value::Object(labels));
    }
    if let Some(annotations) = annotations {
        meta.insert("annotations".into(), Value::Object(annotations));
    }
    if !owner_references.is_empty() {
        meta.insert("ownerReferences".into(), Value::Array(owner_references));
    }
    Value::Object(meta)
}

/// A template's labels or annotations: `None` when absent (nil in Go).
fn template_map(object: &Value, pointer: &str) -> Option<Map<String, Value>> {
    object.pointer(pointer).and_then(Value::as_object).cloned()
}

/// `controller.GetPodFromTemplate` (pkg/controller/controller_utils.go):
/// the template's labels, annotations and finalizers, `generateName`
/// `<parent>-`, the controller's reference, the template's spec.
fn pod_from_template(parent: &Value, template: &str, extra_labels: &[(&str, &str)]) -> Value {
    let mut labels =
        template_map(parent, &format!("{template}/metadata/labels")).unwrap_or_default();
    for (key, value) in extra_labels {
        labels.insert(key.to_string(), json!(value));
    }
    let prefix = format!("{}-", text(parent, "/metadata/name"));
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata(
            ("generateName", &prefix),
            text(parent, "/metadata/namespace"),
            Some(labels),
            template_map(parent, &format!("{template}/metadata/annotations")),
            vec![controller_ref(parent)],
        ),
        "spec": parent.pointer(&format!("{template}/spec")).cloned().unwrap_or(json!({})),
    });
    if let Some(finalizers) = parent.pointer(&format!("{template}/metadata/finalizers")) {
        pod["metadata"]["finalizers"] = finalizers.clone();
    }
    pod
}

/// `DeploymentController.getNewReplicaSet` (pkg/controller/deployment/sync.go):
/// the template's labels plus `pod-template-hash` (on the ReplicaSet and
/// its template), the Deployment's annotations but the skipped ones
/// (`deploymentutil.SetNewReplicaSetAnnotations`,
/// `copyDeploymentAnnotationsToReplicaSet`), a controller reference.
fn replica_set(deployment: &Value) -> Made {
    const HASH: &str = "5d8f9c7b6d";
    const SKIPPED: [&str; 6] = [
        "kubectl.kubernetes.io/last-applied-configuration",
        "deployment.kubernetes.io/revision",
        "deployment.kubernetes.io/revision-history",
        "deployment.kubernetes.io/desired-replicas",
        "deployment.kubernetes.io/max-replicas",
        "deprecated.deployment.rollback.to",
    ];
    let labels = with(
        map_at(deployment, "/spec/template/metadata/labels"),
        "pod-template-hash",
        HASH,
    );
    let mut annotations: Map<String, Value> = map_at(deployment, "/metadata/annotations")
        .into_iter()
        .filter(|(k, _)| !SKIPPED.contains(&k.as_str()))
        .collect();
    annotations.insert("deployment.kubernetes.io/revision".into(), json!("1"));
    let replicas = deployment["spec"]["replicas"].as_i64().unwrap_or(1);
    annotations.insert(
        "deployment.kubernetes.io/desired-replicas".into(),
        json!(replicas.to_string()),
    );
    annotations.insert(
        "deployment.kubernetes.io/max-replicas".into(),
        json!((replicas + 1).to_string()),
    );
    let mut template = deployment["spec"]["template"].clone();
    if let Some(meta) = template.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("labels".into(), Value::Object(labels.clone()));
    } else if let Some(template) = template.as_object_mut() {
        template.insert("metadata".into(), json!({"labels": labels}));
    }
    let mut selector = deployment["spec"]["selector"].clone();
    if let Some(match_labels) = selector
        .as_object_mut()
        .map(|s| s.entry("matchLabels").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
    {
        match_labels.insert("pod-template-hash".into(), json!(HASH));
    }
    let name = format!("{}-{HASH}", text(deployment, "/metadata/name"));
    Made {
        controller: "deployment-controller",
        source: "DeploymentController.getNewReplicaSet",
        object: json!({
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": metadata(
                ("name", &name),
                text(deployment, "/metadata/namespace"),
                Some(labels),
                Some(annotations),
                vec![controller_ref(deployment)],
            ),
            "spec": {"replicas": replicas, "selector": selector, "template": template},
        }),
    }
}

/// `ReplicaSetController.manageReplicas` -> `RealPodControl.CreatePods`.
fn replica_set_pod(replica_set: &Value) -> Made {
    Made {
        controller: "replicaset-controller",
        source: "ReplicaSetController.manageReplicas (controller.GetPodFromTemplate)",
        object: pod_from_template(replica_set, "/spec/template", &[]),
    }
}

/// `Controller.manageJob` (pkg/controller/job/job_controller.go) ->
/// `CreatePodsWithGenerateName`: the stored Job's template, which the API
/// server gave the job-name and controller-uid labels.
fn job_pod(job: &Value) -> Made {
    let uid = text(job, "/metadata/uid");
    let name = text(job, "/metadata/name");
    let mut pod = pod_from_template(
        job,
        "/spec/template",
        &[
            ("batch.kubernetes.io/controller-uid", uid),
            ("batch.kubernetes.io/job-name", name),
            ("controller-uid", uid),
            ("job-name", name),
        ],
    );
    let finalizers = pod["metadata"]
        .as_object_mut()
        .map(|m| m.entry("finalizers").or_insert_with(|| json!([])));
    if let Some(Value::Array(finalizers)) = finalizers {
        finalizers.push(json!("batch.kubernetes.io/job-tracking"));
    }
    Made {
        controller: "job-controller",
        source: "Controller.manageJob (controller.GetPodFromTemplate)",
        object: pod,
    }
}

/// `getJobFromTemplate2` (pkg/controller/cronjob/utils.go): the Job
/// template's labels and annotations (copyLabels, copyAnnotations) plus the
/// scheduled timestamp, name `<cronjob>-<minutes>`, a controller
/// reference, the Job template's spec.
fn cron_job_job(cron_job: &Value) -> Made {
    let annotations = with(
        map_at(cron_job, "/spec/jobTemplate/metadata/annotations"),
        "batch.kubernetes.io/cronjob-scheduled-timestamp",
        "2026-01-01T00:00:00Z",
    );
    let name = format!("{}-29433600", text(cron_job, "/metadata/name"));
    Made {
        controller: "cronjob-controller",
        source: "getJobFromTemplate2",
        object: json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": metadata(
                ("name", &name),
                text(cron_job, "/metadata/namespace"),
                Some(map_at(cron_job, "/spec/jobTemplate/metadata/labels")),
                Some(annotations),
                vec![controller_ref(cron_job)],
            ),
            "spec": cron_job.pointer("/spec/jobTemplate/spec").cloned().unwrap_or(json!({})),
        }),
    }
}

/// A ControllerRevision: `history.NewControllerRevision` (StatefulSet,
/// via `newRevision`, which then copies the set's annotations) or the
/// DaemonSet controller's `snapshot`: the pod template's labels plus the
/// hash label, the workload's annotations, a controller reference.
fn revision(
    workload: &Value,
    hash_label: &str,
    controller: &'static str,
    source: &'static str,
) -> Made {
    const HASH: &str = "7b9d6c5f48";
    let labels = with(
        map_at(workload, "/spec/template/metadata/labels"),
        hash_label,
        HASH,
    );
    let name = format!("{}-{HASH}", text(workload, "/metadata/name"));
    let annotations = template_map(workload, "/metadata/annotations");
    Made {
        controller,
        source,
        object: json!({
            "apiVersion": "apps/v1",
            "kind": "ControllerRevision",
            "metadata": metadata(
                ("name", &name),
                text(workload, "/metadata/namespace"),
                Some(labels),
                annotations,
                vec![controller_ref(workload)],
            ),
            "data": {"spec": {"template": {"$patch": "replace"}}},
            "revision": 1,
        }),
    }
}

/// `getPersistentVolumeClaims` (pkg/controller/statefulset/stateful_set_utils.go):
/// a deep copy of the claim template (its annotations, any references it
/// carries), named `<template>-<set>-<ordinal>`, its labels the template's
/// with the selector's `matchLabels` written over them (the selector's
/// alone when the template has none); then `newStatefulSetPod` for
/// ordinal 0 (`GetPodFromTemplate`, `initIdentity`, `updateStorage`).
fn stateful_set(set: &Value) -> Vec<Made> {
    let name = text(set, "/metadata/name");
    let namespace = text(set, "/metadata/namespace");
    let mut made = vec![revision(
        set,
        "controller.kubernetes.io/hash",
        "statefulset-controller",
        "newRevision (history.NewControllerRevision)",
    )];
    let selector = template_map(set, "/spec/selector/matchLabels");
    let mut claim_volumes = Vec::new();
    for template in set["spec"]["volumeClaimTemplates"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let mut meta = template["metadata"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let template_name = meta
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let claim_name = format!("{template_name}-{name}-0");
        meta.insert("name".into(), json!(claim_name));
        meta.insert("namespace".into(), json!(namespace));
        let labels = match (meta.get("labels").and_then(Value::as_object), &selector) {
            (Some(labels), Some(selector)) => {
                let mut labels = labels.clone();
                labels.extend(selector.clone());
                Some(labels)
            }
            (Some(labels), None) => Some(labels.clone()),
            (None, selector) => selector.clone(),
        };
        meta.remove("labels");
        if let Some(labels) = labels {
            meta.insert("labels".into(), Value::Object(labels));
        }
        claim_volumes.push((template_name, claim_name));
        made.push(Made {
            controller: "statefulset-controller",
            source: "getPersistentVolumeClaims",
            object: json!({
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": Value::Object(meta),
                "spec": template["spec"].clone(),
            }),
        });
    }
    let mut pod = pod_from_template(
        set,
        "/spec/template",
        &[
            ("statefulset.kubernetes.io/pod-name", &format!("{name}-0")),
            ("apps.kubernetes.io/pod-index", "0"),
            ("controller-revision-hash", &format!("{name}-7b9d6c5f48")),
        ],
    );
    let meta = pod["metadata"].as_object_mut().expect("a pod has metadata");
    meta.remove("generateName");
    meta.insert("name".into(), json!(format!("{name}-0")));
    let mut volumes: Vec<Value> = claim_volumes
        .iter()
        .map(|(volume, claim)| json!({"name": volume, "persistentVolumeClaim": {"claimName": claim}}))
        .collect();
    for volume in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        if !claim_volumes
            .iter()
            .any(|(v, _)| volume["name"] == v.as_str())
        {
            volumes.push(volume.clone());
        }
    }
    if !volumes.is_empty() {
        pod["spec"]["volumes"] = Value::Array(volumes);
    }
    made.push(Made {
        controller: "statefulset-controller",
        source: "newStatefulSetPod (controller.GetPodFromTemplate, updateStorage)",
        object: pod,
    });
    made
}

/// `DaemonSetsController.snapshot` (pkg/controller/daemon/update.go), then
/// a pod (`CreatePods` with `util.CreatePodTemplate`: the revision hash and
/// generation labels).
fn daemon_set(set: &Value) -> Vec<Made> {
    vec![
        revision(
            set,
            "controller-revision-hash",
            "daemon-set-controller",
            "DaemonSetsController.snapshot",
        ),
        Made {
            controller: "daemon-set-controller",
            source: "DaemonSetsController.syncNodes (util.CreatePodTemplate)",
            object: pod_from_template(
                set,
                "/spec/template",
                &[
                    ("controller-revision-hash", "7b9d6c5f48"),
                    ("pod-template-generation", "1"),
                ],
            ),
        },
    ]
}

/// The pod's claims: `ephemeralController.handleVolume`
/// (pkg/controller/volume/ephemeral/controller.go) for every generic
/// ephemeral volume, named `<pod>-<volume>`, the claim template's labels
/// and annotations verbatim and a reference to the pod with `controller:
/// true, blockOwnerDeletion: true`; and `Controller.handleClaim`
/// (pkg/controller/resourceclaim/controller.go) for every
/// `spec.resourceClaims[]` naming a ResourceClaimTemplate that exists: its
/// `spec.metadata` labels, its annotations plus
/// `resource.kubernetes.io/pod-claim-name`, the same reference,
/// `generateName` `<pod>-<claim>-`.
fn pod_claims(pod: &Value, store: &[Value]) -> Vec<Made> {
    let name = text(pod, "/metadata/name");
    let namespace = text(pod, "/metadata/namespace");
    let reference = json!({
        "apiVersion": "v1", "kind": "Pod", "name": name, "uid": pod["metadata"]["uid"],
        "controller": true, "blockOwnerDeletion": true,
    });
    let mut made = Vec::new();
    for volume in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        let Some(template) = volume.pointer("/ephemeral/volumeClaimTemplate") else {
            continue;
        };
        let claim = format!("{name}-{}", volume["name"].as_str().unwrap_or(""));
        made.push(Made {
            controller: "ephemeral-volume-controller",
            source: "ephemeralController.handleVolume",
            object: json!({
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": metadata(
                    ("name", &claim),
                    namespace,
                    template_map(template, "/metadata/labels"),
                    template_map(template, "/metadata/annotations"),
                    vec![reference.clone()],
                ),
                "spec": template["spec"].clone(),
            }),
        });
    }
    for claim in pod["spec"]["resourceClaims"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let Some(template_name) = claim["resourceClaimTemplateName"].as_str() else {
            continue;
        };
        let template = store.iter().find(|o| {
            o["kind"] == "ResourceClaimTemplate"
                && o["metadata"]["name"] == template_name
                && o["metadata"]["namespace"] == namespace
        });
        let Some(template) = template else {
            continue;
        };
        let claim_name = claim["name"].as_str().unwrap_or("");
        let annotations = with(
            map_at(template, "/spec/metadata/annotations"),
            "resource.kubernetes.io/pod-claim-name",
            claim_name,
        );
        made.push(Made {
            controller: "resource-claim-controller",
            source: "Controller.handleClaim",
            object: json!({
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": metadata(
                    ("generateName", &format!("{name}-{claim_name}-")),
                    namespace,
                    template_map(template, "/spec/metadata/labels"),
                    Some(annotations),
                    vec![reference.clone()],
                ),
                "spec": template["spec"]["spec"].clone(),
            }),
        });
    }
    made
}

/// What the built-in controllers make next from `stored` (an object the
/// API server stored: uid and name set); `store` holds what else exists
/// (the ResourceClaimTemplates a pod may name).
pub fn made_from(stored: &Value, store: &[Value]) -> Vec<Made> {
    let api = stored["apiVersion"].as_str().unwrap_or("");
    match (api, stored["kind"].as_str().unwrap_or("")) {
        ("apps/v1", "Deployment") => vec![replica_set(stored)],
        ("apps/v1", "ReplicaSet") => vec![replica_set_pod(stored)],
        ("apps/v1", "StatefulSet") => stateful_set(stored),
        ("apps/v1", "DaemonSet") => daemon_set(stored),
        ("batch/v1", "Job") => vec![job_pod(stored)],
        ("batch/v1", "CronJob") => vec![cron_job_job(stored)],
        ("v1", "Pod") => pod_claims(stored, store),
        _ => Vec::new(),
    }
}

// ---------------------------------------------------------------------------
// The API server around them.

/// How the API server reaches ownerguard: the answer (HTTP status, body) of
/// `hook` to `review`, with `pods` the pods that exist.
pub type Ask<'a> = dyn FnMut(Hook, &Value, &[Pod]) -> (u16, Value) + 'a;

/// What became of a create.
#[derive(Clone, Debug)]
pub enum Created {
    /// Stored as the API server keeps it (patched, named, with a uid).
    Stored(Value),
    /// Refused by `/mutate`: its answer.
    Denied(Value),
}

/// A namespace of a cluster: the pods that exist, what is stored, and the
/// settings ownerguard runs with.
pub struct Cluster<'a> {
    pub settings: &'a Settings,
    pub namespace: String,
    pub pods: Vec<Pod>,
    pub store: Vec<Value>,
    /// Every review sent, in order (for a failure's story).
    pub sent: Vec<Value>,
    next: u64,
}

impl<'a> Cluster<'a> {
    pub fn new(settings: &'a Settings, namespace: &str, pods: Vec<Pod>) -> Self {
        Self {
            settings,
            namespace: namespace.to_string(),
            pods,
            store: Vec::new(),
            sent: Vec::new(),
            next: 0,
        }
    }

    fn fresh(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// The chart's objectSelector: the owner-pod label, whatever its value.
    pub fn sent_to_ownerguard(&self, object: &Value) -> bool {
        object["metadata"]["labels"]
            .get(self.settings.pod_key())
            .is_some()
    }

    /// A CREATE review of `object` by `user_info`, as the API server sends
    /// it to a webhook.
    pub fn review(&mut self, user_info: &Value, object: &Value) -> Value {
        let api = object["apiVersion"].as_str().unwrap_or("v1");
        let (group, version) = api.split_once('/').unwrap_or(("", api));
        let kind = object["kind"].as_str().unwrap_or("");
        let mut request = json!({
            "uid": format!("7e57ca5e-0000-4000-9000-{:012x}", self.fresh()),
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": format!("{}s", kind.to_lowercase())},
            "namespace": self.namespace,
            "operation": "CREATE",
            "userInfo": user_info,
            "object": object,
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        });
        if let Some(name) = object["metadata"]["name"]
            .as_str()
            .filter(|n| !n.is_empty())
        {
            request["name"] = json!(name);
        }
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    }

    /// Create `object` as `user_info` would: the API server defaults its
    /// namespace, calls `/mutate`, applies the patch, names it, calls
    /// `/validate` (only when the objectSelector sends it), and stores it.
    ///
    /// # Errors
    ///
    /// The oracle's verdict on a wrong answer, a patch that does not apply,
    /// or `/validate` refusing what `/mutate` admitted.
    pub fn create(
        &mut self,
        user_info: &Value,
        object: Value,
        ask: &mut Ask<'_>,
    ) -> Result<Created, String> {
        let mut object = object;
        object["metadata"]["namespace"] = json!(self.namespace);
        let mut stored = if self.sent_to_ownerguard(&object) {
            let review = self.review(user_info, &object);
            let (status, answer) = ask(Hook::Mutate, &review, &self.pods);
            self.sent.push(review.clone());
            judge(
                &review,
                &self.pods,
                Hook::Mutate,
                self.settings,
                status,
                &answer,
            )
            .map_err(|wrong| format!("/mutate: {wrong}\n  review: {review}\n  answer: {answer}"))?;
            if answer["response"]["allowed"] != true {
                return Ok(Created::Denied(answer));
            }
            let mut patched = apply_patch(&object, &answer["response"])
                .map_err(|e| format!("/mutate's patch: {e}\n  review: {review}"))?
                .unwrap_or(object);
            self.name(&mut patched);
            let review = self.review(user_info, &patched);
            let (status, validated) = ask(Hook::Validate, &review, &self.pods);
            self.sent.push(review.clone());
            judge(
                &review,
                &self.pods,
                Hook::Validate,
                self.settings,
                status,
                &validated,
            )
            .map_err(|wrong| {
                format!("/validate: {wrong}\n  review: {review}\n  answer: {validated}")
            })?;
            if validated["response"]["allowed"] != true {
                return Err(format!(
                    "/validate refuses what /mutate admitted: {validated}\n  review: {review}\n  /mutate answered: {answer}"
                ));
            }
            patched
        } else {
            self.name(&mut object);
            object
        };
        let meta = &mut stored["metadata"];
        if let Some(map) = meta.as_object_mut() {
            map.remove("generateName");
        }
        if stored["kind"] == "Pod" && stored["apiVersion"] == "v1" {
            self.pods.push(Pod::new(
                &self.namespace,
                text(&stored, "/metadata/name"),
                text(&stored, "/metadata/uid"),
                false,
            ));
        }
        self.store.push(stored.clone());
        Ok(Created::Stored(stored))
    }

    /// The name the API server generates, and the uid it gives.
    fn name(&mut self, object: &mut Value) {
        let n = self.fresh();
        let meta = &mut object["metadata"];
        if meta["name"].as_str().is_none_or(str::is_empty) {
            let prefix = meta["generateName"].as_str().unwrap_or("").to_string();
            meta["name"] = json!(format!("{prefix}{:05x}", n & 0xfffff));
        }
        meta["uid"] = json!(format!("5eed0000-0000-4000-8000-{n:012x}"));
    }

    /// Walk every built-in controller from `stored` to the leaves: each
    /// object a controller makes is created as that controller; returns
    /// what was stored, in order.
    ///
    /// # Errors
    ///
    /// The first object refused though its parent was admitted (or any
    /// answer the oracle finds wrong on the way), with the chain of
    /// controllers that led to it.
    pub fn reconcile(&mut self, stored: &Value, ask: &mut Ask<'_>) -> Result<Vec<Value>, String> {
        let describe = |o: &Value| {
            format!(
                "{} '{}'",
                o["kind"].as_str().unwrap_or("object"),
                text(o, "/metadata/name")
            )
        };
        let mut queue: Vec<(String, Value)> = vec![(describe(stored), stored.clone())];
        let mut made_all = Vec::new();
        while let Some((chain, parent)) = queue.pop() {
            for made in made_from(&parent, &self.store) {
                if made_all.len() >= 64 {
                    return Err(format!("more than 64 objects made from {chain}"));
                }
                let user = json!({
                    "username": format!("{CONTROLLER_USER_PREFIX}{}", made.controller),
                    "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"],
                });
                let what = format!(
                    "{} {} by {}",
                    made.controller,
                    made.object["kind"].as_str().unwrap_or(""),
                    made.source
                );
                match self.create(&user, made.object.clone(), ask) {
                    Ok(Created::Stored(child)) => {
                        queue.push((format!("{chain} -> {}", describe(&child)), child.clone()));
                        made_all.push(child);
                    }
                    Ok(Created::Denied(answer)) => {
                        return Err(format!(
                            "{chain} was admitted, but what its controller makes from it is refused: the {what}\n  refused: {}\n  object: {}",
                            answer["response"]["status"]["message"], made.object
                        ));
                    }
                    Err(wrong) => return Err(format!("{chain} -> the {what}: {wrong}")),
                }
            }
        }
        Ok(made_all)
    }
}
