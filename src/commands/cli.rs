//! The command line. The doc comments are the `--help` text.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::TypedValueParser as _;
use clap::{Args, Parser, Subcommand};

use crate::decide::requester::{Delegate, RequesterCheck};
use crate::decide::resolve::OwnerLabels;
use crate::decide::{DEFAULT_MAX_POD_REFERENCES, Policy, WebhookKind};
use crate::k8s::duration::{parse_flag as duration, parse_nonzero_flag as nonzero_duration};
pub use crate::observe::telemetry::LogFormat;
use crate::owner::LookupBudget;

/// `--version`: the release, the commit built and that commit's date.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("OWNERGUARD_COMMIT"),
    ", ",
    env!("OWNERGUARD_COMMIT_DATE"),
    ")"
);

/// ownerguard: ties what a worker pod creates to that pod with a correct,
/// non-blocking ownerReference, and refuses the objects whose owner is wrong.
#[derive(Debug, Parser)]
// A flag given twice takes its last value, so that a chart's extraArgs can
// override what the chart itself sets (--addr, --lookup-timeout...).
#[command(
    name = "ownerguard",
    version = VERSION,
    propagate_version = true,
    args_override_self = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// Log format: one line per event, as text or as JSON.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true, env = "OWNERGUARD_LOG_FORMAT")]
    pub log_format: LogFormat,
}

