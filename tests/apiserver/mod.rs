//! A Kubernetes API server on loopback, for the real kube client: enough
//! of the protocol for ownerguard's watch, lookup and `release`, with the
//! faults a real one has.
//!
//! - list with `resourceVersion` (metadata-only when the client asks with
//!   `as=PartialObjectMetadataList`), label selectors of `k=v` and `k` terms, field
//!   selectors of `=`, `==` and `!=` terms on the fields the real one
//!   serves for pods (`metadata.name`, `metadata.namespace`,
//!   `status.phase`, `spec.nodeName`; any other is 400, as there);
//! - watch streams of ADDED, MODIFIED, DELETED, BOOKMARK, replayed from the
//!   requested `resourceVersion`, and ERROR 410 Gone on demand. A change is
//!   filtered as the API server's watch cache filters it (cacher
//!   `convertToWatchEvent`): old and new object against the selectors, so
//!   an object that starts matching arrives as ADDED and one that stops
//!   matching as DELETED (the old object);
//! - GET of the whole object (of its metadata only when asked with
//!   `as=PartialObjectMetadata`; 404 when missing), DELETE (with preconditions and
//!   propagationPolicy recorded; pods can linger before they go);
//! - faults: down (503), slow GETs, Jobs forbidden (403), dropped watches.
//!
//! Every call is recorded as `METHOD path?query` for the scenarios to
//! assert.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Pod,
    Job,
    ConfigMap,
    Lease,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Pod => "Pod",
            Self::Job => "Job",
            Self::ConfigMap => "ConfigMap",
            Self::Lease => "Lease",
        }
    }
    fn api_version(self) -> &'static str {
        match self {
            Self::Job => "batch/v1",
            Self::Lease => "coordination.k8s.io/v1",
            _ => "v1",
        }
    }
}

/// Faults to inject.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Every request answers 503.
    pub down: bool,
    /// GET of one object under [`Faults::get_delay_under`] waits this
    /// long first.
    pub get_delay: Duration,
    /// The path the GETs that wait start with: empty for every GET, a
    /// resource's path for an API server slow for that one only.
    pub get_delay_under: String,
    /// Jobs answer 403.
    pub jobs_forbidden: bool,
    /// The next watch answers ERROR 410 Gone, as after etcd compaction.
    pub gone_on_next_watch: bool,
    /// A deleted pod stays, terminating, this long before it goes.
    pub pod_linger: Duration,
    /// Deleted pods never go (stuck finalizer).
    pub pods_never_go: bool,
    /// Right after a list of this kind is served, the named object is
    /// replaced by a new one (another uid, no owner): a race made certain.
    pub replace_after_list: Option<(Kind, String, String)>,
    /// GETs of one object answer 429 Too Many Requests, with this
    /// `Retry-After` (seconds) when given.
    pub throttled: Option<Option<u64>>,
    /// Watch requests answer 500: the watch keeps failing.
    pub watch_fails: bool,
    /// Lists and watches with a field selector answer 500: the watches of
    /// finished pods keep failing, the others work.
    pub field_selectors_fail: bool,
    /// A list's later pages (asked with a `continue` token) answer 500: a
    /// list that fails midway.
    pub continue_fails: bool,
    /// Changes are not sent to open watches, which stay open: a stream that
    /// lost its events, or went silent.
    pub mute_watches: bool,
    /// Changes of the object of this name are not sent to open watches;
    /// every other change is: a stream that lost one pod's events and
    /// keeps speaking.
    pub drop_events_of: Option<String>,
    /// DELETE of this kind (of this name only, when given) answers this
    /// code.
    pub delete_fails: Option<(Kind, Option<String>, u16)>,
    /// Requests to a path under one of these answer 403, as RBAC would.
    pub forbidden_paths: Vec<String>,
}

/// One term of a field selector: `field=value` or `field!=value`.
#[derive(Debug, Clone)]
struct FieldTerm {
    field: String,
    value: String,
    equal: bool,
}

/// The fields the API server lets a client select pods on (a subset of
/// `pod.ToSelectableFields`), and their value in `object`.
fn field_value(object: &Value, field: &str) -> Option<String> {
    let text = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    match field {
        "metadata.name" => Some(text("/metadata/name")),
        "metadata.namespace" => Some(text("/metadata/namespace")),
        "status.phase" => Some(text("/status/phase")),
        "spec.nodeName" => Some(text("/spec/nodeName")),
        _ => None,
    }
}

