//! Structured reviews: arbitrary bytes choose from a grammar of the
//! dangerous parts (names of every class, tuples of real pods twisted,
//! blocking flags, identities, malformed extras, namespaces, UPDATE pairs
//! made by edits), rendered as the API server would send them, decided by
//! both webhooks and judged by the oracle.

#![no_main]

mod common;

use arbitrary::Arbitrary;
use common::{NS, U_GONE, U_STALE, uid_of};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};

const NAMES: &[&str] = &[
    "w-1", "w-2", "w-dead", "w-done", "w-failed", "w.dotted", "w-flaky", "w-gone", "w-1?x=1", "w-1/status", "w-1#x", "w 1",
    "W-1", "w_1", "", "-w", "w-", "../w-1", "%2e%2e", "w-1%2Fx", "w..1", "ｗ-1", "w-1\n",
];
const UIDS: &[&str] = &[
    common::U1, common::U2, common::U_DEAD, common::U_DONE, common::U_FAILED, common::U_DOT, common::U_FLAKY, common::U_OTHER_NS, U_STALE, U_GONE, "",
];

#[derive(Arbitrary, Debug)]
enum Name {
    Known(u8),
    Long(u8),
    Text(String),
}

impl Name {
    fn render(&self) -> String {
        match self {
            Name::Known(i) => NAMES[*i as usize % NAMES.len()].to_string(),
            // 1 to 256 characters, around the 63/64 and 253/254 bounds.
            Name::Long(n) => {
                let len = match n % 6 {
                    0 => 63,
                    1 => 64,
                    2 => 253,
                    3 => 254,
                    _ => *n as usize + 1,
                };
                let mut s: String = std::iter::repeat_n('a', len).collect();
                s.replace_range(0..1, "w");
                s
            }
            Name::Text(s) => s.clone(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Uid {
    OfName,
    Known(u8),
    Text(String),
}

impl Uid {
    fn render(&self, name: &str) -> String {
        match self {
            Uid::OfName => uid_of(name).to_string(),
            Uid::Known(i) => UIDS[*i as usize % UIDS.len()].to_string(),
            Uid::Text(s) => s.clone(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Api {
    V1,
    V1beta1,
    Apps,
    Empty,
    /// `/v1`: the collector's `v1`.
    SlashV1,
    Text(String),
}

#[derive(Arbitrary, Debug)]
enum Kind {
    Pod,
    Lower,
    Pods,
    ReplicaSet,
    /// A homoglyph of Pod (issue 14 item 7), by index.
    Homoglyph(u8),
    Text(String),
}

/// Kinds a person reads as Pod that the collector cannot resolve.
const HOMOGLYPHS: [&str; 6] = ["P\u{43e}d", "\u{420}od", "\u{ff30}\u{ff4f}\u{ff44}", "P0d", "Po\u{301}d", "P\u{3bf}ds"];

#[derive(Arbitrary, Debug)]
struct Ref {
    api: Api,
    kind: Kind,
    name: Option<Name>,
    uid: Option<Uid>,
    block: Option<bool>,
    controller: Option<bool>,
}

impl Ref {
    fn render(&self) -> Value {
        let mut map = Map::new();
        let api = match &self.api {
            Api::V1 => "v1".to_string(),
            Api::V1beta1 => "v1beta1".into(),
            Api::Apps => "apps/v1".into(),
            Api::Empty => String::new(),
            Api::SlashV1 => "/v1".into(),
            Api::Text(s) => s.clone(),
        };
        let kind = match &self.kind {
            Kind::Pod => "Pod".to_string(),
            Kind::Lower => "pod".into(),
            Kind::Pods => "Pods".into(),
            Kind::ReplicaSet => "ReplicaSet".into(),
            Kind::Homoglyph(i) => HOMOGLYPHS[*i as usize % HOMOGLYPHS.len()].into(),
            Kind::Text(s) => s.clone(),
        };
        map.insert("apiVersion".into(), json!(api));
        map.insert("kind".into(), json!(kind));
        let name = self.name.as_ref().map(Name::render);
        if let Some(name) = &name {
            map.insert("name".into(), json!(name));
        }
        if let Some(uid) = &self.uid {
            map.insert("uid".into(), json!(uid.render(name.as_deref().unwrap_or(""))));
        }
        if let Some(b) = self.block {
            map.insert("blockOwnerDeletion".into(), json!(b));
        }
        if let Some(c) = self.controller {
            map.insert("controller".into(), json!(c));
        }
        Value::Object(map)
    }
}

#[derive(Arbitrary, Debug)]
struct Object {
    shape: u8,
    generate_name: bool,
    owner_pod: Option<Name>,
    owner_uid: Option<Uid>,
    /// The owner's exact reference: None, Some(blocking).
    owner_ref: Option<Option<bool>>,
    refs: Vec<Ref>,
    /// 0 nothing, 1 owner-pod, 2 owner-pod and uid, 3 another pod.
    template: u8,
}

impl Object {
    fn render(&self, namespace: Option<&str>) -> Value {
        let (pk, uk) = ("ownerguard.io/owner-pod", "ownerguard.io/owner-uid");
        let owner = self.owner_pod.as_ref().map(Name::render);
        let mut labels = Map::new();
        labels.insert("app".into(), json!("agent"));
        if let Some(o) = &owner {
            labels.insert(pk.into(), json!(o));
        }
        let uid = self.owner_uid.as_ref().map(|u| u.render(owner.as_deref().unwrap_or("")));
        if let Some(u) = &uid {
            labels.insert(uk.into(), json!(u));
        }
        let mut refs = Vec::new();
        if let (Some(o), Some(block)) = (&owner, &self.owner_ref) {
            let mut r = json!({"apiVersion": "v1", "kind": "Pod", "name": o,
                "uid": uid.clone().unwrap_or_else(|| uid_of(o).to_string()), "controller": false});
            if let Some(b) = block {
                r["blockOwnerDeletion"] = json!(b);
            }
            refs.push(r);
        }
        refs.extend(self.refs.iter().take(6).map(Ref::render));
        let mut metadata = Map::new();
        if self.generate_name {
            metadata.insert("generateName".into(), json!("agent-"));
        } else {
            metadata.insert("name".into(), json!("agent-1"));
        }
        if let Some(ns) = namespace {
            metadata.insert("namespace".into(), json!(ns));
        }
        metadata.insert("labels".into(), Value::Object(labels));
        if !refs.is_empty() {
            metadata.insert("ownerReferences".into(), Value::Array(refs));
        }
        let mut template_labels = Map::new();
        let t_owner = owner.clone().unwrap_or_else(|| "w-1".into());
        match self.template % 4 {
            1 => drop(template_labels.insert(pk.into(), json!(t_owner))),
            2 => {
                template_labels.insert(pk.into(), json!(t_owner));
                template_labels.insert(uk.into(), json!(uid_of(&t_owner)));
            }
            3 => drop(template_labels.insert(pk.into(), json!("w-2"))),
            _ => {}
        }
        let template = json!({"metadata": {"labels": template_labels}, "spec": {"containers": [{"name": "a", "image": "a:1"}]}});
        match self.shape % 6 {
            // A claim named after pod w-2 (`<template>-<pod>`): the
            // statefulset controller's claim retention names it.
            5 => {
                let mut metadata = metadata;
                if !self.generate_name {
                    metadata.insert("name".into(), json!("data-w-2"));
                }
                json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata,
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
            }
            0 => json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"containers": [{"name": "a", "image": "a:1"}]}}),
            1 => json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"k": "v"}}),
            2 => json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": {"template": template}}),
            3 => json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata, "spec": {"template": template}}),
            _ => json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": metadata,
                "spec": {"jobTemplate": {"metadata": {"labels": template_labels}, "spec": {"template": template}}}}),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Who {
    Person,
    Pod { name: Name, uid: Uid },
    OtherNamespace { name: Name, uid: Uid },
    Node { name: Name, uid: Uid },
    Collector,
    Controller,
    /// Writes `controller: true, blockOwnerDeletion: true` to a pod.
    EphemeralVolumeController,
    /// Adds a condemned pod as controller of its claim (claim retention).
    StatefulSetController,
    /// Every controller's shared user: only the collector's shape is exempt.
    ControllerManager,
    Extras { service_account: bool, names: Vec<String>, uids: Vec<String>, which: u8 },
}

impl Who {
    fn render(&self) -> Value {
        let extras = |name: &Name, uid: &Uid| {
            let n = name.render();
            json!({"authentication.kubernetes.io/pod-name": [n], "authentication.kubernetes.io/pod-uid": [uid.render(&n)]})
        };
        match self {
            Who::Person => json!({"username": "alice"}),
            Who::Pod { name, uid } => json!({"username": "system:serviceaccount:agents:worker", "extra": extras(name, uid)}),
            Who::OtherNamespace { name, uid } => json!({"username": "system:serviceaccount:other:worker", "extra": extras(name, uid)}),
            Who::Node { name, uid } => json!({"username": "system:node:node-a", "extra": extras(name, uid)}),
            Who::Collector => json!({"username": common::oracle::GC_USER}),
            Who::Controller => json!({"username": "system:serviceaccount:kube-system:job-controller"}),
            Who::EphemeralVolumeController => {
                json!({"username": "system:serviceaccount:kube-system:ephemeral-volume-controller"})
            }
            Who::StatefulSetController => json!({"username": common::oracle::STATEFULSET_CONTROLLER_USER}),
            Who::ControllerManager => json!({"username": common::oracle::CONTROLLER_MANAGER_USER}),
            Who::Extras { service_account, names, uids, which } => {
                let mut extra = Map::new();
                if which % 3 != 2 {
                    extra.insert("authentication.kubernetes.io/pod-name".into(), json!(names));
                }
                if which % 3 != 1 {
                    extra.insert("authentication.kubernetes.io/pod-uid".into(), json!(uids));
                }
                let user = if *service_account { "system:serviceaccount:agents:worker" } else { "bob" };
                json!({"username": user, "extra": extra})
            }
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Namespace {
    Agents,
    Other,
    Missing,
    Text(String),
}

#[derive(Arbitrary, Debug)]
enum Edit {
    DropUidLabel,
    DropOwnerLabel,
    DropLabels,
    SetOwnerLabel(Name),
    SetUidLabel(Uid),
    Replace,
    EmptyList,
    Remove(u8),
    Rename(u8, Name),
    Rekind(u8),
    Block(u8),
    Add(Ref),
}

fn apply(object: &mut Value, edit: &Edit) {
    let (pk, uk) = ("ownerguard.io/owner-pod", "ownerguard.io/owner-uid");
    let metadata = object["metadata"].as_object_mut().unwrap();
    let labels = metadata.entry("labels").or_insert_with(|| json!({})).as_object_mut().unwrap();
    match edit {
        Edit::DropUidLabel => drop(labels.remove(uk)),
        Edit::DropOwnerLabel => drop(labels.remove(pk)),
        Edit::DropLabels => {
            labels.remove(pk);
            labels.remove(uk);
        }
        Edit::SetOwnerLabel(n) => drop(labels.insert(pk.into(), json!(n.render()))),
        Edit::SetUidLabel(u) => drop(labels.insert(uk.into(), json!(u.render("")))),
        Edit::Replace => {
            labels.remove(uk);
            metadata.remove("ownerReferences");
        }
        Edit::EmptyList => drop(metadata.insert("ownerReferences".into(), json!([]))),
        Edit::Remove(i) | Edit::Rename(i, _) | Edit::Rekind(i) | Edit::Block(i) => {
            let Some(refs) = metadata.get_mut("ownerReferences").and_then(Value::as_array_mut) else { return };
            if refs.is_empty() {
                return;
            }
            let i = *i as usize % refs.len();
            match edit {
                Edit::Remove(_) => drop(refs.remove(i)),
                Edit::Rename(_, n) => refs[i]["name"] = json!(n.render()),
                Edit::Rekind(_) => refs[i]["kind"] = json!("pod"),
                _ => refs[i]["blockOwnerDeletion"] = json!(true),
            }
        }
        Edit::Add(r) => {
            let refs = metadata.entry("ownerReferences").or_insert_with(|| json!([]));
            if let Some(refs) = refs.as_array_mut() {
                refs.push(r.render());
            }
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Operation {
    Create,
    /// An UPDATE: the old object, and the edits that make the new one.
    Update(Object, Vec<Edit>),
    /// An UPDATE of two unrelated objects (the new one is `object`).
    UpdateFrom(Object),
    Delete,
    Connect,
}

#[derive(Arbitrary, Debug)]
struct Input {
    settings: u8,
    v1beta1: bool,
    uid: bool,
    dry_run: bool,
    namespace: Namespace,
    who: Who,
    object: Object,
    operation: Operation,
}

fuzz_target!(|input: Input| {
    let namespace = match &input.namespace {
        Namespace::Agents => Some(NS.to_string()),
        Namespace::Other => Some("other".to_string()),
        Namespace::Missing => None,
        Namespace::Text(s) => Some(s.clone()),
    };
    let ns = namespace.as_deref().filter(|n| !n.is_empty());
    let (operation, object, old) = match &input.operation {
        Operation::Create => ("CREATE", input.object.render(ns), Value::Null),
        Operation::Update(old, edits) => {
            let old = old.render(ns);
            let mut new = old.clone();
            for edit in edits.iter().take(4) {
                apply(&mut new, edit);
            }
            ("UPDATE", new, old)
        }
        Operation::UpdateFrom(old) => ("UPDATE", input.object.render(ns), old.render(ns)),
        Operation::Delete => ("DELETE", Value::Null, input.object.render(ns)),
        Operation::Connect => ("CONNECT", Value::Null, Value::Null),
    };
    let mut request = json!({
        "kind": {"group": "", "version": "v1", "kind": object["kind"].as_str().unwrap_or("Pod")},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": operation,
        "userInfo": input.who.render(),
        "object": object,
        "oldObject": old,
        "dryRun": input.dry_run,
    });
    if input.uid {
        request["uid"] = json!("f0220000-0000-4000-8000-000000000001");
    }
    if let Some(ns) = &namespace {
        request["namespace"] = json!(ns);
    }
    let review = common::envelope(request, input.v1beta1);
    common::check(&review, input.settings as usize, true);
});
