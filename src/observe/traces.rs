//! Traces: a review joins the trace of the API server's webhook call
//! (the W3C `traceparent` it sends), as a span of its own with child spans
//! where time can go (each owner lookup, with the kube client's own span of
//! a live GET under it), exported over OTLP (HTTP, protobuf) with the
//! standard `OTEL_*` environment. Off unless `--tracing`.
//!
//! Sampled by the parent's decision: unless `OTEL_TRACES_SAMPLER` says
//! otherwise, a review the API server did not sample, or that came without
//! a trace, makes no span at all (not even one dropped later), so that
//! tracing on costs an unsampled review one header lookup.
//!
//! What a span says is bounded and kept to a fixed set of keys
//! ([`Redacting`]): the webhook, mode, operation, resource, namespace,
//! result and rule of a review; never a name, a label's value, a uid or a
//! message, which the denial messages and the decision log keep.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use hyper_util::client::legacy::connect::HttpConnector;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, Status, TraceContextExt, TraceState, TracerProvider as _};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_http::{HeaderExtractor, HttpClient, HttpError};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::resource::{EnvResourceDetector, ResourceDetector};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanData, SpanExporter, Tracer};

/// `--tracing-max-per-second`'s default: far above what tracing a share
/// of a busy cluster's creates gives, far below what tracing every review
/// of a burst would cost.
pub const DEFAULT_MAX_PER_SECOND: u32 = 100;

/// The target of ownerguard's own spans: the log leaves them out, the
/// trace layer takes them (and the kube client's spans under them).
pub const TARGET: &str = "ownerguard::trace";

/// The span of a lookup, by name: the kube client's request span is
/// exported only under one.
pub const LOOKUP_SPAN: &str = "owner lookup";

/// The kube client's span of an HTTP request (kube-client's builder, its
/// tower-http trace layer), and the name ownerguard gives a lookup's GET.
pub const KUBE_HTTP_SPAN: &str = "HTTP";
pub const KUBE_TARGET_PREFIX: &str = "kube_client";
pub const GET_POD: &str = "GET pod";

/// The longest string value a span carries: a Kubernetes name's limit.
const MAX_VALUE_BYTES: usize = 253;

/// What the tracing setup holds: the provider (its batch processor's
/// thread), whether roots are sampled, and the propagator.
pub struct Traces {
    provider: SdkTracerProvider,
    propagator: TraceContextPropagator,
    /// What decides which reviews are traced; every span made is exported
    /// (the SDK's sampler keeps all): the decision is taken here, once,
    /// before any span exists.
    sampling: Sampling,
    /// At most this many reviews traced a second: a caller that forces
    /// sampling (a `traceparent` relayed from any user by an API server
    /// that does not trace) cannot make every review pay for a trace.
    budget: Budget,
    /// For the start-up log line.
    pub endpoint: String,
    pub sampler: String,
    pub service_name: String,
}

impl fmt::Debug for Traces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Traces")
            .field("endpoint", &self.endpoint)
            .field("sampler", &self.sampler)
            .field("sampling", &self.sampling)
            .finish_non_exhaustive()
    }
}

/// Why tracing could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TracesError {
    #[error(
        "{variable}={value}: ownerguard exports traces over OTLP/HTTP with protobuf only (http/protobuf); point it at the collector's HTTP port (4318)"
    )]
    Protocol {
        variable: &'static str,
        value: String,
    },
    #[error("OTEL_EXPORTER_OTLP_CERTIFICATE: {0}")]
    Certificate(String),
    #[error(
        "OTEL_TRACES_SAMPLER={0}: ownerguard knows always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off and parentbased_traceidratio"
    )]
    Sampler(String),
    #[error(
        "OTEL_TRACES_SAMPLER_ARG={0:?}: a ratio sampler needs the share of reviews to trace, a number from 0 to 1 (0.01 is one in a hundred)"
    )]
    SamplerArg(String),
    #[error(
        "OTEL_TRACES_EXPORTER={0}: ownerguard exports over OTLP only (otlp, or none to turn traces off)"
    )]
    UnknownExporter(String),
    #[error(
        "--tracing-ignore-parent with OTEL_TRACES_SAMPLER={0}: nothing would ever be traced; give a sampler that starts traces of its own (parentbased_traceidratio with OTEL_TRACES_SAMPLER_ARG)"
    )]
    NothingTraced(String),
    #[error("the OTLP exporter: {0}")]
    Exporter(String),
}