fn fields_select(terms: &[FieldTerm], object: &Value) -> bool {
    terms.iter().all(|term| {
        field_value(object, &term.field).is_some_and(|value| (value == term.value) == term.equal)
    })
}

struct Watcher {
    kind: Kind,
    namespace: Option<String>,
    selector: Vec<LabelTerm>,
    fields: Vec<FieldTerm>,
    metadata_only: bool,
    sender: mpsc::UnboundedSender<Result<Bytes, Infallible>>,
}

#[derive(Default)]
struct Inner {
    resource_version: u64,
    objects: BTreeMap<(Kind, String, String), Value>,
    /// Every change, for replay.
    history: Vec<Change>,
    calls: Vec<String>,
    watchers: Vec<Watcher>,
    faults: Faults,
    /// Any other object, by its API path (for `doctor`): GET by path, and a
    /// list of a collection path gives the objects directly under it.
    raw: BTreeMap<String, Value>,
    /// GETs of one object being answered now, and the most at once.
    gets_in_flight: usize,
    max_gets_in_flight: usize,
}

/// One change of an object, as the watch cache keeps it: the object
/// before (MODIFIED) for filtering.
struct Change {
    resource_version: u64,
    event: &'static str,
    kind: Kind,
    object: Value,
    previous: Option<Value>,
}

impl Change {
    /// The event a watcher of `namespace` with these selectors receives,
    /// if any.
    fn seen_by(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        selector: &[LabelTerm],
        fields: &[FieldTerm],
    ) -> Option<(&'static str, &Value)> {
        let passes = |object: &Value| {
            namespace.is_none_or(|ns| object["metadata"]["namespace"] == ns)
                && selects(selector, object)
                && fields_select(fields, object)
        };
        if self.kind != kind {
            return None;
        }
        let now = self.event != "DELETED" && passes(&self.object);
        let before = match (self.event, &self.previous) {
            ("DELETED", _) => passes(&self.object),
            (_, Some(previous)) => passes(previous),
            (_, None) => false,
        };
        match (now, before) {
            (true, true) => Some(("MODIFIED", &self.object)),
            (true, false) => Some(("ADDED", &self.object)),
            // The old object, at the change's resourceVersion.
            (false, true) if self.event == "DELETED" => Some(("DELETED", &self.object)),
            (false, true) => self.previous.as_ref().map(|previous| ("DELETED", previous)),
            (false, false) => None,
        }
    }
}

#[derive(Clone, Default)]
pub struct FakeApi {
    inner: Arc<Mutex<Inner>>,
}