// Parsed once at start-up: the size of the serve variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the admission webhooks over HTTPS (/mutate and /validate,
    /// their /warn and /audit modes, /validate-all, /observe), with metrics
    /// and probes over plain HTTP (/metrics, /healthz, /readyz).
    Serve(ServeArgs),
    /// Decide one AdmissionReview (or a plain manifest, as a CREATE) offline
    /// and print the response review, or the object as it would be stored.
    /// Exit 0 allowed, 1 denied, 2 bad input.
    Review(ReviewArgs),
    /// Make a CA and a serving certificate (ca.crt, tls.crt, tls.key) and
    /// print the base64 caBundle for the webhook configurations.
    Certs(CertsArgs),
    /// Delete the pods, Jobs (with their pods) and ConfigMaps of a namespace
    /// whose ownerReferences name the owner pod's uid, and wait until the
    /// pods are gone. A restarted worker calls it at boot.
    Release(ReleaseArgs),
    /// Check a live installation: webhook configurations, caBundle against
    /// the serving certificate and its days left, namespace exclusions,
    /// what the API server calls (Service, port, path, rules, selectors),
    /// failurePolicy and timeoutSeconds against the server's flags, what the
    /// pods run and mount, replicas and PodDisruptionBudget; with --probe, a
    /// real admission round trip. One line per check; exit 1 when one fails.
    Doctor(DoctorArgs),
    /// Find what already leaks on a running cluster: objects labelled for an
    /// owner that is gone or finished and no reference, references the
    /// collector resolves to nothing, blocking ones, contradictions; with
    /// the webhook's own rules. One line per finding, the counts by class,
    /// and the kubectl command that would delete the leaked ones (never
    /// run). --fix adds what /mutate would add; it never deletes. Exit 0
    /// when nothing but ok and dangling, 1 otherwise, 2 on error.
    Audit(AuditArgs),
    /// Print a shell completion script, as kubectl's: for bash,
    /// `source <(ownerguard completion bash)`; for zsh,
    /// `ownerguard completion zsh > "${fpath[1]}/_ownerguard"`.
    Completion {
        /// The shell to complete in.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Which cluster a command talks to, as kubectl's flags say it.
#[derive(Debug, Clone, Default, Args)]
pub struct ClusterArgs {
    /// The kubeconfig file to use (default: KUBECONFIG, else
    /// ~/.kube/config, else the in-cluster configuration of a pod).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

impl ClusterArgs {
    pub fn target(&self) -> crate::k8s::client::Target {
        crate::k8s::client::Target {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
        }
    }
}

/// The resources audited when none is named (`audit --resource`,
/// `serve --audit-resource`): what workers create.
pub const DEFAULT_RESOURCES: [&str; 3] = ["pods", "configmaps", "jobs.batch"];

#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    /// Audit only this namespace (repeatable); default: every namespace.
    #[arg(long = "namespace", value_name = "NAMESPACE")]
    pub namespaces: Vec<String>,

    /// The resources to audit, as kubectl names them (plural or
    /// plural.group), comma-separated or repeated.
    #[arg(long = "resource", value_delimiter = ',', default_values_t = DEFAULT_RESOURCES.map(String::from))]
    pub resources: Vec<String>,

    /// How to print the findings: a table for people, or one JSON object
    /// per finding for scripts.
    #[arg(long, value_enum, default_value_t = AuditOutput::Table)]
    pub output: AuditOutput,

    /// Add the missing non-blocking reference and unblock blocking ones,
    /// with the patch /mutate would make and a resourceVersion
    /// precondition (a conflict is reported, not retried). Never deletes.
    #[arg(long)]
    pub fix: bool,

    /// Prefix of the owner label keys, as the server's --key-prefix.
    #[arg(long, default_value = "ownerguard.io", value_parser = key_prefix)]
    pub key_prefix: String,

    /// Also write the findings as policy reports, one per namespace named
    /// `ownerguard`, replaced whole: OpenReports (openreports.io/v1alpha1
    /// Report) when its CRD is installed, else wgpolicyk8s.io/v1alpha2
    /// PolicyReport, else none (said).
    #[arg(long)]
    pub reports: bool,

    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `audit --output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AuditOutput {
    Table,
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct DoctorArgs {
    /// Namespace ownerguard is installed in.
    #[arg(long, default_value = "ownerguard")]
    pub namespace: String,

    /// Name of the webhook configurations and of the Deployment (the
    /// release's full name).
    #[arg(long, default_value = "ownerguard")]
    pub name: String,

    /// Secret of the serving certificate (default: the Deployment's tls
    /// volume, else <name>-tls).
    #[arg(long)]
    pub tls_secret: Option<String>,

    /// Read the served certificate by a TLS handshake with HOST:PORT
    /// (after `kubectl port-forward svc/ownerguard 8443:443`:
    /// 127.0.0.1:8443); default: the webhooks' Service, which answers from
    /// inside the cluster. The Secret is read only when that fails.
    #[arg(long, value_name = "HOST:PORT")]
    pub serving_address: Option<String>,

    /// Fail when the serving certificate has fewer days left.
    #[arg(long, default_value_t = 14)]
    pub min_certificate_days: i64,

    /// Also prove that the webhook answers: a server-side dry-run create of
    /// a ConfigMap in this namespace, labelled with an owner pod that does
    /// not exist, must come back denied by mutate.<key prefix>. Needs
    /// create on ConfigMaps there; nothing is stored.
    #[arg(long, value_name = "NAMESPACE")]
    pub probe: Option<String>,

    /// Only the probe: no other check, and no other permission needed (the
    /// chart's install check and helm test run this).
    #[arg(long, requires = "probe")]
    pub probe_only: bool,

    /// Key prefix of the probe's owner labels (default: the server's
    /// --key-prefix, read from the Deployment; ownerguard.io with
    /// --probe-only).
    #[arg(long, value_parser = key_prefix)]
    pub key_prefix: Option<String>,

    /// Retry the probe this long while it fails (pods still starting).
    #[arg(long, default_value = "0s", value_parser = duration)]
    pub wait: Duration,

    /// How to print the checks: a line each for people, or one JSON object
    /// each (verdict, check, detail) for scripts.
    #[arg(long, value_enum, default_value_t = DoctorOutput::Text)]
    pub output: DoctorOutput,

    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `doctor --output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DoctorOutput {
    Text,
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct ReleaseArgs {
    /// Namespace of the owner pod and of what it owns.
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: String,

    /// Name of the owner pod (downward API metadata.name).
    #[arg(long, env = "POD_NAME")]
    pub owner_pod: String,

    /// Uid of the owner pod (downward API metadata.uid).
    #[arg(long, env = "POD_UID")]
    pub owner_uid: String,

    /// How long to wait for the deleted pods to be gone.
    #[arg(long, default_value = "60s", value_parser = duration)]
    pub timeout: Duration,

    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// The settings every decision depends on.
#[derive(Debug, Clone, Args)]
pub struct PolicyArgs {
    /// Prefix of the owner label keys: <prefix>/owner-pod and <prefix>/owner-uid.
    #[arg(long, default_value = "ownerguard.io", value_parser = key_prefix)]
    pub key_prefix: String,

    /// A request from a pod-bound service account that declares another pod
    /// as owner: deny it (enforce), allow it with a warning (warn), or do not
    /// compare (off).
    #[arg(long, value_enum, default_value_t = RequesterCheck::Enforce)]
    pub requester_check: RequesterCheck,

    /// A service account (NAMESPACE/NAME; repeat or comma-separate) whose
    /// pods may declare another pod of their own namespace as owner: a broker
    /// that creates agents for the workers of its namespace. The owner is
    /// still looked up and checked.
    #[arg(
        long = "delegate",
        value_delimiter = ',',
        value_name = "NAMESPACE/NAME"
    )]
    pub delegates: Vec<Delegate>,

    /// Allow, with a warning, when an owner cannot be looked up (API server
    /// down or slower than the budget) instead of denying with 503. Pair it
    /// with failurePolicy: Ignore.
    #[arg(long)]
    pub fail_open: bool,

    /// Most Pod ownerReferences one object may carry: above it the object is
    /// denied (400) before any lookup, so that no create turns into
    /// thousands of API calls.
    #[arg(long, default_value_t = DEFAULT_MAX_POD_REFERENCES, value_parser = clap::value_parser!(u16).range(1..=1000).map(usize::from))]
    pub max_pod_references: usize,
}

impl PolicyArgs {
    pub fn policy(&self) -> Policy {
        Policy {
            labels: OwnerLabels::new(&self.key_prefix),
            requester_check: self.requester_check,
            delegates: self.delegates.clone(),
            fail_open: self.fail_open,
            max_pod_references: self.max_pod_references,
            relaxed: crate::decide::Relaxed::default(),
        }
    }
}

/// The longest key prefix: the longest name built on it, the restart
/// holds' Lease annotation `held-restart.<keyPrefix>/<uid>` (and the
/// chart's `validate-all.<keyPrefix>`), must stay a DNS subdomain of at
/// most 253 characters. The chart's schema holds the same limit.
const MAX_KEY_PREFIX: usize = 253 - "held-restart.".len();

fn key_prefix(text: &str) -> Result<String, String> {
    if !crate::k8s::names::is_pod_name(text) {
        Err(format!(
            "'{text}' is not a label key prefix (a lowercase DNS subdomain such as example.com)"
        ))
    } else if text.len() > MAX_KEY_PREFIX {
        Err(format!(
            "the key prefix is {} characters long, at most {MAX_KEY_PREFIX} are allowed: the names built on it (held-restart.<prefix>, validate-all.<prefix>) must stay within the 253 characters of a DNS subdomain",
            text.len()
        ))
    } else {
        Ok(text.to_string())
    }
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// HTTPS address of the webhooks.
    #[arg(long, default_value = "0.0.0.0:8443")]
    pub addr: SocketAddr,

    /// Plain-HTTP address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:9090")]
    pub metrics_addr: SocketAddr,

    /// Serving certificate chain, PEM. Reloaded when the file changes.
    #[arg(long, required_unless_present = "dev", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// Private key of the serving certificate, PEM. Reloaded with it.
    #[arg(long, required_unless_present = "dev", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Require client certificates signed by this CA (PEM): for clusters
    /// whose admission configuration gives the API server one. Reread
    /// like the serving certificate.
    #[arg(long)]
    pub client_ca: Option<PathBuf>,

    /// With --client-ca: accept only a client certificate whose subject
    /// common name or a DNS name is NAME (repeatable, or comma-separated),
    /// not any certificate the CA signed.
    #[arg(
        long = "client-name",
        value_name = "NAME",
        requires = "client_ca",
        value_delimiter = ','
    )]
    pub client_names: Vec<String>,

    /// Development: make a CA and a certificate for localhost in certs/ when
    /// none is there, and serve with them.
    #[arg(long)]
    pub dev: bool,

    /// Directory of --dev certificates.
    #[arg(long, default_value = "certs", hide = true)]
    pub dev_certs_dir: PathBuf,

    /// Look owners up in this static inventory instead of a cluster: a v1
    /// PodList (kubectl get pods -A -o json or -o yaml) or a YAML stream of Pods.
    /// Without it, owners are looked up in the cluster (in-cluster config or
    /// KUBECONFIG): a metadata-only pod watch, then a live GET on a miss.
    #[arg(long)]
    pub pods: Option<PathBuf>,

    /// Watch the pods of these namespaces only (repeat or comma-separate);
    /// all namespaces when absent. Owners elsewhere are looked up live.
    #[arg(long = "namespace", value_delimiter = ',', conflicts_with = "pods")]
    pub namespaces: Vec<String>,

    /// Watch only the pods this label selector matches (for instance
    /// app=worker); other owners are looked up live.
    #[arg(long, conflicts_with = "pods")]
    pub owner_selector: Option<String>,

    /// Write every reviewed request into this directory as a ready-to-commit
    /// test case (request, owner pods, response).
    #[arg(long)]
    pub record: Option<PathBuf>,

    /// Upper bound of one owner lookup; the API server's ?timeout= bounds it
    /// too. At least 1ms: less would fail every lookup not answered from
    /// memory.
    #[arg(long, default_value = "2s", value_parser = LookupBudget::parse_timeout)]
    pub lookup_timeout: Duration,

    /// How often the certificate files are checked for a change; not zero.
    #[arg(long, default_value = "5s", value_parser = nonzero_duration)]
    pub tls_reload_interval: Duration,

    /// After SIGTERM, keep serving this long while /readyz says not ready, so
    /// that Service endpoints drop this pod before the listener closes.
    #[arg(long, default_value = "0s", value_parser = duration)]
    pub shutdown_delay: Duration,

    /// After the listener closes, how long in-flight requests may run.
    #[arg(long, default_value = "25s", value_parser = duration)]
    pub shutdown_timeout: Duration,

    /// Close a connection once nothing has been read or written on it for
    /// this long. Longer than the API server's own 90 s, so that it never
    /// closes a connection the API server is about to reuse. Not zero; over
    /// thirty years means never.
    #[arg(long, default_value = "120s", value_parser = nonzero_duration)]
    pub idle_timeout: Duration,

    /// Most HTTPS connections open at once. At the cap a new connection
    /// takes the place of the least valuable one (a TLS handshake not
    /// finished, then a connection that sent no review, then the longest
    /// idle); it is closed at accept only when every one serves reviews.
    /// An API server keeps up to 25 to a webhook path: 1000 leaves room for
    /// a dozen and bounds what connections hold.
    #[arg(long, default_value_t = crate::serve::DEFAULT_MAX_CONNECTIONS, value_parser = clap::value_parser!(u32).range(1..).map(|v| v as usize))]
    pub max_connections: usize,

    /// Most HTTPS connections one source address holds at once once it
    /// has had a review answered (an API server's); past it, its own least
    /// valuable connection makes room. Default: three quarters of
    /// --max-connections, at least 50 (an API server holds a connection per
    /// webhook call in flight, up to its 600 requests in flight in a
    /// burst). An address that has not holds at most a quarter of
    /// --max-connections (at least 50), or this, if lower.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..).map(|v| v as usize))]
    pub max_connections_per_source: Option<usize>,

    /// Most live owner GETs in flight at once, across all reviews; a lookup
    /// that finds no room before its deadline fails (503, or allowed under
    /// --fail-open).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..).map(usize::from))]
    pub lookup_concurrency: usize,

    /// Most live owner GETs per second, across all reviews (a token bucket
    /// with a burst of as many); the same failure when none is left in time.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..).map(u32::from))]
    pub lookup_rate: u32,

    /// A pod watch that has seen no event and no bookmark for this long is
    /// no longer trusted: its cache hits are checked live until it speaks
    /// again. The API server sends a bookmark about every minute.
    #[arg(long, default_value = "90s", value_parser = duration)]
    pub watch_silence_limit: Duration,

    /// A cached owner last seen whole (listed, added, or read live) longer
    /// ago than this is read live again before it answers, and a running
    /// pod found live is young again: a deletion lost on a stream that
    /// keeps speaking makes a gone owner look alive for at most this long.
    #[arg(long, default_value = "5m", value_parser = duration)]
    pub cache_max_age: Duration,

    /// Run `ownerguard audit` (never --fix) this often and export its
    /// counts as ownerguard_audit_objects{resource,state}; 0s: never.
    /// Needs list on the audited resources.
    #[arg(long, default_value = "0s", value_parser = duration, conflicts_with = "pods")]
    pub audit_interval: Duration,

    /// The resources the periodic audit reads (plural or plural.group).
    #[arg(long = "audit-resource", value_delimiter = ',', default_values_t = DEFAULT_RESOURCES.map(String::from))]
    pub audit_resources: Vec<String>,

    /// Write each periodic audit's findings as policy reports, one per
    /// namespace, replaced whole (`audit --reports`): OpenReports when its
    /// CRD is installed, else wgpolicyk8s.io, else none (said once).
    #[arg(long)]
    pub audit_reports: bool,

    /// The Lease that makes one replica the writer of the periodic audit's
    /// policy reports (every replica audits, for its metrics; one writes).
    /// In the reaper's Lease namespace, held by the same identity.
    #[arg(long, default_value = "ownerguard-audit")]
    pub audit_lease: String,

    /// Release what finished owner pods (Succeeded, Failed) own, as
    /// `release` does, once they have stayed finished for --reap-after.
    /// One replica reaps at a time, the holder of a Lease. Needs delete on
    /// pods, Jobs and ConfigMaps, and the Lease.
    #[arg(long, conflicts_with = "pods")]
    pub reap_finished: bool,

    /// How long a pod stays finished before the reaper releases what it
    /// owns: a worker's own exit path goes first.
    #[arg(long, default_value = "5m", value_parser = duration)]
    pub reap_after: Duration,

    /// The Lease that makes one replica the reaper.
    #[arg(long, default_value = "ownerguard-reaper")]
    pub reaper_lease: String,

    /// Namespace of the reaper's Lease (the chart's release namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub reaper_lease_namespace: String,

    /// This replica's name as the Lease's holder (the pod name).
    #[arg(long, env = "POD_NAME", default_value = "ownerguard")]
    pub reaper_identity: String,

    /// Release what earlier runs of a restarted worker container made, as
    /// `release` does, for the worker pods that ask for it with the label
    /// <key prefix>/release-on-restart: <container> (several: a.b): once
    /// that container has restarted, what the pod owns that was created
    /// before its newest run started goes; what the current run made
    /// stays. Watches the pods with that label only. One replica releases
    /// at a time, the holder of a Lease. Needs list and delete on pods,
    /// Jobs and ConfigMaps, the Lease, and get on the nodes' Leases
    /// (kube-node-lease: they date each node's clock).
    #[arg(long, conflicts_with = "pods")]
    pub release_restarted: bool,

    /// With --release-restarted: how far a node's clock may be from the API
    /// server's. Objects created within it of a restart are kept (which
    /// run made them cannot be told); a node that reports a start further
    /// ahead than this has nothing released.
    #[arg(long, default_value = "2s", value_parser = duration)]
    pub restart_clock_margin: Duration,

    /// The Lease that makes one replica the one that releases restarted
    /// workers' objects (in the reaper's Lease namespace, same identity).
    #[arg(long, default_value = "ownerguard-restarts")]
    pub restart_lease: String,

    /// Record Kubernetes Events on the worker pods concerned: the reaper's
    /// releases and, in a namespace in warn mode, each create let through
    /// that enforce refuses; rate-limited per pod (a burst of 25, one more
    /// every 5 minutes). Needs create and patch on events.k8s.io events.
    #[arg(long, conflicts_with = "pods")]
    pub events: bool,

    /// Join the traces of the API server's webhook calls: a review the API
    /// server samples (its traceparent header) gets a span, with its owner
    /// lookups and the answer, exported over OTLP/HTTP (protobuf) as the
    /// standard OTEL_* variables say (OTEL_EXPORTER_OTLP_ENDPOINT, by
    /// default http://localhost:4318; OTEL_TRACES_SAMPLER, by default the
    /// API server's decision alone). Spans carry no name, label value or
    /// uid.
    #[arg(long, env = "OWNERGUARD_TRACING")]
    pub tracing: bool,

    /// With --tracing: do not read the incoming trace context; trace only
    /// what OTEL_TRACES_SAMPLER starts itself (a ratio of reviews). For API
    /// servers that do not trace: they relay whatever traceparent a user
    /// sent them.
    #[arg(long, env = "OWNERGUARD_TRACING_IGNORE_PARENT", requires = "tracing")]
    pub tracing_ignore_parent: bool,

    /// With --tracing: reviews traced a second, at most, whatever the
    /// sampler and the callers ask (0 traces none).
    #[arg(long, env = "OWNERGUARD_TRACING_MAX_PER_SECOND", default_value_t = crate::observe::traces::DEFAULT_MAX_PER_SECOND, requires = "tracing")]
    pub tracing_max_per_second: u32,

    #[command(flatten)]
    pub policy: PolicyArgs,

    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Clone, Args)]
