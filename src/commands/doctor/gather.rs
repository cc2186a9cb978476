//! Reading the installation through the API: the two webhook
//! configurations, other installations' configurations, the Deployment,
//! its Service, the PodDisruptionBudget and the serving Secret.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, ListParams};

use super::DoctorOptions;
use super::certificate::{served_chain, serving_certificate_source};
use super::webhooks::webhooks;
use super::{Installation, NamespaceView, OtherConfiguration, ServingCertificate};

/// Every webhook configuration but `ours`, of both kinds. A refusal to list
/// (RBAC) is reported, not an error: the other checks still run.
pub(super) async fn other_configurations(
    client: &kube::Client,
    ours: &str,
) -> Result<Vec<OtherConfiguration>, String> {
    pub(super) fn keys(selector: Option<&LabelSelector>) -> Vec<String> {
        let Some(selector) = selector else {
            return Vec::new();
        };
        let mut keys: Vec<String> = selector
            .match_labels
            .iter()
            .flatten()
            .map(|(k, _)| k.clone())
            .collect();
        keys.extend(
            selector
                .match_expressions
                .iter()
                .flatten()
                .map(|e| e.key.clone()),
        );
        keys
    }
    let refused = |kind: &str, error: kube::Error| match error {
        kube::Error::Api(status) => {
            format!("cannot list {kind}s ({} {})", status.code, status.reason)
        }
        other => format!("cannot list {kind}s: {other}"),
    };
    let params = ListParams::default();
    let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .list(&params)
        .await
        .map_err(|e| refused("MutatingWebhookConfiguration", e))?;
    let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .list(&params)
        .await
        .map_err(|e| refused("ValidatingWebhookConfiguration", e))?;
    let mut others = Vec::new();
    let (cluster_wide, observe) = (cluster_wide_name(ours), observe_name(ours));
    let mut add = |kind: &'static str, name: Option<String>, webhooks| {
        let name = name.unwrap_or_default();
        // Ours by name and kind: the chart writes `-cluster-wide` and
        // `-observe` as validating configurations only.
        let validating = kind == "ValidatingWebhookConfiguration";
        if name != ours && !(validating && (name == cluster_wide || name == observe)) {
            others.push(OtherConfiguration {
                kind,
                name,
                webhooks,
            });
        }
    };
    // Two types with the same fields: each webhook as (name, its
    // objectSelector's keys).
    let mutating = mutating.items.into_iter().map(|c| {
        let webhooks = c.webhooks.iter().flatten();
        let names = webhooks.map(|w| (w.name.clone(), keys(w.object_selector.as_ref())));
        (
            "MutatingWebhookConfiguration",
            c.metadata.name,
            names.collect(),
        )
    });
    let validating = validating.items.into_iter().map(|c| {
        let webhooks = c.webhooks.iter().flatten();
        let names = webhooks.map(|w| (w.name.clone(), keys(w.object_selector.as_ref())));
        (
            "ValidatingWebhookConfiguration",
            c.metadata.name,
            names.collect(),
        )
    });
    for (kind, name, webhooks) in mutating.chain(validating) {
        add(kind, name, webhooks);
    }
    Ok(others)
}

/// The name of the configuration the chart gives the cluster-wide
/// switch's `validate-all` webhook: one of its own, so that turning the
/// switch off deletes it whole.
pub fn cluster_wide_name(name: &str) -> String {
    format!("{name}-cluster-wide")
}

/// The name of the configuration of the observe-only webhook of the
/// creates without the owner label (`observe.unlabelled`).
pub fn observe_name(name: &str) -> String {
    format!("{name}-observe")
}

/// Read the installation. Missing objects are `None`, not errors.
///
/// # Errors
///
/// When the API cannot be read (other than 404).
/// How long the handshake with the Service may take.
const SERVED_TIMEOUT: Duration = Duration::from_secs(3);