/// An environment variable, trace-specific first.
fn otlp_env(suffix: &str) -> Option<(&'static str, String)> {
    let names: [&'static str; 2] = match suffix {
        "PROTOCOL" => [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ],
        "CERTIFICATE" => [
            "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
        ],
        "TIMEOUT" => [
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ],
        _ => [
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ],
    };
    names.into_iter().find_map(|name| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(|v| (name, v))
    })
}

/// Whether the environment turns the SDK off (`OTEL_SDK_DISABLED=true`,
/// `OTEL_TRACES_EXPORTER=none`): then `--tracing` sets nothing up.
pub fn disabled_by_env() -> bool {
    let is = |name: &str, value: &str| {
        std::env::var(name).is_ok_and(|v| v.trim().eq_ignore_ascii_case(value))
    };
    is("OTEL_SDK_DISABLED", "true") || is("OTEL_TRACES_EXPORTER", "none")
}

/// Where and how spans are exported: from the `OTEL_*` environment
/// ([`TraceSettings::from_env`]), or given (tests, benchmarks).
#[derive(Debug, Clone)]
pub struct TraceSettings {
    /// The traces URL (`.../v1/traces`).
    pub endpoint: String,
    /// One export's bound.
    pub timeout: Duration,
    /// A PEM file of the CAs an `https://` endpoint is checked against
    /// (else the system's).
    pub certificate: Option<String>,
    /// `OTEL_TRACES_SAMPLER` and its argument: parentbased_always_off
    /// (the API server's decision alone) when unset.
    pub sampler: Sampling,
    /// The incoming trace context is not read (`--tracing-ignore-parent`):
    /// only the sampler's own decision starts traces, for API servers that
    /// do not trace (which relay any user's `traceparent` as it came).
    pub ignore_parent: bool,
    /// Reviews traced a second, at most (`--tracing-max-per-second`).
    pub max_per_second: u32,
}

/// Which reviews are traced: by the parent's decision (`parentbased_*`),
/// and a share of those with no parent (or of all, without `parentbased`)
/// as a trace of their own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// `parentbased_*`: a review with a trace context follows its flag.
    pub follows_parent: bool,
    /// The share of the other reviews traced as a trace of their own.
    pub ratio: f64,
}

impl Sampling {
    /// The API server's decision alone.
    pub const PARENT: Self = Self {
        follows_parent: true,
        ratio: 0.0,
    };

    /// `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`, as the
    /// OpenTelemetry specification names them; anything else refused.
    pub fn parse(name: Option<&str>, arg: Option<&str>) -> Result<Self, TracesError> {
        let ratio = || -> Result<f64, TracesError> {
            let text = arg.map(str::trim).unwrap_or_default();
            match text.parse::<f64>() {
                Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
                _ => Err(TracesError::SamplerArg(text.to_string())),
            }
        };
        let name = name.map(str::trim).filter(|n| !n.is_empty());
        Ok(match name {
            None | Some("parentbased_always_off") => Self::PARENT,
            Some("parentbased_always_on") => Self {
                follows_parent: true,
                ratio: 1.0,
            },
            Some("parentbased_traceidratio") => Self {
                follows_parent: true,
                ratio: ratio()?,
            },
            Some("always_on") => Self {
                follows_parent: false,
                ratio: 1.0,
            },
            Some("always_off") => Self {
                follows_parent: false,
                ratio: 0.0,
            },
            Some("traceidratio") => Self {
                follows_parent: false,
                ratio: ratio()?,
            },
            Some(other) => return Err(TracesError::Sampler(other.to_string())),
        })
    }

    /// The name it is known by (the start-up line).
    pub fn name(&self) -> String {
        let (kind, ratio) = (self.follows_parent, self.ratio);
        let prefix = if kind { "parentbased_" } else { "" };
        if ratio <= 0.0 {
            format!("{prefix}always_off")
        } else if ratio >= 1.0 {
            format!("{prefix}always_on")
        } else {
            format!("{prefix}traceidratio {ratio}")
        }
    }
}

/// A budget of traced reviews a second, shared by every task.
#[derive(Debug)]
struct Budget {
    per_second: u32,
    /// The second (since the process's start) and how many were taken in
    /// it, in one word: second << 32 | taken.
    used: std::sync::atomic::AtomicU64,
    start: std::time::Instant,
}

impl Budget {
    fn new(per_second: u32) -> Self {
        Self {
            per_second,
            used: std::sync::atomic::AtomicU64::new(0),
            start: std::time::Instant::now(),
        }
    }

