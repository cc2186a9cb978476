//! `ownerguard doctor`: checks a live installation for what breaks
//! webhooks in practice, one line per check; exit 1 when one fails.
//!
//! It reads what the API server will actually call (each webhook's Service,
//! port, target port and path, its rules and selectors, its caBundle) and
//! what the pods actually run and mount (the effective command line, the
//! volume behind `--tls-cert`), rather than what the chart meant to
//! install: each check names the object it read. `--probe` adds a real
//! admission round trip.
//!
//! [`gather`] reads the installation through the API; [`check`] judges it,
//! without I/O, so each verdict is tested on its own; [`probe`] makes the
//! round trip.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, RuleWithOperations, ValidatingWebhookConfiguration,
    WebhookClientConfig,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams, PostParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

mod conditions;

use crate::k8s::duration::parse_go_duration;
use crate::serve::tls::certificate_not_after;
use crate::webhook::DEFAULT_LOOKUP_TIMEOUT;

/// The key prefix when nothing says otherwise (the server's default).
const DEFAULT_KEY_PREFIX: &str = "ownerguard.io";
/// The server's default `--addr` and `--metrics-addr` ports.
const DEFAULT_WEBHOOK_PORT: u16 = 8443;
const DEFAULT_METRICS_PORT: u16 = 9090;

/// What to check.
#[derive(Debug, Clone)]
pub struct DoctorOptions {
    /// Namespace of the release.
    pub namespace: String,
    /// Name of the webhook configurations and the Deployment.
    pub name: String,
    /// The serving certificate's Secret; default: the Secret behind the
    /// volume that holds the server's `--tls-cert`.
    pub tls_secret: Option<String>,
    /// Fewer days left than this on the serving certificate fails.
    pub min_certificate_days: i64,
    /// The admission round trip, if asked for.
    pub probe: Option<ProbeOptions>,
    /// Only the probe: no other read of the installation.
    pub probe_only: bool,
}

/// The round trip of `--probe`.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// Where the dry-run ConfigMap is created: a namespace the webhooks see.
    pub namespace: String,
    /// Key prefix of the owner labels; default: the server's, else
    /// `ownerguard.io`.
    pub key_prefix: Option<String>,
    /// How long to retry while the probe fails.
    pub wait: Duration,
}

impl From<crate::commands::cli::DoctorArgs> for DoctorOptions {
    fn from(args: crate::commands::cli::DoctorArgs) -> Self {
        Self {
            namespace: args.namespace,
            name: args.name,
            tls_secret: args.tls_secret,
            min_certificate_days: args.min_certificate_days,
            probe: args.probe.map(|namespace| ProbeOptions {
                namespace,
                key_prefix: args.key_prefix,
                wait: args.wait,
            }),
            probe_only: args.probe_only,
        }
    }
}

/// The installation as read from the API.
#[derive(Debug)]
pub struct Installation {
    pub mutating: Option<MutatingWebhookConfiguration>,
    pub validating: Option<ValidatingWebhookConfiguration>,
    pub deployment: Option<Deployment>,
    /// The Services the webhooks name, as found (missing ones are absent).
    pub services: Vec<Service>,
    pub disruption_budgets: Vec<PodDisruptionBudget>,
    pub serving_certificate: ServingCertificate,
    /// Every other webhook configuration of the cluster, or why they could
    /// not be listed.
    pub others: Result<Vec<OtherConfiguration>, String>,
}

/// A webhook configuration that is not this installation's.
#[derive(Debug, Clone)]
pub struct OtherConfiguration {
    pub kind: &'static str,
    pub name: String,
    /// Each webhook's name, and the label keys its objectSelector reads.
    pub webhooks: Vec<(String, Vec<String>)>,
}

impl Default for Installation {
    fn default() -> Self {
        Self {
            mutating: None,
            validating: None,
            deployment: None,
            services: Vec::new(),
            disruption_budgets: Vec::new(),
            serving_certificate: ServingCertificate::default(),
            others: Ok(Vec::new()),
        }
    }
}

/// Where the server's certificate comes from, and what it holds.
#[derive(Debug, Default, Clone)]
pub struct ServingCertificate {
    /// The Secret and the key of it that the server reads as `--tls-cert`.
    pub secret: String,
    pub key: String,
    /// Why the server's certificate is not (cleanly) in a Secret, when so.
    pub problem: Option<String>,
    /// The certificate chain (PEM), if the Secret and key exist.
    pub pem: Option<Vec<u8>>,
}

/// Every webhook configuration but `ours`, of both kinds. A refusal to list
/// (RBAC) is reported, not an error: the other checks still run.
async fn other_configurations(
    client: &kube::Client,
    ours: &str,
) -> Result<Vec<OtherConfiguration>, String> {
    fn keys(selector: Option<&LabelSelector>) -> Vec<String> {
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
    let mut add = |kind: &'static str, name: Option<String>, webhooks| {
        let name = name.unwrap_or_default();
        if name != ours {
            others.push(OtherConfiguration {
                kind,
                name,
                webhooks,
            });
        }
    };
    for configuration in mutating.items {
        let webhooks = configuration.webhooks.iter().flatten();
        add(
            "MutatingWebhookConfiguration",
            configuration.metadata.name,
            webhooks
                .map(|w| (w.name.clone(), keys(w.object_selector.as_ref())))
                .collect(),
        );
    }
    for configuration in validating.items {
        let webhooks = configuration.webhooks.iter().flatten();
        add(
            "ValidatingWebhookConfiguration",
            configuration.metadata.name,
            webhooks
                .map(|w| (w.name.clone(), keys(w.object_selector.as_ref())))
                .collect(),
        );
    }
    Ok(others)
}

