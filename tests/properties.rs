//! Generated reviews, every one judged by the oracle (`tests/oracle/`) on
//! both webhooks. The grammar is made of the dangerous parts: names of
//! every character class and length, uid/kind/apiVersion/name permutations
//! of real pods, duplicate and contradicting references, blocking flags,
//! UPDATE pairs (kubectl replace, renames, orphaning by the garbage
//! collector), identities (pods of the namespace and of others, nodes,
//! malformed extras), label combinations, namespaces, settings.
//!
//! Deterministic: a fixed seed per property, no failure file. A failure
//! prints the minimal input (the review as JSON, the settings) and what the
//! oracle expected. `PROPTEST_CASES=5000 cargo test --test properties` runs
//! longer; `OWNERGUARD_PROPTEST_SEED=n` tries another seed.

mod common;

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use common::CaseLookup;
use common::oracle::{self, Hook, Pod};
use ownerguard::decide::RequesterCheck;
use ownerguard::decide::WebhookKind;
use ownerguard::observe::Metrics;
use ownerguard::observe::fixture::CaseConfig;
use ownerguard::owner::{Finished, ObservedPod};
use ownerguard::owner::{Inventory, InventoryPod};
use ownerguard::webhook::Webhook;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use serde_json::{Map, Value, json};

// ---------------------------------------------------------------------------
// The world: the pods that exist.

const NS: &str = "agents";
const U1: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000001";
const U2: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000002";
const U_DEAD: &str = "6f1f3d4e-0c1a-4b7e-9d2a-00000000000d";
const U_OTHER_NS: &str = "6f1f3d4e-0c1a-4b7e-9d2a-0000000000a1";
const U_LONG: &str = "6f1f3d4e-0c1a-4b7e-9d2a-0000000000b1";
const U_DOT: &str = "6f1f3d4e-0c1a-4b7e-9d2a-0000000000c1";
const U_FLAKY: &str = "6f1f3d4e-0c1a-4b7e-9d2a-0000000000f1";
/// The uid a pod of a name had before it was replaced (or a typo).
const U_STALE: &str = "6f1f3d4e-0c1a-4b7e-9d2a-0000000000ee";
/// The uid of a pod that is gone.
const U_GONE: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000099";
/// The uids of pods that have finished (rule 11): Succeeded, Failed.
const U_DONE: &str = "6f1f3d4e-0c1a-4b7e-9d2a-0000000000d5";
const U_FAILED: &str = "6f1f3d4e-0c1a-4b7e-9d2a-0000000000fa";

fn long_name(len: usize) -> String {
    // A valid DNS-1123 subdomain of exactly `len` characters.
    let mut s = "w".to_string();
    while s.len() < len {
        s.push(if s.len() % 60 == 59 { '.' } else { 'a' });
    }
    s.truncate(len);
    if s.ends_with('.') {
        s.pop();
        s.push('z');
    }
    s
}

fn world() -> Vec<Pod> {
    vec![
        Pod::new(NS, "w-1", U1, false).in_phase("Running"),
        Pod::new(NS, "w-2", U2, false),
        Pod::new(NS, "w-dead", U_DEAD, true),
        Pod::new(NS, "w-done", U_DONE, false).in_phase("Succeeded"),
        Pod::new(NS, "w-failed", U_FAILED, false).in_phase("Failed"),
        Pod::new("other", "w-1", U_OTHER_NS, false),
        Pod::new(NS, &long_name(253), U_LONG, false),
        Pod::new(NS, "w.dotted", U_DOT, false),
        Pod::new(NS, "w-flaky", U_FLAKY, false),
    ]
}

// ---------------------------------------------------------------------------
// The settings.

#[derive(Clone)]
struct Knobs {
    requester_check: oracle::RequesterCheck,
    fail_open: bool,
    key_prefix: Option<&'static str>,
    lookup_failures: Vec<&'static str>,
    /// `--max-pod-references` when not the default.
    max_pod_references: Option<usize>,
    /// The namespace's mode: the paths asked are `/mutate/<mode>`...
    mode: oracle::Mode,
}

impl fmt::Debug for Knobs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "requesterCheck {:?}, failOpen {}, keyPrefix {:?}, lookupFailures {:?}, maxPodReferences {:?}, mode {:?}",
            self.requester_check,
            self.fail_open,
            self.key_prefix,
            self.lookup_failures,
            self.max_pod_references,
            self.mode
        )
    }
}

impl Knobs {
    fn prefix(&self) -> &'static str {
        self.key_prefix.unwrap_or("ownerguard.io")
    }
    fn oracle(&self) -> oracle::Settings {
        oracle::Settings {
            key_prefix: self.prefix().into(),
            requester_check: self.requester_check,
            fail_open: self.fail_open,
            lookup_failures: self.lookup_failures.iter().map(|s| s.to_string()).collect(),
            max_pod_references: self.max_pod_references,
            mode: self.mode,
            ..oracle::Settings::default()
        }
    }
    fn webhook(&self) -> Arc<Webhook> {
        self.webhook_over(&world())
    }

    /// The webhook over `pods`: the world, and what controllers made in it.
    fn webhook_over(&self, pods: &[Pod]) -> Arc<Webhook> {
        let config = CaseConfig {
            requester_check: match self.requester_check {
                oracle::RequesterCheck::Enforce => RequesterCheck::Enforce,
                oracle::RequesterCheck::Warn => RequesterCheck::Warn,
                oracle::RequesterCheck::Off => RequesterCheck::Off,
            },
            fail_open: self.fail_open,
            key_prefix: self.key_prefix.map(str::to_string),
            lookup_failures: self.lookup_failures.iter().map(|s| s.to_string()).collect(),
            max_pod_references: self.max_pod_references,
            ..CaseConfig::default()
        };
        let inventory = Inventory::from_pods(pods.iter().cloned().map(|p| InventoryPod {
            namespace: p.namespace,
            name: p.name,
            pod: ObservedPod {
                finished: match p.phase.as_deref() {
                    Some("Succeeded") => Some(Finished::Succeeded),
                    Some("Failed") => Some(Finished::Failed),
                    _ => None,
                },
                uid: p.uid,
                terminating: p.terminating,
            },
        }));
        let lookup = CaseLookup {
            inventory,
            failures: config
                .lookup_failures
                .iter()
                .cloned()
                .collect::<HashSet<_>>(),
        };
        Arc::new(Webhook::new(
            config.policy(),
            Arc::new(lookup),
            Arc::new(Metrics::default()),
        ))
    }
}

fn knobs() -> impl Strategy<Value = Knobs> {
    (
        prop_oneof![
            6 => Just(oracle::RequesterCheck::Enforce),
            1 => Just(oracle::RequesterCheck::Warn),
            1 => Just(oracle::RequesterCheck::Off),
        ],
        prop_oneof![3 => Just(false), 1 => Just(true)],
        prop_oneof![6 => Just(None), 1 => Just(Some("acme.dev"))],
        prop_oneof![
            4 => Just(vec![]),
            2 => Just(vec!["w-flaky"]),
            1 => Just(vec!["w-1"]),
        ],
        prop_oneof![
            4 => Just(oracle::Mode::Enforce),
            1 => Just(oracle::Mode::Warn),
            1 => Just(oracle::Mode::Audit),
        ],
    )
        .prop_map(
            |(requester_check, fail_open, key_prefix, lookup_failures, mode)| Knobs {
                requester_check,
                fail_open,
                key_prefix,
                lookup_failures,
                max_pod_references: None,
                mode,
            },
        )
}

// ---------------------------------------------------------------------------
// The grammar.

/// Pod names: real pods, valid names of no pod, and every class of name
/// that is not a pod name (rule 7, class 2).
fn pod_name() -> impl Strategy<Value = String> {
    let real = select(vec![
        "w-1".to_string(),
        "w-2".into(),
        "w-dead".into(),
        "w-done".into(),
        "w-failed".into(),
        "w.dotted".into(),
        "w-flaky".into(),
        long_name(253),
    ]);
    let missing = select(vec![
        "w-3".to_string(),
        "w-gone".into(),
        long_name(63),
        long_name(64),
        long_name(252),
        "0".into(),
    ]);
    let invalid = select(vec![
        "w-1?x=1".to_string(),
        "w-1/status".into(),
        "w-1#x".into(),
        "w 1".into(),
        "w-1%2Fx".into(),
        "%2e%2e".into(),
        "../w-1".into(),
        "W-1".into(),
        "w-é".into(),
        "w_1".into(),
        "".into(),
        "-w".into(),
        "w-".into(),
        ".w".into(),
        "w..1".into(),
        "w-1\n".into(),
        " w-1".into(),
        "w-1/".into(),
        long_name(254),
        "w-1?".into(),
        "ｗ-1".into(),
    ]);
    let any = proptest::string::string_regex("[a-z0-9?/#% .A-Z_\\-]{0,10}").unwrap();
    prop_oneof![8 => real, 2 => missing, 3 => invalid, 1 => any]
}

fn uid() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => select(vec![U1.to_string(), U2.into(), U_DEAD.into(), U_DONE.into(), U_FAILED.into(), U_DOT.into(), U_LONG.into(), U_FLAKY.into()]),
        2 => select(vec![U_OTHER_NS.to_string(), U_STALE.into(), U_GONE.into(), "".into(), U1.to_uppercase(), format!(" {U1}")]),
    ]
}

/// The uid of a pod name in the world (its real uid, or a plausible one).
fn uid_of(name: &str) -> String {
    world()
        .into_iter()
        .find(|p| p.namespace == NS && p.name == name)
        .map(|p| p.uid)
        .unwrap_or_else(|| U_GONE.to_string())
}

#[derive(Clone, Debug)]
enum Flag {
    Absent,
    True,
    False,
    Null,
}

fn flag() -> impl Strategy<Value = Flag> {
    prop_oneof![
        3 => Just(Flag::Absent),
        2 => Just(Flag::False),
        2 => Just(Flag::True),
        1 => Just(Flag::Null),
    ]
}

fn put_flag(map: &mut Map<String, Value>, key: &str, flag: &Flag) {
    match flag {
        Flag::Absent => {}
        Flag::True => drop(map.insert(key.into(), json!(true))),
        Flag::False => drop(map.insert(key.into(), json!(false))),
        Flag::Null => drop(map.insert(key.into(), Value::Null)),
    }
}

/// How a reference differs from the true tuple of a real pod.
#[derive(Clone, Debug)]
enum Twist {
    None,
    KindLower,
    KindPods,
    KindReplicaSet,
    ApiV1beta1,
    ApiApps,
    ApiEmpty,
    /// A kind a person reads as `Pod`/`Pods` that no RESTMapper resolves:
    /// a Unicode confusable (issue 14 item 7).
    KindHomoglyph(&'static str),
    /// `/v1`: the collector's `v1` (apimachinery's ParseGroupVersion).
    ApiSlashV1,
    OtherName(String),
    OtherUid(String),
    NoUid,
    NoName,
    NumberUid,
}

fn twist() -> impl Strategy<Value = Twist> {
    prop_oneof![
        10 => Just(Twist::None),
        1 => Just(Twist::KindLower),
        1 => Just(Twist::KindPods),
        1 => Just(Twist::KindReplicaSet),
        1 => Just(Twist::ApiV1beta1),
        1 => Just(Twist::ApiApps),
        1 => Just(Twist::ApiEmpty),
        2 => homoglyph().prop_map(Twist::KindHomoglyph),
        1 => Just(Twist::ApiSlashV1),
        2 => pod_name().prop_map(Twist::OtherName),
        2 => uid().prop_map(Twist::OtherUid),
        1 => Just(Twist::NoUid),
        1 => Just(Twist::NoName),
        1 => Just(Twist::NumberUid),
    ]
}

/// Kinds a person reads as `Pod` (or `Pods`): Cyrillic, Greek, fullwidth,
/// mathematical, a digit zero, combining marks, invisible characters, and
/// the forms UTS #39's skeleton leaves alone (small capitals, modifier,
/// circled and negative-squared letters: the third review). The
/// collector resolves none of them.
fn homoglyph() -> impl Strategy<Value = &'static str> {
    select(vec![
        "P\u{43e}d",
        "\u{420}\u{43e}d",
        "P\u{3bf}d",
        "\u{3a1}od",
        "\u{ff30}\u{ff4f}\u{ff44}",
        "\u{1d40f}\u{1d428}\u{1d41d}",
        "P0d",
        "\u{1e56}od",
        "Po\u{301}d",
        "P\u{43e}ds",
        "Pod\u{200b}",
        "\u{feff}Pod",
        "p\u{43e}\u{501}",
        "\u{1d18}\u{1d0f}\u{1d05}",
        "\u{1d3e}\u{1d52}\u{1d48}",
        "\u{24df}\u{24de}\u{24d3}",
        "\u{1f15f}\u{1f15e}\u{1f153}",
        "P\u{1d52}d",
    ])
}