pub struct Running {
    pub addr: SocketAddr,
    pub api: FakeApi,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Running {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube client configuration for this server.
    pub fn config(&self) -> kube::Config {
        let mut config = kube::Config::new(self.url().parse().unwrap());
        config.default_namespace = "default".into();
        config.read_timeout = Some(Duration::from_secs(295));
        config
    }

    /// A kube client for this server.
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config()).unwrap()
    }

    /// A kube client for this server configured as `serve` configures its
    /// own (no retries of its own: ownerguard decides when to try again).
    pub fn serve_client(&self) -> kube::Client {
        kube::Client::try_from(ownerguard::k8s::client::without_retries(self.config())).unwrap()
    }

    /// A kubeconfig file pointing at this server.
    pub fn kubeconfig(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\ncurrent-context: fake\nusers:\n- name: fake\n  user:\n    token: test\n",
            self.url()
        );
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl FakeApi {
    pub async fn start() -> Running {
        let api = FakeApi::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().fallback(handle).with_state(api.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Running { addr, api, task }
    }

    pub fn set_faults(&self, faults: Faults) {
        self.inner.lock().unwrap().faults = faults;
    }

    pub fn update_faults(&self, update: impl FnOnce(&mut Faults)) {
        update(&mut self.inner.lock().unwrap().faults);
    }

    /// The calls made so far, as `METHOD path?query`.
    pub fn calls(&self) -> Vec<String> {
        self.inner.lock().unwrap().calls.clone()
    }

    pub fn clear_calls(&self) {
        self.inner.lock().unwrap().calls.clear();
    }

    /// Calls whose text contains `needle`.
    pub fn calls_matching(&self, needle: &str) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter(|c| c.contains(needle))
            .collect()
    }

    /// Create or replace an object, telling the watches.
    pub fn put(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        uid: &str,
        labels: Value,
        owner_uids: &[&str],
    ) {
        // A reference names its pod as a real one does: by the name of the
        // pod of that uid in the namespace, when there is one.
        let pod_name = |uid: &str| {
            let inner = self.inner.lock().unwrap();
            inner
                .objects
                .iter()
                .find(|((k, ns, _), object)| {
                    *k == Kind::Pod && ns == namespace && object["metadata"]["uid"] == uid
                })
                .map_or_else(|| format!("owner-{uid}"), |((_, _, name), _)| name.clone())
        };
        let references: Vec<Value> = owner_uids
            .iter()
            .map(|uid| json!({"apiVersion": "v1", "kind": "Pod", "name": pod_name(uid), "uid": uid, "controller": false, "blockOwnerDeletion": false}))
            .collect();
        let mut object = json!({
            "apiVersion": kind.api_version(), "kind": kind.name(),
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": labels,
                         "creationTimestamp": "2026-11-29T12:00:00Z"},
        });
        if !references.is_empty() {
            object["metadata"]["ownerReferences"] = Value::Array(references);
        }
        self.store(kind, object, true);
    }

    /// Create or replace an object with exactly these `ownerReferences`.
    pub fn put_with_references(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        uid: &str,
        references: Value,
    ) {
        let object = json!({
            "apiVersion": kind.api_version(), "kind": kind.name(),
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "ownerReferences": references,
                         "creationTimestamp": "2026-11-29T12:00:00Z"},
        });
        self.store(kind, object, true);
    }

    /// Many pods at once, without watch events or history (benchmarks).
    pub fn load_pods(&self, pods: impl IntoIterator<Item = (String, String, String)>) {
        let mut inner = self.inner.lock().unwrap();
        inner.resource_version += 1;
        let rv = inner.resource_version.to_string();
        for (namespace, name, uid) in pods {
            let object = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "uid": uid,
                "resourceVersion": rv, "creationTimestamp": "2026-11-29T12:00:00Z", "labels": {"app": "agent"}}});
            inner.objects.insert((Kind::Pod, namespace, name), object);
        }
    }

    /// A pod the watch has not told about yet: it exists for GET and LIST,
    /// but its ADDED event is held back (a worker that just started).
    pub fn put_pod_unannounced(&self, namespace: &str, name: &str, uid: &str) {
        let object = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "creationTimestamp": "2026-11-29T12:00:00Z"}});
        self.store(Kind::Pod, object, false);
    }

    pub fn put_pod(&self, namespace: &str, name: &str, uid: &str) {
        self.put(Kind::Pod, namespace, name, uid, json!({}), &[]);
    }

    /// A pod owned by the Job of `job_uid`, as the Job controller makes it.
    pub fn put_job_pod(&self, namespace: &str, name: &str, uid: &str, job: &str, job_uid: &str) {
        let object = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid,
                "labels": {"batch.kubernetes.io/job-name": job},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": job_uid, "controller": true, "blockOwnerDeletion": true}]}});
        self.store(Kind::Pod, object, true);
    }

    /// Set a pod's `status.phase` (as the kubelet does through the status
    /// subresource), as MODIFIED: the watches of that phase see it ADDED,
    /// those of its old phase DELETED.
    pub fn set_pod_phase(&self, namespace: &str, name: &str, phase: &str) {
        let inner = self.inner.lock().unwrap();
        let key = (Kind::Pod, namespace.to_string(), name.to_string());
        if let Some(mut object) = inner.objects.get(&key).cloned() {
            object["status"] = json!({"phase": phase});
            drop(inner);
            self.store(Kind::Pod, object, true);
        }
    }

    /// A pod in `phase` from its creation on (as seen by a list: finished
    /// before ownerguard started).
    pub fn put_pod_in_phase(&self, namespace: &str, name: &str, uid: &str, phase: &str) {
        let object = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "creationTimestamp": "2026-11-29T12:00:00Z"},
            "status": {"phase": phase}});
        self.store(Kind::Pod, object, true);
    }

    /// A pod in `phase` that no watch has told about: only a GET sees it.
    pub fn put_pod_unannounced_in_phase(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        phase: &str,
    ) {
        let object = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "creationTimestamp": "2026-11-29T12:00:00Z"},
            "status": {"phase": phase}});
        self.store(Kind::Pod, object, false);
    }

    /// Mark a pod terminating (deletionTimestamp set), as MODIFIED.
    pub fn terminate_pod(&self, namespace: &str, name: &str) {
        let inner = self.inner.lock().unwrap();
        let key = (Kind::Pod, namespace.to_string(), name.to_string());
        if let Some(mut object) = inner.objects.get(&key).cloned() {
            object["metadata"]["deletionTimestamp"] = json!("2026-11-29T12:30:00Z");
            drop(inner);
            self.store(Kind::Pod, object, true);
        }
    }

    /// Remove an object, as DELETED.
    pub fn remove(&self, kind: Kind, namespace: &str, name: &str) {
        let mut inner = self.inner.lock().unwrap();
        if let Some(object) = inner
            .objects
            .remove(&(kind, namespace.to_string(), name.to_string()))
        {
            inner.resource_version += 1;
            let rv = inner.resource_version;
            let change = Change {
                resource_version: rv,
                event: "DELETED",
                kind,
                object: with_rv(object, rv),
                previous: None,
            };
            broadcast(&mut inner, &change);
            inner.history.push(change);
        }
    }

    /// The stored object, if any.
    pub fn object(&self, kind: Kind, namespace: &str, name: &str) -> Option<Value> {
        self.inner
            .lock()
            .unwrap()
            .objects
            .get(&(kind, namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Store `object` as it is (its kind, namespace and name), telling the
    /// watches.
    pub fn put_object(&self, kind: Kind, object: Value) {
        self.store(kind, object, true);
    }

    pub fn exists(&self, kind: Kind, namespace: &str, name: &str) -> bool {
        self.inner.lock().unwrap().objects.contains_key(&(
            kind,
            namespace.to_string(),
            name.to_string(),
        ))
    }

    /// Serve `object` at `path` (e.g. /apis/apps/v1/namespaces/x/deployments/y).
    pub fn put_raw(&self, path: &str, object: Value) {
        self.inner
            .lock()
            .unwrap()
            .raw
            .insert(path.to_string(), object);
    }

    /// A BOOKMARK on every open watch.
    pub fn bookmark(&self) {
        let inner = self.inner.lock().unwrap();
        let rv = inner.resource_version;
        for watcher in &inner.watchers {
            let line = json!({"type": "BOOKMARK", "object": {"apiVersion": if watcher.metadata_only { "meta.k8s.io/v1" } else { watcher.kind.api_version() },
                "kind": if watcher.metadata_only { "PartialObjectMetadata" } else { watcher.kind.name() },
                "metadata": {"resourceVersion": rv.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}}}});
            let _ = watcher.sender.send(Ok(Bytes::from(format!("{line}\n"))));
        }
    }

    /// Close every open watch, as a dropped connection does.
    pub fn drop_watches(&self) {
        self.inner.lock().unwrap().watchers.clear();
    }

    /// Forget the history, so that a watch from an old resourceVersion is
    /// 410 Gone (etcd compaction).
    pub fn compact(&self) {
        self.inner.lock().unwrap().history.clear();
    }

    /// The most GETs of one object answered at once so far.
    pub fn max_gets_in_flight(&self) -> usize {
        self.inner.lock().unwrap().max_gets_in_flight
    }

    pub fn open_watches(&self) -> usize {
        let mut inner = self.inner.lock().unwrap();
        inner.watchers.retain(|w| !w.sender.is_closed());
        inner.watchers.len()
    }

    fn store(&self, kind: Kind, object: Value, announce: bool) {
        let mut inner = self.inner.lock().unwrap();
        inner.resource_version += 1;
        let rv = inner.resource_version;
        let object = with_rv(object, rv);
        let key = (
            kind,
            object["metadata"]["namespace"]
                .as_str()
                .unwrap()
                .to_string(),
            object["metadata"]["name"].as_str().unwrap().to_string(),
        );
        let previous = inner.objects.insert(key, object.clone());
        let event = if previous.is_some() {
            "MODIFIED"
        } else {
            "ADDED"
        };
        if announce {
            let change = Change {
                resource_version: rv,
                event,
                kind,
                object,
                previous,
            };
            broadcast(&mut inner, &change);
            inner.history.push(change);
        }
    }
}

fn with_rv(mut object: Value, rv: u64) -> Value {
    object["metadata"]["resourceVersion"] = json!(rv.to_string());
    object
}

/// One term of a label selector: `key=value` and `key in (a,b)` (the
/// label has one of the values), or `key` (the label is there).
type LabelTerm = (String, Option<Vec<String>>);

fn selects(selector: &[LabelTerm], object: &Value) -> bool {
    selector.iter().all(|(k, values)| {
        let label = object["metadata"]["labels"][k].as_str();
        match values {
            Some(values) => label.is_some_and(|l| values.iter().any(|v| v == l)),
            None => label.is_some(),
        }
    })
}

fn metadata_form(object: &Value) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": object["metadata"]})
}