pub struct ReviewArgs {
    /// An AdmissionReview (JSON or YAML), a bare AdmissionRequest, or a plain
    /// object manifest reviewed as a CREATE. Standard input when absent or -.
    pub input: Option<PathBuf>,

    /// The owner pods that exist: a PodList or a YAML stream of Pods. None
    /// exist when absent (but the --as-pod one).
    #[arg(long)]
    pub pods: Option<PathBuf>,

    /// Which webhook decides.
    #[arg(long, value_enum, default_value_t = WebhookKind::Mutate)]
    pub webhook: WebhookKind,

    /// The namespace's mode, as the chart's webhook of that mode calls
    /// (`/mutate/warn`...): warn and audit never refuse; they complete what
    /// they can with an owner they looked up and let the rest through as
    /// sent, saying what enforce would refuse. `--webhook validate-all` has
    /// none.
    #[arg(long, value_enum, default_value_t = crate::decide::Mode::Enforce)]
    pub mode: crate::decide::Mode,

    /// Namespace of a plain manifest (default: its metadata.namespace, else
    /// default).
    #[arg(long)]
    pub namespace: Option<String>,

    /// Review a plain manifest as created by this pod (NAME/UID), as a
    /// pod-bound service-account token would show it. The pod is taken to
    /// exist.
    #[arg(long, value_name = "NAME/UID", value_parser = as_pod)]
    pub as_pod: Option<(String, String)>,

