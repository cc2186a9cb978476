//! `--probe`: a real admission round trip, a dry-run create whose owner
//! does not exist, denied by the mutating webhook after a lookup.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

use super::{Check, Verdict, line};

/// The owner pod the probe declares: a name no pod has, so that ownerguard
/// answers with its "not found" denial after a real lookup.
pub const PROBE_OWNER: &str = "ownerguard-doctor-probe-no-such-pod";

/// One admission round trip: a server-side dry-run create of a ConfigMap
/// in `namespace`, labelled with an owner pod that does not exist. Only
/// mutate.`key_prefix`'s own 403 denial proves that the API server called
/// ownerguard, over TLS it trusts, and that ownerguard looked the owner up.
/// Give it a client that does not retry 503 itself (`default_retry`
/// false): ownerguard's lookup failure comes back as a 503.
pub async fn probe(client: kube::Client, namespace: &str, key_prefix: &str) -> Check {
    let subject = format!("probe in {namespace}");
    let webhook = format!("mutate.{key_prefix}");
    let config_map = ConfigMap {
        metadata: ObjectMeta {
            generate_name: Some("ownerguard-doctor-probe-".into()),
            labels: Some(BTreeMap::from([
                (format!("{key_prefix}/owner-pod"), PROBE_OWNER.to_string()),
                (
                    format!("{key_prefix}/owner-uid"),
                    "00000000-0000-0000-0000-000000000000".to_string(),
                ),
            ])),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    let params = PostParams {
        dry_run: true,
        field_manager: Some("ownerguard-doctor".into()),
    };
    let answer = Api::<ConfigMap>::namespaced(client, namespace)
        .create(&params, &config_map)
        .await;
    let denied_by_us = format!("admission webhook \"{webhook}\" denied the request");
    match answer {
        Ok(_) => line(
            Verdict::Fail,
            subject,
            format!(
                "a dry-run create of a ConfigMap labelled with a pod that does not exist went through: the API server did not call {webhook} (failurePolicy Ignore hides an outage), or its rules or selectors leave out ConfigMaps in {namespace}"
            ),
        ),
        Err(kube::Error::Api(status)) if status.message.starts_with(&denied_by_us) => {
            if status.code == 403 {
                line(
                    Verdict::Ok,
                    subject,
                    format!(
                        "{webhook} answered a dry-run create and looked the owner up: {}",
                        status.message
                    ),
                )
            } else {
                line(
                    Verdict::Fail,
                    subject,
                    format!(
                        "{webhook} answered {} instead of 403 (owner not found): {}",
                        status.code, status.message
                    ),
                )
            }
        }
        Err(kube::Error::Api(status)) if status.message.contains("failed calling webhook") => line(
            Verdict::Fail,
            subject,
            format!(
                "the API server could not call the webhook ({}): a TLS error means the caBundle does not verify the serving certificate; connection refused or no endpoints, that no replica is ready; a timeout, a NetworkPolicy or the control plane cannot reach the pods (hostNetwork); a bad certificate, that the server requires a client certificate the API server does not present",
                status.message
            ),
        ),
        Err(kube::Error::Api(status))
            if status.code == 403
                && status.reason == "Forbidden"
                && !status.message.contains("admission webhook") =>
        {
            line(
                Verdict::Fail,
                subject,
                format!(
                    "may not create ConfigMaps in {namespace}: {}",
                    status.message
                ),
            )
        }
        Err(kube::Error::Api(status)) => line(
            Verdict::Fail,
            subject,
            format!(
                "refused otherwise than by {webhook}'s denial ({}): {}",
                status.code, status.message
            ),
        ),
        Err(error) => line(
            Verdict::Fail,
            subject,
            format!("cannot reach the API server: {error}"),
        ),
    }
}

/// [`probe`] until it passes or `wait` has passed (every 2 s), reporting
/// each failed attempt on standard error at most every 10 s.
pub async fn probe_until(
    client: kube::Client,
    namespace: &str,
    key_prefix: &str,
    wait: Duration,
) -> Check {
    let deadline = crate::deadline::after_now(wait);
    let mut reported = None::<tokio::time::Instant>;
    loop {
        let check = probe(client.clone(), namespace, key_prefix).await;
        let now = tokio::time::Instant::now();
        if check.verdict == Verdict::Ok || now >= deadline {
            return check;
        }
        if reported.is_none_or(|at| now.duration_since(at) >= Duration::from_secs(10)) {
            eprintln!("waiting ({}s left): {check}", (deadline - now).as_secs());
            reported = Some(now);
        }
        tokio::time::sleep(Duration::from_secs(2).min(deadline - now)).await;
    }
}