/// Another installation that judges the same objects: a webhook of the same
/// name (the API server allows it in another configuration), or one whose
/// objectSelector reads this installation's owner label. Then two servers
/// answer for the same objects, and neither the install check nor
/// `--probe` can tell which one answered.
fn check_others(installation: &Installation, key_prefix: &str) -> Check {
    let subject = "other installations";
    let others = match &installation.others {
        Ok(others) => others,
        Err(why) => {
            return line(
                Verdict::Warn,
                subject,
                format!("{why}: another installation serving the same webhooks would go unnoticed"),
            );
        }
    };
    let ours: BTreeSet<String> = webhooks(installation)
        .iter()
        .map(|w| w.name.clone())
        .collect();
    let owner_key = format!("{key_prefix}/owner-pod");
    let clashes: Vec<String> = others
        .iter()
        .flat_map(|other| {
            other.webhooks.iter().filter_map(|(name, keys)| {
                let same_name = ours.contains(name);
                let same_label = keys.contains(&owner_key);
                (same_name || same_label).then(|| {
                    let why = if same_name {
                        "the same name"
                    } else {
                        "the owner label"
                    };
                    format!("{} {} webhook {name} ({why})", other.kind, other.name)
                })
            })
        })
        .collect();
    if clashes.is_empty() {
        line(
            Verdict::Ok,
            subject,
            format!("no other webhook configuration serves {owner_key}"),
        )
    } else {
        line(
            Verdict::Fail,
            subject,
            format!(
                "{}: two installations judge the same objects, the first one the API server calls decides, and neither the install check nor --probe can tell which answered; uninstall one, or give it another keyPrefix",
                clashes.join(", ")
            ),
        )
    }
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

    let others = other_configurations(&client, &options.name).await;
    let mut wanted = BTreeSet::new();
    let mut installation = Installation {
        mutating,
        validating,
        deployment,
        disruption_budgets,
        others,
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
    if !serving.secret.is_empty() {
        let secret = Api::<Secret>::namespaced(client, namespace)
            .get_opt(&serving.secret)
            .await?;
        serving.pem = secret
            .and_then(|s| s.data)
            .and_then(|mut data| data.remove(&serving.key))
            .map(|pem| pem.0);
    }
    installation.serving_certificate = serving;
    Ok(installation)
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

/// Which configuration a webhook is in: what path it must call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Configuration {
    Mutating,
    Validating,
}

impl Configuration {
    fn kind(self) -> &'static str {
        match self {
            Self::Mutating => "MutatingWebhookConfiguration",
            Self::Validating => "ValidatingWebhookConfiguration",
        }
    }

    fn word(self) -> &'static str {
        match self {
            Self::Mutating => "mutating",
            Self::Validating => "validating",
        }
    }
}

/// How many webhooks the installation's configuration of that kind holds;
/// `None` when there is no such configuration.
fn webhook_count(installation: &Installation, configuration: Configuration) -> Option<usize> {
    match configuration {
        Configuration::Mutating => installation
            .mutating
            .as_ref()
            .map(|c| c.webhooks.iter().flatten().count()),
        Configuration::Validating => installation
            .validating
            .as_ref()
            .map(|c| c.webhooks.iter().flatten().count()),
    }
}

/// One webhook of either configuration, as far as the checks read it.
struct WebhookView<'a> {
    configuration: Configuration,
    name: String,
    client_config: &'a WebhookClientConfig,
    rules: &'a [RuleWithOperations],
    object_selector: Option<&'a LabelSelector>,
    namespace_selector: Option<&'a LabelSelector>,
    failure_policy: &'a str,
    timeout_seconds: i32,
    match_conditions: Vec<conditions::Condition>,
}

impl WebhookView<'_> {
    fn label(&self) -> String {
        format!("{} {}", self.configuration.word(), self.name)
    }
}

fn webhooks(installation: &Installation) -> Vec<WebhookView<'_>> {
    // MutatingWebhook and ValidatingWebhook are two types with the same
    // fields: one view of either.
    macro_rules! view {
        ($configuration:expr, $webhook:expr) => {{
            let webhook = $webhook;
            WebhookView {
                configuration: $configuration,
                name: webhook.name.clone(),
                client_config: &webhook.client_config,
                rules: webhook.rules.as_deref().unwrap_or_default(),
                object_selector: webhook.object_selector.as_ref(),
                namespace_selector: webhook.namespace_selector.as_ref(),
                failure_policy: webhook.failure_policy.as_deref().unwrap_or("Fail"),
                timeout_seconds: webhook.timeout_seconds.unwrap_or(10),
                match_conditions: webhook
                    .match_conditions
                    .iter()
                    .flatten()
                    .map(|c| (c.name.clone(), c.expression.clone()))
                    .collect(),
            }
        }};
    }
    let mutating = installation
        .mutating
        .iter()
        .flat_map(|c| c.webhooks.iter().flatten())
        .map(|webhook| view!(Configuration::Mutating, webhook));
    let validating = installation
        .validating
        .iter()
        .flat_map(|c| c.webhooks.iter().flatten())
        .map(|webhook| view!(Configuration::Validating, webhook));
    mutating.chain(validating).collect()
}

/// The flags of `ownerguard serve` the checks compare with, as the
/// container runs them (a repeated flag: the last one wins).
#[derive(Debug, Clone)]
struct ServeFlags {
    webhook_port: u16,
    metrics_port: u16,
    tls_cert: Option<String>,
    client_ca: Option<String>,
    fail_open: bool,
    lookup_timeout: Duration,
    key_prefix: String,
}

/// The server container and its flags, or why it does not run `serve`.
struct ServerView<'a> {
    container: &'a Container,
    flags: ServeFlags,
}

fn pod_spec(deployment: &Deployment) -> Option<&PodSpec> {
    deployment.spec.as_ref()?.template.spec.as_ref()
}

fn template_labels(deployment: &Deployment) -> BTreeMap<String, String> {
    deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default()
}

/// What the container executes: `command` replaces the image's entrypoint
/// (the ownerguard binary) and `args` its default arguments.
fn argv(container: &Container) -> Vec<String> {
    let mut argv = match container.command.as_deref() {
        Some(command) if !command.is_empty() => command.to_vec(),
        _ => vec!["ownerguard".to_string()],
    };
    argv.extend(container.args.iter().flatten().cloned());
    argv
}