    /// What to print: the response AdmissionReview, the object as the API
    /// server would store it (the patch applied; nothing when denied), or
    /// the JSON Patch decoded.
    #[arg(long, value_enum, default_value_t = ReviewOutput::Review)]
    pub output: ReviewOutput,

    #[command(flatten)]
    pub policy: PolicyArgs,
}

/// `review --output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReviewOutput {
    /// The response AdmissionReview, as the API server reads it.
    Review,
    /// The object as it would be stored.
    Object,
    /// The JSON Patch, decoded.
    Patch,
}

fn as_pod(text: &str) -> Result<(String, String), String> {
    match text.split_once('/') {
        Some((name, uid)) if !name.is_empty() && !uid.is_empty() => {
            Ok((name.to_string(), uid.to_string()))
        }
        _ => Err(format!("'{text}' is not NAME/UID")),
    }
}

#[derive(Debug, Clone, Args)]
pub struct CertsArgs {
    /// Directory to write ca.crt, tls.crt and tls.key (0600) into.
    #[arg(long)]
    pub out: PathBuf,

    /// DNS names of the serving certificate, such as
    /// ownerguard.ownerguard.svc.
    #[arg(long, num_args = 1.., required_unless_present = "ip")]
    pub dns: Vec<String>,

    /// IP addresses of the serving certificate.
    #[arg(long, num_args = 1..)]
    pub ip: Vec<IpAddr>,

    /// Validity in days.
    #[arg(long, default_value_t = 365, value_parser = clap::value_parser!(u32).range(1..=3650))]
    pub days: u32,
}
