//! The oracle: judges one answer of ownerguard from the point of view of
//! the API server that applies it and the garbage collector that later
//! resolves the object's owners. Written from SPEC.md section 3 (and the
//! rules of issues 7 and 8), never from `src/`: it must be able to say that
//! the implementation is wrong.
//!
//! [`judge`] takes a review as the API server sent it, the pods that exist,
//! the webhook and its settings, and the answer; it returns `Err` with every
//! rule the answer breaks. Two halves:
//!
//! - What the spec demands of this input ([`Expect`]): the reasons it must
//!   be denied (with the codes each allows), the reasons it may be denied
//!   where the spec leaves a choice, the warnings an allow must carry, what
//!   `/mutate` must restore on an UPDATE. A denial for no reason is a wrong
//!   denial; an allow despite a reason is a wrong allow.
//! - Independently of that, an allowed answer is applied (RFC 6902, as the
//!   API server would: a patch that does not apply is a 500 for the user)
//!   and the final object judged as the garbage collector sees it: every
//!   Pod reference resolvable (`v1`, `Pod`, name, uid of an existing pod of
//!   the namespace, not terminating, not finished: rule 11, the collector
//!   keeps what a finished pod owns until its object is deleted) and
//!   non-blocking, one reference per
//!   owner label, no entry contradicting a pod it names by uid, the uid
//!   label the owner's uid.
//!
//! [`controllers`] adds the controllers' side: what Kubernetes' built-in
//! controllers make from what was admitted, sent back through the webhooks.
//!
//! Shared by `tests/golden.rs`, `tests/public_fixtures.rs`,
//! `tests/properties.rs` and the fuzz target (`fuzz/`, by `#[path]`), so it
//! only uses `serde_json`, `json-patch`, `base64` and `unicode-security`
//! (UTS #39's confusable skeleton: what a person reads).

#![allow(dead_code)]

pub mod controllers;

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine;
use serde_json::Value;

/// The garbage collector's user: its UPDATEs remove references.
pub const GC_USER: &str = "system:serviceaccount:kube-system:generic-garbage-collector";
/// The user every controller shares without kube-controller-manager's
/// `--use-service-account-credentials`: the collector among them, so the
/// collector's shape is exempt under it, and nothing else (rule 16).
pub const CONTROLLER_MANAGER_USER: &str = "system:kube-controller-manager";
/// The statefulset controller's own user.
pub const STATEFULSET_CONTROLLER_USER: &str =
    "system:serviceaccount:kube-system:statefulset-controller";
pub const EXTRA_POD_NAME: &str = "authentication.kubernetes.io/pod-name";
pub const EXTRA_POD_UID: &str = "authentication.kubernetes.io/pod-uid";
/// Rule 10 leaves the limit on Pod references to the implementation. Up to
/// this many (real objects carry a handful) a denial for their number is
/// wrong.
pub const REFERENCES_ALWAYS_ACCEPTED: usize = 16;
/// From this many on, the object must be denied 400 before any lookup
/// (issue 7 class 15: 2,000 references made 2,000 GETs).
pub const REFERENCES_ALWAYS_REFUSED: usize = 1000;

/// Which endpoint answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    Mutate,
    Validate,
    /// `/validate-all`, the chart's cluster-wide opt-in (SPEC §3 rule 13):
    /// it refuses only references the collector cannot resolve to a live
    /// pod. A blocking reference is the API server's permission check to
    /// judge there (the ephemeral-volume and resource-claim controllers
    /// write `controller: true, blockOwnerDeletion: true` and hold `update`
    /// on `pods/finalizers`), and whom a client names as owner is not a
    /// claim on ownerguard's requester check; its webhook fails open
    /// (`failurePolicy: Ignore`), so a failed lookup is allowed.
    ValidateAll,
}

impl Hook {
    pub fn as_str(self) -> &'static str {
        match self {
            Hook::Mutate => "mutate",
            Hook::Validate => "validate",
            Hook::ValidateAll => "validate-all",
        }
    }

    /// The rules this endpoint applies: `/validate-all` those of
    /// `/validate`, less what [`Reason::blocking`] marks and the requester
    /// check.
    fn rules(self) -> Hook {
        match self {
            Hook::ValidateAll => Hook::Validate,
            other => other,
        }
    }
}

/// A pod that exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `deletionTimestamp` set.
    pub terminating: bool,
    /// `status.phase`, when known.
    pub phase: Option<String>,
}

impl Pod {
    pub fn new(namespace: &str, name: &str, uid: &str, terminating: bool) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            uid: uid.into(),
            terminating,
            phase: None,
        }
    }

    /// This pod in `phase` (`Running`, `Succeeded`, `Failed`...).
    pub fn in_phase(mut self, phase: &str) -> Self {
        self.phase = Some(phase.into());
        self
    }

    /// Rule 11: phase `Succeeded` or `Failed`, no container runs again,
    /// but the object (and what it owns) stays until it is deleted.
    pub fn finished(&self) -> bool {
        matches!(self.phase.as_deref(), Some("Succeeded" | "Failed"))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RequesterCheck {
    #[default]
    Enforce,
    Warn,
    Off,
}

/// A namespace's mode (SPEC §3 rule 17): the path the API server calls.
/// `warn` and `audit` may let through only what, once completed, the
/// collector still resolves and collects with its owner; where enforce
/// refuses and the mode allows, the answer says so (an audit annotation,
/// and under `warn` a warning to the client).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    #[default]
    Enforce,
    Warn,
    Audit,
}

/// The settings the webhook ran with.
#[derive(Clone, Debug)]
pub struct Settings {
    pub key_prefix: String,
    pub requester_check: RequesterCheck,
    pub fail_open: bool,
    /// Service accounts that may declare another pod of their namespace
    /// (issue 8 item 5), as `namespace:name`, `namespace/name` or the full
    /// `system:serviceaccount:namespace:name`.
    pub delegates: Vec<String>,
    /// Pod names whose lookup fails (the API down), in every namespace.
    pub lookup_failures: Vec<String>,
    /// The owner-pod label value that means "the requesting pod" (issue 8
    /// item 4), if the implementation has one.
    pub self_value: Option<String>,
    /// The limit of rule 10 when the case sets it; otherwise only the
    /// bounds [`REFERENCES_ALWAYS_ACCEPTED`] and
    /// [`REFERENCES_ALWAYS_REFUSED`] are known.
    pub max_pod_references: Option<usize>,
    /// The namespace's mode.
    pub mode: Mode,
    /// The requester check a release is judged by, once a mode set the
    /// check aside for references being added: a softened rule relaxes
    /// that rule alone (rule 17). `None`: `requester_check`.
    pub release_check: Option<RequesterCheck>,
    /// The requester check an adoption is judged by, relaxed apart from
    /// `requester_check`. `None`: `requester_check`.
    pub adoption_check: Option<RequesterCheck>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            key_prefix: "ownerguard.io".into(),
            requester_check: RequesterCheck::Enforce,
            fail_open: false,
            delegates: Vec::new(),
            lookup_failures: Vec::new(),
            // The README's decision (issue 8 item 4): `Self` means the pod
            // that sends the request.
            self_value: Some("Self".into()),
            max_pod_references: None,
            mode: Mode::Enforce,
            release_check: None,
            adoption_check: None,
        }
    }
}

impl Settings {
    fn pod_key(&self) -> String {
        format!("{}/owner-pod", self.key_prefix)
    }
    fn uid_key(&self) -> String {
        format!("{}/owner-uid", self.key_prefix)
    }
    /// The annotation that names the owner of a `Self` object (README:
    /// ownerguard writes it, so that the object names its owner for
    /// whoever sends the next request, a controller included).
    fn name_key(&self) -> String {
        format!("{}/owner-pod-name", self.key_prefix)
    }
    fn is_delegate(&self, username: &str) -> bool {
        let Some(rest) = username.strip_prefix("system:serviceaccount:") else {
            return false;
        };
        self.delegates
            .iter()
            .any(|d| d == username || d == rest || d.replacen('/', ":", 1) == rest)
    }
}

/// Judge `answer` (the decoded response body, HTTP `status`) to `review`.
///
/// # Errors
///
/// Every rule the answer breaks, one per line, with what the oracle
/// expected.
pub fn judge(
    review: &Value,
    pods: &[Pod],
    hook: Hook,
    settings: &Settings,
    status: u16,
    answer: &Value,
) -> Result<(), String> {
    let mut v = Violations::default();
    let request = review.get("request").unwrap_or(review);
    let garbage = !Meta::parse(&request["object"]).garbage.is_empty()
        || !Meta::parse(&request["oldObject"]).garbage.is_empty();
    if status == 400 && garbage {
        // Not what the API server sends (it decodes objects into their
        // types first): refusing the body is fine.
        return Ok(());
    }
    if status != 200 {
        return Err(format!(
            "HTTP {status} for a review the API server would send: {answer}"
        ));
    }
    check_wire(review, hook, answer, &mut v);
    // A write against an older version of the object: kube-apiserver runs
    // the mutating webhooks, then compares versions and answers 409,
    // storing nothing (the validating webhooks never see it). Nothing is
    // applied, so nothing to judge as the collector would; refusing it on
    // /mutate refuses a write that cannot happen, where the writer (a
    // controller's stale cache) expects the conflict that makes it retry.
    if written_against_an_older_version(request) {
        if hook == Hook::Mutate && answer["response"]["allowed"] != true {
            v.push(format!(
                "denied an UPDATE written against an older version (the API server answers it with a conflict): {}",
                answer["response"]["status"]["message"]
            ));
        }
        return v.into_result();
    }
    // /validate-all: no requester check, and a failed lookup allowed.
    let all_settings;
    let settings = if hook == Hook::ValidateAll {
        all_settings = Settings {
            requester_check: RequesterCheck::Off,
            fail_open: true,
            ..settings.clone()
        };
        &all_settings
    } else {
        settings
    };
    // A mode judges the object as the collector will: whoever asked for
    // the reference (the requester check), an owner that has finished (the
    // collector resolves it, its object stays), a blocking flag (a
    // foreground deletion's wait) do not change what is collected. Each of
    // those rules is relaxed once it refuses, until none that refuses can
    // be: what the collector would delete at once or never collect stays
    // refused, and what enforce allows is judged as enforce judges it.
    let softens = settings.mode != Mode::Enforce && hook != Hook::ValidateAll;
    let mut relaxed = settings.clone();
    let finished_is_owner = hook == Hook::ValidateAll;
    let mut finished_owners: BTreeSet<String> = BTreeSet::new();
    let mut blocking_relaxed = hook == Hook::ValidateAll;
    let judged =
        |settings: &Settings, finished_owners: &BTreeSet<String>, blocking_relaxed: bool| {
            let world = softened_world(request, pods, settings, finished_is_owner, finished_owners);
            let mut e = expect(&world, hook.rules());
            if blocking_relaxed {
                e.deny.retain(|reason| !reason.blocking);
                e.maybe.retain(|reason| !reason.blocking);
            }
            e
        };
    let mut expect = judged(&relaxed, &finished_owners, blocking_relaxed);
    let enforced_refuses = !expect.deny.is_empty();
    let enforced_reasons = reasons(&expect.deny.iter().collect::<Vec<_>>());
    if softens {
        loop {
            let refusing: Vec<&Reason> = expect.deny.iter().chain(&expect.maybe).collect();
            let mut more = false;
            if refusing.iter().any(|r| r.soft == Some(Soft::Requester))
                && relaxed.requester_check != RequesterCheck::Off
            {
                relaxed.release_check.get_or_insert(relaxed.requester_check);
                relaxed
                    .adoption_check
                    .get_or_insert(relaxed.requester_check);
                relaxed.requester_check = RequesterCheck::Off;
                more = true;
            }
            if refusing.iter().any(|r| r.soft == Some(Soft::Adoption))
                && relaxed.adoption_check.unwrap_or(relaxed.requester_check) != RequesterCheck::Off
            {
                relaxed.release_check.get_or_insert(relaxed.requester_check);
                relaxed.adoption_check = Some(RequesterCheck::Off);
                more = true;
            }
            for reason in &refusing {
                if reason.soft == Some(Soft::Finished)
                    && let Some(pod) = &reason.pod
                {
                    more |= finished_owners.insert(pod.clone());
                }
            }
            if hook == Hook::Validate && refusing.iter().any(|r| r.blocking) && !blocking_relaxed {
                blocking_relaxed = true;
                more = true;
            }
            if !more {
                break;
            }
            expect = judged(&relaxed, &finished_owners, blocking_relaxed);
        }
    }
    let world = softened_world(request, pods, &relaxed, finished_is_owner, &finished_owners);
    let response = &answer["response"];
    // In warn and audit nothing is refused (rule 17): what a rule still
    // refuses once every softenable one is set aside is let through as
    // sent (no owner was proven to complete it with), named.
    let still_refused = !expect.deny.is_empty();
    let patched = response.get("patch").is_some();
    let as_sent = softens && !patched && (still_refused || !expect.maybe.is_empty());
    match response["allowed"].as_bool() {
        Some(true) if softens && still_refused => {
            if patched {
                v.push(format!(
                    "{:?} mode changed an object a rule still refuses (no owner proven): {}",
                    settings.mode,
                    reasons(&expect.deny.iter().collect::<Vec<_>>())
                ));
            }
            judge_softened(settings.mode, &enforced_reasons, response, true, &mut v);
        }
        Some(true) if as_sent && annotated(response) => {
            judge_softened(settings.mode, &enforced_reasons, response, false, &mut v);
        }
        Some(true) => {
            judge_allowed(&world, hook, &expect, response, &mut v);
            if softens && enforced_refuses {
                judge_softened(settings.mode, &enforced_reasons, response, false, &mut v);
            }
        }
        Some(false) if softens => v.push(format!(
            "{:?} mode refused: nothing the API server sends is refused in warn or audit: {}",
            settings.mode, response["status"]["message"]
        )),
        Some(false) => judge_denied(&world, &expect, response, &mut v),
        None => v.push("answer has no boolean response.allowed".into()),
    }
    v.into_result()
}