fn is_ownerguard_binary(path: &str) -> bool {
    path.rsplit('/').next() == Some("ownerguard")
}

/// The server container of the Deployment: the one named ownerguard, else
/// the first; its effective command line must be `ownerguard … serve …`.
fn server_view(deployment: &Deployment) -> Result<ServerView<'_>, String> {
    let spec = pod_spec(deployment).ok_or("the Deployment has no pod template")?;
    let container = spec
        .containers
        .iter()
        .find(|c| c.name == "ownerguard")
        .or(spec.containers.first())
        .ok_or("the pod template has no container")?;
    let argv = argv(container);
    let shown = argv.join(" ");
    if !is_ownerguard_binary(&argv[0]) {
        return Err(format!(
            "container {} runs `{shown}`: its command replaces the image's entrypoint (the ownerguard binary), so it does not run ownerguard serve; give the flags as args",
            container.name
        ));
    }
    let Some(serve) = argv.iter().position(|a| a == "serve") else {
        return Err(format!(
            "container {} runs `{shown}`, not ownerguard serve",
            container.name
        ));
    };
    let mut flags = ServeFlags {
        webhook_port: DEFAULT_WEBHOOK_PORT,
        metrics_port: DEFAULT_METRICS_PORT,
        tls_cert: None,
        client_ca: None,
        fail_open: false,
        lookup_timeout: DEFAULT_LOOKUP_TIMEOUT,
        key_prefix: DEFAULT_KEY_PREFIX.to_string(),
    };
    let port = |value: &str| {
        value
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse::<u16>().ok())
    };
    let mut tokens = argv[1..serve]
        .iter()
        .chain(&argv[serve + 1..])
        .map(String::as_str);
    while let Some(token) = tokens.next() {
        if token == "--fail-open" {
            flags.fail_open = true;
            continue;
        }
        let Some((flag, inline)) = token
            .strip_prefix("--")
            .map(|t| t.split_once('=').map_or((t, None), |(f, v)| (f, Some(v))))
        else {
            continue;
        };
        const VALUED: [&str; 7] = [
            "addr",
            "metrics-addr",
            "tls-cert",
            "client-ca",
            "lookup-timeout",
            "key-prefix",
            "tls-key",
        ];
        if !VALUED.contains(&flag) {
            continue;
        }
        let Some(value) = inline.or_else(|| tokens.next()) else {
            break;
        };
        match flag {
            "addr" => flags.webhook_port = port(value).unwrap_or(flags.webhook_port),
            "metrics-addr" => flags.metrics_port = port(value).unwrap_or(flags.metrics_port),
            "tls-cert" => flags.tls_cert = Some(value.to_string()),
            "client-ca" => flags.client_ca = Some(value.to_string()),
            "lookup-timeout" => {
                flags.lookup_timeout = parse_go_duration(value).unwrap_or(flags.lookup_timeout);
            }
            "key-prefix" => flags.key_prefix = value.to_string(),
            _ => {}
        }
    }
    Ok(ServerView { container, flags })
}

/// The Secret and key behind the server's `--tls-cert` file: the volume
/// mounted at the longest prefix of that path, and the key that volume
/// puts at the remaining path. ([`gather`] then reads the Secret.)
pub fn serving_certificate_source(deployment: &Deployment) -> ServingCertificate {
    let unusable = |problem: String| ServingCertificate {
        problem: Some(problem),
        ..ServingCertificate::default()
    };
    let Ok(view) = server_view(deployment) else {
        return unusable(
            "cannot tell which Secret the server reads, since it does not run ownerguard serve (see the server check)".into(),
        );
    };
    let Some(cert_path) = view.flags.tls_cert.as_deref() else {
        return unusable("the server runs without --tls-cert".into());
    };
    let mount = view
        .container
        .volume_mounts
        .iter()
        .flatten()
        .filter(|m| {
            let dir = m.mount_path.trim_end_matches('/');
            cert_path
                .strip_prefix(dir)
                .is_some_and(|rest| rest.starts_with('/') || rest.is_empty())
        })
        .max_by_key(|m| m.mount_path.len());
    let Some(mount) = mount else {
        return unusable(format!(
            "--tls-cert {cert_path} is on no mounted volume: the certificate is whatever the image holds"
        ));
    };
    let relative = cert_path[mount.mount_path.trim_end_matches('/').len()..]
        .trim_start_matches('/')
        .to_string();
    let relative = match mount.sub_path.as_deref().filter(|s| !s.is_empty()) {
        Some(sub_path) if relative.is_empty() => sub_path.to_string(),
        Some(sub_path) => format!("{sub_path}/{relative}"),
        None => relative,
    };
    let volume = pod_spec(deployment)
        .and_then(|s| s.volumes.as_ref())
        .and_then(|volumes| volumes.iter().find(|v| v.name == mount.name));
    let Some(volume) = volume else {
        return unusable(format!(
            "volume {} mounted at {} is not in the pod template",
            mount.name, mount.mount_path
        ));
    };
    let key_of = |items: Option<&Vec<k8s_openapi::api::core::v1::KeyToPath>>| match items {
        Some(items) => items
            .iter()
            .find(|item| item.path == relative)
            .map(|item| item.key.clone()),
        None => Some(relative.clone()),
    };
    let found = if let Some(secret) = &volume.secret {
        secret
            .secret_name
            .clone()
            .zip(key_of(secret.items.as_ref()))
    } else if let Some(projected) = &volume.projected {
        projected
            .sources
            .iter()
            .flatten()
            .filter_map(|source| source.secret.as_ref())
            .find_map(|secret| Some(secret.name.clone()).zip(key_of(secret.items.as_ref())))
    } else {
        None
    };
    let Some((secret, key)) = found else {
        return unusable(format!(
            "--tls-cert {cert_path} is in volume {}, which is not a Secret holding that file",
            volume.name
        ));
    };
    let problem = mount.sub_path.as_deref().filter(|s| !s.is_empty()).map(|_| {
        format!(
            "volume {} is mounted with subPath: kubelet never updates such a mount, so a renewed certificate never reaches the server",
            mount.name
        )
    });
    ServingCertificate {
        secret,
        key,
        problem,
        pem: None,
    }
}