    /// One more traced review this second, if there is room.
    fn take(&self) -> bool {
        use std::sync::atomic::Ordering;
        if self.per_second == 0 {
            return false;
        }
        let second = self.start.elapsed().as_secs() & 0xffff_ffff;
        let mut current = self.used.load(Ordering::Relaxed);
        loop {
            let (at, taken) = (current >> 32, current & 0xffff_ffff);
            let next = if at == second {
                if taken >= u64::from(self.per_second) {
                    return false;
                }
                current + 1
            } else {
                (second << 32) | 1
            };
            match self.used.compare_exchange_weak(
                current,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(seen) => current = seen,
            }
        }
    }
}

/// A share of reviews, drawn without a lock: a per-thread xorshift.
fn draw(ratio: f64) -> bool {
    use std::cell::Cell;
    if ratio >= 1.0 {
        return true;
    }
    if ratio <= 0.0 {
        return false;
    }
    thread_local! {
        static STATE: Cell<u64> = Cell::new({
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(0x9e37_79b9_7f4a_7c15);
            h.finish() | 1
        });
    }
    STATE.with(|state| {
        let mut x = state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        ((x >> 11) as f64 / (1u64 << 53) as f64) < ratio
    })
}

impl TraceSettings {
    /// The settings the `OTEL_*` environment gives.
    pub fn from_env() -> Result<Self, TracesError> {
        if let Some((variable, value)) = otlp_env("PROTOCOL")
            && value.trim() != "http/protobuf"
        {
            return Err(TracesError::Protocol { variable, value });
        }
        let timeout = otlp_env("TIMEOUT")
            .and_then(|(_, v)| v.trim().parse::<u64>().ok())
            .map_or(Duration::from_secs(10), Duration::from_millis);
        let endpoint = otlp_env("ENDPOINT").map_or_else(
            || "http://localhost:4318/v1/traces".to_string(),
            |(name, value)| {
                if name.contains("TRACES") {
                    value
                } else {
                    format!("{}/v1/traces", value.trim_end_matches('/'))
                }
            },
        );
        if let Ok(exporter) = std::env::var("OTEL_TRACES_EXPORTER")
            && !matches!(exporter.trim(), "" | "otlp" | "none")
        {
            return Err(TracesError::UnknownExporter(exporter));
        }
        let sampler = Sampling::parse(
            std::env::var("OTEL_TRACES_SAMPLER").ok().as_deref(),
            std::env::var("OTEL_TRACES_SAMPLER_ARG").ok().as_deref(),
        )?;
        Ok(Self {
            endpoint,
            timeout,
            certificate: otlp_env("CERTIFICATE").map(|(_, path)| path),
            sampler,
            ignore_parent: false,
            max_per_second: DEFAULT_MAX_PER_SECOND,
        })
    }
}

impl Traces {
    /// Tracing as the environment configures it, its exports sent on
    /// `runtime`.
    pub fn from_env(runtime: tokio::runtime::Handle) -> Result<Self, TracesError> {
        Self::start(runtime, TraceSettings::from_env()?)
    }