/// Whether an answer carries a non-empty audit annotation.
fn annotated(response: &Value) -> bool {
    response["auditAnnotations"]
        .as_object()
        .is_some_and(|notes| {
            notes
                .values()
                .any(|note| note.as_str().is_some_and(|n| !n.is_empty()))
        })
}

/// The world a decision is judged in: `/validate-all`'s finished owners,
/// and those a mode took as owners.
fn softened_world<'a>(
    request: &'a Value,
    pods: &'a [Pod],
    settings: &'a Settings,
    finished_is_owner: bool,
    finished_owners: &BTreeSet<String>,
) -> World<'a> {
    let mut world = World::new(request, pods, settings);
    world.finished_is_owner = finished_is_owner;
    world.finished_owners = finished_owners.clone();
    world
}

/// An answer a mode allowed where enforce refuses: it must say so, in an
/// audit annotation, and under `warn` in a warning to the client; under
/// `audit` the client hears nothing of it.
fn judge_softened(mode: Mode, refused: &str, response: &Value, stood: bool, v: &mut Violations) {
    let notes = &response["auditAnnotations"];
    let said = |key: &str| notes[key].as_str().is_some_and(|n| !n.is_empty());
    if !said("violation") || !said("violation-rules") || !said("mode") {
        v.push(format!(
            "{mode:?} mode allowed what enforce refuses without naming it (mode, violation, violation-rules): {refused}"
        ));
    }
    // A refusal stood, so the object went through as sent: what the
    // collector will do to it is said.
    if stood && !said("collector") {
        v.push(format!(
            "{mode:?} mode let through as sent without saying what the collector will do: {refused}"
        ));
    }
    let heard = response["warnings"].as_array().is_some_and(|w| {
        w.iter()
            .any(|w| w.as_str().is_some_and(|w| w.contains("would refuse")))
    });
    if mode == Mode::Warn && !heard {
        v.push(format!(
            "warn mode allowed what enforce refuses without a warning saying so: {refused}"
        ));
    }
    if !annotated(response) {
        v.push(format!(
            "{mode:?} mode allowed what enforce refuses without an audit annotation: {refused}"
        ));
    }
    let warned = response["warnings"]
        .as_array()
        .is_some_and(|warnings| !warnings.is_empty());
    if mode == Mode::Warn && !warned {
        v.push(format!(
            "warn mode allowed what enforce refuses without a warning: {refused}"
        ));
    }
}

#[derive(Default)]
struct Violations(Vec<String>);

impl Violations {
    fn push(&mut self, s: String) {
        self.0.push(s);
    }
    fn into_result(self) -> Result<(), String> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(self.0.join("\n"))
        }
    }
}

// ---------------------------------------------------------------------------
// The wire: what the API server checks of any answer.

/// kube-apiserver's own groups (its generic store compares versions on
/// every UPDATE), each served at `v1` only.
const OPTIMISTIC_GROUPS: [&str; 5] = ["", "apps", "batch", "discovery.k8s.io", "policy"];

/// An UPDATE whose object names a resourceVersion (as Go's
/// `strconv.ParseUint(s, 10, 64)` reads it: decimal digits, no sign),
/// not 0 (an unconditional update), other than the stored object's.
fn written_against_an_older_version(request: &Value) -> bool {
    fn version(object: &Value) -> Option<u64> {
        let text = object["metadata"]["resourceVersion"].as_str()?;
        if text.is_empty() || !text.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        text.parse().ok()
    }
    let resource = &request["resource"];
    request["operation"] == "UPDATE"
        && OPTIMISTIC_GROUPS.contains(&resource["group"].as_str().unwrap_or("?"))
        && resource["version"] == "v1"
        && match (version(&request["object"]), version(&request["oldObject"])) {
            (Some(new), Some(stored)) => new != 0 && new != stored,
            _ => false,
        }
}

fn check_wire(review: &Value, hook: Hook, answer: &Value, v: &mut Violations) {
    let sent = review["apiVersion"]
        .as_str()
        .unwrap_or("admission.k8s.io/v1");
    if answer["apiVersion"] != sent {
        v.push(format!(
            "wire: answered in {} to a review in {sent}",
            answer["apiVersion"]
        ));
    }
    if answer["kind"] != "AdmissionReview" {
        v.push(format!(
            "wire: kind {} is not AdmissionReview",
            answer["kind"]
        ));
    }
    let request = review.get("request").unwrap_or(review);
    let sent_uid = request["uid"].as_str().unwrap_or("");
    if answer["response"]["uid"] != sent_uid {
        v.push(format!(
            "wire: response.uid {} does not echo request.uid '{sent_uid}'",
            answer["response"]["uid"]
        ));
    }
    let response = &answer["response"];
    if let Some(patch) = response.get("patch") {
        if hook != Hook::Mutate {
            v.push(format!("wire: a /{} answer carries a patch", hook.as_str()));
        }
        if response["allowed"] != true {
            v.push("wire: a denial carries a patch".into());
        }
        if !patch.is_string() {
            v.push(format!("wire: patch is not base64 text: {patch}"));
        }
        if response["patchType"] != "JSONPatch" {
            v.push(format!(
                "wire: patchType {} is not JSONPatch",
                response["patchType"]
            ));
        }
    }
    for warning in response["warnings"].as_array().into_iter().flatten() {
        match warning.as_str() {
            Some(w) if w.len() < 120 => {}
            _ => v.push(format!(
                "wire: warning not a string under 120 characters: {warning}"
            )),
        }
    }
    if let Some(annotations) = response.get("auditAnnotations") {
        for (key, value) in annotations.as_object().into_iter().flatten() {
            if key.contains('/') || key.is_empty() {
                v.push(format!(
                    "wire: audit annotation key '{key}' (a key may not hold '/')"
                ));
            }
            if !value.is_string() {
                v.push(format!("wire: audit annotation {key} is not a string"));
            }
        }
    }
    if response["allowed"] == false {
        match response["status"]["code"].as_u64() {
            Some(400 | 403 | 503) => {}
            other => v.push(format!(
                "wire: denial code {other:?} is none of 400, 403, 503"
            )),
        }
        if response["status"]["message"]
            .as_str()
            .is_none_or(|m| m.trim().is_empty())
        {
            v.push("wire: denial without a message".into());
        }
    }
}

// ---------------------------------------------------------------------------
// The request as the oracle reads it.

/// An `ownerReferences` entry.
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    api_version: Option<String>,
    kind: Option<String>,
    name: Option<String>,
    uid: Option<String>,
    block: Option<Value>,
    controller: Option<Value>,
    raw: Value,
}

type Tuple = (String, String, String, String);

impl Entry {
    fn parse(raw: &Value) -> Option<Self> {
        let map = raw.as_object()?;
        let text = |key: &str| map.get(key).and_then(Value::as_str).map(str::to_string);
        Some(Self {
            api_version: text("apiVersion"),
            kind: text("kind"),
            name: text("name"),
            uid: text("uid"),
            block: map.get("blockOwnerDeletion").cloned(),
            controller: map.get("controller").cloned(),
            raw: raw.clone(),
        })
    }
    fn field(&self, key: &str) -> Option<&Value> {
        self.raw.get(key)
    }
    /// Resolvable by the collector to a pod: kind `Pod`, apiVersion the
    /// core group's `v1` ([`core_v1`]).
    fn exact(&self) -> bool {
        self.api_version.as_deref().is_some_and(core_v1) && self.kind.as_deref() == Some("Pod")
    }
    /// Named like a pod (SPEC §3 rule 15): a kind a person reads as `Pod`
    /// or `Pods` ([`reads_as_pod`]), or any kind outside ASCII: no API
    /// serves one (a CustomResourceDefinition's kind, lowercased, must be
    /// a DNS-1035 label), so the collector never resolves it, and the
    /// confusables UTS #39 leaves alone (small capitals `ᴘᴏᴅ`, circled
    /// `ⓟⓞⓓ`) make the object immortal as surely. None of those but
    /// `v1`/`Pod` is resolvable.
    fn pod_kind(&self) -> bool {
        self.exact()
            || self
                .kind
                .as_deref()
                .is_some_and(|kind| reads_as_pod(kind) || (!kind.is_ascii() && !crd_kind(kind)))
    }
    fn well_formed(&self) -> bool {
        let text_or_absent = |key: &str| self.field(key).is_none_or(Value::is_string);
        self.name.as_deref().is_some_and(|n| !n.is_empty())
            && self.uid.as_deref().is_some_and(|u| !u.is_empty())
            && self.api_version.is_some()
            && self.kind.is_some()
            && text_or_absent("name")
            && self
                .block
                .as_ref()
                .is_none_or(|b| b.is_boolean() || b.is_null())
            && self
                .controller
                .as_ref()
                .is_none_or(|b| b.is_boolean() || b.is_null())
    }
    fn blocking(&self) -> bool {
        self.block == Some(Value::Bool(true))
    }
    fn uid(&self) -> &str {
        self.uid.as_deref().unwrap_or("")
    }
    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }
    /// What identifies the reference to the collector: `/v1` is `v1`.
    fn tuple(&self) -> Tuple {
        let api_version = self.api_version.clone().unwrap_or_default();
        (
            if core_v1(&api_version) {
                "v1".to_string()
            } else {
                api_version
            },
            self.kind.clone().unwrap_or_default(),
            self.name.clone().unwrap_or_default(),
            self.uid.clone().unwrap_or_default(),
        )
    }
    fn show(&self) -> String {
        serde_json::to_string(&self.raw).unwrap_or_default()
    }
}

/// Whether the collector reads `api_version` as the core group's `v1`. It
/// resolves an owner with apimachinery's `schema.FromAPIVersionAndKind`,
/// whose `ParseGroupVersion` splits at the one `/` (group "" for `/v1`)
/// and reads a string without `/` as a version of group "": `v1` and
/// `/v1` only (`""` and `"/"` are the empty version).
pub fn core_v1(api_version: &str) -> bool {
    api_version == "v1" || api_version == "/v1"
}

/// Whether kube-apiserver takes `kind` for a CustomResourceDefinition:
/// `IsDNS1035Label(strings.ToLower(kind))`, Go lowercasing letter by letter
/// with the simple mapping (the Kelvin sign K to `k`, `İ` to `i`). Such a
/// kind can be served, and so can be an owner's.
fn crd_kind(kind: &str) -> bool {
    let lowered: String = kind
        .chars()
        .map(|c| match c {
            '\u{212a}' => 'k',
            '\u{130}' => 'i',
            c if c.is_ascii() => c.to_ascii_lowercase(),
            c => c,
        })
        .collect();
    let b = lowered.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// Whether a person reads `kind` as `Pod` or `Pods` (SPEC §3 rule 15):
/// in any case, through invisible characters and separators (`Pod\u{200b}`,
/// ` pod `, `p-o-d`), and through Unicode confusables as UTS #39 defines
/// them (its skeleton: Cyrillic `о`, fullwidth `Ｐ`, the digit `0`, `Ṗ`
/// whose decomposition leaves a combining mark).
pub fn reads_as_pod(kind: &str) -> bool {
    // Letter by letter, each through the skeleton, as a reader takes it
    // in; every character that is no letter or digit once read (spaces,
    // format characters, punctuation, marks) separates nothing.
    let read = |lowercase_first: bool| -> String {
        let mut out = String::new();
        for c in kind.chars() {
            if c.is_ascii() && !c.is_ascii_alphanumeric() {
                continue;
            }
            let c: String = if lowercase_first {
                c.to_lowercase().collect()
            } else {
                c.to_string()
            };
            let skeleton: String = unicode_security::skeleton(&c).collect();
            out.extend(
                skeleton
                    .to_lowercase()
                    .chars()
                    .filter(|c| c.is_alphanumeric()),
            );
        }
        out
    };
    [read(true), read(false)]
        .iter()
        .any(|reading| reading == "pod" || reading == "pods")
}

/// The metadata of an object, as far as ownership goes.
#[derive(Clone, Debug, Default)]
struct Meta {
    present: bool,
    name: String,
    generate_name: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    refs: Vec<Entry>,
    /// `ownerReferences` present and not null.
    refs_present: bool,
    /// What the API server would never send (non-string labels, a
    /// reference list that is not a list): any answer but a patch that
    /// breaks the object is fine.
    garbage: Vec<String>,
}

impl Meta {
    fn parse(object: &Value) -> Self {
        let mut meta = Meta {
            present: object.is_object(),
            ..Meta::default()
        };
        let Some(metadata) = object.get("metadata") else {
            return meta;
        };
        if metadata.is_null() {
            return meta;
        }
        let Some(metadata) = metadata.as_object() else {
            meta.garbage.push("metadata is not an object".into());
            return meta;
        };
        meta.name = metadata
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .into();
        meta.generate_name = metadata
            .get("generateName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .into();
        match metadata.get("labels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(labels)) => {
                for (k, val) in labels {
                    match val.as_str() {
                        Some(s) => {
                            meta.labels.insert(k.clone(), s.into());
                        }
                        None => meta.garbage.push(format!("label {k} is not a string")),
                    }
                }
            }
            Some(_) => meta.garbage.push("labels is not a map".into()),
        }
        match metadata.get("annotations") {
            None | Some(Value::Null) => {}
            Some(Value::Object(annotations)) => {
                for (k, val) in annotations {
                    match val.as_str() {
                        Some(s) => {
                            meta.annotations.insert(k.clone(), s.into());
                        }
                        None => meta.garbage.push(format!("annotation {k} is not a string")),
                    }
                }
            }
            Some(_) => meta.garbage.push("annotations is not a map".into()),
        }
        match metadata.get("ownerReferences") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                meta.refs_present = true;
                for item in items {
                    match Entry::parse(item) {
                        Some(entry) => {
                            for key in ["apiVersion", "kind", "name", "uid"] {
                                if entry.field(key).is_some_and(|v| !v.is_string()) {
                                    meta.garbage
                                        .push(format!("ownerReferences {key} is not a string"));
                                }
                            }
                            meta.refs.push(entry)
                        }
                        None => meta
                            .garbage
                            .push("an ownerReferences entry is not an object".into()),
                    }
                }
            }
            Some(_) => meta.garbage.push("ownerReferences is not a list".into()),
        }
        meta
    }
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }
    fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key).map(String::as_str)
    }
    fn shown_name(&self) -> &str {
        if self.name.is_empty() {
            &self.generate_name
        } else {
            &self.name
        }
    }
}

