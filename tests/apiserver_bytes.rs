//! Reviews as the real API server wrote them, byte for byte, whose objects
//! hold bytes that are not UTF-8: a `RawExtension` (a ControllerRevision's
//! `data`, a ResourceClaim's opaque device parameters) keeps the bytes its
//! client sent, through the API server's decoding, storage and the webhook
//! client's encoder, and validation never reads them. Recorded by the
//! end-to-end suite (`TestRawBytes`, `E2E_UPDATE_RECORDED=1`) into
//! `tests/fixtures/apiserver/`; each is a labelled CREATE by its worker.
//!
//! Every webhook must decide them (a 200 review), and the oracle judges
//! each answer against the same review read with the invalid bytes
//! replaced (a part no rule reads).

mod common;

use std::sync::Arc;

use common::oracle;
use ownerguard::decide::WebhookKind;
use ownerguard::observe::fixture::CaseConfig;
use serde_json::Value;

const POD_NAME: &str = "authentication.kubernetes.io/pod-name";
const POD_UID: &str = "authentication.kubernetes.io/pod-uid";

#[tokio::test]
async fn reviews_with_bytes_the_api_server_passes_through_are_decided() {
    let dir = common::fixtures().join("apiserver");
    let mut bodies: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    bodies.sort();
    assert!(bodies.len() >= 2, "{} recorded reviews", bodies.len());
    for path in bodies {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let body = std::fs::read(&path).unwrap();
        assert!(
            std::str::from_utf8(&body).is_err(),
            "{name}: holds no invalid UTF-8, so proves nothing"
        );
        // The same review, its invalid bytes replaced: what the oracle reads.
        let review: Value = serde_json::from_str(&String::from_utf8_lossy(&body)).unwrap();
        let request = &review["request"];
        let namespace = request["namespace"].as_str().unwrap();
        let extra = &request["userInfo"]["extra"];
        let worker = extra[POD_NAME][0].as_str().unwrap();
        let uid = extra[POD_UID][0].as_str().unwrap();
        let pods = [oracle::Pod::new(namespace, worker, uid, false).in_phase("Running")];
        let config = CaseConfig::default();
        let webhook = Arc::new(common::webhook_over(&config, &pods));
        for kind in [
            WebhookKind::Mutate,
            WebhookKind::Validate,
            WebhookKind::ValidateAll,
        ] {
            let (status, answer) = common::send(webhook.clone(), kind, body.clone()).await;
            assert_eq!(status, 200, "{name} on /{}: {answer}", kind.as_str());
            common::assert_apiserver_accepts(&review, &answer, kind);
            oracle::judge(
                &review,
                &pods,
                common::oracle_hook(kind),
                &common::oracle_settings(&config),
                status.as_u16(),
                &answer,
            )
            .unwrap_or_else(|wrong| {
                panic!("{name} on /{}: {wrong}\nanswer: {answer}", kind.as_str())
            });
            if kind == WebhookKind::Mutate {
                // The worker's reference, as the real API server stored it.
                assert!(
                    answer["response"]["allowed"] == true
                        && answer["response"]["patch"].is_string(),
                    "{name}: {answer}"
                );
            }
        }
    }
}