/// An `ownerReferences` entry: the tuple of a pod name, twisted.
#[derive(Clone, Debug)]
struct RefSpec {
    name: String,
    twist: Twist,
    block: Flag,
    controller: Flag,
}

fn ref_spec() -> impl Strategy<Value = RefSpec> {
    (pod_name(), twist(), flag(), flag()).prop_map(|(name, twist, block, controller)| RefSpec {
        name,
        twist,
        block,
        controller,
    })
}

impl RefSpec {
    fn exact(name: &str, block: Flag) -> Self {
        Self {
            name: name.into(),
            twist: Twist::None,
            block,
            controller: Flag::False,
        }
    }
    fn render(&self) -> Value {
        let mut map = Map::new();
        let (mut api, mut kind) = (json!("v1"), json!("Pod"));
        let (mut name, mut uid) = (json!(self.name), json!(uid_of(&self.name)));
        match &self.twist {
            Twist::None => {}
            Twist::KindLower => kind = json!("pod"),
            Twist::KindPods => kind = json!("Pods"),
            Twist::KindReplicaSet => {
                kind = json!("ReplicaSet");
                api = json!("apps/v1");
            }
            Twist::ApiV1beta1 => api = json!("v1beta1"),
            Twist::ApiApps => api = json!("apps/v1"),
            Twist::ApiEmpty => api = json!(""),
            Twist::KindHomoglyph(homoglyph) => kind = json!(homoglyph),
            Twist::ApiSlashV1 => api = json!("/v1"),
            Twist::OtherName(other) => name = json!(other),
            Twist::OtherUid(other) => uid = json!(other),
            Twist::NoUid => uid = Value::Null,
            Twist::NoName => name = Value::Null,
            Twist::NumberUid => uid = json!(7),
        }
        map.insert("apiVersion".into(), api);
        map.insert("kind".into(), kind);
        if !name.is_null() {
            map.insert("name".into(), name);
        }
        if !uid.is_null() {
            map.insert("uid".into(), uid);
        }
        put_flag(&mut map, "controller", &self.controller);
        put_flag(&mut map, "blockOwnerDeletion", &self.block);
        Value::Object(map)
    }
}

/// The owner labels.
#[derive(Clone, Debug)]
enum Owner {
    None,
    /// owner-pod and the right uid.
    Both(String),
    /// owner-pod only.
    NameOnly(String),
    /// owner-pod and some uid.
    NameUid(String, String),
    /// uid label alone (rule 9).
    UidOnly(String),
    /// Empty values.
    Empty,
}

fn owner() -> impl Strategy<Value = Owner> {
    prop_oneof![
        1 => Just(Owner::None),
        5 => pod_name().prop_map(Owner::Both),
        3 => pod_name().prop_map(Owner::NameOnly),
        2 => (pod_name(), uid()).prop_map(|(n, u)| Owner::NameUid(n, u)),
        1 => uid().prop_map(Owner::UidOnly),
        1 => Just(Owner::Empty),
    ]
}

impl Owner {
    fn labels(&self, prefix: &str) -> Vec<(String, String)> {
        let (p, u) = (format!("{prefix}/owner-pod"), format!("{prefix}/owner-uid"));
        match self {
            Owner::None => vec![],
            Owner::Both(n) => vec![(p, n.clone()), (u, uid_of(n))],
            Owner::NameOnly(n) => vec![(p, n.clone())],
            Owner::NameUid(n, id) => vec![(p, n.clone()), (u, id.clone())],
            Owner::UidOnly(id) => vec![(u, id.clone())],
            Owner::Empty => vec![(p, String::new()), (u, String::new())],
        }
    }
}

/// Who sends the request.
#[derive(Clone, Debug)]
enum Who {
    Person,
    /// A pod of the namespace, bound token: (pod name, uid).
    Pod(String, String),
    /// A pod of another namespace with the same extras.
    PodOtherNamespace(String, String),
    /// A node with pod extras (class 6).
    Node(String, String),
    Collector,
    JobController,
    /// Kubernetes' controllers that write `controller: true,
    /// blockOwnerDeletion: true` references to a pod (SPEC §3 rule 13).
    EphemeralVolumeController,
    ResourceClaimController,
    /// The statefulset controller's own service account.
    StatefulSetController,
    /// The user every controller shares without per-controller
    /// credentials: the collector's shape goes unjudged under it, nothing
    /// else (rule 16).
    ControllerManager,
    /// Extras that are not one non-empty string each.
    Malformed(u8),
}

/// Boxed: the union's value tree, inlined in the creates' and updates'
/// tuples, made debug builds' frames overflow a test thread's stack.
fn who() -> BoxedStrategy<Who> {
    let pod = prop_oneof![
        4 => Just(("w-1".to_string(), U1.to_string())),
        2 => Just(("w-2".to_string(), U2.to_string())),
        1 => Just(("w-dead".to_string(), U_DEAD.to_string())),
        // A finished pod's token stays valid while its object exists.
        1 => Just(("w-failed".to_string(), U_FAILED.to_string())),
        1 => Just(("w-9".to_string(), U_GONE.to_string())),
        1 => Just(("w-1".to_string(), U_STALE.to_string())),
    ];
    prop_oneof![
        3 => Just(Who::Person),
        5 => pod.clone().prop_map(|(n, u)| Who::Pod(n, u)),
        1 => pod.clone().prop_map(|(n, u)| Who::PodOtherNamespace(n, u)),
        1 => pod.prop_map(|(n, u)| Who::Node(n, u)),
        1 => Just(Who::Collector),
        1 => Just(Who::JobController),
        1 => Just(Who::EphemeralVolumeController),
        1 => Just(Who::StatefulSetController),
        1 => Just(Who::ControllerManager),
        2 => (0u8..6).prop_map(Who::Malformed),
    ]
    .boxed()
}

impl Who {
    fn user_info(&self) -> Value {
        let sa = |ns: &str, name: &str| format!("system:serviceaccount:{ns}:{name}");
        let extras = |n: &str, u: &str| {
            json!({
                "authentication.kubernetes.io/pod-name": [n],
                "authentication.kubernetes.io/pod-uid": [u],
                "authentication.kubernetes.io/node-name": ["node-a"],
            })
        };
        match self {
            Who::Person => json!({"username": "alice", "groups": ["system:authenticated"]}),
            Who::Pod(n, u) => json!({"username": sa(NS, "worker"), "extra": extras(n, u)}),
            Who::PodOtherNamespace(n, u) => {
                json!({"username": sa("other", "worker"), "extra": extras(n, u)})
            }
            Who::Node(n, u) => {
                json!({"username": "system:node:node-a", "groups": ["system:nodes"], "extra": extras(n, u)})
            }
            Who::Collector => json!({"username": oracle::GC_USER}),
            Who::JobController => json!({"username": sa("kube-system", "job-controller")}),
            Who::EphemeralVolumeController => {
                json!({"username": sa("kube-system", "ephemeral-volume-controller")})
            }
            Who::ResourceClaimController => {
                json!({"username": sa("kube-system", "resource-claim-controller")})
            }
            Who::StatefulSetController => json!({"username": oracle::STATEFULSET_CONTROLLER_USER}),
            Who::ControllerManager => json!({"username": oracle::CONTROLLER_MANAGER_USER}),
            Who::Malformed(k) => {
                let (pn, pu) = (
                    "authentication.kubernetes.io/pod-name",
                    "authentication.kubernetes.io/pod-uid",
                );
                let extra = match k {
                    0 => json!({pn: [], pu: []}),
                    1 => json!({pn: ["w-1", "w-2"], pu: [U1, U2]}),
                    2 => json!({pn: ["w-1"]}),
                    3 => json!({pu: [U1]}),
                    4 => json!({pn: [""], pu: [""]}),
                    _ => json!({pn: ["w-1"], pu: []}),
                };
                let username = if *k == 5 {
                    "system:node:node-a".to_string()
                } else {
                    sa(NS, "worker")
                };
                json!({"username": username, "extra": extra})
            }
        }
    }
}

/// What kind of object, and its pod template.
#[derive(Clone, Debug)]
enum Shape {
    Pod,
    ConfigMap,
    /// A Job whose template carries: 0 nothing, 1 the object's owner-pod
    /// label, 2 owner-pod and uid, 3 another pod as owner.
    Job(u8),
    CronJob(u8),
    Deployment(u8),
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        3 => Just(Shape::Pod),
        3 => Just(Shape::ConfigMap),
        2 => (0u8..4).prop_map(Shape::Job),
        1 => (0u8..4).prop_map(Shape::CronJob),
        1 => (0u8..4).prop_map(Shape::Deployment),
    ]
}

/// Where the request is sent.
#[derive(Clone, Debug)]
enum Place {
    Agents,
    Missing,
    Empty,
    Odd(&'static str),
}

fn place() -> impl Strategy<Value = Place> {
    prop_oneof![
        12 => Just(Place::Agents),
        1 => Just(Place::Missing),
        1 => Just(Place::Empty),
        2 => select(vec!["agents/../other", "agents?x=1", "Agents", "other/pods/w-1", "a#b", "agents "]).prop_map(Place::Odd),
    ]
}

impl Place {
    fn namespace(&self) -> Option<&'static str> {
        match self {
            Place::Agents => Some(NS),
            Place::Missing => None,
            Place::Empty => Some(""),
            Place::Odd(ns) => Some(ns),
        }
    }
}

/// One object: shape, labels, references.
#[derive(Clone, Debug)]
struct ObjectSpec {
    shape: Shape,
    owner: Owner,
    refs: Vec<RefSpec>,
    /// Give the owner's exact reference too (0 no, 1 non-blocking, 2
    /// blocking, 3 without blockOwnerDeletion, 4 non-blocking under
    /// apiVersion `/v1`, the collector's `v1`).
    owner_ref: u8,
    generate_name: bool,
    /// Use the default prefix even when the settings have another.
    default_prefix: bool,
}

fn object_spec() -> impl Strategy<Value = ObjectSpec> {
    (
        shape(),
        owner(),
        prop::collection::vec(ref_spec(), 0..3),
        prop_oneof![3 => Just(0u8), 2 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8), 1 => Just(4u8)],
        prop_oneof![4 => Just(false), 1 => Just(true)],
        prop_oneof![8 => Just(false), 1 => Just(true)],
    )
        .prop_map(
            |(shape, owner, refs, owner_ref, generate_name, default_prefix)| ObjectSpec {
                shape,
                owner,
                refs,
                owner_ref,
                generate_name,
                default_prefix,
            },
        )
}

impl ObjectSpec {
    fn owner_name(&self) -> Option<&str> {
        match &self.owner {
            Owner::Both(n) | Owner::NameOnly(n) | Owner::NameUid(n, _) => Some(n),
            _ => None,
        }
    }