fn event_line(event: &str, object: &Value, metadata_only: bool) -> Bytes {
    let object = if metadata_only {
        metadata_form(object)
    } else {
        object.clone()
    };
    Bytes::from(format!("{}\n", json!({"type": event, "object": object})))
}

fn broadcast(inner: &mut Inner, change: &Change) {
    if inner.faults.mute_watches
        || inner
            .faults
            .drop_events_of
            .as_deref()
            .is_some_and(|name| change.object["metadata"]["name"] == name)
    {
        return;
    }
    inner.watchers.retain(|watcher| {
        let seen = change.seen_by(
            watcher.kind,
            watcher.namespace.as_deref(),
            &watcher.selector,
            &watcher.fields,
        );
        let Some((event, object)) = seen else {
            return !watcher.sender.is_closed();
        };
        let object = with_rv(object.clone(), change.resource_version);
        watcher
            .sender
            .send(Ok(event_line(event, &object, watcher.metadata_only)))
            .is_ok()
    });
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code});
    (
        StatusCode::from_u16(code).unwrap(),
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn json_response(value: Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// (kind, namespace, name) of a path.
fn route(path: &str) -> Option<(Kind, Option<String>, Option<String>)> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (rest, group) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => (rest, ""),
        ["apis", "batch", "v1", rest @ ..] => (rest, "batch"),
        ["apis", "coordination.k8s.io", "v1", rest @ ..] => (rest, "coordination.k8s.io"),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] => (Some(ns.to_string()), rest),
        rest => (None, rest),
    };
    let (resource, name) = match rest {
        [resource] => (*resource, None),
        [resource, name] => (*resource, Some(name.to_string())),
        _ => return None,
    };
    let kind = match (resource, group) {
        ("pods", "") => Kind::Pod,
        ("configmaps", "") => Kind::ConfigMap,
        ("jobs", "batch") => Kind::Job,
        ("leases", "coordination.k8s.io") => Kind::Lease,
        _ => return None,
    };
    Some((kind, namespace, name))
}

