//! Owners looked up in the cluster: the watch cache first, then one live
//! GET.
//!
//! The cache answers alone only when it agrees with the object (the pod is
//! there with the declared uid) and its watch is healthy (see
//! [`crate::cache::WatchHealth`]). A miss, another uid, a watch that failed
//! or went silent, or a question that must be answered fresh goes to the
//! API server: a worker that just started may create objects before its own
//! watch event arrives, and a pod replaced under the same name may not have
//! reached the cache either. The live answer wins.
//!
//! Live GETs are bounded across all reviews by a [`Throttle`], retried at
//! most once (on 429, 503 and 504, after `Retry-After` when it fits in the
//! budget), and their path is built from validated, escaped segments.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::PartialObjectMeta;
use kube::core::Status;
use tokio::time::Instant;

use super::lookup::{Lookup, ObservedPod, OwnerLookup, PodQuery, Source};
use super::throttle::Throttle;
use crate::cache::Watches;
use crate::error::LookupError;
use crate::metrics::Metrics;
use crate::names::{is_namespace, is_pod_name, path_segment};

/// Attempts of one live GET: the first, and one retry.
const MAX_ATTEMPTS: u32 = 2;

/// Without `Retry-After`, the pause before the retry.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// The limits on live lookups (`--lookup-concurrency`, `--lookup-rate`).
#[derive(Debug, Clone, Copy)]
pub struct LookupLimits {
    pub concurrency: usize,
    pub rate_per_second: u32,
}

impl Default for LookupLimits {
    fn default() -> Self {
        Self {
            concurrency: 32,
            rate_per_second: 50,
        }
    }
}

pub struct ClusterLookup {
    client: kube::Client,
    watches: Arc<Watches>,
    throttle: Throttle,
    limits: LookupLimits,
    metrics: Arc<Metrics>,
}

impl ClusterLookup {
    pub fn new(
        client: kube::Client,
        watches: Arc<Watches>,
        limits: LookupLimits,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            client,
            watches,
            throttle: Throttle::new(limits.concurrency, limits.rate_per_second),
            limits,
            metrics,
        }
    }

    /// One live GET of the pod's metadata, bounded by `deadline`.
    async fn get(&self, namespace: &str, name: &str, deadline: Instant) -> Lookup {
        let budget = deadline.saturating_duration_since(Instant::now());
        let outcome = match tokio::time::timeout_at(
            deadline,
            self.get_pod(namespace, name, deadline),
        )
        .await
        {
            Ok(outcome) => outcome,
            Err(_) => Err(LookupError::TimedOut { after: budget }),
        };
        Lookup {
            source: Source::Api,
            outcome,
        }
    }

    async fn get_pod(
        &self,
        namespace: &str,
        name: &str,
        deadline: Instant,
    ) -> Result<Option<ObservedPod>, LookupError> {
        // Validated before this is ever called (SPEC §3 rule 7); checked
        // again here because a path is where a bad name does harm.
        if !is_namespace(namespace) || !is_pod_name(name) {
            return Ok(None);
        }
        let path = format!(
            "/api/v1/namespaces/{}/pods/{}",
            path_segment(namespace),
            path_segment(name)
        );
        let mut attempt = 1;
        loop {
            let answer = {
                let _permit = self.throttle.admit(deadline).await?;
                self.metrics
                    .set_lookups_in_flight(self.throttle.in_flight(self.limits.concurrency));
                let answer = self.send(&path).await;
                drop(_permit);
                self.metrics
                    .set_lookups_in_flight(self.throttle.in_flight(self.limits.concurrency));
                answer
            };
            match answer {
                Answer::Retry { retry_after, error } if attempt < MAX_ATTEMPTS => {
                    let pause = retry_after.unwrap_or(RETRY_PAUSE);
                    if Instant::now() + pause >= deadline {
                        return Err(error);
                    }
                    tokio::time::sleep(pause).await;
                    attempt += 1;
                }
                Answer::Retry { error, .. } => return Err(error),
                Answer::Done(outcome) => return outcome,
            }
        }
    }

    /// One GET; what to do with its answer.
    async fn send(&self, path: &str) -> Answer {
        let request = http::Request::get(path)
            .header(
                http::header::ACCEPT,
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json",
            )
            .body(kube::client::Body::from(Vec::new()));
        let request = match request {
            Ok(request) => request,
            Err(error) => {
                return Answer::Done(Err(LookupError::Api {
                    source: kube::Error::HttpError(error),
                }));
            }
        };
        let response = match self.client.send(request).await {
            Ok(response) => response,
            Err(source) => return Answer::Done(Err(LookupError::Api { source })),
        };
        let status = response.status();
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = match response.into_body().collect().await {
            Ok(body) => body.to_bytes(),
            Err(source) => return Answer::Done(Err(LookupError::Api { source })),
        };
        if status.is_success() {
            return Answer::Done(
                serde_json::from_slice::<PartialObjectMeta<Pod>>(&body)
                    .map(|pod| {
                        Some(ObservedPod {
                            uid: pod.metadata.uid.unwrap_or_default(),
                            terminating: pod.metadata.deletion_timestamp.is_some(),
                            // Not in a metadata-only answer.
                            finished: None,
                        })
                    })
                    .map_err(|error| LookupError::Api {
                        source: kube::Error::SerdeError(error),
                    }),
            );
        }
        if status == http::StatusCode::NOT_FOUND {
            return Answer::Done(Ok(None));
        }
        let status_code = status.as_u16();
        let api_status = serde_json::from_slice::<Status>(&body)
            .unwrap_or_else(|_| Status::failure(status.as_str(), "").with_code(status_code));
        let error = LookupError::Api {
            source: kube::Error::Api(Box::new(api_status.with_code(status_code))),
        };
        if matches!(status_code, 429 | 503 | 504) {
            Answer::Retry { retry_after, error }
        } else {
            Answer::Done(Err(error))
        }
    }
}

enum Answer {
    Done(Result<Option<ObservedPod>, LookupError>),
    /// Worth one more try, after `Retry-After` if the server gave one.
    Retry {
        retry_after: Option<Duration>,
        error: LookupError,
    },
}

impl OwnerLookup for ClusterLookup {
    fn lookup<'a>(&'a self, query: PodQuery<'a>) -> BoxFuture<'a, Lookup> {
        Box::pin(async move {
            let (namespace, name) = (query.namespace, query.name);
            let hit = (!query.fresh && self.watches.covers(namespace))
                .then(|| {
                    self.watches
                        .index
                        .get_matching(namespace, name, query.expected_uid)
                })
                .flatten();
            let Some(hit) = hit else {
                return self.get(namespace, name, query.deadline).await;
            };
            let cached = || Lookup {
                source: Source::Cache,
                outcome: Ok(Some(hit.clone())),
            };
            if self.watches.trusted(namespace) {
                return cached();
            }
            // The watch failed or went silent: the hit is checked live, and
            // the live answer wins. When there is none (the API server
            // unreachable), a hit heard within the silence limit still
            // answers: staleness stays within that limit either way.
            let live = self.get(namespace, name, query.deadline).await;
            if live.outcome.is_err() && self.watches.recent(namespace) {
                return cached();
            }
            live
        })
    }

    fn is_ready(&self) -> bool {
        self.watches.is_synced()
    }
}