    /// Tracing with `settings`, its exports sent on `runtime`.
    pub fn start(
        runtime: tokio::runtime::Handle,
        settings: TraceSettings,
    ) -> Result<Self, TracesError> {
        let client = OnRuntime {
            runtime,
            inner: opentelemetry_http::hyper::HyperClient::new(
                https_connector(settings.certificate.as_deref(), &settings.endpoint)?,
                settings.timeout,
                None,
            ),
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(settings.endpoint.clone())
            .with_timeout(settings.timeout)
            .build()
            .map_err(|e| TracesError::Exporter(e.to_string()))?;
        let resource = resource();
        let service_name = resource
            .get(&opentelemetry::Key::from_static_str("service.name"))
            .map(|v| v.to_string())
            .unwrap_or_default();
        if settings.ignore_parent && settings.sampler.ratio <= 0.0 {
            return Err(TracesError::NothingTraced(settings.sampler.name()));
        }
        // Every span made is kept: which reviews make spans is decided in
        // `parent`, before any exists (the SDK's own sampler, read from the
        // environment, would otherwise decide again, and after the cost).
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(Redacting(exporter))
            .with_resource(resource)
            .with_sampler(Sampler::AlwaysOn)
            .build();
        let mut sampling = settings.sampler;
        if settings.ignore_parent {
            sampling.follows_parent = false;
        }
        Ok(Self {
            provider,
            propagator: TraceContextPropagator::new(),
            sampling,
            budget: Budget::new(settings.max_per_second),
            endpoint: settings.endpoint,
            sampler: format!(
                "{}{}, at most {} a second",
                settings.sampler.name(),
                if settings.ignore_parent {
                    ", the incoming trace context ignored"
                } else {
                    ""
                },
                settings.max_per_second
            ),
            service_name,
        })
    }

    /// Exports every span ended so far (tests, benchmarks). It blocks its
    /// thread until the export is done, which runs on the runtime: never
    /// call it from a task of a current-thread runtime.
    pub fn flush(&self) {
        if let Err(e) = self.provider.force_flush() {
            tracing::warn!("traces: flushing the exporter: {e}");
        }
    }

    /// A tracer of this provider (the trace layer's).
    pub fn tracer(&self) -> Tracer {
        self.provider.tracer("ownerguard")
    }

    /// The context a review's span is made under, or `None` when it makes
    /// none: no sampled parent and no sampler of roots.
    pub fn parent(&self, headers: &HeaderMap) -> Option<Context> {
        let traceparent = if self.sampling.follows_parent {
            headers.get("traceparent")
        } else {
            None
        };
        let cx = match traceparent {
            // The parent's decision, read from the header's flags alone
            // before anything is parsed or allocated (the API server sends
            // a traceparent with every call once it traces at all).
            Some(value) => {
                if !sampled_flag(value.as_bytes()) {
                    return None;
                }
                let cx = self.propagator.extract(&HeaderExtractor(headers));
                if !cx.span().span_context().is_valid() {
                    return None; // a header that does not parse: no trace
                }
                cx
            }
            // No parent to follow: a trace of its own, for a share.
            None => {
                if !draw(self.sampling.ratio) {
                    return None;
                }
                Context::new()
            }
        };
        self.budget.take().then_some(cx)
    }

    /// Exports what is queued and stops the batch processor's thread,
    /// within `timeout`.
    pub fn shutdown(&self, timeout: Duration) {
        if let Err(e) = self.provider.shutdown_with_timeout(timeout) {
            tracing::warn!("traces: shutting the exporter down: {e}");
        }
    }
}

/// Whether a W3C `traceparent` (`VV-TRACEID-PARENTID-FF`, 55 bytes in
/// version 00, longer in later versions) says sampled: its flags' lowest
/// bit. The propagator checks the rest.
fn sampled_flag(traceparent: &[u8]) -> bool {
    let hex = |b: u8| (b as char).to_digit(16);
    traceparent.len() >= 55
        && traceparent[52] == b'-'
        && hex(traceparent[54]).is_some_and(|low| low & 1 == 1)
        && hex(traceparent[53]).is_some()
}

/// `service.name` from `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES`,
/// else ownerguard; its version; the pod (`POD_NAME`, which the chart sets)
/// as the instance.
fn resource() -> Resource {
    let from_env = EnvResourceDetector::new().detect();
    let service_name = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .or_else(|| {
            from_env
                .get(&opentelemetry::Key::from_static_str("service.name"))
                .map(|v| v.to_string())
        })
        .unwrap_or_else(|| "ownerguard".to_string());
    let mut builder = Resource::builder_empty()
        .with_detector(Box::new(EnvResourceDetector::new()))
        .with_service_name(service_name)
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.is_empty()
    {
        builder = builder
            .with_attribute(KeyValue::new("service.instance.id", pod.clone()))
            .with_attribute(KeyValue::new("k8s.pod.name", pod));
    }
    builder.build()
}

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// HTTPS with rustls (the roots of `OTEL_EXPORTER_OTLP_CERTIFICATE`, else
/// the system's), or plain HTTP.
fn https_connector(certificate: Option<&str>, endpoint: &str) -> Result<Connector, TracesError> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = hyper_rustls::HttpsConnectorBuilder::new();
    let builder = match certificate {
        Some(path) => {
            use rustls::pki_types::pem::PemObject;
            let pem = std::fs::read(path)
                .map_err(|e| TracesError::Certificate(format!("{path}: {e}")))?;
            let mut roots = rustls::RootCertStore::empty();
            for certificate in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
                let certificate =
                    certificate.map_err(|e| TracesError::Certificate(format!("{path}: {e}")))?;
                roots
                    .add(certificate)
                    .map_err(|e| TracesError::Certificate(format!("{path}: {e}")))?;
            }
            builder.with_tls_config(client_config(provider, roots)?)
        }
        None => match builder.with_provider_and_native_roots(provider.clone()) {
            Ok(builder) => builder,
            // No system roots (a bare image): only an https:// endpoint
            // needs them.
            Err(e) if endpoint.starts_with("https://") => {
                return Err(TracesError::Certificate(format!(
                    "the system's roots, for {endpoint}: {e}"
                )));
            }
            Err(_) => hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(client_config(provider, rustls::RootCertStore::empty())?),
        },
    };
    Ok(builder.https_or_http().enable_http1().build())
}

