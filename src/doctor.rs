//! `ownerguard doctor`: checks a live installation for what breaks
//! webhooks in practice, one line per check; exit 1 when one fails.
//!
//! [`gather`] reads the installation through the API; [`check`] judges it,
//! without I/O, so each verdict is tested on its own.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, ListParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use crate::duration::parse_go_duration;
use crate::tls::certificate_not_after;
use crate::webhook::DEFAULT_LOOKUP_TIMEOUT;

/// What to check.
#[derive(Debug, Clone)]
pub struct DoctorOptions {
    /// Namespace of the release.
    pub namespace: String,
    /// Name of the webhook configurations and the Deployment.
    pub name: String,
    /// The serving certificate's Secret; default: the Deployment's `tls`
    /// volume, else `<name>-tls`.
    pub tls_secret: Option<String>,
    /// Fewer days left than this on the serving certificate fails.
    pub min_certificate_days: i64,
}

/// The installation as read from the API.
#[derive(Debug, Default)]
pub struct Installation {
    pub mutating: Option<MutatingWebhookConfiguration>,
    pub validating: Option<ValidatingWebhookConfiguration>,
    pub deployment: Option<Deployment>,
    pub disruption_budgets: Vec<PodDisruptionBudget>,
    /// The Secret's name, and its `tls.crt` (PEM) if it could be read.
    pub serving_certificate: (String, Option<Vec<u8>>),
}

/// Read the installation. Missing objects are `None`, not errors.
///
/// # Errors
///
/// When the API cannot be read (other than 404).
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
    let deployment = Api::<Deployment>::namespaced(client.clone(), namespace)
        .get_opt(&options.name)
        .await?;
    let disruption_budgets = Api::<PodDisruptionBudget>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await?
        .items;
    let secret_name = options
        .tls_secret
        .clone()
        .or_else(|| deployment.as_ref().and_then(tls_volume_secret))
        .unwrap_or_else(|| format!("{}-tls", options.name));
    let secret = Api::<Secret>::namespaced(client, namespace)
        .get_opt(&secret_name)
        .await?;
    let certificate = secret
        .and_then(|s| s.data)
        .and_then(|mut data| data.remove("tls.crt"))
        .map(|pem| pem.0);
    Ok(Installation {
        mutating,
        validating,
        deployment,
        disruption_budgets,
        serving_certificate: (secret_name, certificate),
    })
}

fn tls_volume_secret(deployment: &Deployment) -> Option<String> {
    let volumes = deployment
        .spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .volumes
        .as_ref()?;
    volumes
        .iter()
        .find(|v| v.name == "tls")
        .and_then(|v| v.secret.as_ref()?.secret_name.clone())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    Warn,
    Fail,
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub verdict: Verdict,
    pub subject: String,
    pub detail: String,
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = match self.verdict {
            Verdict::Ok => "ok  ",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
        };
        write!(f, "{verdict} {}: {}", self.subject, self.detail)
    }
}

fn line(verdict: Verdict, subject: impl Into<String>, detail: impl Into<String>) -> Check {
    Check {
        verdict,
        subject: subject.into(),
        detail: detail.into(),
    }
}

/// One webhook of either configuration, as far as the checks read it.
struct WebhookView<'a> {
    name: String,
    client_config: &'a WebhookClientConfig,
    namespace_selector: Option<&'a LabelSelector>,
    failure_policy: &'a str,
    timeout_seconds: i32,
}

fn webhooks(installation: &Installation) -> Vec<WebhookView<'_>> {
    let mut views = Vec::new();
    for webhook in installation
        .mutating
        .iter()
        .flat_map(|c| c.webhooks.iter().flatten())
    {
        views.push(WebhookView {
            name: format!("mutating {}", webhook.name),
            client_config: &webhook.client_config,
            namespace_selector: webhook.namespace_selector.as_ref(),
            failure_policy: webhook.failure_policy.as_deref().unwrap_or("Fail"),
            timeout_seconds: webhook.timeout_seconds.unwrap_or(10),
        });
    }
    for webhook in installation
        .validating
        .iter()
        .flat_map(|c| c.webhooks.iter().flatten())
    {
        views.push(WebhookView {
            name: format!("validating {}", webhook.name),
            client_config: &webhook.client_config,
            namespace_selector: webhook.namespace_selector.as_ref(),
            failure_policy: webhook.failure_policy.as_deref().unwrap_or("Fail"),
            timeout_seconds: webhook.timeout_seconds.unwrap_or(10),
        });
    }
    views
}

/// The server flags that the webhook settings must agree with.
struct ServerFlags {
    fail_open: bool,
    lookup_timeout: Duration,
}

