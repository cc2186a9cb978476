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

use std::fmt;
use std::process::ExitCode;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use rustls::pki_types::CertificateDer;

use crate::commands::cli::DoctorOutput;
use crate::owner::LookupBudget;
use rustls::pki_types::pem::PemObject;

mod certificate;
mod conditions;
mod gather;
mod modes;
mod observe;
mod probe;
mod webhooks;
mod workload;

pub use certificate::serving_certificate_source;
use certificate::{check_ca_bundle, check_serving_certificate};
pub use gather::gather;
pub use modes::NamespaceView;
pub use probe::{PROBE_OWNER, probe, probe_until};
use webhooks::{
    Configuration, Role, check_exclusion, check_match_conditions, check_object_selector,
    check_others, check_path, check_policy, check_roles, check_rules, check_timeout, webhook_count,
    webhooks,
};
use workload::{ServerView, check_disruption_budget, check_service, server_view, template_labels};

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
    /// volume that holds the server's `--tls-cert`. Read only when the
    /// Service does not answer a handshake from here.
    pub tls_secret: Option<String>,
    /// Where to read the served certificate by a TLS handshake; default:
    /// the webhooks' Service, `<service>.<namespace>.svc:<port>`.
    pub serving_address: Option<String>,
    /// Fewer days left than this on the serving certificate fails.
    pub min_certificate_days: i64,
    /// The admission round trip, if asked for.
    pub probe: Option<ProbeOptions>,
    /// Only the probe: no other read of the installation.
    pub probe_only: bool,
    /// The checks as lines for people, or JSON objects for scripts.
    pub output: DoctorOutput,
    /// The cluster to check.
    pub target: crate::k8s::client::Target,
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
            serving_address: args.serving_address,
            min_certificate_days: args.min_certificate_days,
            probe: args.probe.map(|namespace| ProbeOptions {
                namespace,
                key_prefix: args.key_prefix,
                wait: args.wait,
            }),
            probe_only: args.probe_only,
            output: args.output,
            target: args.cluster.target(),
        }
    }
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

impl Check {
    /// The check as `--output` asks: its line, or one JSON object.
    pub fn render(&self, output: DoctorOutput) -> String {
        match output {
            DoctorOutput::Text => self.to_string(),
            DoctorOutput::Json => serde_json::json!({
                "verdict": match self.verdict {
                    Verdict::Ok => "ok",
                    Verdict::Warn => "warn",
                    Verdict::Fail => "fail",
                },
                "check": self.subject,
                "detail": self.detail,
            })
            .to_string(),
        }
    }
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
        (Some(_), Some(Ok(ServerView {
            refused: Some(problem),
            ..
        }))) => line(Verdict::Fail, "server", problem.clone()),
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
    checks.push(modes::check_modes(
        &webhooks,
        &installation.namespaces,
        key_prefix,
    ));
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
        let role = Role::of_in_mode(&webhook, key_prefix);
        if let Some((role, mode)) = role {
            checks.push(check_path(&webhook, role, mode));
            checks.push(check_rules(&webhook, role));
            checks.push(check_object_selector(&webhook, role, key_prefix));
            checks.push(check_match_conditions(&webhook, role, key_prefix));
        }
        checks.push(check_exclusion(&webhook, namespace));
        if observe::is_observe(&webhook, key_prefix) {
            // Its own checks; no lookup is made on its answer's path, so
            // its timeout owes --lookup-timeout nothing.
            checks.extend(observe::check_observe(&webhook, key_prefix));
            continue;
        }
        if let Some(flags) = flags {
            if let Some((role, mode)) = role {
                checks.push(check_policy(&webhook, role, mode, flags));
            }
            checks.push(check_timeout(&webhook, flags));
        }
    }

    checks.push(match &installation.deployment {
        None => line(Verdict::Fail, "replicas", format!("Deployment {namespace}/{name} not found")),
        Some(deployment) => {
            let desired = workload::deployment_spec(deployment).and_then(|s| s.replicas).unwrap_or(1);
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

/// The whole command: gather, check, probe, print one line per check.
/// Exit 1 when one fails.
pub async fn run(options: &DoctorOptions) -> ExitCode {
    // No retries inside the client (crate::k8s::client): a check reports what it
    // sees, and the probe's own loop is what waits.
    let client = match crate::k8s::client::connect(&options.target).await {
        Ok(client) => client,
        Err(e) => {
            let check = Check {
                verdict: Verdict::Fail,
                subject: "cluster".to_string(),
                detail: format!("cannot connect: {e}"),
            };
            println!("{}", check.render(options.output));
            return ExitCode::FAILURE;
        }
    };
    let mut checks = Vec::new();
    let mut key_prefix = None;
    if !options.probe_only {
        let installation = match gather(client.clone(), options).await {
            Ok(installation) => installation,
            Err(e) => {
                let check = Check {
                    verdict: Verdict::Fail,
                    subject: "cluster".to_string(),
                    detail: format!("cannot read the installation: {e}"),
                };
                println!("{}", check.render(options.output));
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
        println!("{}", check.render(options.output));
    }
    if checks.iter().any(|c| c.verdict == Verdict::Fail) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The installation as read from the API.
#[derive(Debug)]
pub struct Installation {
    pub mutating: Option<MutatingWebhookConfiguration>,
    pub validating: Option<ValidatingWebhookConfiguration>,
    /// `<name>-cluster-wide`: the validating configuration of the opt-in
    /// `validate-all` webhook, when the switch is on.
    pub cluster_wide: Option<ValidatingWebhookConfiguration>,
    /// `<name>-observe`: the observe-only webhook of the creates without
    /// the owner label, when it is on.
    pub observe: Option<ValidatingWebhookConfiguration>,
    pub deployment: Option<Deployment>,
    /// The Services the webhooks name, as found (missing ones are absent).
    pub services: Vec<Service>,
    pub disruption_budgets: Vec<PodDisruptionBudget>,
    pub serving_certificate: ServingCertificate,
    /// Every other webhook configuration of the cluster, or why they could
    /// not be listed.
    pub others: Result<Vec<OtherConfiguration>, String>,
    /// Every namespace and its labels, for the modes, or why they could
    /// not be listed.
    pub namespaces: Result<Vec<NamespaceView>, String>,
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
            cluster_wide: None,
            observe: None,
            deployment: None,
            services: Vec::new(),
            disruption_budgets: Vec::new(),
            serving_certificate: ServingCertificate::default(),
            others: Ok(Vec::new()),
            namespaces: Ok(Vec::new()),
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
    /// The certificate chain (PEM): the one the Service serves, else the
    /// Secret's.
    pub pem: Option<Vec<u8>>,
    /// Where the chain was served from, when read by a handshake.
    pub served: Option<String>,
    /// Why no chain could be read, neither served nor from the Secret.
    pub unread: Option<String>,
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
    lookup_budget: LookupBudget,
    key_prefix: String,
}