/// What a lookup of a pod name finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Live,
    Missing,
    OtherUid,
    Terminating,
    /// Phase Succeeded or Failed (rule 11): no owner.
    Finished,
    Failed,
}

/// The requester, by SPEC rule 8.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Requester {
    /// No pod identity (nodes, people, controllers, other namespaces).
    Nobody,
    Pod {
        name: String,
        uid: String,
    },
    /// Pod extras present but malformed; `of_namespace`: the user is a
    /// service account of the object's namespace.
    Malformed {
        why: String,
        of_namespace: bool,
    },
}

struct World<'a> {
    request: &'a Value,
    pods: &'a [Pod],
    settings: &'a Settings,
    namespace: Option<String>,
    operation: String,
    username: String,
    requester: Requester,
    object: Meta,
    old: Meta,
    /// Every uid written anywhere in the request: what the requester named.
    named_text: String,
    /// `/validate-all` (rule 13): it refuses only what the collector cannot
    /// resolve, and the collector resolves a finished pod (its object is
    /// there); the ephemeral-volume controller makes claims for finished
    /// pods too (it skips only those being deleted).
    finished_is_owner: bool,
    /// Finished pods a mode takes as owners: those a softened refusal
    /// named (rule 17).
    finished_owners: BTreeSet<String>,
}

impl<'a> World<'a> {
    fn new(request: &'a Value, pods: &'a [Pod], settings: &'a Settings) -> Self {
        // A Namespace is cluster-scoped, though the API server sets the
        // request's namespace to the Namespace's own name.
        let core = |field: &str| request[field]["group"].as_str().unwrap_or("").is_empty();
        let namespace_object = (core("kind") && request["kind"]["kind"] == "Namespace")
            || (core("resource") && request["resource"]["resource"] == "namespaces");
        // The request's namespace, else the object's (a hand-written
        // review may give only the object's: the API server gives both).
        let namespace = request["namespace"]
            .as_str()
            .filter(|ns| !ns.is_empty())
            .or_else(|| {
                request["object"]["metadata"]["namespace"]
                    .as_str()
                    .filter(|ns| !ns.is_empty())
            })
            .filter(|_| !namespace_object)
            .map(str::to_string);
        let username = request["userInfo"]["username"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let requester = requester(request, namespace.as_deref().unwrap_or(""));
        Self {
            request,
            pods,
            settings,
            namespace,
            operation: request["operation"].as_str().unwrap_or("").to_string(),
            username,
            requester,
            object: Meta::parse(&request["object"]),
            old: Meta::parse(&request["oldObject"]),
            named_text: named_text(request),
            finished_is_owner: false,
            finished_owners: BTreeSet::new(),
        }
    }

    fn ns(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }

    /// The request and its object name different namespaces: the API
    /// server never sends that (it refuses such an object before
    /// admission), so it is a malformed review.
    fn namespace_mismatch(&self) -> bool {
        fn of(value: &Value) -> Option<&str> {
            value.as_str().filter(|ns| !ns.is_empty())
        }
        matches!(
            (of(&self.request["namespace"]), of(&self.request["object"]["metadata"]["namespace"])),
            (Some(a), Some(b)) if a != b
        )
    }

    fn pod(&self, name: &str) -> Option<&Pod> {
        let ns = self.ns();
        self.pods
            .iter()
            .find(|p| p.namespace == ns && p.name == name)
    }

    fn state(&self, name: &str, uid: &str) -> State {
        if self.settings.lookup_failures.iter().any(|f| f == name) {
            return State::Failed;
        }
        match self.pod(name) {
            None => State::Missing,
            Some(p) if p.uid != uid => State::OtherUid,
            Some(p) if p.terminating => State::Terminating,
            Some(p)
                if p.finished()
                    && !self.finished_is_owner
                    && !self.finished_owners.contains(name) =>
            {
                State::Finished
            }
            Some(_) => State::Live,
        }
    }

    fn requester_pod(&self) -> Option<(&str, &str)> {
        match &self.requester {
            Requester::Pod { name, uid } => Some((name, uid)),
            _ => None,
        }
    }

    fn gc(&self) -> bool {
        self.username == GC_USER
    }

    fn delegate(&self) -> bool {
        self.settings.is_delegate(&self.username)
    }
}

/// What the requester wrote: the request without the old object (which the
/// API server sends from storage, so its uids need not be the
/// requester's to know).
fn named_text(request: &Value) -> String {
    let mut named = request.clone();
    if let Some(map) = named.as_object_mut() {
        map.remove("oldObject");
    }
    serde_json::to_string(&named).unwrap_or_default()
}

/// The uids the old object holds (its uid label, its references'): the
/// owner's and co-owners' uids, which a message may only repeat when the
/// request names them itself.
fn stored_uids(old: &Meta, uid_key: &str) -> Vec<String> {
    old.label(uid_key)
        .into_iter()
        .map(str::to_string)
        .chain(old.refs.iter().filter_map(|r| r.uid.clone()))
        // Short values could turn up in a message by chance ("#1").
        .filter(|uid| uid.len() >= 8)
        .collect()
}

fn requester(request: &Value, namespace: &str) -> Requester {
    let username = request["userInfo"]["username"].as_str().unwrap_or("");
    let of_namespace = username
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
        .is_some_and(|(ns, name)| {
            ns == namespace && !ns.is_empty() && !name.is_empty() && !name.contains(':')
        });
    let extra = &request["userInfo"]["extra"];
    let one = |key: &str| -> Result<Option<String>, String> {
        match extra.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(values)) => match values.as_slice() {
                [Value::String(s)] if !s.is_empty() => Ok(Some(s.clone())),
                _ => Err(format!(
                    "{key} holds {} instead of one non-empty string",
                    Value::Array(values.clone())
                )),
            },
            Some(other) => Err(format!("{key} is {other}, not a list")),
        }
    };
    let (name, uid) = match (one(EXTRA_POD_NAME), one(EXTRA_POD_UID)) {
        (Err(why), _) | (_, Err(why)) => return Requester::Malformed { why, of_namespace },
        (Ok(name), Ok(uid)) => (name, uid),
    };
    match (name, uid) {
        // A pod name the API server could never have signed.
        (Some(name), Some(_)) if !dns_subdomain(&name) => Requester::Malformed {
            why: format!("pod-name {name:?} is not a pod name"),
            of_namespace,
        },
        (None, None) => Requester::Nobody,
        (Some(_), None) | (None, Some(_)) => Requester::Malformed {
            why: "one pod extra without the other".into(),
            of_namespace,
        },
        (Some(name), Some(uid)) if of_namespace => Requester::Pod { name, uid },
        (Some(_), Some(_)) => Requester::Nobody,
    }
}

/// A label value: at most 63 characters of `[A-Za-z0-9._-]`, starting and
/// ending alphanumeric.
pub fn label_value(s: &str) -> bool {
    s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.bytes().next().is_none_or(|b| b.is_ascii_alphanumeric())
        && s.bytes().last().is_none_or(|b| b.is_ascii_alphanumeric())
}

/// DNS-1123 label: a namespace.
pub fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// DNS-1123 subdomain: a pod name.
pub fn dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

// ---------------------------------------------------------------------------
// What the spec demands of an input.

#[derive(Clone, Debug)]
struct Reason {
    codes: Vec<u16>,
    why: String,
    /// Decided before any lookup (rules 7 and 10, labels, identity): a 503
    /// cannot be the answer then.
    early: bool,
    /// About a blocking reference only: not `/validate-all`'s to judge.
    blocking: bool,
    /// A rule a mode may soften (rule 17), other than a blocking flag.
    soft: Option<Soft>,
    /// The finished pod a [`Soft::Finished`] refusal is about: a mode
    /// takes that one as an owner, no other.
    pod: Option<String>,
}

/// The rules a mode may soften (SPEC §3 rule 17), besides a blocking
/// reference on `/validate`: whom the requester names, and an owner that
/// has finished. Neither changes what the collector resolves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Soft {
    Requester,
    /// The requester check on a reference added to another worker's
    /// object: relaxed apart from [`Soft::Requester`].
    Adoption,
    Finished,
}

/// A reference `/mutate` must bring back on an UPDATE that omitted it.
#[derive(Clone, Debug)]
struct Restore {
    tuple: Tuple,
    uid_label: Option<String>,
}

#[derive(Default, Debug)]
struct Expect {
    deny: Vec<Reason>,
    maybe: Vec<Reason>,
    /// An allow must carry a warning, for these reasons.
    warn: Vec<String>,
    /// Names whose lookup failed under --fail-open: not verifiable.
    unchecked: BTreeSet<String>,
    /// Allowed by /mutate: these come back.
    restore: Vec<Restore>,
    /// Uids that must not come back (a removal that stands).
    no_restore: Vec<String>,
    /// Allowed: no patch at all.
    unchanged: bool,
    /// The owner an allow is about: (name, uid). Its reference must be in
    /// the final object exactly once when `owner_required`.
    owner: Option<(String, String)>,
    owner_required: bool,
    /// References the statefulset controller adds for its claim retention
    /// (rule 16): never refused, whatever their pod's state; the set's own
    /// retention policy asks the collector for what they make it do.
    retention: BTreeSet<Tuple>,
}

impl Expect {
    fn deny(&mut self, codes: &[u16], early: bool, why: impl Into<String>) {
        self.deny.push(Reason {
            codes: codes.to_vec(),
            why: why.into(),
            early,
            blocking: false,
            soft: None,
            pod: None,
        });
    }
    fn maybe(&mut self, codes: &[u16], early: bool, why: impl Into<String>) {
        self.maybe.push(Reason {
            codes: codes.to_vec(),
            why: why.into(),
            early,
            blocking: false,
            soft: None,
            pod: None,
        });
    }
    /// A denial a mode may soften.
    fn deny_soft(&mut self, soft: Soft, codes: &[u16], early: bool, why: impl Into<String>) {
        self.deny(codes, early, why);
        if let Some(reason) = self.deny.last_mut() {
            reason.soft = Some(soft);
        }
    }
    fn maybe_soft(&mut self, soft: Soft, codes: &[u16], early: bool, why: impl Into<String>) {
        self.maybe(codes, early, why);
        if let Some(reason) = self.maybe.last_mut() {
            reason.soft = Some(soft);
        }
    }
    /// A denial for a blocking reference (`/validate`'s, not `/validate-all`'s).
    fn deny_blocking(&mut self, codes: &[u16], early: bool, why: impl Into<String>) {
        self.deny(codes, early, why);
        if let Some(reason) = self.deny.last_mut() {
            reason.blocking = true;
        }
    }
    fn maybe_blocking(&mut self, codes: &[u16], early: bool, why: impl Into<String>) {
        self.maybe(codes, early, why);
        if let Some(reason) = self.maybe.last_mut() {
            reason.blocking = true;
        }
    }
    /// A looked-up pod that must be live.
    fn require_live(&mut self, w: &World, name: &str, uid: &str, what: &str) {
        match w.state(name, uid) {
            State::Live => {}
            State::Missing => self.deny(
                &[403],
                false,
                format!(
                    "{what} pod '{name}' does not exist in namespace '{}'",
                    w.ns()
                ),
            ),
            State::OtherUid => self.deny(
                &[403],
                false,
                format!("{what} pod '{name}' has another uid than '{uid}'"),
            ),
            State::Terminating => self.deny(
                &[403],
                false,
                format!("{what} pod '{name}' is being deleted"),
            ),
            State::Finished => {
                self.deny_soft(
                    Soft::Finished,
                    &[403],
                    false,
                    format!("{what} pod '{name}' has finished (rule 11): the collector keeps what it owns until the pod object is deleted"),
                );
                if let Some(reason) = self.deny.last_mut() {
                    reason.pod = Some(name.to_string());
                }
            }
            State::Failed => self.lookup_failed(w, name),
        }
    }
    fn lookup_failed(&mut self, w: &World, name: &str) {
        if w.settings.fail_open {
            self.warn
                .push(format!("lookup of '{name}' failed, allowed by --fail-open"));
            self.unchecked.insert(name.to_string());
        } else {
            self.deny(
                &[503],
                false,
                format!("lookup of '{name}' failed and --fail-open is off"),
            );
        }
    }
}