    fn render(&self, knobs: &Knobs, namespace: Option<&str>) -> Value {
        let prefix = if self.default_prefix {
            "ownerguard.io"
        } else {
            knobs.prefix()
        };
        let mut labels = Map::new();
        labels.insert("app".into(), json!("agent"));
        for (k, v) in self.owner.labels(prefix) {
            labels.insert(k, json!(v));
        }
        let mut refs: Vec<Value> = Vec::new();
        if let Some(name) = self.owner_name() {
            let block = match self.owner_ref {
                1 | 4 => Some(Flag::False),
                2 => Some(Flag::True),
                3 => Some(Flag::Absent),
                _ => None,
            };
            if let Some(block) = block {
                let mut r = RefSpec::exact(name, block).render();
                if let Owner::NameUid(_, u) = &self.owner {
                    r["uid"] = json!(u);
                }
                if self.owner_ref == 4 {
                    r["apiVersion"] = json!("/v1");
                }
                refs.push(r);
            }
        }
        refs.extend(self.refs.iter().map(RefSpec::render));
        let (kind, api) = match self.shape {
            Shape::Pod => ("Pod", "v1"),
            Shape::ConfigMap => ("ConfigMap", "v1"),
            Shape::Job(_) => ("Job", "batch/v1"),
            Shape::CronJob(_) => ("CronJob", "batch/v1"),
            Shape::Deployment(_) => ("Deployment", "apps/v1"),
        };
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
        let mut object = json!({"apiVersion": api, "kind": kind, "metadata": metadata});
        let template = |which: u8| -> Value {
            let mut labels = Map::new();
            labels.insert("app".into(), json!("agent"));
            let owner = self.owner_name().unwrap_or("w-1");
            if (1..=2).contains(&which) {
                labels.insert(format!("{prefix}/owner-pod"), json!(owner));
            }
            if which == 2 {
                labels.insert(format!("{prefix}/owner-uid"), json!(uid_of(owner)));
            }
            if which == 3 {
                labels.insert(format!("{prefix}/owner-pod"), json!("w-2"));
            }
            json!({"metadata": {"labels": labels}, "spec": {"containers": [{"name": "a", "image": "agent:1"}], "restartPolicy": "Never"}})
        };
        match self.shape {
            Shape::Pod => {
                object["spec"] = json!({"containers": [{"name": "a", "image": "agent:1"}]})
            }
            Shape::ConfigMap => object["data"] = json!({"prompt.md": "hello"}),
            Shape::Job(t) => object["spec"] = json!({"template": template(t)}),
            Shape::Deployment(t) => {
                object["spec"] = json!({"replicas": 1, "selector": {"matchLabels": {"app": "agent"}}, "template": template(t)})
            }
            Shape::CronJob(t) => {
                let mut job_labels = Map::new();
                if (1..=2).contains(&t) {
                    job_labels.insert(
                        format!("{prefix}/owner-pod"),
                        json!(self.owner_name().unwrap_or("w-1")),
                    );
                }
                object["spec"] = json!({"schedule": "* * * * *", "jobTemplate": {"metadata": {"labels": job_labels}, "spec": {"template": template(t)}}})
            }
        }
        object
    }
}

/// The envelope: version, uid, dry run.
#[derive(Clone, Debug)]
struct Envelope {
    v1beta1: bool,
    uid: bool,
    dry_run: bool,
}

fn envelope() -> impl Strategy<Value = Envelope> {
    (
        prop_oneof![6 => Just(false), 1 => Just(true)],
        prop_oneof![8 => Just(true), 1 => Just(false)],
        any::<bool>(),
    )
        .prop_map(|(v1beta1, uid, dry_run)| Envelope {
            v1beta1,
            uid,
            dry_run,
        })
}

/// An edit that turns the old object into the new one.
#[derive(Clone, Debug)]
enum Edit {
    Keep,
    DropUidLabel,
    DropOwnerLabel,
    DropBothLabels,
    SetOwnerLabel(String),
    SetUidLabel(String),
    /// `kubectl replace` of the original manifest: no list, no uid label.
    Replace,
    /// A replace whose manifest carries another uid label: the denial
    /// may not quote the uid the object had (which only the stored object
    /// holds then).
    ReplaceWithUid(String),
    DropList,
    EmptyList,
    RemoveRef(usize),
    RenameRef(usize, String),
    RekindRef(usize),
    /// Re-kinded to a kind a person reads as Pod.
    RekindHomoglyph(usize, &'static str),
    ReversionRef(usize),
    BlockRef(usize),
    UnblockRef(usize),
    AddRef(RefSpec),
    OtherLabel,
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        3 => Just(Edit::Keep),
        2 => Just(Edit::DropUidLabel),
        1 => Just(Edit::DropOwnerLabel),
        2 => Just(Edit::DropBothLabels),
        1 => pod_name().prop_map(Edit::SetOwnerLabel),
        1 => uid().prop_map(Edit::SetUidLabel),
        3 => Just(Edit::Replace),
        1 => uid().prop_map(Edit::ReplaceWithUid),
        1 => Just(Edit::DropList),
        1 => Just(Edit::EmptyList),
        3 => (0usize..3).prop_map(Edit::RemoveRef),
        1 => ((0usize..3), pod_name()).prop_map(|(i, n)| Edit::RenameRef(i, n)),
        1 => (0usize..3).prop_map(Edit::RekindRef),
        1 => ((0usize..3), homoglyph()).prop_map(|(i, k)| Edit::RekindHomoglyph(i, k)),
        1 => (0usize..3).prop_map(Edit::ReversionRef),
        2 => (0usize..3).prop_map(Edit::BlockRef),
        1 => (0usize..3).prop_map(Edit::UnblockRef),
        2 => ref_spec().prop_map(Edit::AddRef),
        2 => Just(Edit::OtherLabel),
    ]
}

fn apply_edit(object: &mut Value, edit: &Edit, prefix: &str) {
    let (pk, uk) = (format!("{prefix}/owner-pod"), format!("{prefix}/owner-uid"));
    let metadata = object["metadata"].as_object_mut().unwrap();
    let labels = |m: &mut Map<String, Value>| -> Map<String, Value> {
        m.get("labels")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let mut l = labels(metadata);
    let refs = metadata
        .get_mut("ownerReferences")
        .and_then(Value::as_array_mut)
        .map(std::mem::take);
    let mut refs_present = refs.is_some();
    let mut refs = refs.unwrap_or_default();
    let mut replace_templates = false;
    let at = |refs: &Vec<Value>, i: usize| {
        if refs.is_empty() {
            None
        } else {
            Some(i % refs.len())
        }
    };
    match edit {
        Edit::Keep => {}
        Edit::DropUidLabel => drop(l.remove(&uk)),
        Edit::DropOwnerLabel => drop(l.remove(&pk)),
        Edit::DropBothLabels => {
            l.remove(&pk);
            l.remove(&uk);
        }
        Edit::SetOwnerLabel(n) => drop(l.insert(pk, json!(n))),
        Edit::SetUidLabel(u) => drop(l.insert(uk.clone(), json!(u))),
        Edit::Replace => {
            l.remove(&uk);
            refs.clear();
            refs_present = false;
            replace_templates = true;
        }
        Edit::ReplaceWithUid(u) => {
            l.insert(uk.clone(), json!(u));
            refs.clear();
            refs_present = false;
        }
        Edit::DropList => {
            refs.clear();
            refs_present = false;
        }
        Edit::EmptyList => {
            refs.clear();
            refs_present = true;
        }
        Edit::RemoveRef(i) => {
            if let Some(i) = at(&refs, *i) {
                refs.remove(i);
            }
        }
        Edit::RenameRef(i, n) => {
            if let Some(i) = at(&refs, *i) {
                refs[i]["name"] = json!(n);
            }
        }
        Edit::RekindRef(i) => {
            if let Some(i) = at(&refs, *i) {
                refs[i]["kind"] = json!("pod");
            }
        }
        Edit::RekindHomoglyph(i, kind) => {
            if let Some(i) = at(&refs, *i) {
                refs[i]["kind"] = json!(kind);
            }
        }
        Edit::ReversionRef(i) => {
            if let Some(i) = at(&refs, *i) {
                refs[i]["apiVersion"] = json!("v1beta1");
            }
        }
        Edit::BlockRef(i) => {
            if let Some(i) = at(&refs, *i) {
                refs[i]["blockOwnerDeletion"] = json!(true);
            }
        }
        Edit::UnblockRef(i) => {
            if let Some(i) = at(&refs, *i) {
                refs[i]["blockOwnerDeletion"] = json!(false);
            }
        }
        Edit::AddRef(r) => {
            refs.push(r.render());
            refs_present = true;
        }
        Edit::OtherLabel => drop(l.insert("app".into(), json!("agent-v2"))),
    }
    metadata.insert("labels".into(), Value::Object(l));
    if refs_present {
        metadata.insert("ownerReferences".into(), Value::Array(refs));
    } else {
        metadata.remove("ownerReferences");
    }
    if replace_templates {
        // The original manifest: its templates without the uid label.
        for pointer in [
            "/spec/template/metadata/labels",
            "/spec/jobTemplate/metadata/labels",
            "/spec/jobTemplate/spec/template/metadata/labels",
        ] {
            if let Some(labels) = object.pointer_mut(pointer).and_then(Value::as_object_mut) {
                labels.remove(&uk);
            }
        }
    }
}

/// An old object as ownerguard leaves one: the owner's labels and its
/// exact reference, sometimes another Pod reference, sometimes legacy
/// (labelled before install, no reference).
#[derive(Clone, Debug)]
struct OldSpec {
    /// The owner: a live pod, a terminating one, a finished one, a gone
    /// one, one replaced under the same name (stale uid).
    owner: &'static str,
    stale_uid: bool,
    legacy: bool,
    other_ref: Option<&'static str>,
    block: bool,
}

fn old_spec() -> impl Strategy<Value = OldSpec> {
    (
        prop_oneof![4 => Just("w-1"), 2 => Just("w-dead"), 1 => Just("w-done"), 1 => Just("w-failed"), 2 => Just("w-gone"), 1 => Just("w-flaky")],
        prop_oneof![5 => Just(false), 1 => Just(true)],
        prop_oneof![5 => Just(false), 1 => Just(true)],
        prop_oneof![3 => Just(None), 1 => Just(Some("w-2")), 1 => Just(Some("w-dead")), 1 => Just(Some("w-failed")), 1 => Just(Some("w-gone"))],
        prop_oneof![8 => Just(false), 1 => Just(true)],
    )
        .prop_map(|(owner, stale_uid, legacy, other_ref, block)| OldSpec {
            owner,
            stale_uid,
            legacy,
            other_ref,
            block,
        })
}

impl OldSpec {
    fn render(&self, knobs: &Knobs, shape: &Shape) -> Value {
        let uid = if self.stale_uid {
            U_STALE.to_string()
        } else {
            uid_of(self.owner)
        };
        let spec = ObjectSpec {
            shape: shape.clone(),
            owner: Owner::NameUid(self.owner.into(), uid.clone()),
            refs: vec![],
            owner_ref: if self.legacy { 0 } else { 1 },
            generate_name: false,
            default_prefix: false,
        };
        let mut object = spec.render(knobs, Some(NS));
        if let Some(other) = self.other_ref {
            let mut r =
                RefSpec::exact(other, if self.block { Flag::True } else { Flag::False }).render();
            r["controller"] = json!(false);
            let list = object["metadata"]
                .as_object_mut()
                .unwrap()
                .entry("ownerReferences")
                .or_insert_with(|| json!([]));
            list.as_array_mut().unwrap().push(r);
        }
        object
    }
}

// ---------------------------------------------------------------------------
// A case, and how it is judged.

#[derive(Clone)]
struct Case {
    review: Value,
    knobs: Knobs,
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "\n  settings: {:?}\n  request: {}\n",
            self.knobs,
            serde_json::to_string(&self.review["request"]).unwrap()
        )
    }
}

fn review(
    envelope: &Envelope,
    operation: &str,
    place: &Place,
    who: &Who,
    object: Value,
    old: Value,
) -> Value {
    let namespace = place.namespace();
    let kind = object["kind"].as_str().unwrap_or("Pod").to_string();
    let name = object["metadata"]["name"].as_str().map(str::to_string);
    let mut request = json!({
        "kind": {"group": "", "version": "v1", "kind": kind},
        "resource": {"group": "", "version": "v1", "resource": format!("{}s", kind.to_lowercase())},
        "operation": operation,
        "userInfo": who.user_info(),
        "object": object,
        "oldObject": old,
        "dryRun": envelope.dry_run,
    });
    if envelope.uid {
        request["uid"] = json!("7e57ca5e-0000-4000-8000-000000000001");
    }
    if let Some(ns) = namespace {
        request["namespace"] = json!(ns);
    }
    if let Some(name) = name {
        request["name"] = json!(name);
    }
    let api = if envelope.v1beta1 {
        "admission.k8s.io/v1beta1"
    } else {
        "admission.k8s.io/v1"
    };
    json!({"apiVersion": api, "kind": "AdmissionReview", "request": request})
}

fn creates() -> impl Strategy<Value = Case> {
    (knobs(), envelope(), place(), who(), object_spec()).prop_map(
        |(knobs, envelope, place, who, spec)| {
            let object = spec.render(&knobs, place.namespace().filter(|n| !n.is_empty()));
            Case {
                review: review(&envelope, "CREATE", &place, &who, object, Value::Null),
                knobs,
            }
        },
    )
}