/// A rustls client trusting `roots` alone, with the ring provider.
fn client_config(
    provider: std::sync::Arc<rustls::crypto::CryptoProvider>,
    roots: rustls::RootCertStore,
) -> Result<rustls::ClientConfig, TracesError> {
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TracesError::Certificate(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// The hyper client, run on ownerguard's runtime: the batch processor
/// exports from a thread of its own, outside any runtime, and hyper needs
/// one.
#[derive(Debug)]
struct OnRuntime {
    runtime: tokio::runtime::Handle,
    inner: opentelemetry_http::hyper::HyperClient<Connector>,
}

#[async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let inner = self.inner.clone();
        self.runtime
            .spawn(async move { inner.send_bytes(request).await })
            .await
            .map_err(|e| Box::new(e) as HttpError)?
    }
}

/// The keys a span may carry, as exported. Every other attribute is
/// dropped at export (the kube client's URL, which names the owner pod,
/// becomes `url.template`).
const KEPT: &[&str] = &[
    "http.request.method",
    "http.route",
    "http.response.status_code",
    "ownerguard.webhook",
    "ownerguard.mode",
    "ownerguard.operation",
    "ownerguard.resource",
    "ownerguard.subresource",
    "ownerguard.dry_run",
    "ownerguard.result",
    "ownerguard.rule",
    "ownerguard.lookup.source",
    "ownerguard.lookup.result",
    "ownerguard.lookup.fresh",
    "k8s.namespace.name",
    "error.type",
    "http.method",
    "http.status_code",
];

/// The exporter, with every span's attributes kept to [`KEPT`], each
/// string bounded, and no events, links or status message: run on the
/// batch processor's thread, off the path of a review.
#[derive(Debug)]
pub struct Redacting<E>(pub E);

impl<E: SpanExporter> SpanExporter for Redacting<E> {
    async fn export(&self, mut batch: Vec<SpanData>) -> OTelSdkResult {
        for span in &mut batch {
            redact(span);
        }
        self.0.export(batch).await
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}

/// One span as it may leave the process.
pub fn redact(span: &mut SpanData) {
    // A lookup that found no pod is an answer, not a failure: the kube
    // client marks every 4xx an error.
    let not_found = span
        .attributes
        .iter()
        .any(|kv| kv.key.as_str() == "http.status_code" && matches!(kv.value, Value::I64(404)));
    let mut kept = Vec::with_capacity(span.attributes.len());
    for attribute in span.attributes.drain(..) {
        let key = attribute.key.as_str();
        if key == "http.url" {
            kept.push(KeyValue::new(
                "url.template",
                url_template(&attribute.value.as_str()),
            ));
        } else if KEPT.contains(&key) {
            kept.push(KeyValue::new(attribute.key, bounded(attribute.value)));
        }
    }
    span.attributes = kept;
    span.events = Default::default();
    span.links = Default::default();
    span.dropped_attributes_count = 0;
    // The caller's tracestate is its own text: not passed on.
    if !span.span_context.trace_state().header().is_empty() {
        span.span_context = SpanContext::new(
            span.span_context.trace_id(),
            span.span_context.span_id(),
            span.span_context.trace_flags(),
            span.span_context.is_remote(),
            TraceState::NONE,
        );
    }
    if let Status::Error { .. } = span.status {
        span.status = if not_found {
            Status::Unset
        } else {
            Status::error("")
        };
    }
}

/// A string value cut to [`MAX_VALUE_BYTES`] at a character boundary.
fn bounded(value: Value) -> Value {
    match value {
        Value::String(s) if s.as_str().len() > MAX_VALUE_BYTES => {
            let text = s.as_str();
            let mut end = MAX_VALUE_BYTES;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            Value::from(text[..end].to_string())
        }
        other => other,
    }
}

/// The kube client's URL with its names taken out: the path's shape, no
/// query.
fn url_template(url: &str) -> Cow<'static, str> {
    let path = url.split(['?', '#']).next().unwrap_or_default();
    let path = path
        .find("://")
        .and_then(|scheme| {
            path[scheme + 3..]
                .find('/')
                .map(|p| &path[scheme + 3 + p..])
        })
        .unwrap_or(path);
    let segments: Vec<&str> = path.split('/').collect();
    match segments.as_slice() {
        ["", "api", "v1", "namespaces", _, "pods", _] => {
            Cow::Borrowed("/api/v1/namespaces/{namespace}/pods/{name}")
        }
        ["", "api", "v1", "namespaces", _, "pods"] => {
            Cow::Borrowed("/api/v1/namespaces/{namespace}/pods")
        }
        _ => Cow::Borrowed("other"),
    }
}

