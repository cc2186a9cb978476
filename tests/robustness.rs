//! Bad input never panics and never yields a patch that does not apply.
//!
//! Every request of the fixtures is mutated, deterministically (a fixed
//! seed): fields replaced by values of another type, removed, or set to
//! null; bytes flipped; bodies truncated. Each mutant must be answered (a
//! review, whose patch applies to the mutated object) or refused as bad
//! input, never panic.

mod common;

use std::sync::Arc;

use ownerguard::decide::{Policy, WebhookKind};
use ownerguard::observe::Metrics;
use ownerguard::observe::fixture;
use ownerguard::owner::ObservedPod;
use ownerguard::owner::{Inventory, InventoryPod};
use ownerguard::webhook::Webhook;
use serde_json::{Value, json};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Every JSON path in `value` (object keys and array indices).
fn paths(value: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                prefix.push(key.clone());
                out.push(prefix.clone());
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                prefix.push(i.to_string());
                out.push(prefix.clone());
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

fn at<'a>(value: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    path.iter().try_fold(value, |v, key| match v {
        Value::Object(map) => map.get_mut(key),
        Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
        _ => None,
    })
}

fn replacement(rng: &mut Rng) -> Value {
    match rng.below(9) {
        0 => Value::Null,
        1 => json!(7),
        2 => json!(true),
        3 => json!([]),
        4 => json!({}),
        5 => json!(""),
        6 => json!("W-1/not a name"),
        7 => json!(["x"]),
        _ => {
            json!({"apiVersion": "v1", "kind": "Pod", "name": "w-1", "uid": "u", "blockOwnerDeletion": true})
        }
    }
}

fn mutate(review: &Value, rng: &mut Rng) -> Vec<u8> {
    let mut mutant = review.clone();
    let mut all = Vec::new();
    paths(&mutant, &mut Vec::new(), &mut all);
    match rng.below(4) {
        0 | 1 if !all.is_empty() => {
            for _ in 0..=rng.below(3) {
                let path = all[rng.below(all.len())].clone();
                if let Some(slot) = at(&mut mutant, &path) {
                    *slot = replacement(rng);
                }
            }
            serde_json::to_vec(&mutant).unwrap()
        }
        2 if !all.is_empty() => {
            let path = all[rng.below(all.len())].clone();
            let (last, parent) = path.split_last().unwrap();
            if let Some(Value::Object(map)) = at(&mut mutant, parent) {
                map.remove(last);
            }
            serde_json::to_vec(&mutant).unwrap()
        }
        _ => {
            let mut bytes = serde_json::to_vec(review).unwrap();
            if rng.below(2) == 0 {
                bytes.truncate(rng.below(bytes.len()));
            } else {
                for _ in 0..=rng.below(4) {
                    let i = rng.below(bytes.len());
                    bytes[i] ^= 1 << rng.below(8);
                }
            }
            bytes
        }
    }
}

#[tokio::test]
async fn mutated_reviews_are_answered_or_refused_never_a_panic() {
    let mut inputs: Vec<Value> = Vec::new();
    for entry in std::fs::read_dir(common::fixtures()).unwrap() {
        let request = entry.unwrap().path().join(fixture::REQUEST);
        if request.exists() {
            inputs.push(serde_json::from_str(&std::fs::read_to_string(request).unwrap()).unwrap());
        }
    }
    assert!(inputs.len() >= 30);
    let pods = ["w-1", "w-2"].map(|name| InventoryPod {
        namespace: "agents".into(),
        name: name.into(),
        pod: ObservedPod::running("6f1f3d4e-0c1a-4b7e-9d2a-000000000001"),
    });
    let webhook = Arc::new(Webhook::new(
        Policy::default(),
        Arc::new(Inventory::from_pods(pods)),
        Arc::new(Metrics::default()),
    ));
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut answered, mut refused) = (0, 0);
    for input in &inputs {
        for _ in 0..150 {
            let body = mutate(input, &mut rng);
            for kind in [
                WebhookKind::Mutate,
                WebhookKind::Validate,
                WebhookKind::ValidateAll,
            ] {
                match webhook.answer(kind, &body, None).await {
                    Err(_) => refused += 1,
                    Ok(answer) => {
                        answered += 1;
                        // Invalid UTF-8 where no rule reads (a flipped
                        // byte in the pod spec) is passed over, as the API
                        // server passes a RawExtension's bytes: read the
                        // rest with those bytes replaced.
                        let sent: Value = serde_json::from_str(&String::from_utf8_lossy(&body))
                            .expect("an answered body is JSON");
                        let response: Value = serde_json::from_slice(&answer.body).unwrap();
                        let uid = sent["request"]["uid"].as_str().unwrap_or("");
                        assert_eq!(response["response"]["uid"], uid);
                        if let Err(e) = fixture::patched_object(&sent, &response) {
                            panic!(
                                "a patch that does not apply: {e}\nrequest: {sent}\nresponse: {response}"
                            );
                        }
                    }
                }
            }
        }
    }
    // Both paths were exercised.
    assert!(
        answered > 1000 && refused > 1000,
        "answered {answered}, refused {refused}"
    );
}
