//! One review, start to end: decode, plan, look the owners up inside the
//! time budget, decide, answer; then log, count and (with `--record`)
//! write the case down. Shared by the HTTP handlers and `ownerguard review`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use crate::admission::DecodeError;
use crate::admission::{AdmissionRequest, AdmissionResponse, Review, ReviewVersion, Status};
use crate::decide::denial::Denial;
use crate::decide::{self, Allowed, Checks, Policy, WebhookKind};
use crate::observe::metrics::Metrics;
use crate::observe::record::Recorder;
use crate::owner::LookupError;
use crate::owner::{Lookup, ObservedPod, OwnerLookup, PodQuery, Source};

/// Default bound of one owner lookup (`--lookup-timeout`).
pub const DEFAULT_LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);

/// The webhook: a policy, an owner source, and where to report.
pub struct Webhook {
    pub policy: Policy,
    lookup: Arc<dyn OwnerLookup>,
    lookup_timeout: Duration,
    metrics: Arc<Metrics>,
    recorder: Option<Recorder>,
}

/// A path the server answers on: the decision it makes, the name it
/// reports under (metrics, logs), and whether a failed lookup is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    pub kind: WebhookKind,
    pub name: &'static str,
    pub fail_open: bool,
}

impl Endpoint {
    /// `/mutate`.
    pub const MUTATE: Self = Self {
        kind: WebhookKind::Mutate,
        name: "mutate",
        fail_open: false,
    };
    /// `/validate`.
    pub const VALIDATE: Self = Self {
        kind: WebhookKind::Validate,
        name: "validate",
        fail_open: false,
    };
    /// `/validate-all`: the chart's cluster-wide switch
    /// (`validation.allPodOwnerReferences`), whose webhook has
    /// `failurePolicy: Ignore`. It refuses only what the collector cannot
    /// resolve to a live pod ([`WebhookKind::ValidateAll`]), and a lookup
    /// that fails is allowed with a warning, as an unreachable ownerguard
    /// would be: an API hiccup must not stop every pod creation that names
    /// a pod as owner (Spark executors, for one).
    pub const VALIDATE_ALL: Self = Self {
        kind: WebhookKind::ValidateAll,
        name: "validate-all",
        fail_open: true,
    };

    pub fn of(kind: WebhookKind) -> Self {
        match kind {
            WebhookKind::Mutate => Self::MUTATE,
            WebhookKind::Validate => Self::VALIDATE,
            WebhookKind::ValidateAll => Self::VALIDATE_ALL,
        }
    }
}

/// The answer to one review.
#[derive(Debug)]
pub struct Answer {
    pub version: ReviewVersion,
    pub response: AdmissionResponse,
    /// The response `AdmissionReview`, ready to send.
    pub body: Vec<u8>,
}

impl Webhook {
    pub fn new(policy: Policy, lookup: Arc<dyn OwnerLookup>, metrics: Arc<Metrics>) -> Self {
        Self {
            policy,
            lookup,
            lookup_timeout: DEFAULT_LOOKUP_TIMEOUT,
            metrics,
            recorder: None,
        }
    }

    pub fn with_lookup_timeout(mut self, timeout: Duration) -> Self {
        self.lookup_timeout = timeout;
        self
    }