fn server_flags(deployment: &Deployment) -> ServerFlags {
    let args: Vec<String> = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| {
            s.containers
                .iter()
                .find(|c| c.name == "ownerguard")
                .or(s.containers.first())
        })
        .and_then(|c| c.args.clone())
        .unwrap_or_default();
    let mut flags = ServerFlags {
        fail_open: false,
        lookup_timeout: DEFAULT_LOOKUP_TIMEOUT,
    };
    let mut iter = args.iter().peekable();
    while let Some(arg) = iter.next() {
        if arg == "--fail-open" {
            flags.fail_open = true;
        } else if let Some(value) = arg.strip_prefix("--lookup-timeout=") {
            flags.lookup_timeout = parse_go_duration(value).unwrap_or(flags.lookup_timeout);
        } else if arg == "--lookup-timeout" {
            flags.lookup_timeout = iter
                .next()
                .and_then(|v| parse_go_duration(v))
                .unwrap_or(flags.lookup_timeout);
        }
    }
    flags
}

/// Judge the installation at Unix time `now`.
pub fn check(installation: &Installation, options: &DoctorOptions, now: i64) -> Vec<Check> {
    let mut checks = Vec::new();
    let (name, namespace) = (&options.name, &options.namespace);
    for (kind, present) in [
        (
            "MutatingWebhookConfiguration",
            installation.mutating.is_some(),
        ),
        (
            "ValidatingWebhookConfiguration",
            installation.validating.is_some(),
        ),
    ] {
        checks.push(if present {
            line(Verdict::Ok, kind, format!("{name} exists"))
        } else {
            line(
                Verdict::Fail,
                kind,
                format!("{name} not found: install the chart, or pass --name"),
            )
        });
    }

    let (secret, pem) = &installation.serving_certificate;
    let chain: Vec<CertificateDer<'static>> = pem
        .as_deref()
        .map(|pem| {
            CertificateDer::pem_slice_iter(pem)
                .filter_map(Result::ok)
                .collect()
        })
        .unwrap_or_default();
    match chain.first().and_then(|leaf| certificate_not_after(leaf)) {
        None => checks.push(line(
            Verdict::Fail,
            "serving certificate",
            format!("no certificate in Secret {namespace}/{secret} (tls.crt)"),
        )),
        Some(not_after) => {
            let days = (not_after - now).div_euclid(86_400);
            let verdict = if days < options.min_certificate_days {
                Verdict::Fail
            } else {
                Verdict::Ok
            };
            let advice = if verdict == Verdict::Fail {
                ": renew it (cert-manager does; chart-made ones need a new install or the certs command)"
            } else {
                ""
            };
            checks.push(line(
                verdict,
                "serving certificate",
                format!("{days} days left in Secret {namespace}/{secret}{advice}"),
            ));
        }
    }

    let flags = installation.deployment.as_ref().map(server_flags);
    for webhook in webhooks(installation) {
        checks.push(check_ca_bundle(&webhook, &chain, now));
        checks.push(check_exclusion(&webhook, namespace));
        if let Some(flags) = &flags {
            checks.extend(check_policy(&webhook, flags));
        }
    }

    checks.push(match &installation.deployment {
        None => line(Verdict::Fail, "replicas", format!("Deployment {namespace}/{name} not found")),
        Some(deployment) => {
            let desired = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let ready = deployment.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0);
            if ready == 0 || ready < desired {
                line(Verdict::Fail, "replicas", format!("{ready} of {desired} ready: with failurePolicy Fail, labelled creates fail while none is"))
            } else if desired < 2 {
                line(Verdict::Warn, "replicas", format!("{ready} of {desired} ready: one replica, so a restart or drain stops the webhook"))
            } else {
                line(Verdict::Ok, "replicas", format!("{ready} of {desired} ready"))
            }
        }
    });

    let template_labels = installation
        .deployment
        .as_ref()
        .and_then(|d| d.spec.as_ref())
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let covering = installation.disruption_budgets.iter().find(|pdb| {
        let selector = pdb
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .and_then(|s| s.match_labels.as_ref());
        selector.is_some_and(|labels| {
            !labels.is_empty()
                && labels
                    .iter()
                    .all(|(k, v)| template_labels.get(k) == Some(v))
        })
    });
    checks.push(match covering {
        Some(pdb) => line(Verdict::Ok, "PodDisruptionBudget", format!("{} covers the webhook's pods", pdb.metadata.name.as_deref().unwrap_or("?"))),
        None => line(Verdict::Fail, "PodDisruptionBudget", format!("none in {namespace} covers the webhook's pods: a drain may evict every replica at once")),
    });
    checks
}