fn updates() -> impl Strategy<Value = Case> {
    (
        knobs(),
        envelope(),
        // The old object lives in `agents`: the request says so too (the
        // API server never sends another namespace for it).
        Just(Place::Agents),
        who(),
        old_spec(),
        shape(),
        prop::collection::vec(edit(), 1..3),
        versions(),
    )
        .prop_map(
            |(knobs, envelope, place, who, old, shape, edits, (written, stored))| {
                let mut old = old.render(&knobs, &shape);
                let mut new = old.clone();
                for edit in &edits {
                    apply_edit(&mut new, edit, knobs.prefix());
                }
                for (object, version) in [(&mut new, written), (&mut old, stored)] {
                    if let (Some(version), Some(meta)) = (
                        version,
                        object.get_mut("metadata").and_then(Value::as_object_mut),
                    ) {
                        meta.insert("resourceVersion".into(), json!(version));
                    }
                }
                Case {
                    review: review(&envelope, "UPDATE", &place, &who, new, old),
                    knobs,
                }
            },
        )
}

/// The resourceVersions an UPDATE is written against and the stored
/// object has: mostly none (the other generators' cases), else the same,
/// an older one (the API server answers with a conflict), or what it does
/// not read as older (`0`: unconditional; `010` is 10; no number).
fn versions() -> impl Strategy<Value = (Option<&'static str>, Option<&'static str>)> {
    prop_oneof![
        6 => Just((None, None)),
        1 => prop::sample::select(vec![
            (Some("10"), Some("10")),
            (Some("9"), Some("10")),
            (Some("11"), Some("10")),
            (Some("0"), Some("10")),
            (Some("010"), Some("10")),
            (Some("+9"), Some("10")),
            (Some(""), Some("10")),
            (Some("9"), None),
            (Some("18446744073709551616"), Some("10")),
        ]),
    ]
}

/// The collector's own UPDATEs: it removes references, nothing else.
fn collector_updates() -> impl Strategy<Value = Case> {
    (
        knobs(),
        envelope(),
        old_spec(),
        shape(),
        prop::collection::vec(0usize..3, 1..3),
    )
        .prop_map(|(knobs, envelope, old, shape, removals)| {
            let old = old.render(&knobs, &shape);
            let mut new = old.clone();
            for i in removals {
                apply_edit(&mut new, &Edit::RemoveRef(i), knobs.prefix());
            }
            Case {
                review: review(
                    &envelope,
                    "UPDATE",
                    &Place::Agents,
                    &Who::Collector,
                    new,
                    old,
                ),
                knobs,
            }
        })
}

/// The statefulset controller's claim retention (rule 16): on a scale-down
/// it adds the condemned pod as controller of the claim named after it,
/// from its informer's cache, so the pod may by then be running, being
/// deleted, finished, gone or recreated under another uid; the same update
/// by others, on a claim not named after the pod, or beside a removal of
/// the worker's own reference.
fn retention_updates() -> impl Strategy<Value = Case> {
    let condemned = prop_oneof![
        Just(("w-2", U2)),
        Just(("w-dead", U_DEAD)),
        Just(("w-done", U_DONE)),
        Just(("w-failed", U_FAILED)),
        Just(("w-9", U_GONE)),
        Just(("w-2", U_STALE)),
    ];
    let who = prop_oneof![
        4 => Just(Who::StatefulSetController),
        2 => Just(Who::ControllerManager),
        1 => Just(Who::Person),
        1 => Just(Who::Pod("w-1".into(), U1.into())),
    ];
    (
        knobs(),
        envelope(),
        old_spec(),
        condemned,
        who,
        any::<bool>(),
        prop_oneof![6 => Just(true), 1 => Just(false)],
        prop_oneof![6 => Just(false), 1 => Just(true)],
    )
        .prop_map(
            |(knobs, envelope, old, (pod, uid), who, block, named_after, drop_owner)| {
                let claim = |mut object: Value| {
                    object["kind"] = json!("PersistentVolumeClaim");
                    object["metadata"]["name"] = if named_after {
                        json!(format!("data-{pod}"))
                    } else {
                        json!("data")
                    };
                    object
                };
                let old = claim(old.render(&knobs, &Shape::ConfigMap));
                let mut new = old.clone();
                let list = new["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .entry("ownerReferences")
                    .or_insert_with(|| json!([]))
                    .as_array_mut()
                    .unwrap();
                if drop_owner {
                    list.clear();
                }
                list.push(
                    json!({"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid,
                    "controller": true, "blockOwnerDeletion": block}),
                );
                Case {
                    review: review(&envelope, "UPDATE", &Place::Agents, &who, new, old),
                    knobs,
                }
            },
        )
}

/// Creates the spec plainly allows: a real live pod, declared the way the
/// README says, by itself, by a controller or by a person.
fn sound_creates() -> impl Strategy<Value = Case> {
    creates_owned_by(vec!["w-1", "w-2", "w.dotted"])
}

/// The creates of [`sound_creates`], owned by a pod that has finished
/// (rule 11): every one must be denied.
fn finished_owner_creates() -> impl Strategy<Value = Case> {
    creates_owned_by(vec!["w-done", "w-failed"])
}

/// Creates that declare `owners` rightly (labels, uid, requester), in
/// every shape: whether each is allowed depends on the owner alone.
fn creates_owned_by(owners: Vec<&'static str>) -> impl Strategy<Value = Case> {
    (
        envelope(),
        select(owners),
        shape(),
        prop_oneof![Just(0u8), Just(1u8), Just(2u8)],
        prop_oneof![Just(0u8), Just(1u8), Just(3u8), Just(4u8)],
    )
        .prop_map(|(envelope, name, shape, how, owner_ref)| {
            let knobs = Knobs {
                requester_check: oracle::RequesterCheck::Enforce,
                fail_open: false,
                key_prefix: None,
                lookup_failures: vec![],
                max_pod_references: None,
                mode: oracle::Mode::Enforce,
            };
            let (owner, who) = match how {
                // The worker itself, no uid label: the token says who it is.
                0 => (
                    Owner::NameOnly(name.into()),
                    Who::Pod(name.into(), uid_of(name)),
                ),
                1 => (
                    Owner::Both(name.into()),
                    Who::Pod(name.into(), uid_of(name)),
                ),
                _ => (Owner::Both(name.into()), Who::JobController),
            };
            // A template names the object's owner (never another pod).
            let shape = match shape {
                Shape::Job(3) => Shape::Job(1),
                Shape::CronJob(3) => Shape::CronJob(1),
                Shape::Deployment(3) => Shape::Deployment(1),
                other => other,
            };
            let spec = ObjectSpec {
                shape,
                owner,
                refs: vec![],
                owner_ref,
                generate_name: false,
                default_prefix: false,
            };
            let object = spec.render(&knobs, Some(NS));
            Case {
                review: review(
                    &envelope,
                    "CREATE",
                    &Place::Agents,
                    &who,
                    object,
                    Value::Null,
                ),
                knobs,
            }
        })
}

/// Issue 14 item 1: a pod adds its own Pod reference to an object that
/// another worker owns (SPEC §3 UPDATE), in every form the object and the
/// addition can take.
fn adoptions() -> impl Strategy<Value = Case> {
    (
        knobs(),
        envelope(),
        // The owner: running, being deleted, gone.
        select(vec!["w-1", "w-dead", "w-gone"]),
        // The adopter and the one it must not be.
        select(vec!["w-2", "w.dotted"]),
        shape(),
        0u8..6,
        0u8..4,
    )
        .prop_map(|(knobs, envelope, owner, adopter, shape, form, how)| {
            let prefix = knobs.prefix();
            let (pod_key, uid_key) = (format!("{prefix}/owner-pod"), format!("{prefix}/owner-uid"));
            let owner_uid = uid_of(owner);
            let spec = ObjectSpec {
                shape,
                owner: Owner::NameUid(owner.into(), owner_uid.clone()),
                refs: vec![],
                owner_ref: 1,
                generate_name: false,
                default_prefix: false,
            };
            let mut old = spec.render(&knobs, Some(NS));
            let metadata = old["metadata"].as_object_mut().unwrap();
            match form {
                // Labelled, with its owner's reference.
                0 => {}
                // Orphaned: the reference removed, the labels kept.
                1 => drop(metadata.insert("ownerReferences".into(), json!([]))),
                // Unlabelled: only the owner's reference says whose it is.
                2 => {
                    let labels = metadata["labels"].as_object_mut().unwrap();
                    labels.remove(&pod_key);
                    labels.remove(&uid_key);
                }
                // Labelled before install: no reference.
                3 => drop(metadata.remove("ownerReferences")),
                // `Self`, the owner's name in the annotation.
                4 => {
                    metadata["labels"][&pod_key] = json!("Self");
                    metadata.insert(
                        "annotations".into(),
                        json!({format!("{prefix}/owner-pod-name"): owner}),
                    );
                }
                // Co-owned by the adopter already, under another uid.
                _ => {
                    let mut r = RefSpec::exact(adopter, Flag::False).render();
                    r["uid"] = json!(U_STALE);
                    metadata["ownerReferences"].as_array_mut().unwrap().push(r);
                }
            }
            let mut new = old.clone();
            let mut own = RefSpec::exact(adopter, Flag::False).render();
            match how {
                0 => {}
                1 => drop(own.as_object_mut().unwrap().remove("blockOwnerDeletion")),
                2 => own["blockOwnerDeletion"] = json!(true),
                // An entry of another kind, rewritten into the adopter's
                // reference under its uid.
                _ => {
                    let entry = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs-1", "uid": uid_of(adopter), "controller": false});
                    old["metadata"]
                        .as_object_mut()
                        .unwrap()
                        .entry("ownerReferences")
                        .or_insert_with(|| json!([]))
                        .as_array_mut()
                        .unwrap()
                        .push(entry);
                }
            }
            new["metadata"]
                .as_object_mut()
                .unwrap()
                .entry("ownerReferences")
                .or_insert_with(|| json!([]))
                .as_array_mut()
                .unwrap()
                .push(own);
            let who = Who::Pod(adopter.into(), uid_of(adopter));
            Case {
                review: review(&envelope, "UPDATE", &Place::Agents, &who, new, old),
                knobs,
            }
        })
}

/// Issue 14 item 2: what Kubernetes' own controllers create for a pod (a
/// generic ephemeral volume's claim, a DRA ResourceClaim), and any other
/// unlabelled object naming a pod by a blocking controller reference.
fn controller_creates() -> impl Strategy<Value = Case> {
    (
        knobs(),
        envelope(),
        prop_oneof![
            3 => Just(Who::EphemeralVolumeController),
            3 => Just(Who::ResourceClaimController),
            1 => Just(Who::JobController),
            1 => Just(Who::Person),
            1 => Just(Who::Pod("w-2".into(), U2.into())),
        ],
        prop_oneof![4 => select(vec!["w-1", "w-2", "w.dotted", "w-flaky"]), 1 => select(vec!["w-dead", "w-gone"])],
        0u8..3,
        prop_oneof![4 => Just(Twist::None), 1 => twist()],
    )
        .prop_map(|(knobs, envelope, who, owner, kind, twist)| {
            let reference = RefSpec {
                name: owner.into(),
                twist,
                block: Flag::True,
                controller: Flag::True,
            }
            .render();
            let metadata = json!({"name": format!("{owner}-scratch"), "namespace": NS, "ownerReferences": [reference]});
            let object = match kind {
                0 => json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata,
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
                1 => json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": metadata,
                    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}),
                _ => json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
                    "spec": {"containers": [{"name": "a", "image": "agent:1"}]}}),
            };
            Case {
                review: review(&envelope, "CREATE", &Place::Agents, &who, object, Value::Null),
                knobs,
            }
        })
}