    pub fn with_recorder(mut self, recorder: Recorder) -> Self {
        self.recorder = Some(recorder);
        self
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn owner_source(&self) -> &Arc<dyn OwnerLookup> {
        &self.lookup
    }

    /// How long the owner lookups may take: `--lookup-timeout`, and never
    /// more than three quarters of what the API server gives the whole
    /// call, so the answer still travels back in time.
    pub fn lookup_budget(&self, api_timeout: Option<Duration>) -> Duration {
        match api_timeout {
            Some(timeout) => self.lookup_timeout.min(timeout.mul_f64(0.75)),
            None => self.lookup_timeout,
        }
    }

    /// Decide one review as `webhook` decides it.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] when `body` is not an `AdmissionReview` with a
    /// request: the caller answers 400. Every decodable review is answered.
    pub async fn review(
        &self,
        webhook: WebhookKind,
        body: &[u8],
        api_timeout: Option<Duration>,
    ) -> Result<Answer, DecodeError> {
        self.review_at(Endpoint::of(webhook), body, api_timeout)
            .await
    }

    /// Decide one review as `endpoint` decides it.
    ///
    /// # Errors
    ///
    /// As [`Webhook::review`].
    pub async fn review_at(
        &self,
        endpoint: Endpoint,
        body: &[u8],
        api_timeout: Option<Duration>,
    ) -> Result<Answer, DecodeError> {
        let webhook = endpoint.kind;
        // The cluster-wide endpoint fails open, as its webhook does.
        let fail_open_policy;
        let policy = if endpoint.fail_open && !self.policy.fail_open {
            fail_open_policy = Policy {
                fail_open: true,
                ..self.policy.clone()
            };
            &fail_open_policy
        } else {
            &self.policy
        };
        let started = Instant::now();
        let review = match Review::from_json(body) {
            Ok(review) => review,
            Err(error) => {
                warn!(webhook = endpoint.name, %error, "refused a body that is not a review");
                self.metrics.observe_request(
                    endpoint.name,
                    "",
                    "",
                    "error",
                    started.elapsed().as_secs_f64(),
                );
                return Err(error);
            }
        };
        let deadline = started + self.lookup_budget(api_timeout);
        let request = &review.request;
        let mut seen = Seen::default();
        let verdict = match decide::plan(request, webhook, policy) {
            Err(denial) => Err(denial),
            Ok(None) => Ok(Allowed::default()),
            Ok(Some(checks)) => {
                let lookups = self.lookup_owners(&checks, deadline).await;
                // Only --record reads what the lookups saw.
                if self.recorder.is_some() {
                    seen = Seen::of(checks.namespace(), &lookups);
                }
                decide::decide(checks, &lookups, policy)
            }
        };
        let response = respond(&request.uid, verdict, webhook);
        let answer = response.to_review_json(review.version);
        let elapsed = started.elapsed();
        let result = result_label(&response);
        self.metrics.observe_request(
            endpoint.name,
            request.operation.as_str(),
            &request.resource.resource,
            result,
            elapsed.as_secs_f64(),
        );
        log_decision(request, endpoint.name, &response, result, elapsed);
        if let Some(recorder) = &self.recorder {
            recorder.record(webhook, policy, body, &seen.pods, &seen.failures, &answer);
        }
        Ok(Answer {
            version: review.version,
            response,
            body: answer,
        })
    }

    /// Look every pod `checks` names up once, concurrently, each bound by
    /// `deadline`.
    async fn lookup_owners(&self, checks: &Checks, deadline: Instant) -> HashMap<String, Lookup> {
        let budget = deadline.saturating_duration_since(Instant::now());
        let lookups = checks.lookups().iter().map(|need| async move {
            let query = PodQuery {
                namespace: checks.namespace(),
                name: &need.name,
                expected_uid: &need.uid,
                fresh: need.fresh,
                deadline,
            };
            // The source bounds itself; this is the guarantee that a slow
            // one cannot hold the answer past the deadline.
            let lookup = tokio::time::timeout_at(deadline, self.lookup.lookup(query))
                .await
                .unwrap_or_else(|_| Lookup {
                    source: Source::Api,
                    outcome: Err(LookupError::TimedOut { after: budget }),
                });
            self.metrics
                .observe_lookup(lookup.source.as_str(), lookup.result_label(&need.uid));
            if let Err(error) = &lookup.outcome {
                // The denial says a sentence; the details are for the log.
                warn!(namespace = checks.namespace(), pod = %need.name, %error, "owner lookup failed");
            }
            (need.name.clone(), lookup)
        });
        futures::future::join_all(lookups)
            .await
            .into_iter()
            .collect()
    }
}

/// What the lookups of one review found: the pods for `--record`.
#[derive(Default)]
struct Seen {
    pods: Vec<(String, String, ObservedPod)>,
    /// Owner names whose lookup failed.
    failures: Vec<String>,
}

impl Seen {
    fn of(namespace: &str, lookups: &HashMap<String, Lookup>) -> Self {
        let mut seen = Self::default();
        for (name, lookup) in lookups {
            match &lookup.outcome {
                Ok(Some(pod)) => seen
                    .pods
                    .push((namespace.to_string(), name.clone(), pod.clone())),
                Ok(None) => {}
                Err(_) => seen.failures.push(name.clone()),
            }
        }
        seen.pods.sort_by(|a, b| a.1.cmp(&b.1));
        seen.failures.sort();
        seen
    }
}

/// The `AdmissionResponse` of a verdict. A validating answer never carries
/// a patch.
pub fn respond(
    uid: &str,
    verdict: Result<Allowed, Denial>,
    webhook: WebhookKind,
) -> AdmissionResponse {
    match verdict {
        Ok(allowed) => {
            let patch =
                (webhook.mutates() && !allowed.patch.is_empty()).then(|| allowed.patch.to_json());
            let mut audit_annotations = std::collections::BTreeMap::new();
            if let Some(owner) = &allowed.owner {
                audit_annotations.insert("owner".to_string(), owner.annotation());
                audit_annotations.insert(
                    "owner-source".to_string(),
                    owner.source.as_str().to_string(),
                );
            }
            AdmissionResponse {
                uid: uid.to_string(),
                allowed: true,
                status: None,
                patch,
                audit_annotations,
                warnings: allowed.warnings,
            }
        }
        Err(denial) => AdmissionResponse {
            uid: uid.to_string(),
            allowed: false,
            status: Some(Status {
                status: "Failure",
                message: denial.to_string(),
                reason: denial.reason(),
                code: denial.code(),
            }),
            ..Default::default()
        },
    }
}

fn result_label(response: &AdmissionResponse) -> &'static str {
    match (response.allowed, response.patch.is_some()) {
        (false, _) => "denied",
        (true, true) => "patched",
        (true, false) => "allowed",
    }
}

fn log_decision(
    request: &AdmissionRequest,
    webhook: &'static str,
    response: &AdmissionResponse,
    result: &str,
    elapsed: Duration,
) {
    let object = decide::object_name(request);
    let name = if object.generated {
        format!("{}*", object.name)
    } else {
        object.name
    };
    let owner = response
        .audit_annotations
        .get("owner")
        .map(String::as_str)
        .unwrap_or("");
    // `detail`, not `message`: tracing's JSON writes the event's own text
    // under `message`, and a second key of that name would hide it.
    let detail = response
        .status
        .as_ref()
        .map(|s| s.message.as_str())
        .unwrap_or("");
    info!(
        uid = %request.uid,
        webhook,
        operation = request.operation.as_str(),
        namespace = request.namespace.as_deref().unwrap_or(""),
        kind = %object.kind,
        name = %name,
        owner,
        result,
        code = response.status.as_ref().map_or(200, |s| s.code),
        dry_run = request.dry_run.unwrap_or(false),
        duration_ms = elapsed.as_secs_f64() * 1000.0,
        detail,
        "decision"
    );
}
