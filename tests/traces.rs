//! Traces, judged from what leaves the process: the OTLP requests
//! ownerguard sends to a collector (a loopback server here), decoded as a
//! collector decodes them. A review the API server samples joins its
//! trace, with a lookup span and the kube client's GET under it (the real
//! kube client against the loopback API server of `tests/apiserver`); an
//! unsampled review or one without a trace makes no span; no exported
//! value names the object, the owner pod or a uid.

mod apiserver;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use apiserver::FakeApi;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::Request;
use axum::routing::post;
use http_body_util::BodyExt;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use ownerguard::decide::Policy;
use ownerguard::observe::Metrics;
use ownerguard::observe::telemetry::{self, LogFormat};
use ownerguard::observe::traces::{Sampling, TraceSettings, Traces};
use ownerguard::owner::{ClusterLookup, LookupLimits, WatchSettings, Watches};
use ownerguard::webhook::Webhook;
use prost::Message;
use serde_json::json;
use tower::ServiceExt;

const NS: &str = "agents";
const OWNER: &str = "worker-traced-7";
const OWNER_UID: &str = "6f1f3d4e-0c1a-4b7e-9d2a-00000000aa07";
const OBJECT: &str = "prompt-secret-name";
const REQUEST_UID: &str = "req-3f9a1c77";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";

/// The trace each decision was told it joined (the decision line's
/// `trace_id`).
#[derive(Default)]
struct TraceIds(Mutex<Vec<Option<String>>>);

impl ownerguard::observe::Observer for TraceIds {
    fn observe(&self, decision: &ownerguard::observe::Decision<'_>) {
        self.0.lock().unwrap().push(decision.trace_id.clone());
    }
}

/// What the collector received: every span, decoded.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<Span>>>);

async fn receive(State(sink): State<Sink>, body: Bytes) -> &'static str {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf request");
    let mut spans = sink.0.lock().unwrap();
    for resource in request.resource_spans {
        for scope in resource.scope_spans {
            spans.extend(scope.spans);
        }
    }
    ""
}

fn string_values(span: &Span) -> Vec<(String, String)> {
    span.attributes
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyValue::StringValue(s)) => s.clone(),
                Some(AnyValue::IntValue(i)) => i.to_string(),
                Some(AnyValue::BoolValue(b)) => b.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    string_values(span)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

fn review(traceparent: Option<&str>) -> Request<axum::body::Body> {
    let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": REQUEST_UID, "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "namespace": NS, "operation": "CREATE", "userInfo": {"username": "alice"},
        "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": OBJECT, "namespace": NS,
            "labels": {"ownerguard.io/owner-pod": OWNER, "ownerguard.io/owner-uid": OWNER_UID}}}}});
    let mut request =
        Request::post("/mutate?timeout=10s").header("content-type", "application/json");
    if let Some(traceparent) = traceparent {
        request = request.header("traceparent", traceparent);
    }
    request
        .body(axum::body::Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap()
}