/// Issue 14 item 5: the collector orphaning an object that holds more
/// Pod references than `--max-pod-references` (made before install, or
/// before the limit was lowered), and keeps more than that after.
fn collector_over_the_limit() -> impl Strategy<Value = Case> {
    (
        knobs(),
        envelope(),
        old_spec(),
        shape(),
        1usize..4,
        prop::collection::vec(0usize..8, 1..3),
    )
        .prop_map(|(mut knobs, envelope, old, shape, limit, removals)| {
            knobs.max_pod_references = Some(limit);
            let mut old = old.render(&knobs, &shape);
            let metadata = old["metadata"].as_object_mut().unwrap();
            let list = metadata
                .entry("ownerReferences")
                .or_insert_with(|| json!([]))
                .as_array_mut()
                .unwrap();
            for i in 0..limit + 3 {
                let mut r = RefSpec::exact("w-2", Flag::False).render();
                r["name"] = json!(format!("p-{i}"));
                r["uid"] = json!(format!("6f1f3d4e-0c1a-4b7e-9d2a-1000000000{i:02}"));
                list.push(r);
            }
            let mut new = old.clone();
            for i in removals {
                apply_edit(&mut new, &Edit::RemoveRef(i), knobs.prefix());
            }
            Case {
                review: review(
                    &envelope,
                    "UPDATE",
                    &Place::Agents,
                    &Who::Collector,
                    new,
                    old,
                ),
                knobs,
            }
        })
}

/// Issue 14 item 7: a labelled object whose extra reference has a kind a
/// person reads as Pod, created by anyone.
fn homoglyph_creates() -> impl Strategy<Value = Case> {
    (knobs(), envelope(), who(), shape(), homoglyph(), pod_name()).prop_map(
        |(knobs, envelope, who, shape, kind, name)| {
            let spec = ObjectSpec {
                shape,
                owner: Owner::Both("w-1".into()),
                refs: vec![RefSpec {
                    name,
                    twist: Twist::KindHomoglyph(kind),
                    block: Flag::False,
                    controller: Flag::False,
                }],
                owner_ref: 1,
                generate_name: false,
                default_prefix: false,
            };
            let object = spec.render(&knobs, Some(NS));
            Case {
                review: review(
                    &envelope,
                    "CREATE",
                    &Place::Agents,
                    &who,
                    object,
                    Value::Null,
                ),
                knobs,
            }
        },
    )
}

fn others() -> impl Strategy<Value = Case> {
    (
        knobs(),
        envelope(),
        who(),
        object_spec(),
        select(vec!["DELETE", "CONNECT"]),
    )
        .prop_map(|(knobs, envelope, who, spec, operation)| {
            let object = spec.render(&knobs, Some(NS));
            let (object, old) = if operation == "DELETE" {
                (Value::Null, object)
            } else {
                (Value::Null, Value::Null)
            };
            Case {
                review: review(&envelope, operation, &Place::Agents, &who, object, old),
                knobs,
            }
        })
}

async fn ask(webhook: &Arc<Webhook>, hook: Hook, review: &Value) -> (u16, Value) {
    ask_in(webhook, hook, oracle::Mode::Enforce, review).await
}

/// [`ask`] the endpoint of `hook` in `mode` (`/validate-all` has none).
async fn ask_in(
    webhook: &Arc<Webhook>,
    hook: Hook,
    mode: oracle::Mode,
    review: &Value,
) -> (u16, Value) {
    let path = match (hook, mode) {
        (Hook::ValidateAll, _) | (_, oracle::Mode::Enforce) => hook.as_str().to_string(),
        (_, oracle::Mode::Warn) => format!("{}/warn", hook.as_str()),
        (_, oracle::Mode::Audit) => format!("{}/audit", hook.as_str()),
    };
    let (status, answer) =
        common::send_to(webhook.clone(), &path, serde_json::to_vec(review).unwrap()).await;
    (status.as_u16(), answer)
}

/// Every endpoint's answer (`/mutate`, `/validate`, `/validate-all`, in
/// that order), judged; with `follow_up`, also what the API
/// server does next with an allowed mutation: reinvoke the mutating webhook
/// on its output (it must add nothing), then call the validating one (it
/// must accept what the mutating one made).
async fn judge_case(case: &Case, follow_up: bool) -> Result<Vec<Value>, String> {
    let webhook = case.knobs.webhook();
    let settings = case.knobs.oracle();
    let pods = world();
    let mut answers = Vec::new();
    for hook in [Hook::Mutate, Hook::Validate, Hook::ValidateAll] {
        let (status, answer) = ask_in(&webhook, hook, case.knobs.mode, &case.review).await;
        oracle::judge(&case.review, &pods, hook, &settings, status, &answer)
            .map_err(|wrong| format!("/{}: {wrong}\n  answer: {answer}", hook.as_str()))?;
        answers.push(answer);
    }
    let mutated = &answers[0]["response"];
    if follow_up && mutated["allowed"] == true {
        let mut next = case.review.clone();
        if let Some(object) = patched(&case.review, &answers[0]) {
            next["request"]["object"] = object;
            next["request"]["uid"] = json!("7e57ca5e-0000-4000-8000-000000000002");
            let (status, again) = ask_in(&webhook, Hook::Mutate, case.knobs.mode, &next).await;
            if status != 200
                || again["response"]["allowed"] != true
                || again["response"].get("patch").is_some()
            {
                return Err(format!(
                    "not idempotent: /mutate on its own output answered {again}\n  first answer: {}",
                    answers[0]
                ));
            }
        }
        let (status, validated) = ask_in(&webhook, Hook::Validate, case.knobs.mode, &next).await;
        oracle::judge(&next, &pods, Hook::Validate, &settings, status, &validated)
            .map_err(|wrong| format!("/validate after /mutate: {wrong}\n  answer: {validated}"))?;
        if validated["response"]["allowed"] != true {
            return Err(format!(
                "/validate refuses what /mutate allowed and made: {validated}\n  /mutate answered: {}",
                answers[0]
            ));
        }
    }
    Ok(answers)
}

fn patched(review: &Value, answer: &Value) -> Option<Value> {
    use base64::Engine;
    let patch = answer["response"]["patch"].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .ok()?;
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).ok()?;
    let mut object = review["request"]["object"].clone();
    json_patch::patch(&mut object, &patch).ok()?;
    Some(object)
}

// ---------------------------------------------------------------------------
// The runner: fixed seed, no persistence, the minimal failing input shown.

fn check<S: Strategy<Value = Case>>(
    property: &str,
    default_cases: u32,
    strategy: S,
    follow_up: bool,
    extra: impl Fn(&Case, &[Value]) -> Result<(), String>,
) {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(default_cases);
    let seed: u64 = std::env::var("OWNERGUARD_PROPTEST_SEED")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(7);
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    for (i, b) in property.bytes().enumerate() {
        bytes[8 + i % 24] ^= b;
    }
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 4096,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let result = runner.run(&strategy, |case| {
        let answers = runtime
            .block_on(judge_case(&case, follow_up))
            .map_err(TestCaseError::fail)?;
        extra(&case, &answers).map_err(TestCaseError::fail)
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(why, case)) => panic!(
            "property '{property}' fails (seed {seed}); minimal input:{case:?}\n  what is wrong: {why}"
        ),
        Err(TestError::Abort(why)) => panic!("property '{property}' aborted: {why}"),
    }
}

fn no_extra(_: &Case, _: &[Value]) -> Result<(), String> {
    Ok(())
}

#[test]
fn every_generated_create_is_judged_right_on_both_webhooks() {
    check("creates", 400, creates(), true, no_extra);
}

#[test]
fn every_generated_update_is_judged_right_on_both_webhooks() {
    check("updates", 400, updates(), true, no_extra);
}

#[test]
fn the_collectors_removals_are_never_denied_nor_restored() {
    check(
        "collector",
        150,
        collector_updates(),
        false,
        |_, answers| {
            for answer in answers {
                if answer["response"]["allowed"] != true {
                    return Err(format!("the collector's removal is denied: {answer}"));
                }
            }
            Ok(())
        },
    );
}

#[test]
fn the_statefulset_controllers_retention_is_never_refused_for_its_pods_state() {
    check(
        "retention",
        300,
        retention_updates(),
        true,
        |case, answers| {
            // Beyond the oracle: the controller's update of a claim owned
            // by its running worker, adding only the condemned pod's
            // reference, is allowed on every webhook whatever that pod's
            // state, or the set's sync stalls.
            let request = &case.review["request"];
            let user = request["userInfo"]["username"].as_str().unwrap_or("");
            let by_controller = user == oracle::STATEFULSET_CONTROLLER_USER
                || user == oracle::CONTROLLER_MANAGER_USER;
            let old = &request["oldObject"]["metadata"];
            let sound_old = old["labels"]
                .as_object()
                .is_some_and(|l| l.values().any(|v| v == "w-1") && l.values().any(|v| v == U1))
                && old["ownerReferences"].as_array().is_some_and(|refs| {
                    refs.len() == 1
                        && refs[0]["uid"] == U1
                        && refs[0]["blockOwnerDeletion"] == false
                });
            let new_refs = request["object"]["metadata"]["ownerReferences"].as_array();
            let keeps_owner = new_refs.is_some_and(|refs| refs.iter().any(|r| r["uid"] == U1));
            let named_after = request["object"]["metadata"]["name"] != "data";
            if by_controller
                && sound_old
                && keeps_owner
                && named_after
                && case.knobs.key_prefix.is_none()
            {
                // /validate sees /mutate's output in the cluster (checked
                // by the follow-up); sent a blocking reference directly it
                // refuses it, as every blocking Pod reference.
                let blocking = new_refs
                    .is_some_and(|refs| refs.iter().any(|r| r["blockOwnerDeletion"] == true));
                let judged = if blocking { &answers[..1] } else { answers };
                for answer in judged {
                    if answer["response"]["allowed"] != true {
                        return Err(format!(
                            "the controller's retention update is refused: {answer}"
                        ));
                    }
                }
            }
            Ok(())
        },
    );
}

#[test]
fn a_pod_never_adopts_another_workers_object() {
    check("adoptions", 150, adoptions(), false, |case, answers| {
        // The oracle judges every answer; here the plain statement: under
        // enforce, neither labelled webhook lets the adopter in; in warn
        // and audit (rule 17) it may, never unrecorded.
        let enforce = case.knobs.requester_check == oracle::RequesterCheck::Enforce;
        for answer in &answers[..2] {
            let allowed = answer["response"]["allowed"] == true;
            let recorded = answer["response"]["auditAnnotations"]["violation-rules"]
                .as_str()
                .is_some_and(|rules| rules.contains("requester-adopts-object"));
            match case.knobs.mode {
                oracle::Mode::Enforce if enforce && allowed => {
                    return Err(format!("an adoption is allowed: {answer}"));
                }
                oracle::Mode::Warn | oracle::Mode::Audit if enforce && allowed && !recorded => {
                    return Err(format!("an adoption is allowed unrecorded: {answer}"));
                }
                _ => {}
            }
        }
        Ok(())
    });
}

#[test]
fn kubernetes_controllers_creates_pass_validate_all() {
    check(
        "controllers",
        150,
        controller_creates(),
        false,
        |case, answers| {
            // A claim for a live pod, exact reference: /validate-all allows it.
            let reference = &case.review["request"]["object"]["metadata"]["ownerReferences"][0];
            let live = ["w-1", "w-2", "w.dotted"]
                .contains(&reference["name"].as_str().unwrap_or(""))
                && reference["uid"] == json!(uid_of(reference["name"].as_str().unwrap_or("")))
                && reference["apiVersion"] == "v1"
                && reference["kind"] == "Pod";
            if live && answers[2]["response"]["allowed"] != true {
                return Err(format!(
                    "/validate-all refuses what a Kubernetes controller makes: {}",
                    answers[2]
                ));
            }
            Ok(())
        },
    );
}

#[test]
fn the_collectors_removals_pass_over_the_reference_limit() {
    check(
        "collector-over-limit",
        100,
        collector_over_the_limit(),
        false,
        |_, answers| {
            for answer in answers {
                if answer["response"]["allowed"] != true
                    || answer["response"].get("patch").is_some()
                {
                    return Err(format!(
                        "the collector's removal is not allowed unchanged: {answer}"
                    ));
                }
            }
            Ok(())
        },
    );
}

#[test]
fn a_kind_a_person_reads_as_pod_is_refused_beside_the_owner() {
    check(
        "homoglyphs",
        100,
        homoglyph_creates(),
        false,
        |case, answers| {
            // Whatever else is wrong with the request, enforce never allows
            // it: the collector would never resolve that reference. Warn
            // and audit let it through as sent, never completed, named.
            for answer in &answers[..2] {
                let response = &answer["response"];
                if case.knobs.mode != oracle::Mode::Enforce {
                    // The first refusal found is named: a decision stops
                    // at it.
                    let named = response["auditAnnotations"]["violation-rules"]
                        .as_str()
                        .unwrap_or_default();
                    if response.get("patch").is_some() || named.is_empty() {
                        return Err(format!(
                            "a homoglyph of Pod let through in a mode without being named, or completed: {answer}"
                        ));
                    }
                } else if response["allowed"] == true {
                    return Err(format!("a homoglyph of Pod is allowed: {answer}"));
                }
            }
            Ok(())
        },
    );
}