/// Judge the installation at Unix time `now`.
pub fn check(installation: &Installation, options: &DoctorOptions, now: i64) -> Vec<Check> {
    let mut checks = Vec::new();
    let (name, namespace) = (&options.name, &options.namespace);
    for configuration in [Configuration::Mutating, Configuration::Validating] {
        let kind = configuration.kind();
        checks.push(match webhook_count(installation, configuration) {
            None => line(
                Verdict::Fail,
                kind,
                format!("{name} not found: install the chart, or pass --name"),
            ),
            Some(0) => line(
                Verdict::Fail,
                kind,
                format!("{name} has no webhooks: the API server calls nothing"),
            ),
            Some(n) => line(Verdict::Ok, kind, format!("{name} exists, {n} webhook(s)")),
        });
    }

    let server = installation.deployment.as_ref().map(server_view);
    let flags = match &server {
        Some(Ok(view)) => Some(&view.flags),
        _ => None,
    };
    checks.push(match (&installation.deployment, &server) {
        (None, _) => line(
            Verdict::Fail,
            "server",
            format!("Deployment {namespace}/{name} not found"),
        ),
        (Some(_), Some(Err(problem))) => line(Verdict::Fail, "server", problem.clone()),
        (Some(_), Some(Ok(view))) => line(
            Verdict::Ok,
            "server",
            format!(
                "container {} runs ownerguard serve: webhook port {}, metrics port {}, key prefix {}",
                view.container.name,
                view.flags.webhook_port,
                view.flags.metrics_port,
                view.flags.key_prefix
            ),
        ),
        (Some(_), None) => unreachable!("a Deployment always has a view"),
    });
    if let Some(client_ca) = flags.and_then(|f| f.client_ca.as_deref()) {
        checks.push(line(
            Verdict::Ok,
            "client certificates",
            format!(
                "required (--client-ca {client_ca}): the API server must present one through its AdmissionConfiguration; doctor cannot see that, --probe proves it"
            ),
        ));
    }

    let serving = &installation.serving_certificate;
    let chain: Vec<CertificateDer<'static>> = serving
        .pem
        .as_deref()
        .map(|pem| {
            CertificateDer::pem_slice_iter(pem)
                .filter_map(Result::ok)
                .collect()
        })
        .unwrap_or_default();
    checks.push(check_serving_certificate(
        serving,
        &chain,
        namespace,
        options.min_certificate_days,
        now,
    ));

    let key_prefix = flags.map_or(DEFAULT_KEY_PREFIX, |f| f.key_prefix.as_str());
    checks.push(check_others(installation, key_prefix));
    let webhooks = webhooks(installation);
    checks.extend(check_roles(&webhooks, installation, key_prefix));
    for webhook in webhooks {
        checks.push(check_ca_bundle(&webhook, &chain, now));
        if let Some(view) = server.as_ref().and_then(|s| s.as_ref().ok()) {
            checks.push(check_service(
                &webhook,
                installation,
                view,
                namespace,
                installation
                    .deployment
                    .as_ref()
                    .map(template_labels)
                    .unwrap_or_default(),
            ));
        }
        // A webhook of no known role was failed by check_roles: what it
        // should call and select cannot be told.
        let role = Role::of(&webhook, key_prefix);
        if let Some(role) = role {
            checks.push(check_path(&webhook, role));
            checks.push(check_rules(&webhook, role));
            checks.push(check_object_selector(&webhook, role, key_prefix));
            checks.push(check_match_conditions(&webhook, role, key_prefix));
        }
        checks.push(check_exclusion(&webhook, namespace));
        if let Some(flags) = flags {
            if let Some(role) = role {
                checks.push(check_policy(&webhook, role, flags));
            }
            checks.push(check_timeout(&webhook, flags));
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
    checks.push(check_disruption_budget(installation, namespace));
    checks
}

fn check_serving_certificate(
    serving: &ServingCertificate,
    chain: &[CertificateDer<'static>],
    namespace: &str,
    min_days: i64,
    now: i64,
) -> Check {
    let subject = "serving certificate";
    if let Some(problem) = &serving.problem {
        return line(Verdict::Fail, subject, problem.clone());
    }
    let source = format!("Secret {namespace}/{} ({})", serving.secret, serving.key);
    match chain.first().and_then(|leaf| certificate_not_after(leaf)) {
        None => line(
            Verdict::Fail,
            subject,
            format!("no certificate in {source}"),
        ),
        Some(not_after) => {
            let days = (not_after - now).div_euclid(86_400);
            if days < min_days {
                line(
                    Verdict::Fail,
                    subject,
                    format!(
                        "{days} days left in {source}: renew it (cert-manager does; the chart renews its own at upgrade; or the certs command)"
                    ),
                )
            } else {
                line(
                    Verdict::Ok,
                    subject,
                    format!("{days} days left in {source}"),
                )
            }
        }
    }
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
    let subject = format!("caBundle of {}", webhook.label());
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

/// The Service the webhook names must exist in the server's namespace,
/// select the server's pods, and carry the webhook's port to the port the
/// server serves HTTPS on.
fn check_service(
    webhook: &WebhookView<'_>,
    installation: &Installation,
    server: &ServerView<'_>,
    namespace: &str,
    pod_labels: BTreeMap<String, String>,
) -> Check {
    let subject = format!("service of {}", webhook.label());
    let Some(reference) = &webhook.client_config.service else {
        return line(
            Verdict::Warn,
            subject,
            format!(
                "calls the url {} directly, not a Service: not checked",
                webhook.client_config.url.as_deref().unwrap_or("(none)")
            ),
        );
    };
    let at = format!("{}/{}", reference.namespace, reference.name);
    if reference.namespace != namespace {
        return line(
            Verdict::Fail,
            subject,
            format!("calls Service {at}, outside ownerguard's namespace {namespace}"),
        );
    }
    let Some(service) = installation.services.iter().find(|s| {
        s.metadata.name.as_deref() == Some(&reference.name)
            && s.metadata
                .namespace
                .as_deref()
                .is_none_or(|n| n == reference.namespace)
    }) else {
        return line(
            Verdict::Fail,
            subject,
            format!("Service {at} not found: every call fails"),
        );
    };
    let spec = service.spec.clone().unwrap_or_default();
    let selector = spec.selector.clone().unwrap_or_default();
    if selector.is_empty() || !selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)) {
        return line(
            Verdict::Fail,
            subject,
            format!(
                "Service {at} selects {selector:?}, not the Deployment's pods: it has no ownerguard endpoint"
            ),
        );
    }
    let port = reference.port.unwrap_or(443);
    let Some(service_port) = spec.ports.iter().flatten().find(|p| p.port == port) else {
        return line(
            Verdict::Fail,
            subject,
            format!("Service {at} has no port {port}: every call fails"),
        );
    };
    let container_ports = server.container.ports.iter().flatten();
    let (target, shown) = match &service_port.target_port {
        None => (Some(port), port.to_string()),
        Some(IntOrString::Int(n)) => (Some(*n), n.to_string()),
        Some(IntOrString::String(name)) => (
            container_ports
                .clone()
                .find(|p| p.name.as_deref() == Some(name))
                .map(|p| p.container_port),
            name.clone(),
        ),
    };
    let Some(target) = target else {
        return line(
            Verdict::Fail,
            subject,
            format!(
                "Service {at} port {port} targets the port named {shown}, which container {} does not declare",
                server.container.name
            ),
        );
    };
    let flags = &server.flags;
    if target == i32::from(flags.webhook_port) {
        line(
            Verdict::Ok,
            subject,
            format!(
                "Service {at} port {port} reaches container port {target} ({shown}), where ownerguard serves HTTPS"
            ),
        )
    } else if target == i32::from(flags.metrics_port) {
        line(
            Verdict::Fail,
            subject,
            format!(
                "Service {at} port {port} reaches container port {target}, the plain-HTTP metrics port, not the webhook's HTTPS port {}: every call fails",
                flags.webhook_port
            ),
        )
    } else {
        line(
            Verdict::Fail,
            subject,
            format!(
                "Service {at} port {port} reaches container port {target}, but ownerguard serves HTTPS on {} (--addr): every call fails",
                flags.webhook_port
            ),
        )
    }
}

fn check_path(webhook: &WebhookView<'_>, role: Role) -> Check {
    let subject = format!("path of {}", webhook.label());
    let path = match (&webhook.client_config.service, &webhook.client_config.url) {
        (Some(service), _) => service.path.clone().unwrap_or_default(),
        (None, Some(url)) => url
            .strip_prefix("https://")
            .and_then(|rest| rest.find('/').map(|i| rest[i..].to_string()))
            .unwrap_or_default(),
        (None, None) => String::new(),
    };
    let path = path.split('?').next().unwrap_or_default().to_string();
    // The cluster-wide switch calls /validate-all, which fails open on a
    // lookup failure as its webhook does; /validate there works too, but
    // denies a lookup failure with 503 under failurePolicy Ignore.
    let expected = role.path();
    if path == expected {
        return line(Verdict::Ok, subject, format!("calls {path}"));
    }
    if role == Role::ValidateAll && path == "/validate" {
        return line(
            Verdict::Warn,
            subject,
            "calls /validate: a failed owner lookup is denied (503) though the webhook fails open; /validate-all allows it".to_string(),
        );
    }
    let shown = if path.is_empty() { "/" } else { path.as_str() };
    let effect = match (webhook.configuration, shown) {
        (Configuration::Mutating, "/validate") => {
            "the validation runs before the reference is injected, so every labelled create is denied"
        }
        (Configuration::Validating, "/mutate") => {
            "a validating webhook cannot patch, so what it would complete is denied or let through unchecked"
        }
        _ => {
            "ownerguard answers 404 there, a failed call: with failurePolicy Fail every labelled create is refused"
        }
    };
    line(
        Verdict::Fail,
        subject,
        format!(
            "calls {shown}, but a {} webhook must call {expected}: {effect}",
            webhook.configuration.word()
        ),
    )
}

/// What a webhook is for, read from its configuration and its name as the
/// chart writes them, never from its selector or its conditions: those are
/// what the checks judge against the role (an inverted selector read as
/// the role would pass itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// `mutate.<keyPrefix>`, mutating: completes labelled objects.
    Mutate,
    /// `validate.<keyPrefix>`, validating: guarantees labelled objects.
    Validate,
    /// `validate-all.<keyPrefix>`, validating: the opt-in
    /// validation.allPodOwnerReferences, for every other object.
    ValidateAll,
}

impl Role {
    const ALL: [Self; 3] = [Self::Mutate, Self::Validate, Self::ValidateAll];

    /// The role of `webhook`, when its configuration and name are one the
    /// chart writes for `key_prefix`.
    fn of(webhook: &WebhookView<'_>, key_prefix: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|role| {
            role.configuration() == webhook.configuration && webhook.name == role.name(key_prefix)
        })
    }

    fn name(self, key_prefix: &str) -> String {
        let word = match self {
            Self::Mutate => "mutate",
            Self::Validate => "validate",
            Self::ValidateAll => "validate-all",
        };
        format!("{word}.{key_prefix}")
    }

    fn configuration(self) -> Configuration {
        match self {
            Self::Mutate => Configuration::Mutating,
            Self::Validate | Self::ValidateAll => Configuration::Validating,
        }
    }

    /// The path of ownerguard this role calls.
    fn path(self) -> &'static str {
        match self {
            Self::Mutate => "/mutate",
            Self::Validate => "/validate",
            Self::ValidateAll => "/validate-all",
        }
    }

    /// Whether it judges the objects carrying the owner-pod label.
    fn labelled(self) -> bool {
        self != Self::ValidateAll
    }

    /// What goes wrong when this webhook is missing.
    fn missing(self) -> &'static str {
        match self {
            Self::Mutate => {
                "labelled objects are never completed, so /validate refuses every labelled create"
            }
            Self::Validate => {
                "nothing guarantees the final object after the other mutating webhooks ran"
            }
            Self::ValidateAll => "",
        }
    }
}