/// A review's span, when the review is traced: made under the API
/// server's context before anything of the review runs, ended when
/// dropped (once the response is built, before hyper writes it). It is never entered: the
/// decision line is written with no span current, as without tracing
/// (its direct path); only each lookup's future runs inside a span.
#[derive(Debug)]
pub struct ReviewSpan(tracing::Span);

impl ReviewSpan {
    /// The span of a review on `route` (`/mutate`, `/validate/warn`...),
    /// or `None` when it is not traced.
    pub fn start(
        traces: &Traces,
        headers: &HeaderMap,
        route: &str,
        webhook: &'static str,
        mode: &'static str,
    ) -> Option<Self> {
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let parent = traces.parent(headers)?;
        let span = tracing::info_span!(
            target: TARGET,
            parent: None,
            "review",
            otel.name = format_args!("POST {route}"),
            otel.kind = "server",
            otel.status_code = tracing::field::Empty,
            http.request.method = "POST",
            http.route = route,
            http.response.status_code = tracing::field::Empty,
            ownerguard.webhook = webhook,
            ownerguard.mode = mode,
            ownerguard.operation = tracing::field::Empty,
            ownerguard.resource = tracing::field::Empty,
            ownerguard.subresource = tracing::field::Empty,
            ownerguard.dry_run = tracing::field::Empty,
            k8s.namespace.name = tracing::field::Empty,
            ownerguard.result = tracing::field::Empty,
            ownerguard.rule = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        if span.is_disabled() {
            return None;
        }
        // Before the span is first used: its OpenTelemetry span is made
        // then, under this parent.
        let _ = span.set_parent(parent);
        Some(Self(span))
    }

    /// What the review asks, once decoded: operation, resource, namespace.
    pub fn record_request(&self, request: &crate::admission::AdmissionRequest<'_>) {
        use crate::admission::Operation;
        let operation = match request.operation {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
            Operation::Other(_) => "OTHER",
        };
        let resource = &request.resource;
        self.0.record("ownerguard.operation", operation);
        self.0.record(
            "ownerguard.resource",
            format_args!(
                "{}/{}/{}",
                resource.group.as_str(),
                resource.version.as_str(),
                resource.resource.as_str()
            ),
        );
        if let Some(sub) = &request.sub_resource {
            self.0.record("ownerguard.subresource", sub.as_str());
        }
        if let Some(namespace) = &request.namespace {
            self.0.record("k8s.namespace.name", namespace.as_str());
        }
        self.0
            .record("ownerguard.dry_run", request.dry_run.unwrap_or(false));
    }

    /// The answer: `allowed`, `patched`, `denied` or `warned`, and the
    /// rule that refused (or the rules a mode let through, by name).
    pub fn record_answer(&self, result: &str, rule: Option<&str>) {
        self.0.record("ownerguard.result", result);
        if let Some(rule) = rule {
            self.0.record("ownerguard.rule", rule);
        }
    }

    /// The HTTP status sent, and a transport error's kind (a denial is an
    /// answer, not an error).
    pub fn record_status(&self, status: u16, error: Option<&'static str>) {
        self.0.record("http.response.status_code", status);
        if let Some(error) = error {
            self.0.record("error.type", error);
            self.0.record("otel.status_code", "ERROR");
        }
    }

    /// The span of one owner lookup, a child of this one: the future of
    /// the lookup runs in it, so that the kube client's request span of a
    /// live GET is its child.
    pub fn lookup(&self, fresh: bool) -> tracing::Span {
        tracing::info_span!(
            target: TARGET,
            parent: &self.0,
            "owner lookup",
            otel.kind = "internal",
            ownerguard.lookup.source = tracing::field::Empty,
            ownerguard.lookup.result = tracing::field::Empty,
            ownerguard.lookup.fresh = fresh,
        )
    }

    /// The trace's id, in hex (the decision line's `trace_id`); none
    /// when the span is not sampled.
    pub fn trace_id(&self) -> Option<String> {
        use opentelemetry::trace::TraceContextExt;
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let cx = self.0.context();
        let span = cx.span();
        let context = span.span_context();
        // Every span made is sampled (the decision is taken before), but
        // name the trace only of one that is.
        context.is_sampled().then(|| context.trace_id().to_string())
    }

    /// The span of writing the answer, a child of this one.
    pub fn answer(&self) -> tracing::Span {
        tracing::info_span!(target: TARGET, parent: &self.0, "answer", otel.kind = "internal")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanContext, SpanId, SpanKind, TraceFlags, TraceId, TraceState};
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};
    use std::time::SystemTime;

