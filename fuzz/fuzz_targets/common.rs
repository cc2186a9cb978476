//! What both fuzz targets share: the world (the same pods as
//! tests/properties.rs), the webhooks for every combination of settings,
//! and the judgement by the oracle, with the API server's next steps
//! (reinvocation, then /validate on what /mutate made).

#![allow(dead_code)]

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use base64::Engine;
use ownerguard::decide::{Endpoint, Mode, WebhookKind};
use ownerguard::observe::fixture::CaseConfig;

#[path = "../../tests/common/case_lookup.rs"]
mod case_lookup;
use case_lookup::CaseLookup;
use ownerguard::observe::Metrics;
use ownerguard::owner::{Inventory, InventoryPod};
use ownerguard::owner::{Finished, ObservedPod};
use ownerguard::decide::RequesterCheck;
use ownerguard::webhook::Webhook;
use serde_json::{Value, json};

#[path = "../../tests/oracle/mod.rs"]
pub mod oracle;

use oracle::{Hook, Pod};

pub const NS: &str = "agents";
pub const U1: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000001";
pub const U2: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000002";
pub const U_DEAD: &str = "6f1f3d4e-0c1a-4b7e-9d2a-00000000000d";
pub const U_OTHER_NS: &str = "6f1f3d4e-0c1a-4b7e-9d2a-0000000000a1";
pub const U_DOT: &str = "6f1f3d4e-0c1a-4b7e-9d2a-0000000000c1";
pub const U_FLAKY: &str = "6f1f3d4e-0c1a-4b7e-9d2a-0000000000f1";
pub const U_STALE: &str = "6f1f3d4e-0c1a-4b7e-9d2a-0000000000ee";
pub const U_GONE: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000099";
/// Pods that have finished (rule 11): Succeeded, Failed.
pub const U_DONE: &str = "6f1f3d4e-0c1a-4b7e-9d2a-0000000000d5";
pub const U_FAILED: &str = "6f1f3d4e-0c1a-4b7e-9d2a-0000000000fa";

pub fn world() -> Vec<Pod> {
    vec![
        Pod::new(NS, "w-1", U1, false),
        Pod::new(NS, "w-2", U2, false),
        Pod::new(NS, "w-dead", U_DEAD, true),
        Pod::new(NS, "w-done", U_DONE, false).in_phase("Succeeded"),
        Pod::new(NS, "w-failed", U_FAILED, false).in_phase("Failed"),
        Pod::new("other", "w-1", U_OTHER_NS, false),
        Pod::new(NS, "w.dotted", U_DOT, false),
        Pod::new(NS, "w-flaky", U_FLAKY, false),
    ]
}

pub fn uid_of(name: &str) -> &'static str {
    match name {
        "w-1" => U1,
        "w-2" => U2,
        "w-dead" => U_DEAD,
        "w-done" => U_DONE,
        "w-failed" => U_FAILED,
        "w.dotted" => U_DOT,
        "w-flaky" => U_FLAKY,
        _ => U_GONE,
    }
}

/// Every combination of settings: requester check x fail-open x lookup
/// failures x the namespace's mode.
pub const SETTINGS: usize = 3 * 2 * 2 * 3;

pub fn settings(index: usize) -> oracle::Settings {
    let index = index % SETTINGS;
    oracle::Settings {
        requester_check: [
            oracle::RequesterCheck::Enforce,
            oracle::RequesterCheck::Warn,
            oracle::RequesterCheck::Off,
        ][index % 3],
        fail_open: (index / 3) % 2 == 1,
        lookup_failures: if (index / 6) % 2 == 1 {
            vec!["w-flaky".into()]
        } else {
            vec![]
        },
        mode: [
            oracle::Mode::Enforce,
            oracle::Mode::Warn,
            oracle::Mode::Audit,
        ][(index / 12) % 3],
        ..oracle::Settings::default()
    }
}

fn webhook(settings: &oracle::Settings) -> Webhook {
    let config = CaseConfig {
        requester_check: match settings.requester_check {
            oracle::RequesterCheck::Enforce => RequesterCheck::Enforce,
            oracle::RequesterCheck::Warn => RequesterCheck::Warn,
            oracle::RequesterCheck::Off => RequesterCheck::Off,
        },
        fail_open: settings.fail_open,
        lookup_failures: settings.lookup_failures.clone(),
        ..CaseConfig::default()
    };
    let inventory = Inventory::from_pods(world().into_iter().map(|p| InventoryPod {
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
        failures: config.lookup_failures.iter().cloned().collect::<HashSet<_>>(),
    };
    Webhook::new(config.policy(), Arc::new(lookup), Arc::new(Metrics::default()))
}

fn webhooks() -> &'static Vec<Webhook> {
    static HOOKS: OnceLock<Vec<Webhook>> = OnceLock::new();
    HOOKS.get_or_init(|| (0..SETTINGS).map(|i| webhook(&settings(i))).collect())
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    })
}