fn query(uri: &Uri) -> BTreeMap<String, String> {
    uri.query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| {
            (
                k.to_string(),
                v.replace("%3D", "=")
                    .replace("%2C", ",")
                    .replace("%2F", "/")
                    .replace("%28", "(")
                    .replace("%29", ")")
                    .replace("%20", " ")
                    .replace('+', " "),
            )
        })
        .collect()
}

async fn handle(
    State(api): State<FakeApi>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let faults = {
        let mut inner = api.inner.lock().unwrap();
        let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("");
        let mut call = format!("{method} {path}");
        if !body.is_empty() {
            call = format!("{call} {}", String::from_utf8_lossy(&body));
        }
        inner.calls.push(call);
        inner.faults.clone()
    };
    if faults.down {
        return status(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        );
    }
    if faults
        .forbidden_paths
        .iter()
        .any(|forbidden| uri.path().starts_with(forbidden.as_str()))
    {
        return status(403, "Forbidden", &format!("{} is forbidden", uri.path()));
    }
    if method == Method::GET {
        let inner = api.inner.lock().unwrap();
        if let Some(object) = inner.raw.get(uri.path()) {
            return json_response(object.clone());
        }
        let prefix = format!("{}/", uri.path());
        let items: Vec<Value> = inner
            .raw
            .iter()
            .filter(|(path, _)| {
                path.strip_prefix(&prefix)
                    .is_some_and(|rest| !rest.contains('/'))
            })
            .map(|(_, object)| object.clone())
            .collect();
        let known_collection = uri.path().ends_with("/poddisruptionbudgets");
        if !items.is_empty() || known_collection {
            return json_response(
                json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": items}),
            );
        }
    }
    let Some((kind, namespace, name)) = route(uri.path()) else {
        return status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
    };
    if kind == Kind::Job && faults.jobs_forbidden {
        return status(
            403,
            "Forbidden",
            "jobs.batch is forbidden: User \"system:serviceaccount:agents:worker\" cannot list resource \"jobs\"",
        );
    }
    if let Some(retry_after) = faults.throttled
        && method == Method::GET
        && name.is_some()
    {
        let mut response = status(
            429,
            "TooManyRequests",
            "too many requests, please try again later",
        );
        if let Some(seconds) = retry_after {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                header::HeaderValue::from_str(&seconds.to_string()).unwrap(),
            );
        }
        return response;
    }
    if let Some((failing, only, code)) = &faults.delete_fails
        && method == Method::DELETE
        && *failing == kind
        && only.as_ref().is_none_or(|only| name.as_ref() == Some(only))
    {
        return status(*code, "Failure", "injected delete failure");
    }
    let metadata_only = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=PartialObjectMetadata"));
    let query = query(&uri);
    match (method, name) {
        (Method::GET, Some(name)) => {
            {
                let mut inner = api.inner.lock().unwrap();
                inner.gets_in_flight += 1;
                inner.max_gets_in_flight = inner.max_gets_in_flight.max(inner.gets_in_flight);
            }
            if !faults.get_delay.is_zero() && uri.path().starts_with(&faults.get_delay_under) {
                tokio::time::sleep(faults.get_delay).await;
            }
            api.inner.lock().unwrap().gets_in_flight -= 1;
            let object = api
                .inner
                .lock()
                .unwrap()
                .objects
                .get(&(kind, namespace.unwrap_or_default(), name.clone()))
                .cloned();
            match object {
                Some(object) if metadata_only => json_response(metadata_form(&object)),
                Some(object) => json_response(object),
                None => status(404, "NotFound", &format!("pods \"{name}\" not found")),
            }
        }
        (Method::GET, None)
            if faults.field_selectors_fail && query.contains_key("fieldSelector") =>
        {
            status(
                500,
                "InternalError",
                "injected failure of field-selected requests",
            )
        }
        (Method::GET, None) if faults.continue_fails && query.contains_key("continue") => status(
            500,
            "InternalError",
            "injected failure of a list's later page",
        ),
        (Method::GET, None) if query.get("watch").is_some_and(|w| w == "true" || w == "1") => {
            if faults.watch_fails {
                return status(500, "InternalError", "injected watch failure");
            }
            let fields = match parse_fields(kind, &query) {
                Ok(fields) => fields,
                Err(response) => return response,
            };
            watch(&api, kind, namespace, &query, fields, metadata_only)
        }
        (Method::GET, None) => {
            let fields = match parse_fields(kind, &query) {
                Ok(fields) => fields,
                Err(response) => return response,
            };
            let inner = api.inner.lock().unwrap();
            let selector = parse_selector(&query);
            // Pages of `limit`, the `continue` token being the offset.
            let offset: usize = query
                .get("continue")
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            let limit: usize = query
                .get("limit")
                .and_then(|l| l.parse().ok())
                .filter(|l| *l > 0)
                .unwrap_or(usize::MAX);
            let mut matching = inner.objects.iter().filter(|((k, ns, _), object)| {
                *k == kind
                    && namespace.as_ref().is_none_or(|n| n == ns)
                    && selects(&selector, object)
                    && fields_select(&fields, object)
            });
            let items: Vec<Value> = matching
                .by_ref()
                .skip(offset)
                .take(limit)
                .map(|(_, object)| {
                    if metadata_only {
                        metadata_form(object)
                    } else {
                        object.clone()
                    }
                })
                .collect();
            let (api_version, list_kind) = if metadata_only {
                ("meta.k8s.io/v1", "PartialObjectMetadataList".to_string())
            } else {
                (kind.api_version(), format!("{}List", kind.name()))
            };
            let mut list = json!({"apiVersion": api_version, "kind": list_kind, "metadata": {"resourceVersion": inner.resource_version.to_string()}, "items": items});
            if matching.next().is_some() {
                list["metadata"]["continue"] = json!((offset + limit).to_string());
            }
            drop(inner);
            if let Some((k, ns, name)) = faults.replace_after_list.filter(|(k, ..)| *k == kind) {
                api.update_faults(|f| f.replace_after_list = None);
                api.remove(k, &ns, &name);
                api.put(k, &ns, &name, "replaced-uid", json!({}), &[]);
            }
            json_response(list)
        }
        (Method::PATCH, Some(name)) => {
            patch(&api, kind, namespace.unwrap_or_default(), name, &body)
        }
        (Method::POST, None) => create(&api, kind, namespace.unwrap_or_default(), &body),
        (Method::PUT, Some(name)) => {
            replace(&api, kind, namespace.unwrap_or_default(), name, &body)
        }
        (Method::DELETE, Some(name)) => delete(
            &api,
            kind,
            namespace.unwrap_or_default(),
            name,
            &faults,
            &body,
        ),
        _ => status(
            405,
            "MethodNotAllowed",
            "not supported by the test API server",
        ),
    }
}