    fn span(attributes: Vec<KeyValue>) -> SpanData {
        SpanData {
            span_context: SpanContext::new(
                TraceId::from(1),
                SpanId::from(2),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: SpanId::from(3),
            parent_span_is_remote: false,
            span_kind: SpanKind::Client,
            name: "GET pod".into(),
            start_time: SystemTime::UNIX_EPOCH,
            end_time: SystemTime::UNIX_EPOCH,
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::error("pods \"worker-7\" not found"),
            instrumentation_scope: Default::default(),
        }
    }

    #[test]
    fn only_the_kept_keys_leave_and_no_name_with_them() {
        let mut data = span(vec![
            KeyValue::new(
                "http.url",
                "https://10.0.0.1:443/api/v1/namespaces/agents/pods/worker-7?timeout=5s",
            ),
            KeyValue::new("http.method", "GET"),
            KeyValue::new("http.status_code", 404),
            KeyValue::new("ownerguard.owner", "worker-7"),
            KeyValue::new("k8s.namespace.name", "n".repeat(1000)),
        ]);
        redact(&mut data);
        let text = format!("{:?}", data.attributes);
        assert!(!text.contains("worker-7"), "{text}");
        assert!(!format!("{:?}", data.status).contains("worker-7"));
        let value = |key: &str| {
            data.attributes
                .iter()
                .find(|kv| kv.key.as_str() == key)
                .map(|kv| kv.value.as_str().into_owned())
        };
        assert_eq!(
            value("url.template").as_deref(),
            Some("/api/v1/namespaces/{namespace}/pods/{name}")
        );
        assert_eq!(value("http.method").as_deref(), Some("GET"));
        assert_eq!(value("k8s.namespace.name").map(|v| v.len()), Some(253));
        assert_eq!(value("ownerguard.owner"), None);
    }

    #[test]
    fn samplers_are_the_specifications_names_and_a_ratio_needs_its_share() {
        let parse = |name: Option<&str>, arg: Option<&str>| Sampling::parse(name, arg);
        assert_eq!(parse(None, None).unwrap(), Sampling::PARENT);
        assert_eq!(parse(Some(""), Some("0.3")).unwrap(), Sampling::PARENT);
        let ratio = parse(Some("parentbased_traceidratio"), Some(" 0.01 ")).unwrap();
        assert!(ratio.follows_parent && (ratio.ratio - 0.01).abs() < 1e-12);
        assert_eq!(
            parse(Some("always_on"), None).unwrap(),
            Sampling {
                follows_parent: false,
                ratio: 1.0
            }
        );
        for (name, arg) in [
            (Some("parentbased_traceidratio"), None),
            (Some("traceidratio"), Some("1%")),
            (Some("traceidratio"), Some("0,01")),
            (Some("traceidratio"), Some("2")),
            (Some("traceidratio"), Some("-0.1")),
            (Some("ALWAYS_OFF"), None),
            (Some("parentbased_ratio"), Some("0.1")),
        ] {
            assert!(parse(name, arg).is_err(), "{name:?} {arg:?}");
        }
        assert_eq!(
            parse(Some("always_off"), None).unwrap().name(),
            "always_off"
        );
        assert_eq!(ratio.name(), "parentbased_traceidratio 0.01");
    }

    /// Which reviews get a span, from the header and the settings.
    #[test]
    fn a_span_is_made_by_the_parents_flag_or_the_samplers_own_share() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let traces = |sampler: Sampling, ignore_parent: bool, max_per_second: u32| {
            Traces::start(
                runtime.handle().clone(),
                TraceSettings {
                    endpoint: "http://127.0.0.1:9/v1/traces".into(),
                    timeout: Duration::from_secs(1),
                    certificate: None,
                    sampler,
                    ignore_parent,
                    max_per_second,
                },
            )
            .unwrap()
        };
        let headers = |flags: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                "traceparent",
                format!("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-{flags}")
                    .parse()
                    .unwrap(),
            );
            h
        };
        let parented = |cx: Option<Context>| cx.map(|cx| cx.span().span_context().is_valid());
        let follow = traces(Sampling::PARENT, false, 100);
        assert_eq!(parented(follow.parent(&headers("01"))), Some(true));
        assert_eq!(parented(follow.parent(&headers("00"))), None);
        assert_eq!(parented(follow.parent(&HeaderMap::new())), None);
        let always = Sampling {
            follows_parent: false,
            ratio: 1.0,
        };
        // Ignoring the caller: a trace of its own, whatever it sent.
        let own = traces(always, true, 100);
        assert_eq!(parented(own.parent(&headers("00"))), Some(false));
        assert_eq!(parented(own.parent(&headers("01"))), Some(false));
        // Nothing could be traced: refused at start.
        assert!(matches!(
            Traces::start(
                runtime.handle().clone(),
                TraceSettings {
                    endpoint: "http://127.0.0.1:9/v1/traces".into(),
                    timeout: Duration::from_secs(1),
                    certificate: None,
                    sampler: Sampling::PARENT,
                    ignore_parent: true,
                    max_per_second: 100,
                },
            ),
            Err(TracesError::NothingTraced(_))
        ));
        // A caller that asks for every review gets at most the budget.
        let bounded = traces(Sampling::PARENT, false, 2);
        let traced = (0..10)
            .filter(|_| bounded.parent(&headers("01")).is_some())
            .count();
        assert_eq!(traced, 2);
        for t in [follow, own, bounded] {
            t.shutdown(Duration::from_millis(100));
        }
    }

    #[test]
    fn the_budget_allows_so_many_a_second_and_none_at_zero() {
        let budget = Budget::new(3);
        assert_eq!((0..10).filter(|_| budget.take()).count(), 3);
        assert!(!Budget::new(0).take());
    }

    #[test]
    fn a_share_is_drawn_near_its_ratio() {
        assert!(draw(1.0));
        assert!(!draw(0.0));
        let drawn = (0..100_000).filter(|_| draw(0.1)).count();
        assert!((9_000..11_000).contains(&drawn), "{drawn}");
    }

    #[test]
    fn the_callers_tracestate_and_a_not_found_error_do_not_leave() {
        let mut data = span(vec![KeyValue::new("http.status_code", 404)]);
        data.span_context = SpanContext::new(
            TraceId::from(1),
            SpanId::from(2),
            TraceFlags::SAMPLED,
            false,
            TraceState::from_key_value([("vendor", "worker-7")]).unwrap(),
        );
        redact(&mut data);
        assert_eq!(data.span_context.trace_state().header(), "");
        assert_eq!(data.status, Status::Unset);
        let mut failed = span(vec![KeyValue::new("http.status_code", 500)]);
        redact(&mut failed);
        assert_eq!(failed.status, Status::error(""));
    }

    #[test]
    fn the_sampled_flag_is_the_lowest_bit_of_the_flags() {
        let parent =
            |flags: &str| format!("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-{flags}");
        assert!(sampled_flag(parent("01").as_bytes()));
        assert!(sampled_flag(parent("03").as_bytes()));
        assert!(!sampled_flag(parent("00").as_bytes()));
        assert!(!sampled_flag(parent("02").as_bytes()));
        assert!(!sampled_flag(parent("0z").as_bytes()));
        assert!(!sampled_flag(b"00-short-01"));
        // A later version, longer: its first 55 bytes are read the same.
        assert!(sampled_flag(format!("{}-more", parent("01")).as_bytes()));
    }

    #[test]
    fn a_url_of_another_shape_says_nothing_of_it() {
        assert_eq!(url_template("/api/v1/namespaces/a/configmaps/b"), "other");
        assert_eq!(
            url_template("/api/v1/namespaces/a/pods"),
            "/api/v1/namespaces/{namespace}/pods"
        );
        assert_eq!(url_template("/api/v1/namespaces/a/pods/b/status"), "other");
    }
}