/// The host the API server calls, whose name the certificate must carry.
fn server_host(config: &WebhookClientConfig) -> Option<String> {
    if let Some(service) = &config.service {
        return Some(format!("{}.{}.svc", service.name, service.namespace));
    }
    let url = config.url.as_deref()?;
    let rest = url.strip_prefix("https://")?;
    let authority = rest.split('/').next()?;
    Some(
        authority
            .rsplit_once(':')
            .map_or(authority, |(host, _)| host)
            .to_string(),
    )
}

fn check_ca_bundle(
    webhook: &WebhookView<'_>,
    chain: &[CertificateDer<'static>],
    now: i64,
) -> Check {
    let subject = format!("caBundle of {}", webhook.name);
    let Some(bundle) = webhook
        .client_config
        .ca_bundle
        .as_ref()
        .filter(|b| !b.0.is_empty())
    else {
        return line(
            Verdict::Fail,
            subject,
            "empty: the API server cannot verify the webhook (is cert-manager's CA injector running?)",
        );
    };
    let Some(host) = server_host(webhook.client_config) else {
        return line(
            Verdict::Fail,
            subject,
            "the webhook has neither a service nor an https url",
        );
    };
    let Some((leaf, intermediates)) = chain.split_first() else {
        return line(Verdict::Fail, subject, "no serving certificate to verify");
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&bundle.0).filter_map(Result::ok) {
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return line(Verdict::Fail, subject, "holds no PEM certificate");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = match rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        provider,
    )
    .build()
    {
        Ok(verifier) => verifier,
        Err(e) => return line(Verdict::Fail, subject, format!("unusable: {e}")),
    };
    let Ok(server_name) = ServerName::try_from(host.clone()) else {
        return line(
            Verdict::Fail,
            subject,
            format!("'{host}' is not a DNS name"),
        );
    };
    let at =
        UnixTime::since_unix_epoch(Duration::from_secs(u64::try_from(now).unwrap_or_default()));
    use rustls::client::danger::ServerCertVerifier;
    match verifier.verify_server_cert(leaf, intermediates, &server_name, &[], at) {
        Ok(_) => line(
            Verdict::Ok,
            subject,
            format!("verifies the serving certificate for {host}"),
        ),
        Err(e) => line(
            Verdict::Fail,
            subject,
            format!("does not verify the serving certificate for {host}: {e}"),
        ),
    }
}

fn check_exclusion(webhook: &WebhookView<'_>, namespace: &str) -> Check {
    let subject = format!("namespaceSelector of {}", webhook.name);
    let excluded: Vec<&str> = webhook
        .namespace_selector
        .and_then(|s| s.match_expressions.as_ref())
        .into_iter()
        .flatten()
        .filter(|e| e.key == "kubernetes.io/metadata.name" && e.operator == "NotIn")
        .flat_map(|e| e.values.iter().flatten().map(String::as_str))
        .collect();
    let missing: Vec<&str> = ["kube-system", namespace]
        .into_iter()
        .filter(|ns| !excluded.contains(ns))
        .collect();
    if missing.is_empty() {
        line(
            Verdict::Ok,
            subject,
            format!("excludes kube-system and {namespace}"),
        )
    } else {
        line(
            Verdict::Fail,
            subject,
            format!(
                "does not exclude {}: the webhook can block its own pods or the control plane",
                missing.join(" and ")
            ),
        )
    }
}

fn check_policy(webhook: &WebhookView<'_>, flags: &ServerFlags) -> Vec<Check> {
    let mut checks = Vec::new();
    let subject = format!("failurePolicy of {}", webhook.name);
    let ignore = webhook.failure_policy == "Ignore";
    checks.push(match (ignore, flags.fail_open) {
        (true, false) => line(Verdict::Fail, subject, "Ignore, but the server runs without --fail-open: a lookup failure denies what an outage lets through"),
        (false, true) => line(Verdict::Fail, subject, format!("{}, but the server runs with --fail-open: a lookup failure lets through what an outage denies", webhook.failure_policy)),
        _ => line(Verdict::Ok, subject, format!("{} matches --fail-open={}", webhook.failure_policy, flags.fail_open)),
    });
    let subject = format!("timeoutSeconds of {}", webhook.name);
    let budget =
        Duration::from_secs(u64::try_from(webhook.timeout_seconds).unwrap_or(0)).mul_f64(0.75);
    checks.push(if flags.lookup_timeout <= budget {
        line(Verdict::Ok, subject, format!("{}s leaves room for --lookup-timeout={}ms", webhook.timeout_seconds, flags.lookup_timeout.as_millis()))
    } else {
        line(Verdict::Fail, subject, format!(
            "{}s, but --lookup-timeout={}ms: the API server gives up before a slow lookup ends; raise timeoutSeconds or lower --lookup-timeout",
            webhook.timeout_seconds, flags.lookup_timeout.as_millis()
        ))
    });
    checks
}