/// The webhook's answer to `body`, or `None` when it refuses the body
/// (HTTP 400).
pub fn decide(index: usize, hook: Hook, body: &[u8]) -> Option<Value> {
    let kind = match hook {
        Hook::Mutate => WebhookKind::Mutate,
        Hook::Validate => WebhookKind::Validate,
        Hook::ValidateAll => WebhookKind::ValidateAll,
    };
    let webhook = &webhooks()[index % SETTINGS];
    // The namespace's mode is the path's (SPEC §3 rule 17); /validate-all
    // has none.
    let mode = match (hook, settings(index).mode) {
        (Hook::ValidateAll, _) | (_, oracle::Mode::Enforce) => Mode::Enforce,
        (_, oracle::Mode::Warn) => Mode::Warn,
        (_, oracle::Mode::Audit) => Mode::Audit,
    };
    let endpoint = Endpoint::of(kind).in_mode(mode);
    let answer = runtime()
        .block_on(webhook.answer_at(endpoint, body, None))
        .ok()?;
    Some(serde_json::from_slice(&answer.body).expect("the answer is JSON"))
}

fn wrong(review: &Value, index: usize, what: String) -> ! {
    panic!(
        "WRONG ANSWER\n  settings: {:?}\n  review: {}\n  {what}",
        settings(index),
        serde_json::to_string(review).unwrap()
    );
}

/// Decide `review` on every endpoint and judge every answer; panic (a
/// finding for libFuzzer) on the first wrong one. `strict`: the review is
/// one the API server could send, so refusing its body is wrong too.
pub fn check(review: &Value, index: usize, strict: bool) {
    let body = serde_json::to_vec(review).unwrap();
    let settings = settings(index);
    let pods = world();
    let mut mutated = None;
    for hook in [Hook::Mutate, Hook::Validate, Hook::ValidateAll] {
        let answer = decide(index, hook, &body);
        if answer.is_none() && !strict {
            return;
        }
        let status = if answer.is_some() { 200 } else { 400 };
        let answer = answer.unwrap_or(Value::Null);
        if let Err(why) = oracle::judge(review, &pods, hook, &settings, status, &answer) {
            wrong(review, index, format!("/{}: {why}\n  answer: {answer}", hook.as_str()));
        }
        if hook == Hook::Mutate {
            mutated = Some(answer);
        }
    }
    padded_alike(review, index, &body);
    // What the API server does next with an allowed mutation.
    let Some(first) = mutated.filter(|a| a["response"]["allowed"] == true) else {
        return;
    };
    let mut next = review.clone();
    if let Some(object) = patched(review, &first) {
        next["request"]["object"] = object;
        let again = decide(index, Hook::Mutate, &serde_json::to_vec(&next).unwrap());
        let again = again.unwrap_or(Value::Null);
        if again["response"]["allowed"] != true || again["response"].get("patch").is_some() {
            wrong(review, index, format!("not idempotent: /mutate on its own output answered {again}\n  first: {first}"));
        }
    }
    let validated = decide(index, Hook::Validate, &serde_json::to_vec(&next).unwrap()).unwrap_or(Value::Null);
    if let Err(why) = oracle::judge(&next, &pods, Hook::Validate, &settings, 200, &validated) {
        wrong(review, index, format!("/validate after /mutate: {why}\n  answer: {validated}"));
    }
    if validated["response"]["allowed"] != true {
        wrong(review, index, format!("/validate refuses what /mutate allowed and made: {validated}\n  /mutate: {first}"));
    }
}

fn patched(review: &Value, answer: &Value) -> Option<Value> {
    let patch = answer["response"]["patch"].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(patch).ok()?;
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).ok()?;
    let mut object = review["request"]["object"].clone();
    json_patch::patch(&mut object, &patch).ok()?;
    Some(object)
}

/// A review around `request`.
pub fn envelope(request: Value, v1beta1: bool) -> Value {
    let api = if v1beta1 { "admission.k8s.io/v1beta1" } else { "admission.k8s.io/v1" };
    json!({"apiVersion": api, "kind": "AdmissionReview", "request": request})
}

/// The same review padded as the API server can send it (SPEC §4): a value
/// nested to its decoder's 10,000 levels beside the object's spec, and a
/// string of `<` as its encoder writes them (six bytes each), must get
/// the same answer on every endpoint as the review without them.
fn padded_alike(review: &Value, index: usize, body: &[u8]) {
    let mut marked = review.clone();
    let depth = 1 + (index * 97 + body.len()) % 10_000;
    let escaped = (index * 131 + body.len() * 7) % (64 * 1024);
    marked["request"]["options"]["ownerguardPadding"] = json!({"deep": "__deep__", "text": "__text__"});
    let text = serde_json::to_string(&marked).unwrap();
    let padded = text
        .replacen("\"__deep__\"", &format!("{}{}", "[".repeat(depth), "]".repeat(depth)), 1)
        .replacen("\"__text__\"", &format!("\"{}\"", "\\u003c".repeat(escaped)), 1);
    let plain = text.replacen("\"__deep__\"", "[]", 1).replacen("\"__text__\"", "\"\"", 1);
    for hook in [Hook::Mutate, Hook::Validate, Hook::ValidateAll] {
        let (a, b) = (decide(index, hook, padded.as_bytes()), decide(index, hook, plain.as_bytes()));
        if a != b {
            wrong(review, index, format!("/{}: {depth} levels and {escaped} escaped bytes change the answer: {a:?} against {b:?}", hook.as_str()));
        }
    }
}