/// A DER certificate as a PEM block.
fn pem_block(der: &[u8]) -> String {
    use base64::Engine;
    let text = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in text.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// Every namespace with its labels; a refusal (no `list` on namespaces)
/// is said, not fatal: only the modes' line needs them.
async fn namespaces(client: &kube::Client) -> Result<Vec<NamespaceView>, String> {
    let list = Api::<Namespace>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await
        .map_err(|error| match error {
            kube::Error::Api(status) if status.code == 403 => {
                "namespaces may not be listed (403)".to_string()
            }
            error => format!("namespaces could not be listed: {error}"),
        })?;
    Ok(list
        .items
        .into_iter()
        .map(|namespace| NamespaceView {
            name: namespace.metadata.name.unwrap_or_default(),
            labels: namespace.metadata.labels.unwrap_or_default(),
        })
        .collect())
}

pub async fn gather(
    client: kube::Client,
    options: &DoctorOptions,
) -> Result<Installation, kube::Error> {
    let namespace = options.namespace.as_str();
    let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get_opt(&options.name)
        .await?;
    let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get_opt(&options.name)
        .await?;
    let cluster_wide = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get_opt(&cluster_wide_name(&options.name))
        .await?;
    let observe = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get_opt(&observe_name(&options.name))
        .await?;
    let deployment = Api::<Deployment>::namespaced(client.clone(), namespace)
        .get_opt(&options.name)
        .await?;
    let disruption_budgets = Api::<PodDisruptionBudget>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await?
        .items;

    let others = other_configurations(&client, &options.name).await;
    let namespaces = namespaces(&client).await;
    let mut wanted = BTreeSet::new();
    let mut installation = Installation {
        mutating,
        validating,
        cluster_wide,
        observe,
        deployment,
        disruption_budgets,
        others,
        namespaces,
        ..Installation::default()
    };
    for webhook in webhooks(&installation) {
        if let Some(service) = &webhook.client_config.service {
            wanted.insert((service.namespace.clone(), service.name.clone()));
        }
    }
    for (service_namespace, name) in wanted {
        if let Some(service) = Api::<Service>::namespaced(client.clone(), &service_namespace)
            .get_opt(&name)
            .await?
        {
            installation.services.push(service);
        }
    }

    let mut serving = match &options.tls_secret {
        Some(secret) => ServingCertificate {
            secret: secret.clone(),
            key: "tls.crt".into(),
            ..ServingCertificate::default()
        },
        None => installation
            .deployment
            .as_ref()
            .map(serving_certificate_source)
            .unwrap_or_else(|| ServingCertificate {
                secret: format!("{}-tls", options.name),
                key: "tls.crt".into(),
                ..ServingCertificate::default()
            }),
    };
    // What the API server is served: the Service's own certificate, by a
    // handshake; the Secret (which holds the private key too) only when
    // the Service does not answer from here.
    let service = webhooks(&installation)
        .iter()
        .find_map(|w| w.client_config.service.clone());
    let target = match (&options.serving_address, &service) {
        (Some(address), service) => Some((
            address.clone(),
            service.as_ref().map_or_else(
                || {
                    address
                        .rsplit_once(':')
                        .map_or(address.as_str(), |(h, _)| h)
                        .to_string()
                },
                |s| format!("{}.{}.svc", s.name, s.namespace),
            ),
        )),
        (None, Some(s)) => Some((
            format!("{}.{}.svc:{}", s.name, s.namespace, s.port.unwrap_or(443)),
            format!("{}.{}.svc", s.name, s.namespace),
        )),
        (None, None) => None,
    };
    let mut unserved = String::from("no Service to read it from");
    if let Some((address, host)) = target {
        match served_chain(&address, &host, SERVED_TIMEOUT).await {
            Ok(chain) => {
                let pem: String = chain.iter().map(|der| pem_block(der)).collect();
                serving.pem = Some(pem.into_bytes());
                serving.served = Some(address);
            }
            Err(error) => unserved = format!("{address} did not answer a handshake ({error})"),
        }
    }
    if serving.pem.is_none() && !serving.secret.is_empty() {
        match Api::<Secret>::namespaced(client, namespace)
            .get_opt(&serving.secret)
            .await
        {
            Ok(secret) => {
                serving.pem = secret
                    .and_then(|s| s.data)
                    .and_then(|mut data| data.remove(&serving.key))
                    .map(|pem| pem.0);
            }
            Err(kube::Error::Api(status)) if status.code == 403 => {
                serving.unread = Some(format!(
                    "{unserved}, and Secret {namespace}/{} may not be read (403)",
                    serving.secret
                ));
            }
            Err(error) => return Err(error),
        }
    }
    installation.serving_certificate = serving;
    Ok(installation)
}