/// A JSON Patch (RFC 6902), as the API server applies one: a patched
/// object whose `resourceVersion` is not the stored one is refused 409
/// Conflict (the optimistic-concurrency precondition of an update).
fn patch(api: &FakeApi, kind: Kind, namespace: String, name: String, body: &[u8]) -> Response {
    let key = (kind, namespace, name.clone());
    let Some(stored) = api.inner.lock().unwrap().objects.get(&key).cloned() else {
        return status(404, "NotFound", &format!("\"{name}\" not found"));
    };
    let Ok(operations) = serde_json::from_slice::<json_patch::Patch>(body) else {
        return status(400, "BadRequest", "not a JSON Patch");
    };
    let mut patched = stored.clone();
    if let Err(error) = json_patch::patch(&mut patched, &operations) {
        return status(
            422,
            "Invalid",
            &format!("the patch does not apply: {error}"),
        );
    }
    let version = |object: &Value| object["metadata"]["resourceVersion"].clone();
    if version(&patched) != version(&stored) {
        return status(
            409,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
        );
    }
    api.store(kind, patched, true);
    let stored = api
        .inner
        .lock()
        .unwrap()
        .objects
        .get(&key)
        .cloned()
        .unwrap_or_default();
    json_response(stored)
}

/// A create: 409 AlreadyExists when the name is taken.
fn create(api: &FakeApi, kind: Kind, namespace: String, body: &[u8]) -> Response {
    let Ok(mut object) = serde_json::from_slice::<Value>(body) else {
        return status(400, "BadRequest", "not JSON");
    };
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if api.object(kind, &namespace, &name).is_some() {
        return status(409, "AlreadyExists", &format!("\"{name}\" already exists"));
    }
    object["metadata"]["namespace"] = json!(namespace);
    object["metadata"]["uid"] = json!(format!("uid-{name}"));
    api.store(kind, object, true);
    json_response(api.object(kind, &namespace, &name).unwrap_or_default())
}

