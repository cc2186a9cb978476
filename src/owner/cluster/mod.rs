//! Owners looked up in the cluster: the watch cache first, then one live
//! GET.
//!
//! The cache answers alone only when it agrees with the object (the pod is
//! there with the declared uid) and its watch is healthy (see
//! [`crate::owner::cluster::WatchHealth`]). A miss, another uid, a watch that failed
//! or went silent, or a question that must be answered fresh goes to the
//! API server: a worker that just started may create objects before its own
//! watch event arrives, and a pod replaced under the same name may not have
//! reached the cache either. The live answer wins.
//!
//! Live GETs are bounded across all reviews by a [`Throttle`], retried at
//! most once (on 429, 503 and 504, after `Retry-After` when it fits in the
//! budget), and their path is built from validated, escaped segments.
//!
//! A live GET asks for the whole pod, not its metadata: only `status.phase`
//! says whether it has finished (SPEC §3 rule 11). It is decoded into the
//! three fields a decision reads; serde skips the rest (spec, the rest of
//! status) without building it.

pub mod finished;
mod health;
pub mod index;
mod packed;
mod throttle;
mod watch;
pub mod watches;

pub use finished::{FinishedChange, FinishedPod, FinishedPods};
pub use watch::{DEFAULT_MAX_AGE, DEFAULT_SILENCE_LIMIT, WatchSettings};
pub use watches::Watches;

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use http_body_util::BodyExt;
use kube::core::Status;
use serde::Deserialize;
use serde::de::IgnoredAny;
use tokio::time::Instant;

use crate::k8s::names::{is_namespace, is_pod_name, path_segment};
use crate::owner::LookupError;

use crate::owner::lookup::{Finished, Lookup, ObservedPod, OwnerLookup, PodQuery, Source};
use throttle::Throttle;

/// Attempts of one live GET: the first, and one retry.
const MAX_ATTEMPTS: u32 = 2;

/// Without `Retry-After`, the pause before the retry.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// What the cluster lookup reports to the metrics: the cache's size, the
/// live GETs in flight, each scope's watch health and failures.
/// `observe::Metrics` implements it: `owner` sits below `observe` and names
/// none of its types.
pub trait ClusterMetrics: Send + Sync {
    /// Pods in the running pods' cache.
    fn set_cache_pods(&self, pods: usize);
    /// Pods in the finished pods' cache.
    fn set_finished_pods(&self, pods: usize);
    /// Live GETs holding a permit of the throttle.
    fn set_lookups_in_flight(&self, in_flight: usize);
    /// Whether a scope's watches may answer alone.
    fn set_watch_healthy(&self, scope: &str, healthy: bool);
    /// One more failure of a scope's watch.
    fn count_watch_failure(&self, scope: &str);
}

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
    metrics: Arc<dyn ClusterMetrics>,
    /// The pods whose old cache entry is being checked live now, each
    /// with what resolves once that check is over.
    checking: Arc<std::sync::Mutex<InFlight>>,
}

/// Old cache entries being checked live, by (namespace, name).
type InFlight = std::collections::HashMap<(String, String), Shared<BoxFuture<'static, ()>>>;

/// A live check of an old entry in flight: the pod is in
/// [`ClusterLookup::checking`] until it is dropped (answered, or the
/// review gone), and the reviews waiting on it wake then.
struct Checking {
    set: Arc<std::sync::Mutex<InFlight>>,
    key: (String, String),
    _done: tokio::sync::oneshot::Sender<()>,
}

impl Drop for Checking {
    fn drop(&mut self) {
        // Removed first; the sender, dropped after, wakes the waiters.
        self.set
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.key);
    }
}

impl ClusterLookup {
    pub fn new(
        client: kube::Client,
        watches: Arc<Watches>,
        limits: LookupLimits,
        metrics: Arc<dyn ClusterMetrics>,
    ) -> Self {
        Self {
            client,
            watches,
            throttle: Throttle::new(limits.concurrency, limits.rate_per_second),
            limits,
            metrics,
            checking: Arc::default(),
        }
    }