#[test]
fn sound_creates_are_allowed_with_the_reference() {
    check("sound", 150, sound_creates(), true, |_, answers| {
        // /validate sees the object before mutation here: only /mutate
        // must allow every one of these.
        if answers[0]["response"]["allowed"] != true {
            return Err(format!(
                "a sound create is denied by /mutate: {}",
                answers[0]
            ));
        }
        Ok(())
    });
}

#[test]
fn a_finished_owner_is_no_owner() {
    check(
        "finished owner",
        100,
        finished_owner_creates(),
        true,
        |_, answers| {
            // /mutate and /validate refuse it (rule 11); /validate-all
            // refuses only what the collector cannot resolve, and it
            // resolves a finished pod (rule 13): the oracle judged its
            // answer, which a finished owner alone may not make a denial.
            for answer in &answers[..2] {
                let response = &answer["response"];
                if response["allowed"] != false || response["status"]["code"] != 403 {
                    return Err(format!(
                        "a create owned by a finished pod is not denied 403: {answer}"
                    ));
                }
            }
            Ok(())
        },
    );
}

#[test]
fn delete_and_connect_pass_unchanged() {
    check("others", 100, others(), false, |_, answers| {
        // A body the API server would not send (a reference with a
        // number for uid) may be refused whole: the oracle judged that.
        for answer in answers.iter().filter(|a| a.get("response").is_some()) {
            if answer["response"]["allowed"] != true || answer["response"].get("patch").is_some() {
                return Err(format!("DELETE/CONNECT not allowed unchanged: {answer}"));
            }
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------
// The controllers' side (SPEC §3 rule 12; issue 14 items 3 and 4): a
// workload a worker creates, then everything Kubernetes' controllers make
// from it, each sent back through both webhooks by the oracle's simulator.

/// How a template (or the object) declares its owner.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Form {
    /// No owner label.
    Absent,
    /// `owner-pod: <worker>`.
    Name,
    /// `owner-pod: <worker>` and its uid.
    NameUid,
    /// `owner-pod: Self`.
    SelfValue,
    /// `owner-pod: w-2`, another worker.
    Other,
}

fn form() -> impl Strategy<Value = Form> {
    prop_oneof![
        3 => Just(Form::Absent),
        4 => Just(Form::Name),
        2 => Just(Form::NameUid),
        4 => Just(Form::SelfValue),
        1 => Just(Form::Other),
    ]
}

/// The worker that creates the workload.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Creator {
    /// Pod `w-1`, with its own token.
    Worker,
    /// A worker whose name (253 characters) cannot be a label value.
    LongWorker,
    /// A person, who gives the uid label of `w-1`.
    Person,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum WorkloadKind {
    Pod,
    Job,
    CronJob,
    Deployment,
    ReplicaSet,
    StatefulSet,
    DaemonSet,
    /// A ResourceClaimTemplate, then a pod that names it.
    ClaimTemplate,
}

#[derive(Clone, Debug)]
struct Workload {
    kind: WorkloadKind,
    creator: Creator,
    /// The object's own label: `Name` or `SelfValue`.
    object: Form,
    template: Form,
    job_template: Form,
    /// Claim templates (a StatefulSet's, a ResourceClaimTemplate's).
    claims: Vec<Form>,
    /// The selector holds the template's owner label.
    selector_owner: bool,
    /// A generic ephemeral volume's claim template, if any.
    ephemeral: Option<Form>,
    /// An ownerReference written into each StatefulSet claim template,
    /// which the statefulset controller copies onto every claim.
    claim_reference: Option<ClaimReference>,
    knobs: Knobs,
}

/// Whom a claim template's ownerReference names.
#[derive(Clone, Copy, Debug, PartialEq)]
enum ClaimReference {
    /// The worker itself, exactly (`v1`/`Pod`, its uid).
    Worker,
    /// Another running worker.
    OtherWorker,
    /// A pod that does not exist.
    Ghost,
    /// The worker, under a kind the collector cannot resolve (`pod`).
    LowercaseKind,
    /// A ConfigMap: no pod at all.
    ConfigMap,
}

fn workload() -> impl Strategy<Value = Workload> {
    (
        prop_oneof![
            2 => Just(WorkloadKind::Pod),
            2 => Just(WorkloadKind::Job),
            2 => Just(WorkloadKind::CronJob),
            3 => Just(WorkloadKind::Deployment),
            1 => Just(WorkloadKind::ReplicaSet),
            3 => Just(WorkloadKind::StatefulSet),
            2 => Just(WorkloadKind::DaemonSet),
            2 => Just(WorkloadKind::ClaimTemplate),
        ],
        prop_oneof![5 => Just(Creator::Worker), 2 => Just(Creator::LongWorker), 2 => Just(Creator::Person)],
        prop_oneof![Just(Form::Name), Just(Form::SelfValue)],
        (form(), form()),
        prop::collection::vec(form(), 1..3),
        any::<bool>(),
        prop::option::of(form()),
        prop_oneof![5 => Just(None), 1 => Just(Some("acme.dev"))],
        prop_oneof![
            10 => Just(None),
            1 => Just(Some(ClaimReference::Worker)),
            1 => Just(Some(ClaimReference::OtherWorker)),
            1 => Just(Some(ClaimReference::Ghost)),
            1 => Just(Some(ClaimReference::LowercaseKind)),
            1 => Just(Some(ClaimReference::ConfigMap)),
        ],
    )
        .prop_map(
            |(kind, creator, object, (template, job_template), claims, selector_owner, ephemeral, prefix, claim_reference)| {
                Workload {
                    kind,
                    creator,
                    object,
                    template,
                    job_template,
                    claims,
                    selector_owner,
                    ephemeral,
                    claim_reference,
                    knobs: Knobs {
                        requester_check: oracle::RequesterCheck::Enforce,
                        fail_open: false,
                        key_prefix: prefix,
                        lookup_failures: vec![],
                        max_pod_references: None,
                        mode: oracle::Mode::Enforce,
                    },
                }
            },
        )
}

impl Workload {
    /// The worker's name and uid.
    fn worker(&self) -> (String, String) {
        match self.creator {
            Creator::LongWorker => (long_name(253), U_LONG.to_string()),
            Creator::Worker | Creator::Person => ("w-1".to_string(), U1.to_string()),
        }
    }

    fn user_info(&self) -> Value {
        let (name, uid) = self.worker();
        match self.creator {
            Creator::Person => Who::Person.user_info(),
            _ => Who::Pod(name, uid).user_info(),
        }
    }

    /// A form as it can be written: a name over 63 characters is no label
    /// value (the worker then writes `Self`), and a person has no `Self`
    /// on the object itself.
    fn writable(&self, form: Form) -> Form {
        match (form, self.creator) {
            (Form::Name | Form::NameUid, Creator::LongWorker) => Form::SelfValue,
            (form, _) => form,
        }
    }

    /// The labels of `form`, beside `app: agent`.
    fn labels(&self, form: Form) -> Map<String, Value> {
        let prefix = self.knobs.prefix();
        let (pod, uid) = (format!("{prefix}/owner-pod"), format!("{prefix}/owner-uid"));
        let (name, worker_uid) = self.worker();
        let mut labels = Map::new();
        labels.insert("app".into(), json!("agent"));
        match self.writable(form) {
            Form::Absent => {}
            Form::Name => drop(labels.insert(pod, json!(name))),
            Form::NameUid => {
                labels.insert(pod, json!(name));
                labels.insert(uid, json!(worker_uid));
            }
            Form::SelfValue => drop(labels.insert(pod, json!("Self"))),
            Form::Other => drop(labels.insert(pod, json!("w-2"))),
        }
        labels
    }

    fn object_labels(&self) -> Map<String, Value> {
        let form = match (self.object, self.creator) {
            (Form::SelfValue, Creator::Person) => Form::Name,
            (form, _) => form,
        };
        let mut labels = self.labels(form);
        if self.creator == Creator::Person {
            let prefix = self.knobs.prefix();
            labels.insert(format!("{prefix}/owner-uid"), json!(U1));
        }
        labels
    }

    fn pod_spec(&self) -> Value {
        let mut spec =
            json!({"containers": [{"name": "a", "image": "agent:1"}], "restartPolicy": "Never"});
        if let Some(form) = self.ephemeral {
            spec["volumes"] = json!([
                {"name": "scratch", "emptyDir": {}},
                {"name": "work", "ephemeral": {"volumeClaimTemplate": {
                    "metadata": {"labels": self.labels(form)},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
                }}},
            ]);
        }
        spec
    }

    fn pod_template(&self) -> Value {
        json!({"metadata": {"labels": self.labels(self.template)}, "spec": self.pod_spec()})
    }

    /// The selector of a workload: `app`, and the template's owner label
    /// when `selector_owner` (it must match the template's labels).
    fn selector(&self) -> Value {
        let mut labels = Map::new();
        labels.insert("app".into(), json!("agent"));
        let pod_key = format!("{}/owner-pod", self.knobs.prefix());
        if self.selector_owner
            && let Some(value) = self.labels(self.template).get(&pod_key)
        {
            labels.insert(pod_key, value.clone());
        }
        json!({"matchLabels": labels})
    }

    /// What the creator sends, in order.
    fn objects(&self) -> Vec<Value> {
        let metadata = json!({"name": "agent-1", "labels": self.object_labels()});
        let object = |api: &str, kind: &str, spec: Value| json!({"apiVersion": api, "kind": kind, "metadata": metadata, "spec": spec});
        let (worker, worker_uid) = self.worker();
        let reference = self.claim_reference.map(|to| match to {
            ClaimReference::Worker => json!({"apiVersion": "v1", "kind": "Pod", "name": worker, "uid": worker_uid}),
            ClaimReference::OtherWorker => json!({"apiVersion": "v1", "kind": "Pod", "name": "w-2", "uid": U2}),
            ClaimReference::Ghost => json!({"apiVersion": "v1", "kind": "Pod", "name": "ghost", "uid": "9e9e9e9e-0000-4000-8000-000000000000"}),
            ClaimReference::LowercaseKind => json!({"apiVersion": "v1", "kind": "pod", "name": worker, "uid": worker_uid}),
            ClaimReference::ConfigMap => json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "prompts", "uid": "5c5c5c5c-0000-4000-8000-000000000000"}),
        });
        let claim_template = |i: usize, form: Form| {
            let mut template = json!({"metadata": {"name": format!("data{i}"), "labels": self.labels(form)},
                   "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
            if let Some(reference) = &reference {
                template["metadata"]["ownerReferences"] = json!([reference]);
            }
            template
        };
        match self.kind {
            WorkloadKind::Pod => vec![object("v1", "Pod", self.pod_spec())],
            WorkloadKind::Job => vec![object(
                "batch/v1",
                "Job",
                json!({"template": self.pod_template()}),
            )],
            WorkloadKind::CronJob => vec![object(
                "batch/v1",
                "CronJob",
                json!({"schedule": "* * * * *", "jobTemplate": {
                    "metadata": {"labels": self.labels(self.job_template)},
                    "spec": {"template": self.pod_template()},
                }}),
            )],
            WorkloadKind::Deployment | WorkloadKind::ReplicaSet | WorkloadKind::DaemonSet => {
                let kind = match self.kind {
                    WorkloadKind::Deployment => "Deployment",
                    WorkloadKind::ReplicaSet => "ReplicaSet",
                    _ => "DaemonSet",
                };
                vec![object(
                    "apps/v1",
                    kind,
                    json!({"replicas": 1, "selector": self.selector(), "template": self.pod_template()}),
                )]
            }
            WorkloadKind::StatefulSet => {
                let claims: Vec<Value> = self
                    .claims
                    .iter()
                    .enumerate()
                    .map(|(i, form)| claim_template(i, *form))
                    .collect();
                vec![object(
                    "apps/v1",
                    "StatefulSet",
                    json!({"replicas": 1, "serviceName": "agent", "selector": self.selector(),
                           "template": self.pod_template(), "volumeClaimTemplates": claims}),
                )]
            }
            WorkloadKind::ClaimTemplate => {
                let template = json!({
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaimTemplate",
                    "metadata": {"name": "gpu", "labels": self.object_labels()},
                    "spec": {"metadata": {"labels": self.labels(self.claims[0])},
                             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}},
                });
                let mut pod = object("v1", "Pod", self.pod_spec());
                pod["spec"]["resourceClaims"] =
                    json!([{"name": "gpu", "resourceClaimTemplateName": "gpu"}]);
                vec![template, pod]
            }
        }
    }
}

/// What a walk saw: roots admitted, objects controllers made.
#[derive(Default)]
struct Walked {
    admitted: usize,
    made: usize,
    sent: usize,
}

/// Create the workload's objects as its creator, then walk every
/// controller from what was admitted; the oracle judges each answer.
fn walk_workload(
    workload: &Workload,
    runtime: &tokio::runtime::Runtime,
    walked: &mut Walked,
) -> Result<(), String> {
    let settings = workload.knobs.oracle();
    let mut cluster = oracle::controllers::Cluster::new(&settings, NS, world());
    let knobs = workload.knobs.clone();
    let mut ask = |hook: Hook, review: &Value, pods: &[Pod]| {
        runtime.block_on(ask(&knobs.webhook_over(pods), hook, review))
    };
    let mut stored = Vec::new();
    for object in workload.objects() {
        match cluster.create(&workload.user_info(), object, &mut ask)? {
            oracle::controllers::Created::Stored(object) => stored.push(object),
            // Refused, and the oracle found the refusal right.
            oracle::controllers::Created::Denied(_) => return Ok(()),
        }
    }
    if !cluster.sent_to_ownerguard(&stored[0]) {
        // Not labelled under the webhook's prefix: ownerguard never sees
        // it (README, the known limit).
        return Ok(());
    }
    walked.admitted += 1;
    for object in &stored {
        walked.made += cluster.reconcile(object, &mut ask)?.len();
    }
    walked.sent += cluster.sent.len();
    Ok(())
}

/// Rule 12: a workload is never admitted when what its controllers make
/// from it would then be refused; every controller is walked to the leaves
/// (Deployment -> ReplicaSet -> Pod -> claims; CronJob -> Job -> Pod;
/// StatefulSet -> revision, claims, Pod; DaemonSet -> revision, Pod;
/// Pod -> ephemeral and DRA claims).
#[test]
fn what_controllers_make_from_an_admitted_workload_is_admitted() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(300);
    let seed: u64 = std::env::var("OWNERGUARD_PROPTEST_SEED")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(7);
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8] = 12;
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 4096,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let walked = std::cell::RefCell::new(Walked::default());
    let result = runner.run(&workload(), |workload| {
        walk_workload(&workload, &runtime, &mut walked.borrow_mut()).map_err(TestCaseError::fail)
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(why, workload)) => panic!(
            "property 'controllers' fails (seed {seed}); minimal workload: {workload:?}\n  objects: {}\n  what is wrong: {why}",
            serde_json::to_string(&workload.objects()).unwrap()
        ),
        Err(TestError::Abort(why)) => panic!("property 'controllers' aborted: {why}"),
    }
    // Not vacuous: most workloads are admitted and walked.
    let walked = walked.into_inner();
    eprintln!(
        "{cases} workloads: {} admitted and walked, {} objects made by controllers, {} reviews sent",
        walked.admitted, walked.made, walked.sent
    );
    assert!(
        walked.admitted * 3 >= cases as usize && walked.made >= walked.admitted,
        "only {} of {cases} workloads admitted, {} objects made",
        walked.admitted,
        walked.made
    );
}

