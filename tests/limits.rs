//! Every review the API server can send gets a decision (SPEC §4, issue 25
//! item 2): whatever its nesting or its size, the answer is HTTP 200 and
//! the same one the review gets without the depth or the bytes.
//!
//! The limits are the API server's own: its JSON decoder accepts 10,000
//! levels of nesting in an object (the review wraps it in two more), its
//! request bodies are up to 3 MiB, etcd stores up to 1.5 MiB, and its
//! encoder writes `<`, `>` and `&` as six bytes each; an UPDATE carries the
//! object twice.

mod common;

use std::sync::Arc;

use ownerguard::observe::fixture::{self, CaseConfig};
use serde_json::{Value, json};

/// The nesting the API server's decoder accepts in an object.
const API_SERVER_DEPTH: usize = 10_000;

/// A placeholder the deep or large text is put in for, textually: a value
/// nested 10,000 deep cannot be built as a `serde_json::Value` and
/// written back without recursing as deep.
const PLACEHOLDER: &str = "\"__ownerguard_limits_placeholder__\"";

fn cases() -> Vec<(String, CaseConfig, Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(common::fixtures()).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(text) = std::fs::read_to_string(dir.join(fixture::REQUEST)) else {
            continue;
        };
        let config: CaseConfig = match std::fs::read_to_string(dir.join(fixture::CASE)) {
            Ok(text) => serde_saphyr::from_str(&text).unwrap(),
            Err(_) => CaseConfig::default(),
        };
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        out.push((name, config, serde_json::from_str(&text).unwrap()));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Where a deep value goes: fields ownerguard skips, and fields it reads
/// for their shape (a template's labels), in the object, the old object
/// and the request.
fn places(review: &Value) -> Vec<Vec<&'static str>> {
    let request = &review["request"];
    let mut places = vec![vec!["request", "options", "ownerguardDeep"]];
    for object in ["object", "oldObject"] {
        if request[object].is_object() {
            places.push(vec!["request", object, "spec", "ownerguardDeep"]);
            places.push(vec!["request", object, "metadata", "managedFields"]);
            places.push(vec![
                "request", object, "spec", "template", "metadata", "labels",
            ]);
            places.push(vec![
                "request",
                object,
                "spec",
                "template",
                "metadata",
                "annotations",
                "a",
            ]);
        }
    }
    places
}

fn with_placeholder(review: &Value, place: &[&str]) -> String {
    let mut review = review.clone();
    let mut at = &mut review;
    for key in &place[..place.len() - 1] {
        if !at[*key].is_object() {
            at[*key] = json!({});
        }
        at = &mut at[*key];
    }
    at[place[place.len() - 1]] = serde_json::from_str(PLACEHOLDER).unwrap();
    serde_json::to_string(&review).unwrap()
}

async fn answer(config: &CaseConfig, dir: &str, body: String) -> (u16, Value) {
    let webhook = Arc::new(common::case_webhook(&common::fixtures().join(dir), config));
    let (status, answer) = common::send_to(webhook, &config.path(), body.into_bytes()).await;
    (status.as_u16(), answer)
}

#[tokio::test]
async fn nesting_the_api_server_accepts_gets_the_decision_of_the_shallow_review() {
    let deep_list = format!(
        "{}{}",
        "[".repeat(API_SERVER_DEPTH),
        "]".repeat(API_SERVER_DEPTH)
    );
    let deep_map = format!(
        "{}{{}}{}",
        "{\"a\":".repeat(API_SERVER_DEPTH - 1),
        "}".repeat(API_SERVER_DEPTH - 1)
    );
    let mut decided = 0;
    for (name, config, review) in cases() {
        for place in places(&review) {
            let text = with_placeholder(&review, &place);
            for (deep, shallow) in [(&deep_list, "[]"), (&deep_map, "{\"a\":{}}")] {
                let (deep_status, deep_answer) =
                    answer(&config, &name, text.replacen(PLACEHOLDER, deep, 1)).await;
                let (status, shallow_answer) =
                    answer(&config, &name, text.replacen(PLACEHOLDER, shallow, 1)).await;
                assert_eq!(
                    (deep_status, &deep_answer),
                    (status, &shallow_answer),
                    "{name}: {} nested {API_SERVER_DEPTH} deep",
                    place.join(".")
                );
                assert_eq!(
                    deep_status,
                    200,
                    "{name}: {}: {deep_answer}",
                    place.join(".")
                );
                decided += 1;
            }
        }
    }
    assert!(decided > 500, "only {decided} deep reviews");
}

/// `n` bytes of `<`, written as the API server's encoder writes them.
fn escaped_text(n: usize) -> String {
    format!("\"{}\"", "\\u003c".repeat(n))
}

#[tokio::test]
async fn the_largest_update_the_api_server_can_send_gets_the_decision_of_a_small_one() {
    // An UPDATE of a ConfigMap whose data is 3 MiB of '<' (the API
    // server's body limit), its old object 1.5 MiB of it (etcd's): each
    // '<' six bytes on the wire, 27 MiB in all.
    let mut decided = 0;
    for (name, config, review) in cases() {
        let request = &review["request"];
        if request["operation"] != "UPDATE"
            || !request["object"].is_object()
            || !request["oldObject"].is_object()
        {
            continue;
        }
        let mut review = review.clone();
        review["request"]["object"]["data"] = json!({"big": "__big__"});
        review["request"]["oldObject"]["data"] = json!({"big": "__old__"});
        let text = serde_json::to_string(&review).unwrap();
        let large = text
            .replacen("\"__big__\"", &escaped_text(3 * 1024 * 1024), 1)
            .replacen("\"__old__\"", &escaped_text(3 * 1024 * 1024 / 2), 1);
        assert!(large.len() > 27 * 1024 * 1024);
        let small = text
            .replacen("\"__big__\"", "\"\"", 1)
            .replacen("\"__old__\"", "\"\"", 1);
        let (status, large_answer) = answer(&config, &name, large).await;
        let (_, small_answer) = answer(&config, &name, small).await;
        assert_eq!(status, 200, "{name}: {large_answer}");
        assert_eq!(large_answer, small_answer, "{name}");
        decided += 1;
        if decided == 8 {
            break;
        }
    }
    assert_eq!(decided, 8);
}

#[tokio::test]
async fn large_reviews_over_the_budget_wait_and_are_all_decided() {
    // Five of the largest reviews at once through one router: more than
    // its budget of bytes in flight holds, so some wait for room; every
    // one is answered 200.
    let (name, config, review) = cases()
        .into_iter()
        .find(|(_, _, r)| {
            r["request"]["operation"] == "UPDATE" && r["request"]["oldObject"].is_object()
        })
        .unwrap();
    let mut review = review.clone();
    review["request"]["object"]["data"] = json!({"big": "__big__"});
    let body = serde_json::to_string(&review).unwrap().replacen(
        "\"__big__\"",
        &escaped_text(4 * 1024 * 1024),
        1,
    );
    let webhook = Arc::new(common::case_webhook(
        &common::fixtures().join(&name),
        &config,
    ));
    let router = ownerguard::serve::router(webhook);
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let (router, body) = (router.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            use tower::ServiceExt;
            let request =
                axum::http::Request::post(format!("/{}?timeout=10s", config.webhook.as_str()))
                    .header("content-type", "application/json")
                    .header("content-length", body.len())
                    .body(axum::body::Body::from(body))
                    .unwrap();
            router.oneshot(request).await.unwrap().status()
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), 200);
    }
}