    /// One live GET of the pod, bounded by `deadline`.
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
                    // The server's Retry-After may name any number of
                    // seconds, more than the clock can add.
                    if crate::deadline::after_now(pause) >= deadline {
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
            .header(http::header::ACCEPT, "application/json")
            // The name of the kube client's span of this request, in a
            // trace (its URL, which names the pod, is not exported).
            .extension(crate::observe::traces::GET_POD)
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
            return Answer::Done(observed(&body).map(Some).map_err(|error| LookupError::Api {
                source: kube::Error::SerdeError(error),
            }));
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

/// The fields of a pod a decision reads. Every other field of the body is
/// skipped by serde ([`IgnoredAny`]), never built.
#[derive(Deserialize)]
struct PodHead {
    #[serde(default)]
    metadata: Option<PodHeadMeta>,
    #[serde(default)]
    status: Option<PodHeadStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodHeadMeta {
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    deletion_timestamp: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct PodHeadStatus {
    #[serde(default)]
    phase: Option<String>,
}

/// What a GET of a pod says of it.
fn observed(body: &[u8]) -> Result<ObservedPod, serde_json::Error> {
    let pod: PodHead = serde_json::from_slice(body)?;
    let metadata = pod.metadata;
    Ok(ObservedPod {
        uid: metadata
            .as_ref()
            .and_then(|m| m.uid.clone())
            .unwrap_or_default(),
        terminating: metadata.is_some_and(|m| m.deletion_timestamp.is_some()),
        finished: pod
            .status
            .and_then(|status| status.phase)
            .as_deref()
            .and_then(Finished::from_phase),
    })
}

enum Answer {
    Done(Result<Option<ObservedPod>, LookupError>),
    /// Worth one more try, after `Retry-After` if the server gave one.
    Retry {
        retry_after: Option<Duration>,
        error: LookupError,
    },
}

impl ClusterLookup {
    /// The watch cache's entry for `query` with the uid it declares; none
    /// for a fresh query or a namespace the watches do not cover.
    fn cache_hit(&self, query: &PodQuery<'_>) -> Option<index::IndexedPod> {
        (!query.fresh && self.watches.covers(query.namespace))
            .then(|| {
                self.watches
                    .get(query.namespace, query.name, query.expected_uid)
            })
            .flatten()
    }

    /// Whether `hit` answers without the API server: young, and every
    /// watch of its namespace trusted.
    fn answers_alone(&self, hit: &index::IndexedPod, namespace: &str) -> bool {
        self.watches.young(hit) && self.watches.trusted(namespace)
    }
}

impl OwnerLookup for ClusterLookup {
    fn lookup<'a>(&'a self, query: PodQuery<'a>) -> BoxFuture<'a, Lookup> {
        Box::pin(async move {
            let (namespace, name) = (query.namespace, query.name);
            let Some(hit) = self.cache_hit(&query) else {
                return self.get(namespace, name, query.deadline).await;
            };
            let young = self.watches.young(&hit);
            let cached = || Lookup {
                source: Source::Cache,
                outcome: Ok(Some(hit.pod.clone())),
            };
            if self.answers_alone(&hit, namespace) {
                return cached();
            }
            // An old entry of a healthy watch that another review is
            // checking live right now: this one waits for that check and
            // answers as it left the entry (young again: from the cache;
            // not confirmed: live, itself). A burst of creates naming one
            // worker (a Job's 500 pods) would otherwise send one GET each
            // the moment its entry grows old, past the live lookups'
            // limit, and be refused 503 for the limit, not for anything
            // about the owner.
            let mut _checking = None;
            if self.watches.trusted(namespace) {
                let key = (namespace.to_string(), name.to_string());
                let running = {
                    let mut checking = self
                        .checking
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    match checking.get(&key) {
                        Some(done) => Some(done.clone()),
                        None => {
                            let (sender, receiver) = tokio::sync::oneshot::channel::<()>();
                            checking.insert(key.clone(), receiver.map(|_| ()).boxed().shared());
                            _checking = Some(Checking {
                                set: self.checking.clone(),
                                key,
                                _done: sender,
                            });
                            None
                        }
                    }
                };
                if let Some(done) = running {
                    let _ = tokio::time::timeout_at(query.deadline, done).await;
                    if let Some(hit) = self.watches.get(namespace, name, query.expected_uid)
                        && self.answers_alone(&hit, namespace)
                    {
                        return Lookup {
                            source: Source::Cache,
                            outcome: Ok(Some(hit.pod)),
                        };
                    }
                    return self.get(namespace, name, query.deadline).await;
                }
            }
            // An entry older than --cache-max-age, or a watch of the scope
            // (of every pod, or of finished pods) that failed or went
            // silent: the hit is checked live, and the live answer wins.
            // A running pod found live makes its entry young again. When
            // there is no live answer (the API server unreachable), a
            // young hit heard within the silence limit still answers:
            // staleness stays within both bounds either way.
            let asked = Instant::now();
            let live = self.get(namespace, name, query.deadline).await;
            match &live.outcome {
                Ok(Some(pod))
                    if pod.uid == query.expected_uid
                        && !pod.terminating
                        && pod.finished.is_none() =>
                {
                    self.watches.confirm(namespace, name, &pod.uid, asked);
                }
                Err(_) if young && self.watches.recent(namespace) => return cached(),
                _ => {}
            }
            live
        })
    }

    /// The cache's entry when it answers alone, as [`Self::lookup`]
    /// answers it first.
    fn lookup_now(&self, query: &PodQuery<'_>) -> Option<Lookup> {
        let hit = self.cache_hit(query)?;
        self.answers_alone(&hit, query.namespace).then(|| Lookup {
            source: Source::Cache,
            outcome: Ok(Some(hit.pod)),
        })
    }

    fn is_ready(&self) -> bool {
        self.watches.is_synced()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const U1: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000001";

    #[test]
    fn a_whole_pod_is_read_for_its_uid_deletion_and_phase() {
        let spec = serde_json::json!({"containers": [{"name": "w", "image": "x", "args": vec!["a"; 1000]}]});
        for (phase, finished) in [
            (serde_json::json!("Succeeded"), Some(Finished::Succeeded)),
            (serde_json::json!("Failed"), Some(Finished::Failed)),
            (serde_json::json!("Running"), None),
            (serde_json::json!("Pending"), None),
            (serde_json::json!("Unknown"), None),
            (serde_json::Value::Null, None),
        ] {
            let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "w-1", "namespace": "agents", "uid": U1,
                    "labels": {"a": "b"}, "managedFields": [{"manager": "kubelet"}]},
                "spec": spec,
                "status": {"phase": phase, "reason": "Evicted", "containerStatuses": [{"name": "w"}]}});
            let observed = observed(&serde_json::to_vec(&pod).unwrap()).unwrap();
            assert_eq!(
                observed,
                ObservedPod {
                    finished,
                    ..ObservedPod::running(U1)
                },
                "{phase}"
            );
        }
        let terminating = serde_json::json!({"metadata": {"uid": U1, "deletionTimestamp": "2026-11-29T12:00:00Z"}, "status": null});
        let observed = observed(&serde_json::to_vec(&terminating).unwrap()).unwrap();
        assert!(observed.terminating && observed.finished.is_none());
        let not_deleted = serde_json::json!({"metadata": {"uid": U1, "deletionTimestamp": null}});
        assert!(
            !observed_of(&not_deleted).terminating,
            "a null deletionTimestamp is no deletion"
        );
    }

    fn observed_of(value: &serde_json::Value) -> ObservedPod {
        observed(&serde_json::to_vec(value).unwrap()).unwrap()
    }

    #[test]
    fn a_body_that_is_not_a_pod_is_an_error_not_a_pod() {
        assert!(observed(b"not json").is_err());
        assert!(observed(br#"{"metadata": {"uid": 7}}"#).is_err());
        assert!(observed(br#"{"status": {"phase": ["Failed"]}}"#).is_err());
    }
}