/// The bound of rule 10: thousands of Pod references are refused before
/// any lookup (issue 7 class 15).
#[test]
fn thousands_of_references_are_refused_400() {
    let knobs = Knobs {
        requester_check: oracle::RequesterCheck::Enforce,
        fail_open: false,
        key_prefix: None,
        lookup_failures: vec![],
        max_pod_references: None,
        mode: oracle::Mode::Enforce,
    };
    let refs: Vec<Value> = (0..2000)
        .map(|i| json!({"apiVersion": "v1", "kind": "Pod", "name": format!("w-{i}"), "uid": format!("u-{i}")}))
        .collect();
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "prompt-1", "namespace": NS,
        "labels": {"ownerguard.io/owner-pod": "w-1", "ownerguard.io/owner-uid": U1}, "ownerReferences": refs}});
    let env = Envelope {
        v1beta1: false,
        uid: true,
        dry_run: false,
    };
    let case = Case {
        review: review(
            &env,
            "CREATE",
            &Place::Agents,
            &Who::Person,
            object,
            Value::Null,
        ),
        knobs,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    if let Err(wrong) = runtime.block_on(judge_case(&case, false)) {
        panic!("2,000 Pod references: {wrong}");
    }
}

/// The oracle itself: it must not accept what it exists to catch. Answers
/// forged here (not the webhook's) are fed to it.
#[test]
fn the_oracle_rejects_known_wrong_answers() {
    use base64::Engine;
    let settings = oracle::Settings::default();
    let pods = world();
    let env = Envelope {
        v1beta1: false,
        uid: true,
        dry_run: false,
    };
    let create = |labels: Value, refs: Value| {
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "prompt-1", "namespace": NS, "labels": labels, "ownerReferences": refs}});
        review(
            &env,
            "CREATE",
            &Place::Agents,
            &Who::Person,
            object,
            Value::Null,
        )
    };
    let allow = |patch: Option<Value>| {
        let mut response = json!({"uid": "7e57ca5e-0000-4000-8000-000000000001", "allowed": true});
        if let Some(p) = patch {
            response["patch"] =
                json!(base64::engine::general_purpose::STANDARD.encode(p.to_string()));
            response["patchType"] = json!("JSONPatch");
        }
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
    };
    let deny = |code: u16, message: &str| json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "7e57ca5e-0000-4000-8000-000000000001", "allowed": false, "status": {"code": code, "message": message}}});
    let labels = json!({"ownerguard.io/owner-pod": "w-1", "ownerguard.io/owner-uid": U1});
    let good_ref = json!([{"apiVersion": "v1", "kind": "Pod", "name": "w-1", "uid": U1, "controller": false, "blockOwnerDeletion": false}]);
    let judge = |review: &Value, answer: &Value, hook: Hook| {
        oracle::judge(review, &pods, hook, &settings, 200, answer)
    };

    // The right answer passes.
    let r = create(labels.clone(), json!([]));
    let right = allow(Some(json!([
        {"op": "add", "path": "/metadata/ownerReferences/-", "value": good_ref[0]}
    ])));
    judge(&r, &right, Hook::Mutate).unwrap();
    // Allowed with no reference added.
    assert!(judge(&r, &allow(None), Hook::Mutate).is_err());
    // A reference under kind `pod` (class 1).
    let wrong_kind = create(
        labels.clone(),
        json!([{"apiVersion": "v1", "kind": "pod", "name": "w-1", "uid": U1}]),
    );
    assert!(judge(&wrong_kind, &allow(None), Hook::Validate).is_err());
    // A patch that does not apply is a 500.
    let bad = allow(Some(
        json!([{"op": "replace", "path": "/metadata/nothing/x", "value": 1}]),
    ));
    assert!(judge(&r, &bad, Hook::Mutate).unwrap_err().contains("500"));
    // A blocking reference written by the patch.
    let mut blocking = good_ref[0].clone();
    blocking["blockOwnerDeletion"] = json!(true);
    let blocked = allow(Some(
        json!([{"op": "add", "path": "/metadata/ownerReferences/-", "value": blocking}]),
    ));
    assert!(judge(&r, &blocked, Hook::Mutate).is_err());
    // A wrong denial of the sound create, and a denial with the wrong code.
    assert!(
        judge(
            &r,
            &deny(
                403,
                "ConfigMap 'prompt-1' in namespace 'agents': owner pod 'w-1'"
            ),
            Hook::Mutate
        )
        .is_err()
    );
    let missing = create(
        json!({"ownerguard.io/owner-pod": "w-3", "ownerguard.io/owner-uid": U1}),
        json!([]),
    );
    judge(
        &missing,
        &deny(
            403,
            "ConfigMap 'prompt-1' in namespace 'agents': owner pod 'w-3' not found",
        ),
        Hook::Mutate,
    )
    .unwrap();
    assert!(
        judge(
            &missing,
            &deny(
                503,
                "ConfigMap 'prompt-1' in namespace 'agents': owner pod 'w-3'"
            ),
            Hook::Mutate
        )
        .is_err()
    );
    // A message that reveals the uid of a pod the request did not name.
    let stale = create(
        json!({"ownerguard.io/owner-pod": "w-2", "ownerguard.io/owner-uid": U1}),
        json!([]),
    );
    let leak =
        format!("ConfigMap 'prompt-1' in namespace 'agents': owner pod 'w-2' has uid '{U2}'");
    assert!(
        judge(&stale, &deny(403, &leak), Hook::Mutate)
            .unwrap_err()
            .contains("reveals")
    );
    // A name with '?' allowed (class 2).
    let query = create(
        json!({"ownerguard.io/owner-pod": "w-1?x=1", "ownerguard.io/owner-uid": U1}),
        json!([]),
    );
    assert!(
        judge(
            &query,
            &allow(Some(
                json!([{"op": "add", "path": "/metadata/ownerReferences/-", "value": good_ref[0]}])
            )),
            Hook::Mutate
        )
        .is_err()
    );
    // Rule 11: a finished owner is no owner. Its reference in the final
    // object is a wrong allow, on either webhook, for either phase.
    for (name, uid) in [("w-done", U_DONE), ("w-failed", U_FAILED)] {
        let finished_ref = json!([{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid, "controller": false, "blockOwnerDeletion": false}]);
        let r = create(
            json!({"ownerguard.io/owner-pod": name, "ownerguard.io/owner-uid": uid}),
            finished_ref.clone(),
        );
        assert!(judge(&r, &allow(None), Hook::Validate).is_err(), "{name}");
        assert!(judge(&r, &allow(None), Hook::Mutate).is_err(), "{name}");
        let message =
            format!("ConfigMap 'prompt-1' in namespace 'agents': owner pod '{name}' has finished");
        judge(&r, &deny(403, &message), Hook::Validate).unwrap();
        // A plain Pod reference to it, no labels: the same.
        let r = create(json!({}), finished_ref);
        assert!(judge(&r, &allow(None), Hook::Mutate).is_err(), "{name}");
    }
    // Answered in another version.
    let mut v1beta1 = r.clone();
    v1beta1["apiVersion"] = json!("admission.k8s.io/v1beta1");
    assert!(judge(&v1beta1, &right, Hook::Mutate).is_err());

    // Issue 14. A pod adding itself to another worker's object, allowed.
    let update = |who: &Who, old: Value, new: Value| {
        let object =
            |meta: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta});
        review(
            &env,
            "UPDATE",
            &Place::Agents,
            who,
            object(new),
            object(old),
        )
    };
    let owned =
        json!({"name": "prompt-1", "namespace": NS, "labels": labels, "ownerReferences": good_ref});
    let mut adopted = owned.clone();
    adopted["ownerReferences"]
        .as_array_mut()
        .unwrap()
        .push(json!({"apiVersion": "v1", "kind": "Pod", "name": "w-2", "uid": U2, "controller": false, "blockOwnerDeletion": false}));
    let adoption = update(&Who::Pod("w-2".into(), U2.into()), owned.clone(), adopted);
    assert!(
        judge(&adoption, &allow(None), Hook::Mutate)
            .unwrap_err()
            .contains("wrong allow")
    );
    // The ephemeral-volume controller's claim refused by /validate-all
    // for its blocking reference (still right on /validate).
    let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "w-1-scratch", "namespace": NS,
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "w-1", "uid": U1, "controller": true, "blockOwnerDeletion": true}]}});
    let claim = review(
        &env,
        "CREATE",
        &Place::Agents,
        &Who::EphemeralVolumeController,
        claim,
        Value::Null,
    );
    let blocked = deny(
        403,
        "PersistentVolumeClaim 'w-1-scratch' in namespace 'agents': the ownerReference to pod 'w-1' has blockOwnerDeletion: true",
    );
    assert!(
        judge(&claim, &blocked, Hook::ValidateAll)
            .unwrap_err()
            .contains("wrong denial")
    );
    judge(&claim, &blocked, Hook::Validate).unwrap();
    judge(&claim, &allow(None), Hook::ValidateAll).unwrap();
    // The collector's removal over a lowered limit, refused.
    let refs: Vec<Value> = (0..4)
        .map(|i| json!({"apiVersion": "v1", "kind": "Pod", "name": format!("p-{i}"), "uid": format!("6f1f3d4e-0c1a-4b7e-9d2a-10000000000{i}")}))
        .collect();
    let many =
        json!({"name": "prompt-1", "namespace": NS, "labels": labels, "ownerReferences": refs});
    let mut fewer = many.clone();
    fewer["ownerReferences"].as_array_mut().unwrap().remove(0);
    let orphaning = update(&Who::Collector, many, fewer);
    let limited = oracle::Settings {
        max_pod_references: Some(2),
        ..oracle::Settings::default()
    };
    let over = deny(
        400,
        "ConfigMap 'prompt-1' in namespace 'agents': the object carries 3 Pod ownerReferences (first: pod 'p-1'), more than the 2 ownerguard checks per object: give w-1's only",
    );
    assert!(
        oracle::judge(&orphaning, &pods, Hook::Mutate, &limited, 200, &over)
            .unwrap_err()
            .contains("wrong denial")
    );
    // A homoglyph of Pod beside the owner's reference, allowed.
    let homoglyph = create(
        labels.clone(),
        json!([good_ref[0], {"apiVersion": "v1", "kind": "P\u{43e}d", "name": "w-2", "uid": U2}]),
    );
    assert!(
        judge(&homoglyph, &allow(None), Hook::Validate)
            .unwrap_err()
            .contains("wrong allow")
    );
    // The owner's reference under /v1, refused.
    let mut slash = good_ref.clone();
    slash[0]["apiVersion"] = json!("/v1");
    let slash = create(labels.clone(), slash);
    let refused = deny(
        400,
        "ConfigMap 'prompt-1' in namespace 'agents': ownerReference #0 to pod 'w-1' has apiVersion '/v1'",
    );
    assert!(
        judge(&slash, &refused, Hook::Mutate)
            .unwrap_err()
            .contains("wrong denial")
    );
    judge(&slash, &allow(None), Hook::Mutate).unwrap();
    // The uid the old object's label had, quoted to a replace that names
    // it nowhere.
    let replaced = json!({"name": "prompt-1", "namespace": NS,
        "labels": {"ownerguard.io/owner-pod": "w-1", "ownerguard.io/owner-uid": U_STALE}});
    let replace = update(&Who::Person, owned, replaced);
    let quoted = deny(
        403,
        &format!(
            "ConfigMap 'prompt-1' in namespace 'agents': the update changes label ownerguard.io/owner-uid of owner pod 'w-1' from '{U1}' to '{U_STALE}'"
        ),
    );
    assert!(
        judge(&replace, &quoted, Hook::Mutate)
            .unwrap_err()
            .contains("reveals")
    );

    // Rule 12: a claim template naming another owner, allowed.
    let set = |claim_labels: Value| {
        let object = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": NS, "labels": labels.clone()},
            "spec": {"volumeClaimTemplates": [{"metadata": {"name": "data", "labels": claim_labels}}]}});
        review(
            &env,
            "CREATE",
            &Place::Agents,
            &Who::Person,
            object,
            Value::Null,
        )
    };
    let reference_only = allow(Some(json!([
        {"op": "add", "path": "/metadata/ownerReferences", "value": good_ref}
    ])));
    let other = set(json!({"ownerguard.io/owner-pod": "w-2"}));
    assert!(
        judge(&other, &reference_only, Hook::Mutate)
            .unwrap_err()
            .contains("wrong allow")
    );
    // A labelled claim template left without the uid label: its claims
    // would be refused.
    let incomplete = set(json!({"ownerguard.io/owner-pod": "w-1"}));
    assert!(
        judge(&incomplete, &reference_only, Hook::Mutate)
            .unwrap_err()
            .contains("volumeClaimTemplates/0")
    );
    let completed = allow(Some(json!([
        {"op": "add", "path": "/metadata/ownerReferences", "value": good_ref},
        {"op": "add", "path": "/spec/volumeClaimTemplates/0/metadata/labels/ownerguard.io~1owner-uid", "value": U1},
    ])));
    judge(&incomplete, &completed, Hook::Mutate).unwrap();
}

