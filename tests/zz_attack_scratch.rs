mod common;
use common::oracle;
use ownerguard::decide::WebhookKind;
use ownerguard::observe::fixture::CaseConfig;
use serde_json::Value;
use std::sync::Arc;

#[tokio::test]
async fn attack_cases() {
    let dir = std::path::Path::new("/tmp/attack/cases");
    let pods_v: Value =
        serde_json::from_slice(&std::fs::read(dir.join("pods.json")).unwrap()).unwrap();
    let pods: Vec<oracle::Pod> = pods_v
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let mut pod = oracle::Pod::new(
                "agents",
                p["name"].as_str().unwrap(),
                p["uid"].as_str().unwrap(),
                p["terminating"].as_bool().unwrap_or(false),
            );
            if let Some(ph) = p["phase"].as_str() {
                pod = pod.in_phase(ph);
            }
            pod
        })
        .collect();
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name().unwrap() != "pods.json" && p.extension().is_some_and(|e| e == "json")
        })
        .collect();
    paths.sort();
    let config = CaseConfig::default();
    let webhook = Arc::new(common::webhook_over(&config, &pods));
    for path in paths {
        let body = std::fs::read(&path).unwrap();
        let review: Value = serde_json::from_str(&String::from_utf8_lossy(&body)).unwrap();
        for kind in [WebhookKind::Mutate, WebhookKind::Validate] {
            let (status, answer) = common::send(webhook.clone(), kind, body.clone()).await;
            let r = &answer["response"];
            let verdict = oracle::judge(
                &review,
                &pods,
                common::oracle_hook(kind),
                &common::oracle_settings(&config),
                status.as_u16(),
                &answer,
            );
            println!(
                "CASE {} /{} status={} allowed={} code={} msg={} warn={} patch={} ORACLE={:?}",
                path.file_name().unwrap().to_string_lossy(),
                kind.as_str(),
                status,
                r["allowed"],
                r["status"]["code"],
                r["status"]["message"]
                    .as_str()
                    .unwrap_or("")
                    .chars()
                    .take(160)
                    .collect::<String>(),
                r["warnings"],
                r["patch"].is_string(),
                verdict.err()
            );
        }
    }
}
