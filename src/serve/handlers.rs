//! The HTTP handlers of `/mutate`, `/validate` and `/validate-all`,
//! nothing else: read the body within its limit, read `?timeout=`, hand
//! over to the [`Webhook`]. What goes wrong before a review is decided is
//! a [`TransportError`], mapped to its HTTP status in one place; a denial
//! is an answer (HTTP 200), and its code is the decision's
//! ([`crate::decide::denial::Denial::code`]).

use std::net::IpAddr;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, post};
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use tokio::sync::Semaphore;

use crate::admission::DecodeError;
use crate::deadline::within;
use crate::decide::{Endpoint, Map, Mode};
use crate::k8s::duration::parse_go_duration;
use crate::observe::traces::ReviewSpan;
use crate::webhook::Webhook;

/// The largest review the API server can send, from its own limits
/// (SPEC §4). A request body is at most 3 MiB (`MaxRequestBodyBytes`,
/// k8s.io/apiserver, no flag); a JSON patch may grow the object it patches
/// (at most 1.5 MiB, etcd's default `--max-request-bytes`) by its own 3 MiB
/// and 3 MiB more of `copy` operations (`JSONPatchMaxCopyBytes`), and the
/// review carries the result before etcd refuses it: 7.5 MiB of object,
/// and an UPDATE's `oldObject` of up to 1.5 MiB. Go's JSON encoder writes
/// `<`, `>` and `&` as six bytes each, so a built-in object of them
/// (stored as protobuf) grows six-fold: 6 × (7.5 + 1.5) MiB = 54 MiB, plus
/// the envelope.
pub const MAX_BODY_BYTES: usize = 56 * 1024 * 1024;

/// The bytes of request bodies held at once across all requests, in two
/// pools: reviews of at most [`SMALL_BODY_BYTES`] (nearly all: a pod is a
/// few KiB) share [`SMALL_BUDGET_BYTES`], the rare larger ones
/// [`LARGE_BUDGET_BYTES`], so that an everyday review never waits behind a
/// large one (a semaphore serves its waiters in order). A request waits
/// for room for its declared body (within its own timeout) rather than
/// being refused, so the largest review is still decided while memory
/// stays bounded under any concurrency: the chart's limit is 256 MiB, a
/// thousand connections at the cap under a flood hold about 160 MiB
/// (performance.md), and bodies are read into one buffer, never copied
/// again.
pub const BODY_BUDGET_BYTES: usize = SMALL_BUDGET_BYTES + LARGE_BUDGET_BYTES;

/// The largest body of the everyday pool.
pub const SMALL_BODY_BYTES: usize = 1024 * 1024;

/// The everyday pool: thousands of reviews at once.
pub const SMALL_BUDGET_BYTES: usize = 16 * 1024 * 1024;

/// The pool of larger reviews: one of the largest at a time.
pub const LARGE_BUDGET_BYTES: usize = MAX_BODY_BYTES;

/// What one source address may hold of a pool: a quarter of the everyday
/// one, or one largest review. A client that declares bodies it never
/// sends cannot take the room of the API server's reviews.
fn share_of(pool_bytes: usize) -> usize {
    if pool_bytes <= SMALL_BUDGET_BYTES {
        pool_bytes / 4
    } else {
        MAX_BODY_BYTES
    }
}

/// The slowest a body may arrive once its request has begun: the API
/// server writes it at once, so a body that trickles (holding its room in
/// the budget) is cut at a second plus its size at this rate.
const BODY_BYTES_PER_SECOND: f64 = 8.0 * 1024.0 * 1024.0;

/// The address a request came from, which the accept loop puts in its
/// extensions (absent when the router is driven without a socket).
#[derive(Debug, Clone, Copy)]
pub struct Source(pub IpAddr);

/// A pool of body bytes, and each source's share of it.
struct Pool {
    total: Semaphore,
    share: usize,
    sources: Mutex<Map<IpAddr, Arc<Semaphore>>>,
}

/// The two pools.
struct Budget {
    small: Pool,
    large: Pool,
}