/// A replace (PUT): 409 Conflict unless it carries the stored version.
fn replace(api: &FakeApi, kind: Kind, namespace: String, name: String, body: &[u8]) -> Response {
    let Ok(mut object) = serde_json::from_slice::<Value>(body) else {
        return status(400, "BadRequest", "not JSON");
    };
    let Some(stored) = api.object(kind, &namespace, &name) else {
        return status(404, "NotFound", &format!("\"{name}\" not found"));
    };
    if object["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"] {
        return status(
            409,
            "Conflict",
            &format!("Operation cannot be fulfilled on \"{name}\": the object has been modified"),
        );
    }
    object["metadata"]["namespace"] = json!(namespace);
    api.store(kind, object, true);
    json_response(api.object(kind, &namespace, &name).unwrap_or_default())
}

fn parse_selector(query: &BTreeMap<String, String>) -> Vec<LabelTerm> {
    let Some(selector) = query.get("labelSelector") else {
        return Vec::new();
    };
    // Terms are split on the commas outside parentheses.
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&selector[start..]);
    terms
        .into_iter()
        .map(str::trim)
        .filter(|term| !term.is_empty())
        .map(|term| {
            if let Some((k, set)) = term.split_once(" in ") {
                let set = set.trim().trim_start_matches('(').trim_end_matches(')');
                (
                    k.trim().to_string(),
                    Some(set.split(',').map(|v| v.trim().to_string()).collect()),
                )
            } else if let Some((k, v)) = term.split_once('=') {
                (k.to_string(), Some(vec![v.to_string()]))
            } else {
                (term.to_string(), None)
            }
        })
        .collect()
}