fn expect(w: &World, hook: Hook) -> Expect {
    let mut e = Expect::default();
    match w.operation.as_str() {
        // Not what the API server sends: refusing it is fine, allowing
        // it harmless.
        "CREATE" | "UPDATE" if !w.object.present => {
            e.maybe(&[400, 403], true, "a CREATE or UPDATE without object")
        }
        "CREATE" => expect_create(w, hook, &mut e),
        "UPDATE" => expect_update(w, hook, &mut e),
        "DELETE" | "CONNECT" => e.unchanged = true,
        other => {
            // Not an operation the API server sends.
            e.maybe(&[400, 403], true, format!("unknown operation '{other}'"));
            e.unchanged = true;
        }
    }
    for g in w.object.garbage.iter().chain(&w.old.garbage) {
        e.maybe(&[400], true, format!("malformed object: {g}"));
    }
    e
}

/// Pod references the spec cares about: exact ones, ones named like a pod,
/// and any entry that carries a uid the webhook knows to be a pod's (the
/// declared owner's, the requester's, an exact reference's).
fn pod_refs<'m>(meta: &'m Meta, known_uids: &BTreeSet<String>) -> Vec<&'m Entry> {
    meta.refs
        .iter()
        .filter(|e| e.pod_kind() || (e.uid.as_deref().is_some_and(|u| known_uids.contains(u))))
        .collect()
}

/// The namespace every operation needs: a DNS label, the request's and
/// the object's the same. Records the denial and says so when it is not.
fn namespace_malformed(w: &World, e: &mut Expect, ns: &str) -> bool {
    if !dns_label(ns) {
        e.deny(&[400], true, format!("namespace '{ns}' is not a DNS label"));
        return true;
    }
    if w.namespace_mismatch() {
        e.deny(
            &[400],
            true,
            "the request's and the object's namespaces differ",
        );
        return true;
    }
    false
}

fn known_uids(w: &World, metas: &[&Meta]) -> BTreeSet<String> {
    let mut uids = BTreeSet::new();
    let uid_key = w.settings.uid_key();
    for meta in metas {
        // A uid label names a pod only beside the owner-pod label: alone it
        // names no owner (rule 9).
        if let Some(u) = meta.label(&uid_key).filter(|u| !u.is_empty())
            && meta.label(&w.settings.pod_key()).is_some()
        {
            uids.insert(u.to_string());
        }
        for entry in meta.refs.iter().filter(|e| e.exact()) {
            if let Some(u) = entry.uid.as_deref().filter(|u| !u.is_empty()) {
                uids.insert(u.to_string());
            }
        }
    }
    // The requester's uid names a pod of the object only when the object
    // declares the requester as its owner (by name or Self): an object
    // that declares no owner declares nothing (rule 1).
    let pod_key = w.settings.pod_key();
    if let Some((name, uid)) = w.requester_pod()
        && metas.iter().any(|meta| {
            meta.label(&pod_key).is_some_and(|owner| {
                owner == name || w.settings.self_value.as_deref() == Some(owner)
            })
        })
    {
        uids.insert(uid.to_string());
    }
    uids
}

/// SPEC §3 CREATE, rules 1–10; /validate's extra rule.
fn expect_create(w: &World, hook: Hook, e: &mut Expect) {
    let s = w.settings;
    let (pod_key, uid_key) = (s.pod_key(), s.uid_key());
    let obj = &w.object;
    let known = known_uids(w, &[obj]);
    let refs = pod_refs(obj, &known);
    let pod_label = obj.label(&pod_key);
    let uid_label = obj.label(&uid_key);
    let annotated = obj.annotation(&s.name_key()).is_some();
    if pod_label.is_none() && uid_label.is_none() && !annotated && refs.is_empty() {
        // Rule 1.
        e.unchanged = true;
        return;
    }
    // Rule 5, and class 11.
    let ns = w.ns();
    let declares = pod_label.is_some() || uid_label.is_some() || refs.iter().any(|r| r.exact());
    if ns.is_empty() && !declares {
        e.maybe(
            &[400, 403],
            true,
            "a cluster-scoped object with a pod-like reference",
        );
        return;
    }
    if ns.is_empty() {
        e.deny(
            &[400, 403],
            true,
            "a cluster-scoped object cannot have a pod owner",
        );
        return;
    }
    if namespace_malformed(w, e, ns) {
        return;
    }
    check_identity(w, e, true);
    // Rule 10.
    if let Some(limit) = s.max_pod_references {
        if refs.len() > limit {
            e.deny(
                &[400],
                true,
                format!("{} Pod references, over the limit {limit}", refs.len()),
            );
            return;
        }
    } else if refs.len() >= REFERENCES_ALWAYS_REFUSED {
        e.deny(
            &[400],
            true,
            format!("{} Pod references: over any sane limit", refs.len()),
        );
        return;
    } else if refs.len() > REFERENCES_ALWAYS_ACCEPTED {
        e.maybe(
            &[400],
            true,
            format!("{} Pod references: may be over the limit", refs.len()),
        );
    }

    // The owner of the label. The name annotation (README) says whom
    // `Self` meant, for whoever sends the object next (a controller
    // included); beside a name it may only restate it.
    let annotated = obj.annotation(&s.name_key());
    let mut owner: Option<(String, String)> = None;
    match (pod_label, uid_label) {
        (None, Some(_)) => e.deny(&[400], true, "uid label without owner-pod label (rule 9)"),
        (None, None) if annotated.is_some() => e.deny(
            &[400],
            true,
            "owner-pod-name annotation without owner-pod label (half a claim)",
        ),
        (None, None) => {}
        (Some(name), uid) => {
            let self_value = s.self_value.as_deref().is_some_and(|v| v == name);
            let name = if self_value {
                match (annotated, w.requester_pod()) {
                    (Some(n), _) if dns_subdomain(n) => n.to_string(),
                    (Some(n), _) => {
                        e.deny(
                            &[400],
                            true,
                            format!("owner-pod-name annotation '{n}' is not a pod name (rule 7)"),
                        );
                        String::new()
                    }
                    (None, Some((n, _))) => n.to_string(),
                    (None, None) => {
                        e.deny(
                            &[400, 403],
                            true,
                            "the 'requesting pod' label value without a pod-bound token",
                        );
                        String::new()
                    }
                }
            } else {
                if let Some(n) = annotated.filter(|n| *n != name) {
                    e.deny(
                        &[400],
                        true,
                        format!("owner-pod-name annotation '{n}' beside owner-pod label '{name}'"),
                    );
                }
                name.to_string()
            };
            if !self_value && !dns_subdomain(&name) {
                e.deny(
                    &[400],
                    true,
                    format!("owner-pod label '{name}' is not a pod name (rule 7)"),
                );
            } else if !name.is_empty() {
                owner = owner_of_label(w, e, &name, uid);
            }
        }
    }

    // Rule 12: every template of the object names its owner.
    let declared = pod_label
        .filter(|v| s.self_value.as_deref() != Some(*v))
        .map(str::to_string);
    let owner_name = owner.as_ref().map(|(n, _)| n.clone()).or(declared);
    let owner_uid = owner
        .as_ref()
        .map(|(_, u)| u.clone())
        .or(uid_label.map(str::to_string));
    check_templates(
        w,
        hook,
        e,
        owner_name.as_deref(),
        owner_uid.as_deref(),
        true,
    );
    // Every Pod reference (rules 3, 6, 7).
    let owner_uid = owner.as_ref().map(|(_, u)| u.as_str());
    let owner_name = owner.as_ref().map(|(n, _)| n.as_str());
    check_added_refs(
        w,
        hook,
        e,
        &refs,
        owner_name,
        owner_uid,
        pod_label.is_some(),
        true,
    );

    // /validate: the matching non-blocking reference must be there; that
    // needs no lookup, so it stands beside the other early reasons.
    if let Some((name, uid)) = &owner
        && hook == Hook::Validate
    {
        let matching = |r: &&&Entry| r.exact() && r.name() == name && r.uid() == uid;
        if !refs.iter().any(|r| matching(&r)) {
            e.deny(
                &[400, 403],
                true,
                format!("/validate: no reference to owner '{name}'"),
            );
        } else if !refs.iter().any(|r| matching(&r) && !r.blocking()) {
            e.deny_blocking(
                &[400, 403],
                true,
                format!("/validate: no non-blocking reference to owner '{name}'"),
            );
        }
    }

    // A denial for a blocking reference alone still leaves the lookups to
    // judge: /validate-all does not judge the flag, only the pod.
    if e.deny.iter().any(|r| !r.blocking) {
        return;
    }
    // Lookups.
    let mut looked: BTreeSet<String> = BTreeSet::new();
    if let Some((name, uid)) = &owner {
        e.require_live(w, name, uid, "owner");
        looked.insert(name.clone());
        e.owner = owner.clone();
        e.owner_required = true;
    }
    for r in refs.iter().filter(|r| r.exact()) {
        if looked.insert(r.name().to_string()) {
            e.require_live(w, r.name(), r.uid(), "referenced");
        }
    }
}

/// SPEC §3 rule 12: every template of the object (pod templates, claim
/// templates, ephemeral volumes' claim templates, a ResourceClaimTemplate's
/// claim metadata) that carries the owner label must declare the object's
/// owner: its label that owner's name, or `Self` with no annotation naming
/// another pod; a name annotation beside a name restating it; its uid
/// label, if any, the owner's. Otherwise what a controller makes from it
/// belongs to another worker (or is refused): 400 on CREATE; on UPDATE the
/// template may be one from before, so refusing is only allowed.
fn check_templates(
    w: &World,
    hook: Hook,
    e: &mut Expect,
    owner: Option<&str>,
    owner_uid: Option<&str>,
    create: bool,
) {
    let s = w.settings;
    let (pod_key, uid_key, name_key) = (s.pod_key(), s.uid_key(), s.name_key());
    if w.object.label(&pod_key).is_none() {
        return;
    }
    let old_templates = controllers::templates(&w.request["oldObject"]);
    let keys = |t: &controllers::TemplateView| {
        (
            t.label(&pod_key).map(str::to_string),
            t.label(&uid_key).map(str::to_string),
            t.annotation(&name_key).map(str::to_string),
        )
    };
    for template in controllers::templates(&w.request["object"]) {
        check_claim_template_references(w, e, &template, owner, create);
        let Some(value) = template.label(&pod_key) else {
            continue;
        };
        // On an UPDATE, a template whose owner keys the update changes (or
        // labels anew) is judged as on CREATE: what its controller makes
        // next carries them. One left as it was is the old object's.
        let changed = !old_templates
            .iter()
            .any(|old| old.identity == template.identity && keys(old) == keys(&template));
        let strict = create || changed;
        let self_value = s.self_value.as_deref() == Some(value);
        let annotated = template.annotation(&name_key);
        let declares = if self_value { annotated } else { Some(value) };
        let mut wrong = Vec::new();
        if let (Some(declared), Some(owner)) = (declares, owner)
            && declared != owner
        {
            wrong.push(format!("declares owner '{declared}'"));
        }
        if let Some(a) = annotated.filter(|a| !self_value && *a != value) {
            wrong.push(format!(
                "has an owner-pod-name annotation '{a}' beside owner-pod '{value}'"
            ));
        }
        if let (Some(t), Some(o)) = (template.label(&uid_key), owner_uid)
            && t != o
        {
            wrong.push(format!("has uid label '{t}'"));
        }
        // An object that records no uid for its owner (labelled by name
        // before ownerguard): a template the update labels without a uid
        // makes objects refused for want of one, and /mutate has none to
        // complete it with: denied up front (rule 12). /validate completes
        // nothing and may let it be.
        if !create
            && changed
            && owner.is_some()
            && owner_uid.is_none()
            && template.label(&uid_key).is_none()
            && wrong.is_empty()
        {
            let why = format!(
                "the template at {} is labelled without a uid on an object that records none for its owner (rule 12)",
                template.pointer
            );
            if hook == Hook::Mutate {
                e.deny(&[400], true, why);
            } else {
                e.maybe(&[400], true, why);
            }
        }
        // A template the update labels anew (not one whose uid label it
        // merely leaves out) makes objects checked against the pod it
        // declares: that pod must run with that uid, or its controller's
        // objects are refused (rule 12, "checked and completed as on
        // CREATE").
        let before = old_templates
            .iter()
            .find(|old| old.identity == template.identity);
        let uid_left_out = before.is_some_and(|old| {
            let (pod, uid, name) = keys(old);
            let (pod_now, uid_now, name_now) = keys(&template);
            pod == pod_now && name == name_now && uid.is_some() && uid_now.is_none()
        });
        if !create
            && changed
            && !uid_left_out
            && wrong.is_empty()
            && let Some(owner) = owner
            && let Some(uid) = template.label(&uid_key).or(owner_uid)
        {
            e.require_live(w, owner, uid, "the template's owner");
        }
        for why in wrong {
            let why = format!("the template at {} {why} (rule 12)", template.pointer);
            if strict {
                e.deny(&[400], true, why);
            } else {
                e.maybe(&[400, 403], true, why);
            }
        }
    }
}