/// Room for one body, given back when dropped.
struct Room<'a> {
    _total: tokio::sync::SemaphorePermit<'a>,
    source: Option<(IpAddr, Arc<Semaphore>, tokio::sync::OwnedSemaphorePermit)>,
    pool: &'a Pool,
}

impl Pool {
    fn new(bytes: usize) -> Self {
        Self {
            total: Semaphore::new(bytes),
            share: share_of(bytes).max(1),
            sources: Mutex::new(Map::default()),
        }
    }

    /// Wait for room for `bytes`: the source's share first, then the
    /// total, so that one source's waiters never queue ahead of another's
    /// in the total.
    async fn reserve(&self, source: Option<IpAddr>, bytes: usize) -> Room<'_> {
        let permits = u32::try_from(bytes.min(self.share)).unwrap_or(u32::MAX);
        let source = match source {
            Some(ip) => {
                let share = self
                    .sources
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .entry(ip)
                    .or_insert_with(|| Arc::new(Semaphore::new(self.share)))
                    .clone();
                let permit = share
                    .clone()
                    .acquire_many_owned(permits)
                    .await
                    .expect("never closed");
                Some((ip, share, permit))
            }
            None => None,
        };
        let total = self
            .total
            .acquire_many(permits)
            .await
            .expect("never closed");
        Room {
            _total: total,
            source,
            pool: self,
        }
    }
}

impl Budget {
    fn new(bytes: usize) -> Self {
        Self {
            small: Pool::new(SMALL_BUDGET_BYTES.min(bytes)),
            large: Pool::new(bytes.saturating_sub(SMALL_BUDGET_BYTES).max(MAX_BODY_BYTES)),
        }
    }

    async fn reserve(&self, source: Option<IpAddr>, bytes: usize) -> Room<'_> {
        if bytes <= SMALL_BODY_BYTES {
            self.small.reserve(source, bytes).await
        } else {
            self.large.reserve(source, bytes).await
        }
    }
}

impl Drop for Room<'_> {
    fn drop(&mut self) {
        // The source's share is forgotten once nothing of it is held, so
        // the map holds only sources with a body in flight.
        if let Some((ip, share, permit)) = self.source.take() {
            drop(permit);
            let mut sources = self
                .pool
                .sources
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if share.available_permits() == self.pool.share && Arc::strong_count(&share) == 2 {
                sources.remove(&ip);
            }
        }
    }
}

/// What the handlers share: the webhook, and the budget of body bytes in
/// flight.
#[derive(Clone)]
struct Served {
    webhook: Arc<Webhook>,
    budget: Arc<Budget>,
}

/// `/mutate`, `/validate` and `/validate-all`, ready to serve or to drive
/// in tests, with a budget of [`BODY_BUDGET_BYTES`].
pub fn router(webhook: Arc<Webhook>) -> Router {
    router_with_budget(webhook, BODY_BUDGET_BYTES)
}

/// [`router`] with a budget of `budget_bytes` of bodies in flight (at
/// least [`MAX_BODY_BYTES`], so that the largest review fits).
pub fn router_with_budget(webhook: Arc<Webhook>, budget_bytes: usize) -> Router {
    let budget = budget_bytes.max(MAX_BODY_BYTES);
    let mut router = Router::new()
        .route("/validate-all", at(Path::Decide(Endpoint::VALIDATE_ALL)))
        .route("/observe", at(Path::Observe));
    // `/mutate` and `/validate` decide in enforce; `/mutate/warn`,
    // `/mutate/audit` and the same of `/validate` in the mode the chart's
    // webhook entry for that namespace's `<keyPrefix>/mode` names (SPEC §3
    // rule 17). `/validate-all` has no mode: nothing it refuses is a rule
    // a mode may soften.
    for endpoint in [Endpoint::MUTATE, Endpoint::VALIDATE] {
        router = router.route(&format!("/{}", endpoint.name), at(Path::Decide(endpoint)));
        for mode in [Mode::Warn, Mode::Audit] {
            router = router.route(
                &format!("/{}/{}", endpoint.name, mode.as_str()),
                at(Path::Decide(endpoint.in_mode(mode))),
            );
        }
    }
    router.fallback(not_found).with_state(Served {
        webhook,
        budget: Arc::new(Budget::new(budget)),
    })
}