#[test]
fn a_sampled_review_joins_the_api_servers_trace_and_says_no_name() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sink = Sink::default();
    let collector = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new()
            .route("/v1/traces", post(receive))
            .with_state(sink.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    });
    let traces = Arc::new(
        Traces::start(
            runtime.handle().clone(),
            TraceSettings {
                endpoint: format!("http://{collector}/v1/traces"),
                timeout: Duration::from_secs(5),
                certificate: None,
                sampler: Sampling::PARENT,
                ignore_parent: false,
                max_per_second: 100,
            },
        )
        .unwrap(),
    );
    let _log = telemetry::init_with_traces(LogFormat::Json, "info", Some(traces.tracer()));
    let trace_ids = Arc::new(TraceIds::default());

    let statuses = runtime.block_on(async {
        let server = FakeApi::start().await;
        let client = server.serve_client();
        let metrics = Arc::new(Metrics::default());
        let watches = Arc::new(Watches::spawn(
            client.clone(),
            &WatchSettings::default(),
            metrics.clone(),
        ));
        while !watches.is_synced() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Made after the watch's list and not announced to it: the cache
        // misses, the lookup is a live GET.
        server.api.put_pod_unannounced(NS, OWNER, OWNER_UID);
        let lookup = Arc::new(ClusterLookup::new(
            client,
            watches,
            LookupLimits::default(),
            metrics.clone(),
        ));
        let webhook = Arc::new(
            Webhook::new(Policy::default(), lookup, metrics)
                .with_traces(traces.clone())
                .with_observer(trace_ids.clone()),
        );
        let mut statuses = Vec::new();
        for traceparent in [
            Some(format!("00-{TRACE_ID}-{PARENT_SPAN}-01")),
            // Not sampled by the API server, or no trace at all: no span.
            Some("00-11111111111111111111111111111111-2222222222222222-00".to_string()),
            None,
        ] {
            let response = ownerguard::serve::router(webhook.clone())
                .oneshot(review(traceparent.as_deref()))
                .await
                .unwrap();
            statuses.push(response.status().as_u16());
            let body = response.into_body().collect().await.unwrap().to_bytes();
            let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(answer["response"]["allowed"], true, "{answer}");
        }
        statuses
    });
    assert_eq!(statuses, [200, 200, 200]);
    // The decision line of the traced review names its trace; the others
    // none.
    assert_eq!(
        *trace_ids.0.lock().unwrap(),
        [Some(TRACE_ID.to_string()), None, None]
    );
    traces.flush();
    let spans = sink.0.lock().unwrap().clone();

    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    for span in &spans {
        assert_eq!(
            hex(&span.trace_id),
            TRACE_ID,
            "a span of another trace: {span:?}"
        );
        for (key, value) in string_values(span) {
            for secret in [OWNER, OWNER_UID, OBJECT, REQUEST_UID, "alice"] {
                assert!(!value.contains(secret), "{key}={value} names {secret}");
            }
        }
    }
    let named = |name: &str| {
        spans.iter().find(|s| s.name == name).unwrap_or_else(|| {
            panic!(
                "no span {name} in {:?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            )
        })
    };
    let review = named("POST /mutate");
    assert_eq!(
        hex(&review.parent_span_id),
        PARENT_SPAN,
        "the API server's call is the parent"
    );
    assert_eq!(
        attribute(review, "ownerguard.webhook").as_deref(),
        Some("mutate")
    );
    assert_eq!(
        attribute(review, "ownerguard.operation").as_deref(),
        Some("CREATE")
    );
    assert_eq!(
        attribute(review, "ownerguard.resource").as_deref(),
        Some("/v1/configmaps")
    );
    assert_eq!(attribute(review, "k8s.namespace.name").as_deref(), Some(NS));
    assert_eq!(
        attribute(review, "ownerguard.result").as_deref(),
        Some("patched")
    );
    assert_eq!(
        attribute(review, "http.response.status_code").as_deref(),
        Some("200")
    );
    let lookup = named("owner lookup");
    assert_eq!(lookup.parent_span_id, review.span_id);
    assert_eq!(
        attribute(lookup, "ownerguard.lookup.source").as_deref(),
        Some("api")
    );
    assert_eq!(
        attribute(lookup, "ownerguard.lookup.result").as_deref(),
        Some("found")
    );
    let get = named("GET pod");
    assert_eq!(
        get.parent_span_id, lookup.span_id,
        "the kube client's GET is the lookup's child"
    );
    assert_eq!(
        attribute(get, "url.template").as_deref(),
        Some("/api/v1/namespaces/{namespace}/pods/{name}")
    );
    assert_eq!(attribute(get, "http.status_code").as_deref(), Some("200"));
    let answer = named("answer");
    assert_eq!(answer.parent_span_id, review.span_id);
    // One review sampled: its four spans, nothing of the other two, and
    // nothing of the watch's own requests.
    assert_eq!(
        spans.len(),
        4,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    traces.shutdown(Duration::from_secs(2));
}