/// Rule 12 for an `apps` StatefulSet's claim template, labelled or not: the
/// statefulset controller deep-copies its metadata onto every claim
/// (`getPersistentVolumeClaims`), `ownerReferences` included, so a Pod
/// reference there (one named like a pod: rule 15) gives each claim an
/// owner no requester check saw, or makes it refused or collected at
/// once. 400 on CREATE; an UPDATE is not judged for it (the API server
/// refuses any change to a StatefulSet's claim templates).
fn check_claim_template_references(
    w: &World,
    e: &mut Expect,
    template: &controllers::TemplateView,
    owner: Option<&str>,
    create: bool,
) {
    let object = &w.request["object"];
    let stateful_set = object["kind"] == "StatefulSet"
        && object["apiVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("apps/"));
    if !create || !stateful_set || !template.pointer.starts_with("/spec/volumeClaimTemplates/") {
        return;
    }
    let references = object
        .pointer(&format!("{}/ownerReferences", template.pointer))
        .and_then(Value::as_array);
    let Some(pod) = references
        .into_iter()
        .flatten()
        .filter_map(Entry::parse)
        .find(Entry::pod_kind)
    else {
        return;
    };
    let why = format!(
        "the claim template at {} carries a Pod reference to '{}', which its controller copies onto every claim of owner '{}' (rule 12)",
        template.pointer,
        pod.name.as_deref().unwrap_or(""),
        owner.unwrap_or("")
    );
    e.deny(&[400], true, why);
}

/// The owner the labels declare: its uid from the uid label or the
/// requester (rule 2), the requester check.
fn owner_of_label(
    w: &World,
    e: &mut Expect,
    name: &str,
    uid_label: Option<&str>,
) -> Option<(String, String)> {
    let requester = w.requester_pod();
    let requester_is_owner = requester.is_some_and(|(n, _)| n == name);
    // The requester check.
    if let Some((rname, _)) = requester
        && rname != name
    {
        match w.settings.requester_check {
            RequesterCheck::Enforce if !w.delegate() => e.deny_soft(
                Soft::Requester,
                &[403],
                true,
                format!("requester pod '{rname}' declares another pod '{name}' (requester check)"),
            ),
            RequesterCheck::Warn if !w.delegate() => e.warn.push("requester check (warn)".into()),
            _ => {}
        }
    }
    match uid_label {
        Some("") => {
            e.deny(&[400], true, "empty uid label");
            None
        }
        // Not even a label value (the API server would refuse the object):
        // a malformed owner label, 400.
        Some(uid) if !label_value(uid) => {
            e.deny(
                &[400],
                true,
                format!("uid label {uid:?} is not a label value"),
            );
            None
        }
        Some(uid) => {
            if let Some((_, ruid)) = requester.filter(|_| requester_is_owner)
                && ruid != uid
            {
                e.deny(
                    &[400, 403],
                    true,
                    format!("uid label '{uid}' disagrees with the requesting owner pod's uid"),
                );
            }
            Some((name.to_string(), uid.to_string()))
        }
        None => match requester {
            Some((_, ruid)) if requester_is_owner => Some((name.to_string(), ruid.to_string())),
            Some(_) => {
                // Issue 8 item 4: the requester check may come first.
                e.deny(
                    &[400, 403],
                    true,
                    "no uid label, and the requester is another pod",
                );
                None
            }
            None => {
                e.deny(
                    &[400],
                    true,
                    "no uid label, and the request does not come from the owner pod",
                );
                None
            }
        },
    }
}

/// SPEC §3 UPDATE (issue 14 item 1): a pod-bound requester that adds or
/// changes a Pod reference on an object whose owner is another pod is
/// denied (delegates aside): no pod makes itself co-owner of another
/// worker's object, nor adopts an orphaned one. The object's owners are
/// what the old object names, alive or not: the pod of its owner label
/// (`Self`: its name annotation), and the pods of its Pod references; the
/// requester is one of them when it has that name and, where the object
/// gives one, that uid (a new pod of the same name is another worker).
fn check_adoption(w: &World, e: &mut Expect, added: &[&Entry]) {
    if !added.iter().any(|r| r.pod_kind()) {
        return;
    }
    let Some((name, owner)) = another_owner(w, false) else {
        return;
    };
    let check = w
        .settings
        .adoption_check
        .unwrap_or(w.settings.requester_check);
    match check {
        RequesterCheck::Enforce => e.deny_soft(
            Soft::Adoption,
            &[403],
            true,
            format!(
                "requester pod '{name}' adds a Pod reference to an object owned by pod '{owner}'"
            ),
        ),
        RequesterCheck::Warn => e.warn.push(format!(
            "requester pod '{name}' adopts pod '{owner}''s object (warn)"
        )),
        RequesterCheck::Off => {}
    }
}

/// How an UPDATE releases the object: it removes a Pod reference or an
/// owner label, and the removal stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Release {
    No,
    /// Whether it stands depends on a lookup that failed: a denial for it
    /// is sound too.
    Maybe,
    Yes,
}

impl Release {
    fn or(self, other: Release) -> Release {
        match (self, other) {
            (Release::Yes, _) | (_, Release::Yes) => Release::Yes,
            (Release::Maybe, _) | (_, Release::Maybe) => Release::Maybe,
            _ => Release::No,
        }
    }

    /// What the lookup of the pod says of a removal that stands unless
    /// that pod runs.
    fn unless_live(state: State) -> Release {
        match state {
            State::Live => Release::No,
            State::Failed => Release::Maybe,
            _ => Release::Yes,
        }
    }
}

/// SPEC §3 UPDATE (issue 14's third attack): a pod-bound requester may not
/// release another worker's object either (remove its reference or owner
/// labels so that the removal stands): no pod orphans another worker's
/// object, nor strips an orphan's uid label to adopt it by name next. The
/// garbage collector's orphaning is its own (rule 14), and a person or a
/// controller is not compared.
fn check_release(w: &World, e: &mut Expect, release: Release) {
    if release == Release::No {
        return;
    }
    let Some((name, owner)) = another_owner(w, true) else {
        return;
    };
    let why = format!("requester pod '{name}' releases an object owned by pod '{owner}'");
    let check = w
        .settings
        .release_check
        .unwrap_or(w.settings.requester_check);
    match (check, release) {
        // A release is never softened: what it leaves names no owner.
        (RequesterCheck::Enforce, Release::Yes) => e.deny(&[403], false, why),
        (RequesterCheck::Enforce, _) => e.maybe(&[403], false, why),
        (RequesterCheck::Warn, Release::Yes) => e.warn.push(format!("{why} (warn)")),
        _ => {}
    }
}

/// The pod-bound requester (compared: no delegate) and the first pod that
/// owns the old object and is not it. The object's owners are what the old
/// object names, alive or not: the pod of its owner label (`Self`: its
/// name annotation), and the pods of its Pod references; the requester is
/// one of them only when it has that name and the uid the object records
/// for it (a new pod of the same name is another worker, and an object
/// that records no uid proves no ownership to a pod of that name).
///
/// `label_first`: when the owner label names a pod, that pod alone is the
/// owner (a release: the references beside the owner's may go, dangling
/// ones included).
fn another_owner<'w>(w: &'w World, label_first: bool) -> Option<(&'w str, String)> {
    let (name, uid) = w.requester_pod()?;
    if w.delegate() {
        return None;
    }
    let s = w.settings;
    let old = &w.old;
    let annotation = |key: &str| {
        w.request["oldObject"]["metadata"]["annotations"][key]
            .as_str()
            .map(str::to_string)
    };
    let mut owners: Vec<(String, Option<String>)> = Vec::new();
    if let Some(value) = old.label(&s.pod_key()).filter(|v| !v.is_empty()) {
        let owner = if s.self_value.as_deref() == Some(value) {
            annotation(&format!("{}/owner-pod-name", s.key_prefix)).unwrap_or(value.to_string())
        } else {
            value.to_string()
        };
        // Its uid: the uid label, else that of its one exact reference.
        let by_reference: BTreeSet<&str> = old
            .refs
            .iter()
            .filter(|r| r.exact() && r.name() == owner && !r.uid().is_empty())
            .map(|r| r.uid())
            .collect();
        let uid = old
            .label(&s.uid_key())
            .filter(|u| !u.is_empty())
            .map(str::to_string)
            .or_else(|| {
                (by_reference.len() == 1).then(|| by_reference.iter().next().unwrap().to_string())
            });
        owners.push((owner, uid));
    }
    let labelled = !owners.is_empty();
    for r in old
        .refs
        .iter()
        .filter(|r| r.pod_kind() && !r.name().is_empty())
    {
        owners.push((
            r.name().to_string(),
            Some(r.uid().to_string()).filter(|u| !u.is_empty()),
        ));
    }
    owners
        .into_iter()
        .take(if label_first && labelled {
            1
        } else {
            usize::MAX
        })
        .find(|(owner, owner_uid)| owner != name || owner_uid.as_deref() != Some(uid))
        .map(|(owner, _)| (name, owner))
}

/// Identity rules (rule 8): malformed extras.
fn check_identity(w: &World, e: &mut Expect, required: bool) {
    if let Requester::Malformed { why, of_namespace } = &w.requester {
        let why = format!("malformed pod extras: {why}");
        if *of_namespace && required {
            e.deny(&[400], true, why);
        } else {
            e.maybe(&[400], true, why);
        }
    }
}

/// Pod references as CREATE validates them (also those an UPDATE adds):
/// the whole tuple, valid names, no contradiction, non-blocking.
#[allow(clippy::too_many_arguments)]
fn check_added_refs(
    w: &World,
    hook: Hook,
    e: &mut Expect,
    refs: &[&Entry],
    owner_name: Option<&str>,
    owner_uid: Option<&str>,
    labelled: bool,
    create: bool,
) {
    for r in refs {
        if !r.well_formed() {
            if r.exact() || labelled {
                e.deny(
                    &[400],
                    true,
                    format!("malformed Pod reference {}", r.show()),
                );
            } else {
                e.maybe(
                    &[400],
                    true,
                    format!("malformed pod-like reference {}", r.show()),
                );
            }
            continue;
        }
        if !r.exact() {
            if owner_uid == Some(r.uid()) {
                e.deny(
                    &[400],
                    true,
                    format!(
                        "entry {} carries the owner's uid under another apiVersion/kind (rule 6)",
                        r.show()
                    ),
                );
            } else if refs.iter().any(|o| o.exact() && o.uid() == r.uid()) {
                e.deny(
                    &[400],
                    true,
                    format!(
                        "entry {} contradicts a Pod reference with its uid",
                        r.show()
                    ),
                );
            } else if labelled && r.pod_kind() {
                e.deny(&[400], true, format!("entry {} names a pod the collector cannot resolve (apiVersion/kind not v1/Pod)", r.show()));
            } else {
                e.maybe(
                    &[400],
                    true,
                    format!(
                        "entry {} looks like a Pod reference but is not v1/Pod",
                        r.show()
                    ),
                );
            }
            continue;
        }
        if !dns_subdomain(r.name()) {
            e.deny(
                &[400],
                true,
                format!(
                    "Pod reference name '{}' is not a pod name (rule 7)",
                    r.name()
                ),
            );
            continue;
        }
        if owner_uid == Some(r.uid()) && owner_name != Some(r.name()) {
            e.deny(
                &[400],
                true,
                format!(
                    "entry {} carries the owner's uid with another name (rule 6)",
                    r.show()
                ),
            );
        }
        if owner_name == Some(r.name()) && owner_uid.is_some_and(|u| u != r.uid()) {
            e.deny(
                &[400, 403],
                true,
                format!("entry {} names the owner with another uid", r.show()),
            );
        }
        for o in refs.iter().filter(|o| o.exact() && o.well_formed()) {
            if o.uid() == r.uid() && o.name() != r.name() {
                e.deny(
                    &[400],
                    true,
                    format!(
                        "two Pod references with uid '{}' and different names",
                        r.uid()
                    ),
                );
            }
            if o.name() == r.name() && o.uid() != r.uid() {
                e.deny(
                    &[400, 403],
                    true,
                    format!("two Pod references to '{}' with different uids", r.name()),
                );
            }
        }
        // The requester check on references: the spec speaks of the
        // declared owner; for other references either answer is sound.
        if let Some((rname, _)) = w.requester_pod()
            && rname != r.name()
            && w.settings.requester_check == RequesterCheck::Enforce
            && !w.delegate()
        {
            e.maybe_soft(
                Soft::Requester,
                &[403],
                true,
                format!(
                    "requester pod '{rname}' references another pod '{}'",
                    r.name()
                ),
            );
        }
        if r.blocking() {
            let is_owner = owner_uid == Some(r.uid());
            match hook {
                Hook::Mutate if !is_owner || !create => e.warn.push(format!(
                    "blocking reference to '{}' made non-blocking",
                    r.name()
                )),
                Hook::Mutate => {}
                _ => e.deny_blocking(
                    &[400, 403],
                    false,
                    format!("blocking Pod reference to '{}' on /validate", r.name()),
                ),
            }
        }
    }
}