/// The controller walk can fail: an answer that refuses what a controller
/// makes from an admitted workload is caught, whether the oracle finds the
/// refusal itself wrong or right.
#[test]
fn the_controller_walk_catches_a_refused_replica_set() {
    let knobs = Knobs {
        requester_check: oracle::RequesterCheck::Enforce,
        fail_open: false,
        key_prefix: None,
        lookup_failures: vec![],
        max_pod_references: None,
        mode: oracle::Mode::Enforce,
    };
    let settings = knobs.oracle();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut ask = |hook: Hook, review: &Value, pods: &[Pod]| {
        if review["request"]["kind"]["kind"] == "ReplicaSet" {
            let message =
                "ReplicaSet 'agents-5d8f9c7b6d' in namespace 'agents': owner pod 'w-1' refused";
            return (
                200,
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": review["request"]["uid"], "allowed": false,
                    "status": {"code": 400, "message": message}}}),
            );
        }
        runtime.block_on(ask(&knobs.webhook_over(pods), hook, review))
    };
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "agents", "labels": {"ownerguard.io/owner-pod": "w-1"}},
        "spec": {"selector": {"matchLabels": {"app": "a"}},
            "template": {"metadata": {"labels": {"app": "a", "ownerguard.io/owner-pod": "w-1"}}, "spec": {}}}});
    let mut cluster = oracle::controllers::Cluster::new(&settings, NS, world());
    let who = Who::Pod("w-1".into(), U1.into()).user_info();
    let oracle::controllers::Created::Stored(stored) =
        cluster.create(&who, deployment, &mut ask).unwrap()
    else {
        panic!("the Deployment is refused");
    };
    let wrong = cluster.reconcile(&stored, &mut ask).unwrap_err();
    assert!(wrong.contains("deployment-controller"), "{wrong}");
}

/// Not a test of CI: a survey of every class of wrong answer, with no
/// shrinking, one smallest example per class.
/// `cargo test --test properties -- --ignored --nocapture survey`.
#[test]
#[ignore]
fn survey() {
    use proptest::strategy::ValueTree;
    let cases: usize = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(3000);
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[3; 32]),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut classes: std::collections::BTreeMap<String, (usize, String)> = Default::default();
    let strategies: Vec<(&str, BoxedStrategy<Case>)> = vec![
        ("create", creates().boxed()),
        ("update", updates().boxed()),
        ("collector", collector_updates().boxed()),
        ("sound", sound_creates().boxed()),
        ("adoptions", adoptions().boxed()),
        ("controllers", controller_creates().boxed()),
        ("collector-over-limit", collector_over_the_limit().boxed()),
        ("homoglyphs", homoglyph_creates().boxed()),
    ];
    for (label, strategy) in &strategies {
        for _ in 0..cases {
            let case = strategy.new_tree(&mut runner).unwrap().current();
            if let Err(wrong) = runtime.block_on(judge_case(&case, true)) {
                let first = wrong.lines().next().unwrap_or("").to_string();
                let class = format!("{label} {}", signature(&first));
                let example = format!("{case:?}  {wrong}");
                let entry = classes.entry(class).or_insert((0, example.clone()));
                entry.0 += 1;
                if example.len() < entry.1.len() {
                    entry.1 = example;
                }
            }
        }
    }
    for (class, (count, example)) in &classes {
        println!("=== {count:>5}  {class}\n{example}\n");
    }
    println!("{} classes", classes.len());
}

/// A violation without its particulars: quoted text and numbers out.
fn signature(line: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                if quoted {
                    out.push_str("'…'");
                }
            }
            _ if quoted => {}
            '{' => break,
            c if c.is_ascii_digit() => {}
            c => out.push(c),
        }
    }
    out.chars().take(110).collect()
}

/// Padding the API server can send and the decision must not see (SPEC
/// §4): a value nested up to its decoder's 10,000 levels, or a string of
/// up to its 3 MiB body limit written as its encoder writes `<` (six
/// bytes each), at a place ownerguard skips or reads for its shape only.
#[derive(Debug, Clone)]
struct Padding {
    depth: usize,
    escaped_bytes: usize,
    place: usize,
}

fn padding() -> impl Strategy<Value = Padding> {
    (
        prop_oneof![Just(0usize), 1usize..200, 9_990usize..=10_000],
        prop_oneof![
            Just(0usize),
            1usize..4096,
            (3usize * 1024 * 1024 - 4096)..=(3usize * 1024 * 1024)
        ],
        0usize..4,
    )
        .prop_map(|(depth, escaped_bytes, place)| Padding {
            depth,
            escaped_bytes,
            place,
        })
}

impl Padding {
    /// The review with the padding in, as text (a `Value` nested 10,000
    /// deep could not be written back without recursing as deep), and the
    /// same review with a shallow value of the same shape there.
    fn apply(&self, review: &Value) -> (String, String) {
        const MARK: &str = "\"__ownerguard_padding__\"";
        let mut review = review.clone();
        let request = &mut review["request"];
        let has_old = request["oldObject"].is_object();
        // Where: a field ownerguard skips, or one it reads for its shape
        // (a template's labels: a deep value there is another shape, as
        // the shallow one is).
        let (at, key): (&mut Value, &str) = match self.place {
            1 => (&mut request["object"]["spec"], "ownerguardPadding"),
            2 => (&mut request["object"]["metadata"], "ownerguardPadding"),
            3 if has_old => (&mut request["oldObject"], "ownerguardPadding"),
            4 => (
                &mut request["object"]["spec"]["template"]["metadata"],
                "labels",
            ),
            5 => (
                &mut request["object"]["spec"]["template"]["metadata"],
                "annotations",
            ),
            _ => (&mut request["options"], "ownerguardPadding"),
        };
        if !at.is_object() {
            *at = json!({});
        }
        at[key] = json!({"deep": "__ownerguard_padding__", "text": "__ownerguard_text__"});
        let text = serde_json::to_string(&review).unwrap();
        let depth = self.depth.max(1);
        // Lists on even depths, maps on odd ones.
        let (deep, shallow) = if depth.is_multiple_of(2) {
            (
                format!("{}{}", "[".repeat(depth), "]".repeat(depth)),
                "[]".to_string(),
            )
        } else {
            (
                format!("{}{{}}{}", "{\"a\":".repeat(depth), "}".repeat(depth)),
                "{\"a\":{}}".to_string(),
            )
        };
        let large = format!("\"{}\"", "\\u003c".repeat(self.escaped_bytes));
        let padded = text
            .replacen(MARK, &deep, 1)
            .replacen("\"__ownerguard_text__\"", &large, 1);
        let plain = text
            .replacen(MARK, &shallow, 1)
            .replacen("\"__ownerguard_text__\"", "\"\"", 1);
        (padded, plain)
    }
}

#[test]
fn deep_and_large_reviews_get_the_decision_of_the_plain_ones() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(48);
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 256,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[25; 32]));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let strategy = (prop_oneof![creates(), updates()], padding());
    let result = runner.run(&strategy, |(case, padding)| {
        let webhook = case.knobs.webhook();
        let (padded, plain) = padding.apply(&case.review);
        for kind in [
            WebhookKind::Mutate,
            WebhookKind::Validate,
            WebhookKind::ValidateAll,
        ] {
            let (status, answer) = runtime.block_on(common::send(
                webhook.clone(),
                kind,
                padded.clone().into_bytes(),
            ));
            let (plain_status, plain_answer) = runtime.block_on(common::send(
                webhook.clone(),
                kind,
                plain.clone().into_bytes(),
            ));
            if (status, &answer) != (plain_status, &plain_answer) {
                return Err(TestCaseError::fail(format!(
                    "/{}: padded {status} {answer}\n  plain {plain_status} {plain_answer}",
                    kind.as_str()
                )));
            }
            if status != 200 && plain_status == 200 {
                return Err(TestCaseError::fail(format!(
                    "/{}: no decision for the padded review",
                    kind.as_str()
                )));
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("deep and large padding changes a decision: {e}");
    }
}