/// What a path does with a review.
#[derive(Debug, Clone, Copy)]
enum Path {
    /// Decide it, as `endpoint` decides.
    Decide(Endpoint),
    /// `/observe`: count it, allow it.
    Observe,
}

/// The POST handler of `path`.
fn at(endpoint: Path) -> MethodRouter<Served> {
    // The request whole, read in place: the `Uri`, `HeaderMap` and
    // `Extension` extractors would each copy their part of it.
    post(
        move |State(served): State<Served>, request: axum::extract::Request| async move {
            let (parts, body) = request.into_parts();
            let source = parts.extensions.get::<Source>().map(|Source(ip)| *ip);
            handle(&served, endpoint, source, &parts.uri, &parts.headers, body).await
        },
    )
}

async fn not_found(uri: Uri) -> Response {
    TransportError::NoSuchPath {
        path: uri.path().to_string(),
    }
    .into_response()
}

/// Why a request got no review answer: every one is an HTTP error with a
/// JSON body (`{"error": "...", "code": N}`), which the API server treats
/// as a failed call (`failurePolicy` decides).
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// A path ownerguard does not serve.
    #[error(
        "no such path {path}: ownerguard serves POST /mutate, /validate (each also under /warn and /audit), /validate-all and /observe"
    )]
    NoSuchPath { path: String },
    /// The body, declared or read, is over [`MAX_BODY_BYTES`].
    #[error("request body over {MAX_BODY_BYTES} bytes")]
    TooLarge,
    /// The body could not be read.
    #[error("cannot read the request body: {0}")]
    Unreadable(String),
    /// The body is no review to decide.
    #[error(transparent)]
    NotAReview(#[from] DecodeError),
    /// The request, body included, did not complete within what the API
    /// server waits.
    #[error("request not complete within {}ms", .after.as_millis())]
    TimedOut { after: Duration },
}

impl TransportError {
    /// The error's kind, a fixed word (a trace's `error.type`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NoSuchPath { .. } => "no_such_path",
            Self::TooLarge => "too_large",
            Self::Unreadable(_) => "unreadable",
            Self::NotAReview(_) => "not_a_review",
            Self::TimedOut { .. } => "timeout",
        }
    }

    /// The one place a transport error gets its HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::NoSuchPath { .. } => StatusCode::NOT_FOUND,
            Self::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Unreadable(_) | Self::NotAReview(_) => StatusCode::BAD_REQUEST,
            Self::TimedOut { .. } => StatusCode::REQUEST_TIMEOUT,
        }
    }
}

impl IntoResponse for TransportError {
    fn into_response(self) -> Response {
        error(self.status(), &self.to_string())
    }
}

async fn handle(
    served: &Served,
    endpoint: Path,
    source: Option<IpAddr>,
    uri: &Uri,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    // A span only for a review the API server traces (`--tracing`):
    // without tracing, one branch; with it, one header lookup.
    let trace = match endpoint {
        Path::Decide(decide) => served.webhook.traces().and_then(|traces| {
            ReviewSpan::start(
                traces,
                headers,
                uri.path(),
                decide.name,
                decide.mode.as_str(),
            )
        }),
        Path::Observe => None,
    };
    let declared_length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared_length.is_some_and(|length| length > MAX_BODY_BYTES) {
        let error = TransportError::TooLarge;
        if let Some(trace) = &trace {
            trace.record_status(error.status().as_u16(), Some(error.kind()));
        }
        return error.into_response();
    }
    // The whole request, body included, within what the API server waits:
    // a client that trickles its body must not hold a task for ever.
    // Never longer than the API server ever waits (30 s): a client's
    // ?timeout=1000h must not hold a request, its room and its connection.
    let timeout = api_timeout(uri).map(|t| t.min(MAX_API_TIMEOUT));
    let deadline = timeout.unwrap_or(MAX_API_TIMEOUT);
    let answer = pin!(async {
        // Room in the budget for the body as declared (the API server
        // always declares it; one that does not is held to the largest),
        // kept until the answer is written.
        let want = declared_length.unwrap_or(MAX_BODY_BYTES).max(1);
        let _room = served.budget.reserve(source, want).await;
        let limit = declared_length.unwrap_or(MAX_BODY_BYTES);
        let read_for =
            Duration::from_secs(1) + Duration::from_secs_f64(want as f64 / BODY_BYTES_PER_SECOND);
        let bytes = match within(read_for, pin!(read_body(body, limit, declared_length))).await {
            Some(bytes) => bytes?,
            None => return Err(TransportError::TimedOut { after: read_for }),
        };
        let answer = match endpoint {
            Path::Decide(endpoint) => {
                served
                    .webhook
                    .answer_traced(endpoint, &bytes, timeout, trace.as_ref())
                    .await?
            }
            Path::Observe => served.webhook.observe_unlabelled(&bytes)?,
        };
        Ok(([(header::CONTENT_TYPE, "application/json")], answer.body).into_response())
    });
    let response = match within(deadline, answer).await {
        Some(Ok(response)) => Ok(response),
        Some(Err(error)) => Err(error),
        None => Err(TransportError::TimedOut { after: deadline }),
    };
    if let Some(trace) = &trace {
        match &response {
            Ok(response) => trace.record_status(response.status().as_u16(), None),
            Err(error) => trace.record_status(error.status().as_u16(), Some(error.kind())),
        }
    }
    response.unwrap_or_else(IntoResponse::into_response)
}