/// The field selector of a request; 400 for a field the API server does
/// not serve (or a term it cannot parse), as the real one answers.
fn parse_fields(kind: Kind, query: &BTreeMap<String, String>) -> Result<Vec<FieldTerm>, Response> {
    let Some(selector) = query.get("fieldSelector").filter(|s| !s.is_empty()) else {
        return Ok(Vec::new());
    };
    let mut terms = Vec::new();
    for term in selector.split(',') {
        let (field, value, equal) = if let Some((field, value)) = term.split_once("!=") {
            (field, value, false)
        } else if let Some((field, value)) = term.split_once("==") {
            (field, value, true)
        } else if let Some((field, value)) = term.split_once('=') {
            (field, value, true)
        } else {
            return Err(status(
                400,
                "BadRequest",
                &format!("invalid selector: '{selector}'"),
            ));
        };
        let known = kind == Kind::Pod && field_value(&json!({}), field).is_some()
            || matches!(field, "metadata.name" | "metadata.namespace");
        if !known {
            return Err(status(
                400,
                "BadRequest",
                &format!("field label not supported: {field}"),
            ));
        }
        terms.push(FieldTerm {
            field: field.to_string(),
            value: value.to_string(),
            equal,
        });
    }
    Ok(terms)
}

fn watch(
    api: &FakeApi,
    kind: Kind,
    namespace: Option<String>,
    query: &BTreeMap<String, String>,
    fields: Vec<FieldTerm>,
    metadata_only: bool,
) -> Response {
    let mut inner = api.inner.lock().unwrap();
    let since: u64 = query
        .get("resourceVersion")
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0);
    let oldest = inner
        .history
        .first()
        .map_or(inner.resource_version, |change| change.resource_version - 1);
    let (sender, receiver) = mpsc::unbounded_channel();
    if inner.faults.gone_on_next_watch || since < oldest {
        inner.faults.gone_on_next_watch = false;
        let line = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("too old resource version: {since} ({oldest})"), "reason": "Expired", "code": 410}});
        let _ = sender.send(Ok(Bytes::from(format!("{line}\n"))));
        drop(sender);
    } else {
        let selector = parse_selector(query);
        for change in inner.history.iter().filter(|c| c.resource_version > since) {
            if let Some((event, object)) =
                change.seen_by(kind, namespace.as_deref(), &selector, &fields)
            {
                let object = with_rv(object.clone(), change.resource_version);
                let _ = sender.send(Ok(event_line(event, &object, metadata_only)));
            }
        }
        inner.watchers.push(Watcher {
            kind,
            namespace,
            selector,
            fields,
            metadata_only,
            sender,
        });
    }
    let stream = tokio_stream_from(receiver);
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .unwrap()
}

fn tokio_stream_from(
    mut receiver: mpsc::UnboundedReceiver<Result<Bytes, Infallible>>,
) -> impl futures::Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
}

fn delete(
    api: &FakeApi,
    kind: Kind,
    namespace: String,
    name: String,
    faults: &Faults,
    body: &[u8],
) -> Response {
    let object = api
        .inner
        .lock()
        .unwrap()
        .objects
        .get(&(kind, namespace.clone(), name.clone()))
        .cloned();
    let Some(object) = object else {
        return status(
            404,
            "NotFound",
            &format!("{} \"{name}\" not found", kind.name().to_lowercase()),
        );
    };
    let uid = object["metadata"]["uid"].clone();
    // DeleteOptions.preconditions.uid: another object of that name is 409.
    let options: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let precondition = &options["preconditions"]["uid"];
    if !precondition.is_null() && *precondition != uid {
        return status(
            409,
            "Conflict",
            "Precondition failed: UID in precondition does not match the UID in record",
        );
    }
    if kind == Kind::Pod && (faults.pods_never_go || !faults.pod_linger.is_zero()) {
        api.terminate_pod(&namespace, &name);
        if !faults.pods_never_go {
            let (api, linger, namespace, name) = (
                api.clone(),
                faults.pod_linger,
                namespace.clone(),
                name.clone(),
            );
            tokio::spawn(async move {
                tokio::time::sleep(linger).await;
                api.remove(Kind::Pod, &namespace, &name);
            });
        }
    } else {
        api.remove(kind, &namespace, &name);
    }
    json_response(
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
        "details": {"name": name, "kind": kind.name().to_lowercase(), "uid": uid}}),
    )
}

/// Wait until `condition` holds (15 s at most, then fail naming `what`).
pub async fn eventually(what: &str, condition: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