/// Every webhook has a role, and the two that every install needs are
/// there: roles come from names, so a webhook of an unknown name, or one
/// in the other configuration (the two configurations' webhooks
/// swapped), fails here rather than being judged as what its selector
/// looks like.
fn check_roles(
    webhooks: &[WebhookView<'_>],
    installation: &Installation,
    key_prefix: &str,
) -> Vec<Check> {
    let mut checks = Vec::new();
    for webhook in webhooks {
        if Role::of(webhook, key_prefix).is_some() {
            continue;
        }
        let misplaced = Role::ALL
            .into_iter()
            .find(|role| webhook.name == role.name(key_prefix));
        let detail = match misplaced {
            Some(role) => format!(
                "{} belongs in the {} configuration: a {} webhook cannot do its work",
                webhook.name,
                role.configuration().word(),
                webhook.configuration.word()
            ),
            None => format!(
                "not a webhook this chart writes for keyPrefix {key_prefix} (mutating: {}; validating: {}, {}): its role, so what it must call and select, cannot be told",
                Role::Mutate.name(key_prefix),
                Role::Validate.name(key_prefix),
                Role::ValidateAll.name(key_prefix)
            ),
        };
        checks.push(line(
            Verdict::Fail,
            format!("role of {}", webhook.label()),
            detail,
        ));
    }
    for role in [Role::Mutate, Role::Validate] {
        // A configuration missing or empty is failed on its own line.
        if webhook_count(installation, role.configuration()).unwrap_or(0) == 0
            || webhooks
                .iter()
                .any(|w| Role::of(w, key_prefix) == Some(role))
        {
            continue;
        }
        checks.push(line(
            Verdict::Fail,
            format!("webhook {}", role.name(key_prefix)),
            format!(
                "not in the {} configuration: {}",
                role.configuration().word(),
                role.missing()
            ),
        ));
    }
    checks
}

fn check_rules(webhook: &WebhookView<'_>, role: Role) -> Check {
    let subject = format!("rules of {}", webhook.label());
    let namespaced: Vec<&RuleWithOperations> = webhook
        .rules
        .iter()
        .filter(|r| {
            r.scope
                .as_deref()
                .is_none_or(|s| s == "*" || s == "Namespaced")
        })
        .collect();
    let has = |rule: &RuleWithOperations, operation: &str| {
        rule.operations
            .iter()
            .flatten()
            .any(|o| o == operation || o == "*")
    };
    let creates: Vec<&&RuleWithOperations> =
        namespaced.iter().filter(|r| has(r, "CREATE")).collect();
    if creates.is_empty() {
        return line(
            Verdict::Fail,
            subject,
            "no rule covers CREATE of namespaced objects: the webhook is never called when an object is made",
        );
    }
    if role.labelled() && !namespaced.iter().any(|r| has(r, "UPDATE")) {
        return line(
            Verdict::Fail,
            subject,
            "no rule covers UPDATE: the owner of a labelled object could be changed after its creation unchecked",
        );
    }
    let star = |list: &Option<Vec<String>>| list.iter().flatten().any(|v| v == "*");
    let everything = creates.iter().any(|r| {
        star(&r.api_groups)
            && star(&r.api_versions)
            && r.resources.iter().flatten().any(|v| v == "*" || v == "*/*")
    });
    if everything {
        return line(
            Verdict::Ok,
            subject,
            "CREATE covers every namespaced resource",
        );
    }
    let covered: Vec<String> = creates
        .iter()
        .flat_map(|r| r.resources.iter().flatten().cloned())
        .collect();
    let verdict = if role.labelled() {
        Verdict::Warn
    } else {
        Verdict::Ok
    };
    line(
        verdict,
        subject,
        format!(
            "CREATE covers only {}: the pod templates of other labelled kinds (a Deployment, a CronJob) are not completed",
            covered.join(", ")
        ),
    )
}

fn check_object_selector(webhook: &WebhookView<'_>, role: Role, key_prefix: &str) -> Check {
    let subject = format!("objectSelector of {}", webhook.label());
    let key = format!("{key_prefix}/owner-pod");
    let (operator, meaning) = if role.labelled() {
        ("Exists", "every labelled object")
    } else {
        ("DoesNotExist", "every object without the owner label")
    };
    let selector = webhook.object_selector.cloned().unwrap_or_default();
    let labels = selector.match_labels.clone().unwrap_or_default();
    let expressions = selector.match_expressions.clone().unwrap_or_default();
    let exact = labels.is_empty()
        && expressions.len() == 1
        && expressions[0].key == key
        && expressions[0].operator == operator;
    if exact {
        return line(Verdict::Ok, subject, format!("{key} {operator}: {meaning}"));
    }
    let shown = serde_json::to_string(&selector).unwrap_or_default();
    line(
        Verdict::Fail,
        subject,
        format!(
            "{shown}: must be exactly {key} {operator} (the server's --key-prefix), or {meaning} is not sent"
        ),
    )
}

/// The matchConditions are this version's chart's: one that differs may
/// skip objects ownerguard must judge, and nothing else would tell.
fn check_match_conditions(webhook: &WebhookView<'_>, role: Role, key_prefix: &str) -> Check {
    let subject = format!("matchConditions of {}", webhook.label());
    let expected = if role.labelled() {
        conditions::labelled(key_prefix)
    } else {
        conditions::pod_references(key_prefix)
    };
    if webhook.match_conditions.is_empty() {
        return line(
            Verdict::Warn,
            subject,
            "none: every request the rules and selectors let through is sent \
             (nothing is skipped, but an outage also blocks updates that do not touch ownership)",
        );
    }
    match conditions::difference(&expected, &webhook.match_conditions) {
        None => line(
            Verdict::Ok,
            subject,
            format!(
                "{}, as this version's chart writes it",
                expected
                    .iter()
                    .map(|(name, _)| name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        Some(difference) => line(
            Verdict::Fail,
            subject,
            format!(
                "{difference}: a condition that differs may skip requests ownerguard must judge; \
                 install the chart of this version (keyPrefix {key_prefix}) rather than editing them"
            ),
        ),
    }
}

fn check_exclusion(webhook: &WebhookView<'_>, namespace: &str) -> Check {
    let subject = format!("namespaceSelector of {}", webhook.label());
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

fn check_policy(webhook: &WebhookView<'_>, role: Role, flags: &ServeFlags) -> Check {
    let subject = format!("failurePolicy of {}", webhook.label());
    let ignore = webhook.failure_policy == "Ignore";
    if role == Role::ValidateAll {
        // The cluster-wide switch has its own policy on purpose.
        return if ignore {
            line(
                Verdict::Ok,
                subject,
                "Ignore: an outage of ownerguard lets unlabelled objects that name a pod as owner through unchecked, and never stops pod creation",
            )
        } else {
            line(
                Verdict::Warn,
                subject,
                format!(
                    "{}: an outage of ownerguard stops the creation of every object that names a pod as owner, in every namespace not excluded (CNI and DNS add-ons included)",
                    webhook.failure_policy
                ),
            )
        };
    }
    match (ignore, flags.fail_open) {
        (true, false) => line(
            Verdict::Fail,
            subject,
            "Ignore, but the server runs without --fail-open: a lookup failure denies what an outage lets through",
        ),
        (false, true) => line(
            Verdict::Fail,
            subject,
            format!(
                "{}, but the server runs with --fail-open: a lookup failure lets through what an outage denies",
                webhook.failure_policy
            ),
        ),
        _ => line(
            Verdict::Ok,
            subject,
            format!(
                "{} matches --fail-open={}",
                webhook.failure_policy, flags.fail_open
            ),
        ),
    }
}

fn check_timeout(webhook: &WebhookView<'_>, flags: &ServeFlags) -> Check {
    let subject = format!("timeoutSeconds of {}", webhook.label());
    let budget =
        Duration::from_secs(u64::try_from(webhook.timeout_seconds).unwrap_or(0)).mul_f64(0.75);
    if flags.lookup_timeout <= budget {
        line(
            Verdict::Ok,
            subject,
            format!(
                "{}s leaves room for --lookup-timeout={}ms",
                webhook.timeout_seconds,
                flags.lookup_timeout.as_millis()
            ),
        )
    } else {
        line(
            Verdict::Fail,
            subject,
            format!(
                "{}s, but --lookup-timeout={}ms: the API server gives up before a slow lookup ends; raise timeoutSeconds or lower --lookup-timeout",
                webhook.timeout_seconds,
                flags.lookup_timeout.as_millis()
            ),
        )
    }
}

/// Whether `selector` selects a pod with `labels` (policy/v1: an empty
/// selector selects every pod of the namespace).
fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_label = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expression = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.clone().unwrap_or_default();
        match e.operator.as_str() {
            "In" => labels.get(&e.key).is_some_and(|v| values.contains(v)),
            "NotIn" => labels.get(&e.key).is_none_or(|v| !values.contains(v)),
            "Exists" => labels.contains_key(&e.key),
            "DoesNotExist" => !labels.contains_key(&e.key),
            _ => false,
        }
    });
    by_label && by_expression
}

/// `value` of `total` pods, percentages rounded up, as the disruption
/// controller counts them.
fn scaled(value: &IntOrString, total: i32) -> Option<i32> {
    match value {
        IntOrString::Int(n) => Some(*n),
        IntOrString::String(text) => {
            let percent: i64 = text.strip_suffix('%')?.parse().ok()?;
            i32::try_from((percent * i64::from(total) + 99).div_euclid(100)).ok()
        }
    }
}

/// Exactly one PodDisruptionBudget covers the pods, and it lets a drain
/// take one of them at a time: none blocks every drain, all of them at
/// once is an outage.
fn check_disruption_budget(installation: &Installation, namespace: &str) -> Check {
    let subject = "PodDisruptionBudget";
    let Some(deployment) = &installation.deployment else {
        return line(
            Verdict::Fail,
            subject,
            "no Deployment whose pods it would cover",
        );
    };
    let labels = template_labels(deployment);
    let covering: Vec<&PodDisruptionBudget> = installation
        .disruption_budgets
        .iter()
        .filter(|pdb| {
            pdb.spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .is_some_and(|s| selects(s, &labels))
        })
        .collect();
    let pdb = match covering.as_slice() {
        [] => {
            return line(
                Verdict::Fail,
                subject,
                format!(
                    "none in {namespace} covers the webhook's pods: a drain may evict every replica at once"
                ),
            );
        }
        [pdb] => *pdb,
        many => {
            let names: Vec<&str> = many.iter().map(|p| meta_name(&p.metadata)).collect();
            return line(
                Verdict::Fail,
                subject,
                format!(
                    "{} cover the webhook's pods: the eviction API refuses to evict a pod under more than one, so every drain blocks",
                    names.join(", ")
                ),
            );
        }
    };
    let name = meta_name(&pdb.metadata);
    let desired = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let spec = pdb.spec.clone().unwrap_or_default();
    let (allowed, given) = match (&spec.max_unavailable, &spec.min_available) {
        (Some(max), _) => (
            scaled(max, desired),
            format!("maxUnavailable {}", shown(max)),
        ),
        (None, Some(min)) => (
            scaled(min, desired).map(|min| desired - min),
            format!("minAvailable {}", shown(min)),
        ),
        (None, None) => (None, "neither maxUnavailable nor minAvailable".to_string()),
    };
    let Some(allowed) = allowed else {
        return line(
            Verdict::Fail,
            subject,
            format!("{name} sets {given}: cannot tell what a drain may take"),
        );
    };
    let allowed = allowed.min(desired);
    if allowed <= 0 {
        line(
            Verdict::Fail,
            subject,
            format!(
                "{name} ({given}) lets no pod of {desired} be evicted: every node drain blocks on it; use maxUnavailable 1"
            ),
        )
    } else if allowed >= desired && desired > 1 {
        line(
            Verdict::Fail,
            subject,
            format!(
                "{name} ({given}) lets a drain evict all {desired} pods at once: the webhook is then down; use maxUnavailable 1"
            ),
        )
    } else if allowed > 1 {
        line(
            Verdict::Warn,
            subject,
            format!("{name} ({given}) lets a drain take {allowed} of {desired} pods at once"),
        )
    } else {
        line(
            Verdict::Ok,
            subject,
            format!("{name} ({given}) lets a drain take one of {desired} pods at a time"),
        )
    }
}

fn meta_name(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or("?")
}

fn shown(value: &IntOrString) -> String {
    match value {
        IntOrString::Int(n) => n.to_string(),
        IntOrString::String(s) => s.clone(),
    }
}

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
    let deadline = tokio::time::Instant::now() + wait;
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

/// The whole command: gather, check, probe, print one line per check.
/// Exit 1 when one fails.
pub async fn run(options: &DoctorOptions) -> ExitCode {
    // No retries inside the client (crate::k8s::client): a check reports what it
    // sees, and the probe's own loop is what waits.
    let client = match crate::k8s::client::infer().await {
        Ok(client) => client,
        Err(e) => {
            println!("FAIL cluster: cannot connect (in-cluster config or KUBECONFIG): {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut checks = Vec::new();
    let mut key_prefix = None;
    if !options.probe_only {
        let installation = match gather(client.clone(), options).await {
            Ok(installation) => installation,
            Err(e) => {
                println!("FAIL cluster: cannot read the installation: {e}");
                return ExitCode::FAILURE;
            }
        };
        key_prefix = installation
            .deployment
            .as_ref()
            .and_then(|d| server_view(d).ok())
            .map(|view| view.flags.key_prefix);
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        checks = check(&installation, options, now);
    }
    if let Some(probe) = &options.probe {
        let key_prefix = probe
            .key_prefix
            .clone()
            .or(key_prefix)
            .unwrap_or_else(|| DEFAULT_KEY_PREFIX.to_string());
        checks.push(probe_until(client, &probe.namespace, &key_prefix, probe.wait).await);
    }
    for check in &checks {
        println!("{check}");
    }
    if checks.iter().any(|c| c.verdict == Verdict::Fail) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(command: Option<&[&str]>, args: &[&str]) -> Container {
        Container {
            name: "ownerguard".into(),
            command: command.map(|c| c.iter().map(ToString::to_string).collect()),
            args: Some(args.iter().map(ToString::to_string).collect()),
            ..Container::default()
        }
    }

    fn deployment(container: Container) -> Deployment {
        serde_json::from_value(serde_json::json!({
            "spec": {"selector": {}, "template": {"spec": {"containers": [container]}}}
        }))
        .unwrap()
    }

    #[test]
    fn flags_are_read_from_the_effective_command_line_last_one_winning() {
        let d = deployment(container(
            None,
            &[
                "--log-format=json",
                "serve",
                "--addr=0.0.0.0:8443",
                "--lookup-timeout",
                "1s",
                "--addr",
                "[::]:10443",
                "--fail-open",
                "--key-prefix=example.com",
            ],
        ));
        let flags = server_view(&d).map(|v| v.flags).unwrap();
        assert_eq!(flags.webhook_port, 10443);
        assert_eq!(flags.metrics_port, DEFAULT_METRICS_PORT);
        assert_eq!(flags.lookup_timeout, Duration::from_secs(1));
        assert!(flags.fail_open);
        assert_eq!(flags.key_prefix, "example.com");
    }

    #[test]
    fn a_command_that_keeps_the_binary_is_read_and_one_that_drops_it_fails() {
        let kept = deployment(container(
            Some(&["/usr/local/bin/ownerguard", "serve", "--fail-open"]),
            &[],
        ));
        assert!(server_view(&kept).unwrap().flags.fail_open);
        let dropped = deployment(container(Some(&["serve", "--fail-open"]), &[]));
        let Err(problem) = server_view(&dropped).map(|_| ()) else {
            panic!("a command without the binary runs something else")
        };
        assert!(
            problem.contains("replaces the image's entrypoint"),
            "{problem}"
        );
        let not_serve = deployment(container(None, &["doctor"]));
        assert!(server_view(&not_serve).is_err());
    }

    #[test]
    fn percentages_round_up_as_the_disruption_controller_does() {
        assert_eq!(scaled(&IntOrString::String("50%".into()), 3), Some(2));
        assert_eq!(scaled(&IntOrString::String("100%".into()), 2), Some(2));
        assert_eq!(scaled(&IntOrString::String("1%".into()), 2), Some(1));
        assert_eq!(scaled(&IntOrString::Int(1), 2), Some(1));
        assert_eq!(scaled(&IntOrString::String("half".into()), 2), None);
    }

    #[test]
    fn label_selectors_match_as_the_api_server_does() {
        let labels = BTreeMap::from([("app".to_string(), "og".to_string())]);
        let selector =
            |v: serde_json::Value| -> LabelSelector { serde_json::from_value(v).unwrap() };
        assert!(selects(&selector(serde_json::json!({})), &labels));
        assert!(selects(
            &selector(serde_json::json!({"matchLabels": {"app": "og"}})),
            &labels
        ));
        assert!(!selects(
            &selector(serde_json::json!({"matchLabels": {"app": "x"}})),
            &labels
        ));
        assert!(selects(
            &selector(
                serde_json::json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["og"]}]})
            ),
            &labels
        ));
        assert!(!selects(
            &selector(
                serde_json::json!({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]})
            ),
            &labels
        ));
    }
}