/// The body, read into one buffer of its declared size (no second copy).
async fn read_body(
    mut body: Body,
    limit: usize,
    declared: Option<usize>,
) -> Result<Bytes, TransportError> {
    let mut buffer = BytesMut::with_capacity(declared.unwrap_or(64 * 1024));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| TransportError::Unreadable(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            if buffer.len() + data.len() > limit {
                return Err(TransportError::TooLarge);
            }
            buffer.extend_from_slice(&data);
        }
    }
    Ok(buffer.freeze())
}

/// The longest the API server waits for a webhook (`timeoutSeconds` is at
/// most 30): the bound of a request that does not say.
pub const MAX_API_TIMEOUT: Duration = Duration::from_secs(30);

/// The API server's `?timeout=` (Go duration syntax), if given and valid.
fn api_timeout(uri: &Uri) -> Option<Duration> {
    uri.query()?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == "timeout")
        .and_then(|(_, value)| parse_go_duration(value))
        .filter(|timeout| !timeout.is_zero())
}

/// A JSON error body: `{"error": "...", "code": N}`.
fn error(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({ "error": message, "code": status.as_u16() });
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_transport_error_has_its_status() {
        let decode = DecodeError::NoRequest;
        for (error, status) in [
            (
                TransportError::NoSuchPath { path: "/x".into() },
                StatusCode::NOT_FOUND,
            ),
            (TransportError::TooLarge, StatusCode::PAYLOAD_TOO_LARGE),
            (
                TransportError::Unreadable("reset".into()),
                StatusCode::BAD_REQUEST,
            ),
            (TransportError::NotAReview(decode), StatusCode::BAD_REQUEST),
            (
                TransportError::TimedOut {
                    after: Duration::from_secs(10),
                },
                StatusCode::REQUEST_TIMEOUT,
            ),
        ] {
            // A variant added without a line above fails to compile here.
            match &error {
                TransportError::NoSuchPath { .. }
                | TransportError::TooLarge
                | TransportError::Unreadable(_)
                | TransportError::NotAReview(_)
                | TransportError::TimedOut { .. } => {}
            }
            assert_eq!(error.status(), status, "{error}");
            assert_eq!(error.into_response().status(), status);
        }
    }

    #[test]
    fn api_timeout_is_read_from_the_query() {
        let uri: Uri = "/mutate?timeout=10s".parse().unwrap();
        assert_eq!(api_timeout(&uri), Some(Duration::from_secs(10)));
        let uri: Uri = "/mutate?x=1&timeout=1m30s".parse().unwrap();
        assert_eq!(api_timeout(&uri), Some(Duration::from_secs(90)));
        let uri: Uri = "/mutate?timeout=soon".parse().unwrap();
        assert_eq!(api_timeout(&uri), None);
        let uri: Uri = "/mutate".parse().unwrap();
        assert_eq!(api_timeout(&uri), None);
    }
}
