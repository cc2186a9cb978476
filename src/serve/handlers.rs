//! The HTTP handlers of `/mutate`, `/validate` and `/validate-all`,
//! nothing else: read the body within its limit, read `?timeout=`, hand
//! over to the [`Webhook`]. What goes wrong before a review is decided is
//! a [`TransportError`], mapped to its HTTP status in one place; a denial
//! is an answer (HTTP 200), and its code is the decision's
//! ([`crate::decide::denial::Denial::code`]).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tokio::sync::Semaphore;

use crate::admission::DecodeError;
use crate::decide::Endpoint;
use crate::k8s::duration::parse_go_duration;
use crate::webhook::Webhook;

/// The largest review the API server can send, from its own limits
/// (SPEC §4): a request body of at most 3 MiB (`MaxRequestBodyBytes`,
/// k8s.io/apiserver, no flag) becomes the review's `object`, and an
/// UPDATE's `oldObject` is what etcd stored, at most 1.5 MiB (its default
/// `--max-request-bytes`); the API server writes both with Go's JSON
/// encoder, which escapes `<`, `>` and `&` as six bytes each, so a
/// built-in object of such characters (stored as protobuf) grows six-fold:
/// 6 × (3 + 1.5) MiB = 27 MiB, plus the envelope and managed fields.
pub const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// The bytes of request bodies held at once across all requests: two of
/// the largest reviews, or thousands of everyday ones. A request whose body
/// does not fit waits for room (within its own timeout) rather than being
/// refused, so the largest review is still decided while memory stays
/// bounded under any concurrency (the chart's limit is 256 MiB).
pub const BODY_BUDGET_BYTES: usize = 2 * MAX_BODY_BYTES;

/// What the handlers share: the webhook, and the budget of body bytes in
/// flight.
#[derive(Clone)]
struct Served {
    webhook: Arc<Webhook>,
    budget: Arc<Semaphore>,
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
    Router::new()
        .route("/mutate", post(mutate))
        .route("/validate", post(validate))
        .route("/validate-all", post(validate_all))
        .fallback(not_found)
        .with_state(Served {
            webhook,
            budget: Arc::new(Semaphore::new(budget)),
        })
}

async fn mutate(
    State(served): State<Served>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(&served, Endpoint::MUTATE, &uri, &headers, body).await
}

async fn validate(
    State(served): State<Served>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(&served, Endpoint::VALIDATE, &uri, &headers, body).await
}

async fn validate_all(
    State(served): State<Served>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(&served, Endpoint::VALIDATE_ALL, &uri, &headers, body).await
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
    #[error("no such path {path}: ownerguard serves POST /mutate, /validate and /validate-all")]
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
    endpoint: Endpoint,
    uri: &Uri,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let declared_length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared_length.is_some_and(|length| length > MAX_BODY_BYTES) {
        return TransportError::TooLarge.into_response();
    }
    // The whole request, body included, within what the API server waits:
    // a client that trickles its body must not hold a task for ever.
    let timeout = api_timeout(uri);
    let deadline = timeout.unwrap_or(MAX_API_TIMEOUT);
    let answer = tokio::time::timeout(deadline, async {
        // Room in the budget for the body as declared (the API server
        // always declares it; one that does not is held to the largest),
        // kept until the answer is written.
        let want = declared_length.unwrap_or(MAX_BODY_BYTES).max(1);
        let _room = served
            .budget
            .acquire_many(u32::try_from(want).unwrap_or(u32::MAX))
            .await
            .map_err(|_| TransportError::Unreadable("the server is shutting down".to_string()))?;
        let limit = declared_length.unwrap_or(MAX_BODY_BYTES);
        let bytes = match Limited::new(body, limit).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
                return Err(TransportError::TooLarge);
            }
            Err(e) => return Err(TransportError::Unreadable(e.to_string())),
        };
        let answer = served.webhook.answer_at(endpoint, &bytes, timeout).await?;
        Ok(([(header::CONTENT_TYPE, "application/json")], answer.body).into_response())
    });
    match answer.await {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => error.into_response(),
        Err(_) => TransportError::TimedOut { after: deadline }.into_response(),
    }
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