/// SPEC §3 UPDATE and Orphaning; issue 8 items 2 and 3.
fn expect_update(w: &World, hook: Hook, e: &mut Expect) {
    let s = w.settings;
    let (pod_key, uid_key) = (s.pod_key(), s.uid_key());
    let (old, new) = (&w.old, &w.object);
    let known = known_uids(w, &[old, new]);
    // What the old object had as Pod references, by what it said itself:
    // an entry of no pod kind whose uid only the update names was not one
    // (the update turning it into the right reference fixes a legacy
    // object).
    let old_refs = pod_refs(old, &known_uids(w, &[old]));
    let new_refs = pod_refs(new, &known);
    let (o_pod, o_uid) = (old.label(&pod_key), old.label(&uid_key));
    let (n_pod, n_uid) = (new.label(&pod_key), new.label(&uid_key));
    // The pod the old labels name: `Self` is its name annotation's.
    let o_named = o_pod.and_then(|value| {
        if s.self_value.as_deref() == Some(value) {
            old.annotations.get(&s.name_key()).map(String::as_str)
        } else {
            Some(value)
        }
    });
    let declares_new = n_pod.is_some() || n_uid.is_some() || !new_refs.is_empty();
    let declares_old = o_pod.is_some() || o_uid.is_some() || !old_refs.is_empty();
    if !declares_new && !declares_old {
        e.unchanged = true;
        return;
    }
    // The collector's UPDATE that removes references: never denied, never
    // restored (SPEC §3 UPDATE), and recognised before any other check,
    // limits, namespace and identity included (rule 14): an object may
    // hold more references than the limit (made before install, or before
    // the limit was lowered), and refusing the removal leaves its owner
    // Terminating.
    if (w.gc() || w.username == CONTROLLER_MANAGER_USER) && old.present {
        // The collector patches `ownerReferences` and nothing else: labels,
        // annotations and every template as they were (rule 16: under the
        // shared user, anything else is another controller's).
        // Under its own service account another webhook may have added to
        // the collector's patch: still its update.
        let shared = w.username == CONTROLLER_MANAGER_USER;
        let keys = [s.pod_key(), s.uid_key()];
        let owner_keys_kept = keys.iter().all(|k| new.labels.get(k) == old.labels.get(k))
            && new.annotations.get(&s.name_key()) == old.annotations.get(&s.name_key());
        let only_removes = new
            .refs
            .iter()
            .all(|r| old.refs.iter().any(|o| o.raw == r.raw))
            && owner_keys_kept
            && (!shared || only_references_differ(&w.request["object"], &w.request["oldObject"]));
        if only_removes {
            e.unchanged = true;
            return;
        }
    }
    if !old.present {
        e.maybe(&[400, 403], true, "an UPDATE without oldObject");
        // Judge the rest as far as it goes: nothing is required.
        let mut inner = Expect::default();
        expect_create(w, hook, &mut inner);
        e.maybe.extend(inner.deny.into_iter().chain(inner.maybe));
        e.unchecked.extend(inner.unchecked);
        return;
    }
    let ns = w.ns();
    if ns.is_empty() {
        if declares_new {
            e.deny(
                &[400, 403],
                true,
                "a cluster-scoped object cannot have a pod owner",
            );
        } else {
            e.maybe(&[400, 403], true, "a cluster-scoped object had a pod owner");
        }
        return;
    }
    if namespace_malformed(w, e, ns) {
        return;
    }
    check_identity(w, e, false);
    if let Some(limit) = s.max_pod_references {
        if new_refs.len() > limit && new_refs.len() > old_refs.len() {
            e.deny(
                &[400],
                true,
                format!("{} Pod references, over the limit {limit}", new_refs.len()),
            );
            return;
        } else if new_refs.len() > limit {
            e.maybe(
                &[400],
                true,
                "as many Pod references as before, over the limit",
            );
        }
    } else if new_refs.len() >= REFERENCES_ALWAYS_REFUSED && new_refs.len() > old_refs.len() {
        e.deny(
            &[400],
            true,
            format!("{} Pod references: over any sane limit", new_refs.len()),
        );
        return;
    } else if new_refs.len() > REFERENCES_ALWAYS_ACCEPTED {
        e.maybe(&[400], true, "many Pod references");
    }
    let gc = w.gc();

    // The owner of the old object: its uid from the label, else from its
    // one exact reference of that name.
    let o_owner_uid: Option<String> = o_pod.and_then(|name| {
        o_uid
            .filter(|u| !u.is_empty())
            .map(str::to_string)
            .or_else(|| {
                // An empty uid (a reference from before ownerguard)
                // identifies no pod.
                let uids: BTreeSet<&str> = old_refs
                    .iter()
                    .filter(|r| r.exact() && r.name() == name && !r.uid().is_empty())
                    .map(|r| r.uid())
                    .collect();
                (uids.len() == 1).then(|| uids.into_iter().next().unwrap().to_string())
            })
    });
    let o_owner_ref: Option<&Entry> = match (o_pod, &o_owner_uid) {
        (Some(name), Some(uid)) => old_refs
            .iter()
            .copied()
            .find(|r| r.exact() && r.name() == name && r.uid() == uid),
        _ => None,
    };
    // Liveness of the old owner, looked up only where a rule needs it.
    let owner_state = |e: &mut Expect| -> Option<State> {
        let (name, uid) = (o_pod?, o_owner_uid.as_deref()?);
        let state = w.state(name, uid);
        if state == State::Failed {
            e.lookup_failed(w, name);
        }
        Some(state)
    };

    // Labels (ownership is set at creation).
    if let Some(n) = n_uid
        && n_pod.is_none()
    {
        if o_pod.is_none() && o_uid == Some(n) {
            e.maybe(
                &[400],
                true,
                "uid label without owner-pod label, as the old object had",
            );
        } else {
            e.deny(
                &[400, 403],
                true,
                "uid label without owner-pod label (rule 9)",
            );
        }
    }
    let mut labels_removed = false;
    // Whether the update releases the object (check_release).
    let mut release = Release::No;
    match (o_pod, n_pod) {
        (None, Some(n)) => e.deny(
            &[400, 403],
            true,
            format!("the update adds owner-pod label '{n}' (ownership is set at creation)"),
        ),
        (Some(o), Some(n)) if o != n => e.deny(
            &[400, 403],
            true,
            format!("the update changes owner-pod label '{o}' to '{n}'"),
        ),
        (Some(o), None) => {
            labels_removed = true;
            // Issue 8 item 3: only once no live owner's reference remains.
            if o_owner_ref.is_some() {
                let state = owner_state(e);
                if state == Some(State::Live) {
                    e.deny(&[403], false, format!("the update removes owner label '{o}' while the owner lives and holds the reference"));
                }
                release = release.or(state.map_or(Release::Yes, Release::unless_live));
            } else {
                release = Release::Yes;
            }
        }
        _ => {}
    }
    let mut uid_label_restore: Option<String> = None;
    if !labels_removed && n_pod.is_some() {
        match (o_uid, n_uid) {
            (Some(o), Some(n)) if o != n => e.deny(
                &[400, 403],
                true,
                format!("the update changes the uid label '{o}' to '{n}'"),
            ),
            (None, Some(n)) if o_pod.is_some() => {
                // The uid the old object's reference gave its owner: the
                // same in a label says nothing new, unless the owner label
                // names no pod at all (then it is anybody's uid).
                let fine = o_owner_uid.as_deref() == Some(n) && o_pod.is_some_and(dns_subdomain);
                if !fine {
                    e.maybe(&[400, 403], true, "the update adds a uid label");
                }
            }
            // Omitted (kubectl replace): restored while the owner lives. A
            // legacy object (no reference) may lose its labels.
            (Some(o), None) if o_owner_ref.is_some() => match owner_state(e).inspect(|&state| {
                release = release.or(Release::unless_live(state));
            }) {
                Some(State::Live) => match hook {
                    Hook::Mutate => {
                        uid_label_restore = Some(o.to_string());
                        e.warn.push("uid label restored".into());
                    }
                    _ => e.deny(
                        &[403],
                        false,
                        "the update drops the uid label while the owner lives",
                    ),
                },
                Some(State::Failed) => {}
                _ => e.maybe(&[403], false, "the update drops the uid label of an orphan"),
            },
            // A legacy object (no reference): the spec lets its labels go
            // once no live owner's reference is left; keeping the uid label
            // of a live owner (restore, or refuse on /validate) is sound too,
            // and deciding that needs a lookup.
            (Some(_), None) => {
                // Dropped at once, or kept for a live owner (either is
                // sound): releasing, or maybe.
                release = release.or(match (o_pod, o_owner_uid.as_deref()) {
                    (Some(name), Some(uid)) if w.state(name, uid) != State::Live => Release::Yes,
                    (Some(_), Some(_)) => Release::Maybe,
                    _ => Release::Yes,
                });
                if let (Some(name), Some(uid)) = (o_pod, o_owner_uid.as_deref()) {
                    match w.state(name, uid) {
                        State::Live => e.maybe(
                            &[403],
                            false,
                            "the update drops the uid label of a live owner",
                        ),
                        State::Failed => {
                            e.maybe(&[503], false, "the owner's liveness cannot be checked")
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }

    // The owner's reference (classes 3, 4, 5; issue 8 item 2).
    if let (Some(r_o), Some(o_name)) = (o_owner_ref, o_pod) {
        let uid = r_o.uid();
        // Every entry under its uid but those the old object had whole
        // besides it (a contradiction from before, kept: no rewrite).
        let in_new: Vec<&Entry> = new
            .refs
            .iter()
            .filter(|r| r.uid() == uid)
            .filter(|r| {
                r.tuple() == r_o.tuple() || !old.refs.iter().any(|o| o.tuple() == r.tuple())
            })
            .collect();
        if in_new.is_empty() {
            // Removed or omitted.
            if gc {
                e.no_restore.push(uid.to_string());
            } else {
                if let Some(state) = owner_state(e) {
                    release = release.or(Release::unless_live(state));
                }
                match owner_state(e) {
                    Some(State::Live) => match hook {
                        Hook::Mutate if !labels_removed && n_pod == Some(o_name) => {
                            e.restore.push(Restore {
                                tuple: r_o.tuple(),
                                uid_label: uid_label_restore.clone(),
                            });
                            e.warn.push("owner reference restored".into());
                            if new.refs_present {
                                // A deliberate removal rather than a
                                // replace: refusing it is sound too.
                                e.maybe(
                                    &[403],
                                    false,
                                    "the update removes the live owner's reference",
                                );
                            }
                        }
                        _ => e.deny(
                            &[403],
                            false,
                            format!("the update removes the reference to live owner '{o_name}'"),
                        ),
                    },
                    Some(State::Failed) => {
                        e.no_restore.push(uid.to_string());
                    }
                    _ => e.no_restore.push(uid.to_string()),
                }
            }
        } else {
            for r in in_new {
                if r.tuple() != r_o.tuple() {
                    e.deny(
                        &[400, 403],
                        true,
                        format!(
                            "the update rewrites the owner's reference to {} (class 3)",
                            r.show()
                        ),
                    );
                } else if r.blocking() && !r_o.blocking() {
                    match hook {
                        Hook::Mutate => e.warn.push("owner reference unblocked".into()),
                        _ => e.deny_blocking(
                            &[400, 403],
                            true,
                            "the update makes the owner's reference blocking",
                        ),
                    }
                } else if r.blocking() && hook == Hook::Validate {
                    e.maybe_blocking(
                        &[400, 403],
                        true,
                        "the owner's reference was blocking already",
                    );
                }
            }
            // Another entry (not v1/Pod) carrying the uid, that the old
            // object did not have as it is.
            for r in new.refs.iter().filter(|r| {
                r.uid() == uid && !r.pod_kind() && !old.refs.iter().any(|o| o.tuple() == r.tuple())
            }) {
                e.deny(
                    &[400, 403],
                    true,
                    format!("entry {} carries the owner's uid", r.show()),
                );
            }
            e.owner = Some((o_name.to_string(), uid.to_string()));
            e.owner_required = !gc;
        }
        if e.restore.iter().any(|r| r.tuple.3 == uid) {
            e.owner = Some((o_name.to_string(), uid.to_string()));
            e.owner_required = true;
        }
    } else if let Some(o_name) = o_pod.filter(|_| !labels_removed) {
        // Legacy or orphaned: the owner's reference may come (checked as on
        // CREATE, below) or not.
        if let Some(uid) = &o_owner_uid {
            e.owner = Some((o_name.to_string(), uid.clone()));
        }
    }

    // A Pod reference without a uid (from before ownerguard: the API
    // server validates references after admission) identifies nothing to
    // follow: legacy, kept or not; but kept, it stays non-blocking like any
    // other (SPEC UPDATE): made blocking by the update, /mutate unblocks
    // it, /validate denies.
    // Made blocking: the old object had the tuple, never blocking (two
    // uid-less entries share a tuple; one blocking already is legacy). Any
    // spelling of Pod: the update keeps it, so it stays non-blocking.
    let kept_uidless = |n: &&&Entry| {
        n.pod_kind()
            && n.uid().is_empty()
            && n.blocking()
            && old_refs.iter().any(|r| r.tuple() == n.tuple())
            && !old_refs
                .iter()
                .any(|r| r.tuple() == n.tuple() && r.blocking())
    };
    for n in new_refs.iter().filter(kept_uidless) {
        match hook {
            Hook::Mutate => e
                .warn
                .push(format!("blocking reference {} made non-blocking", n.show())),
            _ => e.deny_blocking(
                &[400, 403],
                false,
                format!("the update makes the reference {} blocking", n.show()),
            ),
        }
    }
    // Every other Pod reference of the old object.
    for r in old_refs
        .iter()
        .filter(|r| Some(r.uid()) != o_owner_ref.map(|o| o.uid()))
        .filter(|r| !r.uid().is_empty())
    {
        // Every entry under its uid, Pod-like or not: rewritten into any
        // other tuple, the reference is renamed or re-kinded.
        let same_uid: Vec<&Entry> = new
            .refs
            .iter()
            .filter(|n| n.uid() == r.uid())
            .filter(|n| n.tuple() == r.tuple() || !old.refs.iter().any(|o| o.tuple() == n.tuple()))
            .collect();
        if same_uid.is_empty() {
            if gc || !r.exact() || !r.well_formed() {
                e.no_restore.push(r.uid().to_string());
                if !gc {
                    release = Release::Yes;
                }
                continue;
            }
            // Beside the owner's reference, another pod's may go while that
            // pod runs: the object still dies with its owner, and
            // Kubernetes' controllers take such references back (the
            // statefulset controller's claim retention). The statefulset
            // controller takes its retention reference back whether or not
            // the claim holds its owner's (rule 16: its pod returned to the
            // set, and a refusal stalls the set).
            let taken_back =
                is_taken_back(w, r) && o_pod != Some(r.name()) && o_named != Some(r.name());
            if o_owner_ref.is_some() || taken_back {
                e.no_restore.push(r.uid().to_string());
                release = Release::Yes;
                continue;
            }
            release = release.or(Release::unless_live(w.state(r.name(), r.uid())));
            match w.state(r.name(), r.uid()) {
                State::Live if declares_new => e.deny(
                    &[403],
                    false,
                    format!(
                        "the update removes the reference to live pod '{}'",
                        r.name()
                    ),
                ),
                State::Live => e.maybe(
                    &[403],
                    false,
                    format!(
                        "the update removes the reference to live pod '{}'",
                        r.name()
                    ),
                ),
                State::Failed => e.lookup_failed(w, r.name()),
                _ => e.no_restore.push(r.uid().to_string()),
            }
            continue;
        }
        for n in same_uid {
            if n.tuple() != r.tuple() && !r.pod_kind() {
                // An entry of no pod kind under a pod's uid was no Pod
                // reference (SPEC §2): rewritten into the right one, the
                // update repairs a legacy object; refusing it is sound too.
                e.maybe(
                    &[400, 403],
                    true,
                    format!("the update rewrites the entry {} to {}", r.show(), n.show()),
                );
            } else if n.tuple() != r.tuple() {
                e.deny(
                    &[400, 403],
                    true,
                    format!(
                        "the update rewrites the reference {} to {}",
                        r.show(),
                        n.show()
                    ),
                );
            } else if n.blocking() && !r.blocking() && !r.pod_kind() {
                // An entry of no pod kind under a pod's uid, kept: legacy;
                // not a Pod reference (SPEC §2), so its flag is not ours.
                e.maybe_blocking(
                    &[400, 403],
                    true,
                    "a legacy entry under a pod's uid made blocking",
                );
            } else if n.blocking()
                && !r.blocking()
                // Two entries of one tuple: one blocking already is legacy.
                && !old.refs.iter().any(|o| o.tuple() == n.tuple() && o.blocking())
            {
                match hook {
                    Hook::Mutate => e.warn.push("reference unblocked".into()),
                    _ => e.deny_blocking(
                        &[400, 403],
                        true,
                        format!("the update makes the reference to '{}' blocking", r.name()),
                    ),
                }
            } else if n.blocking() {
                // Blocking already before: legacy, either answer.
                if hook == Hook::Validate {
                    e.maybe_blocking(&[400, 403], true, "a blocking reference the old object had");
                }
            }
        }
    }

    // Pod references the update adds: as on CREATE.
    let old_tuples: BTreeSet<Tuple> = old_refs.iter().map(|r| r.tuple()).collect();
    let added: Vec<&Entry> = new_refs
        .iter()
        .copied()
        .filter(|r| !old_tuples.contains(&r.tuple()))
        .filter(|r| !old_refs.iter().any(|o| o.uid() == r.uid() && r.uid() != ""))
        .collect();
    // The owner the labels name stays the owner whether it lives or not:
    // an added reference to its name under another uid (a new pod of the
    // same name) would change ownership after creation.
    let (owner_name, owner_uid) = match &e.owner {
        Some((n, u)) => (Some(n.clone()), Some(u.clone())),
        None if !labels_removed => (o_pod.map(str::to_string), o_owner_uid.clone()),
        None => (None, None),
    };
    // Rule 16: the statefulset controller, condemning a pod on a scale-down
    // (whenScaled: Delete), adds that pod as controller of the claim named
    // after it, working from its informer's cache: the pod may be being
    // deleted, finished, gone or recreated by then. Never refused for it.
    // A reference naming the owner of record under another uid contradicts
    // the object (rule 6) whoever adds it: not retention.
    let (retention, added): (Vec<&Entry>, Vec<&Entry>) = added.into_iter().partition(|r| {
        let names_owner = owner_name.as_deref() == Some(r.name()) || o_named == Some(r.name());
        let contradicts = names_owner && owner_uid.as_deref() != Some(r.uid());
        is_retention(w, r) && !contradicts
    });
    // A reference naming the old owner (`Self` included) under another uid
    // contradicts the object (rule 6): 400 as well as the added
    // reference's 403.
    for r in added
        .iter()
        .filter(|r| r.exact() && o_named == Some(r.name()) && owner_uid.as_deref() != Some(r.uid()))
    {
        e.maybe(
            &[400],
            true,
            format!("entry {} names the owner under another uid", r.show()),
        );
    }
    e.retention.extend(retention.iter().map(|r| r.tuple()));
    // Non-blocking as every Pod reference: /mutate unblocks it (the
    // controller compares only uid and controller, so nothing churns).
    for r in retention.iter().filter(|r| r.blocking()) {
        match hook {
            Hook::Mutate => e.warn.push(format!(
                "blocking reference to '{}' made non-blocking",
                r.name()
            )),
            _ => e.deny_blocking(
                &[400, 403],
                false,
                format!("blocking Pod reference to '{}' on /validate", r.name()),
            ),
        }
    }
    check_templates(
        w,
        hook,
        e,
        owner_name.as_deref(),
        owner_uid.as_deref(),
        false,
    );
    check_adoption(w, e, &added);
    check_release(w, e, release);
    check_added_refs(
        w,
        hook,
        e,
        &added,
        owner_name.as_deref(),
        owner_uid.as_deref(),
        n_pod.is_some(),
        false,
    );
    // Labels removed: the old labels still said which pod that uid is, so
    // an added entry carrying it under another tuple contradicts it (rule
    // 6, 400), whether or not the spec requires the comparison.
    if labels_removed && let (Some(name), Some(uid)) = (o_pod, o_owner_uid.as_deref()) {
        for r in added
            .iter()
            .filter(|r| r.uid() == uid && !(r.exact() && r.name() == name))
        {
            e.maybe(
                &[400],
                true,
                format!(
                    "entry {} carries the old owner's uid under another tuple",
                    r.show()
                ),
            );
        }
        for r in added
            .iter()
            .filter(|r| r.exact() && r.name() == name && r.uid() != uid)
        {
            e.maybe(
                &[400, 403],
                true,
                format!("entry {} names the old owner under another uid", r.show()),
            );
        }
    }
    // Old inexact entries kept: legacy.
    for r in new_refs
        .iter()
        .filter(|r| !r.exact() && old_tuples.contains(&r.tuple()))
    {
        e.maybe(
            &[400],
            true,
            format!("entry {} the old object already had", r.show()),
        );
    }
    if !e.deny.iter().any(|r| r.early && !r.blocking) {
        let mut looked = BTreeSet::new();
        for r in added
            .iter()
            .filter(|r| r.exact() && r.well_formed() && dns_subdomain(r.name()))
        {
            if looked.insert(r.name().to_string()) {
                e.require_live(w, r.name(), r.uid(), "referenced");
            }
        }
    }
}

/// Whether two objects are the same but for `metadata.ownerReferences` and
/// what the API server keeps itself (`managedFields`, `resourceVersion`):
/// the collector's patch, and nothing else (rule 16, the shared user).
fn only_references_differ(object: &Value, old: &Value) -> bool {
    let rest = |o: &Value| {
        let mut o = o.clone();
        if let Some(metadata) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in ["ownerReferences", "managedFields", "resourceVersion"] {
                metadata.remove(field);
            }
        }
        o
    };
    rest(object) == rest(old)
}

/// Whether `r` is the statefulset controller's retention reference: added
/// by that controller (its own user or the controller manager's shared
/// one) to a PersistentVolumeClaim named `<template>-<pod>`, exactly
/// `v1`/`Pod`, `controller: true`, naming that pod.
fn is_retention(w: &World, r: &Entry) -> bool {
    is_taken_back(w, r) && r.controller == Some(Value::Bool(true)) && !r.uid().is_empty()
}

/// Whether `r`, removed, is one the statefulset controller takes back
/// from the claim named after its pod: a Pod reference to that pod,
/// whatever its flags (the controller scrubs every reference to its pod).
fn is_taken_back(w: &World, r: &Entry) -> bool {
    let claim = w.request["kind"]["group"].as_str().unwrap_or("").is_empty()
        && w.request["kind"]["kind"] == "PersistentVolumeClaim";
    let by_the_controller =
        w.username == STATEFULSET_CONTROLLER_USER || w.username == CONTROLLER_MANAGER_USER;
    let named_after = w
        .object
        .name
        .strip_suffix(r.name())
        .is_some_and(|rest| rest.len() > 1 && rest.ends_with('-'));
    claim && by_the_controller && r.exact() && !r.name().is_empty() && named_after
}

// ---------------------------------------------------------------------------
// Denials.

fn judge_denied(w: &World, e: &Expect, response: &Value, v: &mut Violations) {
    let code = response["status"]["code"].as_u64().unwrap_or(0) as u16;
    let message = response["status"]["message"].as_str().unwrap_or("");
    let all: Vec<&Reason> = e.deny.iter().chain(&e.maybe).collect();
    if all.is_empty() {
        v.push(format!(
            "wrong denial ({code}): the spec allows this {} (no rule denies it): {message}",
            w.operation
        ));
        return;
    }
    let early = e.deny.iter().any(|r| r.early);
    let acceptable: BTreeSet<u16> = all
        .iter()
        .filter(|r| !early || r.early)
        .flat_map(|r| r.codes.iter().copied())
        .collect();
    if !acceptable.contains(&code) {
        v.push(format!(
            "wrong denial code {code}: by the spec the code is one of {acceptable:?} ({}): {message}",
            reasons(&all)
        ));
    }
    check_message(w, e, message, true, v);
}

fn reasons(all: &[&Reason]) -> String {
    all.iter()
        .map(|r| format!("{} {:?}", r.why, r.codes))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Whether `message` names `name`; a long name may be cut short.
fn names(message: &str, name: &str) -> bool {
    message.contains(name) || (name.len() > 40 && message.contains(&name[..40]))
}

/// Text fit to search a message for: printable ASCII, no quote.
fn plain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'\'' && b != b'"' && b != b'\\')
}

fn check_message(w: &World, e: &Expect, message: &str, denial: bool, v: &mut Violations) {
    // Class 9: no uid the requester did not name.
    for pod in w.pods {
        if !pod.uid.is_empty() && message.contains(&pod.uid) && !w.named_text.contains(&pod.uid) {
            v.push(format!(
                "message reveals the uid of pod '{}/{}', which the request did not name: {message}",
                pod.namespace, pod.name
            ));
        }
    }
    // Issue 14 item 7: nor a uid only the stored object holds.
    for uid in stored_uids(&w.old, &w.settings.uid_key()) {
        if message.contains(&uid) && !w.named_text.contains(&uid) {
            v.push(format!(
                "message reveals the uid '{uid}' the old object holds, which the request did not name: {message}"
            ));
        }
    }
    // Class 12: no API error internals.
    for internal in ["Status {", "ErrorResponse", "reqwest", "hyper::"] {
        if message.contains(internal) {
            v.push(format!("message echoes internals ({internal}): {message}"));
        }
    }
    if !denial {
        return;
    }
    let object = if w.object.present { &w.object } else { &w.old };
    let name = object.shown_name();
    // The request's own name is the object's too (an UPDATE whose object
    // lost metadata.name still has it there).
    let request_name = w.request["name"].as_str().filter(|n| !n.is_empty());
    if plain(name) && !names(message, name) && !request_name.is_some_and(|n| names(message, n)) {
        v.push(format!(
            "denial does not name the object '{name}': {message}"
        ));
    }
    let ns = w.ns();
    if plain(ns) && dns_label(ns) && !message.contains(ns) {
        v.push(format!(
            "denial does not name the namespace '{ns}': {message}"
        ));
    }
    let pod_key = w.settings.pod_key();
    // The owner the object declares (a denial of an object that declares
    // none, like a lone uid label, has no owner to name).
    let declared = if w.object.present { &w.object } else { &w.old };
    let owners: Vec<&str> = [declared.label(&pod_key)]
        .into_iter()
        .flatten()
        .filter(|o| plain(o) && w.settings.self_value.as_deref() != Some(*o))
        .collect();
    if let Some(owner) = owners.first()
        && !owners.iter().any(|o| names(message, o))
    {
        // A denial about a reference names that reference instead.
        let names_a_ref = w
            .object
            .refs
            .iter()
            .chain(&w.old.refs)
            .any(|r| !r.name().is_empty() && message.contains(r.name()));
        let _ = e;
        if !names_a_ref {
            v.push(format!(
                "denial does not name the owner '{owner}': {message}"
            ));
        }
    }
}

// ---------------------------------------------------------------------------
// Allowed: the API server applies the patch, the collector reads the result.

fn judge_allowed(w: &World, hook: Hook, e: &Expect, response: &Value, v: &mut Violations) {
    if !e.deny.is_empty() {
        let all: Vec<&Reason> = e.deny.iter().collect();
        v.push(format!(
            "wrong allow: the spec denies this: {}",
            reasons(&all)
        ));
    }
    let warnings: Vec<&str> = response["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    for warning in &warnings {
        check_message(w, e, warning, false, v);
    }
    if !e.warn.is_empty() && warnings.is_empty() {
        v.push(format!(
            "allowed without a warning, though: {}",
            e.warn.join("; ")
        ));
    }
    let sent = &w.request["object"];
    let fin = match apply_patch(sent, response) {
        Ok(Some(patched)) => {
            if e.unchanged {
                v.push("patched an object the spec leaves unchanged".into());
            }
            if patched == *sent {
                v.push(
                    "a patch that changes nothing (rule 4: only when it changes something)".into(),
                );
            }
            only_metadata_changed(w, sent, &patched, v);
            patched
        }
        Ok(None) => sent.clone(),
        Err(problem) => {
            v.push(format!(
                "the API server fails the request with 500: {problem}"
            ));
            return;
        }
    };
    if hook != Hook::Mutate && response.get("patch").is_some() {
        return;
    }
    if matches!(w.operation.as_str(), "CREATE" | "UPDATE") && fin.is_object() {
        collector(w, hook, e, &fin, response, v);
    }
}

/// The patch as the API server applies it: base64, RFC 6902.
fn apply_patch(object: &Value, response: &Value) -> Result<Option<Value>, String> {
    let Some(encoded) = response.get("patch") else {
        return Ok(None);
    };
    let encoded = encoded.as_str().ok_or("patch is not a string")?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| format!("patch is not base64: {e}"))?;
    let patch: json_patch::Patch =
        serde_json::from_slice(&bytes).map_err(|e| format!("patch is not a JSON Patch: {e}"))?;
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch).map_err(|e| {
        format!(
            "patch {} does not apply: {e}",
            String::from_utf8_lossy(&bytes)
        )
    })?;
    if patched.get("metadata").is_some_and(|m| !m.is_object()) {
        return Err("the patched object's metadata is not an object".into());
    }
    Ok(Some(patched))
}

/// Only metadata may change, and of a template (rule 12) only its uid
/// label and its owner-pod-name annotation (the maps created if need be).
fn only_metadata_changed(w: &World, sent: &Value, patched: &Value, v: &mut Violations) {
    let s = w.settings;
    let pointers: Vec<String> = controllers::templates(sent)
        .into_iter()
        .map(|t| t.pointer)
        .collect();
    let strip = |object: &Value| {
        let mut object = object.clone();
        if let Some(map) = object.as_object_mut() {
            map.remove("metadata");
        }
        for pointer in &pointers {
            let Some(metadata) = object.pointer_mut(pointer).and_then(Value::as_object_mut) else {
                continue;
            };
            for (map, key) in [("labels", s.uid_key()), ("annotations", s.name_key())] {
                if let Some(Value::Object(entries)) = metadata.get_mut(map) {
                    entries.remove(&key);
                    if entries.is_empty() {
                        metadata.remove(map);
                    }
                }
            }
        }
        object
    };
    if strip(sent) != strip(patched) {
        v.push("the patch changes more than metadata and the owner keys of templates".into());
    }
}

/// After mutation the API server removes exact duplicate references.
fn dedup(refs: &[Entry]) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    for r in refs {
        if !out.iter().any(|o| o.raw == r.raw) {
            out.push(r.clone());
        }
    }
    out
}

fn collector(w: &World, hook: Hook, e: &Expect, fin: &Value, response: &Value, v: &mut Violations) {
    let s = w.settings;
    let (pod_key, uid_key) = (s.pod_key(), s.uid_key());
    let mut meta = Meta::parse(fin);
    if !meta.garbage.is_empty() && w.object.garbage.is_empty() {
        v.push(format!(
            "the final object is malformed: {}",
            meta.garbage.join(", ")
        ));
    }
    meta.refs = dedup(&meta.refs);
    let update = w.operation == "UPDATE";
    let old = &w.old;
    let sent = &w.object;
    let mut known = known_uids(w, &[sent, old, &meta]);
    if let Some((_, uid)) = &e.owner {
        known.insert(uid.clone());
    }
    let refs = pod_refs(&meta, &known);
    let inherited = |r: &Entry| update && old.refs.iter().any(|o| o.tuple() == r.tuple());
    let old_blocking = |r: &Entry| {
        old.refs
            .iter()
            .any(|o| o.tuple() == r.tuple() && o.blocking())
    };
    let patched = response.get("patch").is_some();
    let sent_has = |r: &Entry| sent.refs.iter().any(|o| o.raw == r.raw);

    // Every Pod reference: resolvable, live, non-blocking.
    for r in &refs {
        let why = if !r.exact() {
            Some("not apiVersion v1, kind Pod: the collector cannot resolve it".to_string())
        } else if !r.well_formed() {
            Some("malformed".to_string())
        } else if !dns_subdomain(r.name()) {
            Some("its name is not a pod name".to_string())
        } else if e.unchecked.contains(r.name()) || e.retention.contains(&r.tuple()) {
            None
        } else {
            match w.state(r.name(), r.uid()) {
                State::Live | State::Failed => None,
                State::Missing => Some(format!("no pod '{}' in namespace '{}'", r.name(), w.ns())),
                State::OtherUid => Some(format!("pod '{}' has another uid", r.name())),
                State::Terminating => Some(format!("pod '{}' is being deleted", r.name())),
                State::Finished => Some(format!(
                    "pod '{}' has finished: the collector keeps this object until the pod object is deleted (rule 11)",
                    r.name()
                )),
            }
        };
        // An object without owner label whose entry merely looks like a
        // pod's (not v1/Pod, no uid the webhook knows): not ownerguard's.
        let foreign = !r.exact()
            && meta.label(&pod_key).is_none()
            && !r.uid.as_deref().is_some_and(|u| known.contains(u));
        if let Some(why) = why
            && !inherited(r)
            && !foreign
        {
            v.push(format!(
                "final object: Pod reference {} does not resolve: {why}",
                r.show()
            ));
        }
        // An entry of no pod kind the old object had (under a pod's uid):
        // not a Pod reference (SPEC §2), its flag is legacy.
        let legacy_entry = inherited(r) && !r.pod_kind();
        let was_blocking = inherited(r) && old_blocking(r);
        // /validate-all leaves blocking references to the API server's
        // permission check (SPEC §3 rule 13), and so does /validate in a
        // mode (rule 17): the flag changes a foreground deletion's wait,
        // not what is collected.
        let permission_checked = hook == Hook::ValidateAll
            || (hook == Hook::Validate && w.settings.mode != Mode::Enforce);
        let exempt = was_blocking || legacy_entry || foreign || permission_checked;
        if r.blocking() && !exempt {
            v.push(format!(
                "final object: Pod reference {} is blocking (blockOwnerDeletion: true)",
                r.show()
            ));
        }
        if r.blocking() && hook == Hook::Mutate && patched && !sent_has(r) {
            v.push(format!(
                "final object: the patch wrote a blocking reference {}",
                r.show()
            ));
        }
    }
    // No entry contradicts a pod it names by uid.
    for r in refs.iter().filter(|r| r.exact() && r.well_formed()) {
        for o in meta
            .refs
            .iter()
            .filter(|o| o.uid() == r.uid() && o.tuple() != r.tuple())
        {
            let legacy = inherited(r) && update && old.refs.iter().any(|x| x.tuple() == o.tuple());
            if !legacy {
                v.push(format!(
                    "final object: {} contradicts {} (same uid, another tuple)",
                    o.show(),
                    r.show()
                ));
            }
        }
    }
    // No restore where a removal stands.
    for uid in &e.no_restore {
        let now = meta.refs.iter().any(|r| r.uid() == uid);
        let sent_it = sent.refs.iter().any(|r| r.uid() == uid);
        if now && !sent_it {
            v.push(format!(
                "final object: the reference with uid '{uid}' was brought back, though its removal stands (collector's update, or owner not live)"
            ));
        }
    }
    // The owner label: exactly one reference, the uid label its uid.
    let owner = match (meta.label(&pod_key), &e.owner) {
        (Some(label), Some((name, uid)))
            if label == name || s.self_value.as_deref() == Some(label) =>
        {
            Some((name.clone(), uid.clone()))
        }
        _ => None,
    };
    if let Some((name, uid)) = owner {
        let with_uid: Vec<&Entry> = meta.refs.iter().filter(|r| r.uid() == uid).collect();
        let exact = |r: &&Entry| r.exact() && r.name() == name;
        let tuples: BTreeSet<Tuple> = with_uid.iter().map(|r| r.tuple()).collect();
        // On UPDATE, what the old object already carried is legacy.
        let old_tuples: BTreeSet<Tuple> = w
            .old
            .refs
            .iter()
            .filter(|r| r.uid() == uid)
            .map(|r| r.tuple())
            .collect();
        if tuples.len() > 1 && !(update && tuples.is_subset(&old_tuples)) {
            v.push(format!(
                "final object: {} different references carry the owner's uid '{uid}', the collector needs exactly one",
                tuples.len()
            ));
        }
        if e.owner_required && e.deny.is_empty() && !with_uid.iter().any(exact) {
            v.push(format!(
                "final object: no reference {{v1, Pod, {name}, {uid}}} for owner label '{label}'",
                label = meta.label(&pod_key).unwrap_or("")
            ));
        }
        if !update
            && hook == Hook::Mutate
            && e.owner_required
            && with_uid.iter().any(&exact)
            && !with_uid
                .iter()
                .any(|r| exact(r) && r.block == Some(Value::Bool(false)))
        {
            v.push(format!(
                "final object: /mutate leaves the owner's reference without blockOwnerDeletion: false (SPEC rule 2): {}",
                with_uid[0].show()
            ));
        }
        // The uid label.
        match meta.label(&uid_key) {
            // A legacy uid label kept as it was is the update's business.
            Some(u)
                if u != uid
                    && !(update
                        && old.label(&uid_key) == Some(u)
                        && sent.label(&uid_key) == Some(u)) =>
            {
                v.push(format!(
                    "final object: uid label '{u}' is not the owner's uid '{uid}'"
                ));
            }
            None if hook == Hook::Mutate && !update && e.owner_required => {
                v.push(format!(
                    "final object: /mutate leaves no uid label (the owner's uid is '{uid}')"
                ));
            }
            _ => {}
        }
        // Templates (issue 8 item 1, rule 12): what a controller makes from
        // one that carries the owner label (its name, or `Self`) must name
        // the owner with its uid, or it is refused.
        if hook == Hook::Mutate && e.owner_required {
            let name_key = s.name_key();
            let old_templates = controllers::templates(&w.request["oldObject"]);
            for template in controllers::templates(fin) {
                let Some(value) = template.label(&pod_key) else {
                    continue;
                };
                let self_value = s.self_value.as_deref() == Some(value);
                if !self_value && value != name {
                    continue;
                }
                // On UPDATE only what ownerguard added and the update omits
                // must come back (kubectl replace); an old template that
                // never had it may stay as it was.
                let had_it = old_templates.iter().any(|t| {
                    t.identity == template.identity && t.label(&uid_key) == Some(uid.as_str())
                });
                if update && !had_it {
                    continue;
                }
                if template.label(&uid_key) != Some(uid.as_str()) {
                    v.push(format!(
                        "final object: the template at {} names owner '{name}' but its uid label is {} (the owner's uid is '{uid}'); what its controller makes will be refused",
                        template.pointer,
                        template.label(&uid_key).map_or("absent".to_string(), |u| format!("'{u}'"))
                    ));
                }
                if self_value && !update && template.annotation(&name_key) != Some(name.as_str()) {
                    v.push(format!(
                        "final object: the template at {} says Self but no owner-pod-name annotation names '{name}'; what its controller makes, without pod identity, will be refused",
                        template.pointer
                    ));
                }
            }
        }
    }
    // Restores on UPDATE.
    if hook == Hook::Mutate && e.deny.is_empty() {
        for restore in &e.restore {
            let back = meta
                .refs
                .iter()
                .any(|r| r.tuple() == restore.tuple && !r.blocking());
            let denied_maybe = e.maybe.iter().any(|r| r.codes.contains(&403));
            if !back && !denied_maybe {
                v.push(format!(
                    "final object: /mutate did not restore the live owner's reference {:?} that the update omitted",
                    restore.tuple
                ));
            } else if !back {
                v.push(format!(
                    "final object: allowed without the live owner's reference {:?}: restore it or deny 403",
                    restore.tuple
                ));
            }
            if let Some(uid) = &restore.uid_label
                && meta.label(&uid_key) != Some(uid.as_str())
            {
                v.push(format!(
                    "final object: /mutate did not restore the uid label '{uid}'"
                ));
            }
        }
    }
    // The audit annotations of an allowed owner.
    if let Some(owner) = response["auditAnnotations"].get("owner") {
        let owner = owner.as_str().unwrap_or("");
        let mut parts = owner.splitn(3, '/');
        let (ns, name, uid) = (parts.next(), parts.next(), parts.next());
        if ns != Some(w.ns()) || name.is_none() || uid.is_none_or(str::is_empty) {
            v.push(format!(
                "audit annotation owner '{owner}' is not namespace/name/uid"
            ));
        }
        if let Some((n, u)) = &e.owner
            && (name != Some(n.as_str()) || uid != Some(u.as_str()))
        {
            v.push(format!(
                "audit annotation owner '{owner}' is not the owner {n}/{u}"
            ));
        }
        match response["auditAnnotations"]["owner-source"].as_str() {
            Some("cache" | "api" | "inventory") => {}
            other => v.push(format!("audit annotation owner-source {other:?}")),
        }
    }
}

/// The pods of a `pods.yaml` (a `v1` PodList, or a stream of Pods) in the
/// oracle's terms. `default` for a pod without namespace, as the inventory
/// reads it.
pub fn pods_of(documents: &[Value]) -> Vec<Pod> {
    let mut pods = Vec::new();
    let mut push = |item: &Value| {
        let m = &item["metadata"];
        if let (Some(name), Some(uid)) = (m["name"].as_str(), m["uid"].as_str()) {
            pods.push(Pod {
                namespace: m["namespace"].as_str().unwrap_or("default").to_string(),
                name: name.to_string(),
                uid: uid.to_string(),
                terminating: !m["deletionTimestamp"].is_null(),
                phase: item["status"]["phase"].as_str().map(str::to_string),
            });
        }
    };
    for document in documents {
        match document["items"].as_array() {
            Some(items) => items.iter().for_each(&mut push),
            None if document.is_object() => push(document),
            None => {}
        }
    }
    pods
}
