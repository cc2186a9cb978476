//! One review, start to end: decode, plan, look the owners up inside the
//! time budget, decide, answer; then hand the finished decision to the
//! observers (metrics, the decision log, `--record`). Shared by the HTTP
//! handlers and `ownerguard review`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::admission::{AdmissionResponse, DecodeError, Review, ReviewVersion, Status};
use crate::decide::denial::Denial;
use crate::decide::{self, Allowed, Checks, Endpoint, Policy, WebhookKind};
use crate::observe::DecisionLog;
use crate::observe::Metrics;
use crate::observe::{Answered, Decision, Observer, Outcome};
use crate::owner::{Lookup, LookupBudget, LookupError, OwnerLookup, PodQuery, Source};

/// The webhook: a policy, an owner source, its time budget, and who is
/// told of each decision.
pub struct Webhook {
    pub policy: Policy,
    lookup: Arc<dyn OwnerLookup>,
    budget: LookupBudget,
    metrics: Arc<Metrics>,
    observers: Vec<Arc<dyn Observer>>,
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
    /// A webhook whose decisions `metrics` counts and the decision log
    /// writes down.
    pub fn new(policy: Policy, lookup: Arc<dyn OwnerLookup>, metrics: Arc<Metrics>) -> Self {
        Self {
            policy,
            lookup,
            budget: LookupBudget::default(),
            observers: vec![metrics.clone(), Arc::new(DecisionLog)],
            metrics,
        }
    }

    pub fn with_lookup_budget(mut self, budget: LookupBudget) -> Self {
        self.budget = budget;
        self
    }

    /// One more observer of every decision (`--record`'s recorder).
    pub fn with_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observers.push(observer);
        self
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn owner_source(&self) -> &Arc<dyn OwnerLookup> {
        &self.lookup
    }

    /// Decide one review as `webhook` decides it.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] when `body` is not an `AdmissionReview` with a
    /// request: the caller answers 400. Every decodable review is answered.
    pub async fn answer(
        &self,
        webhook: WebhookKind,
        body: &[u8],
        api_timeout: Option<Duration>,
    ) -> Result<Answer, DecodeError> {
        self.answer_at(Endpoint::of(webhook), body, api_timeout)
            .await
    }

    /// Decide one review as `endpoint` decides it.
    ///
    /// # Errors
    ///
    /// As [`Webhook::answer`].
    pub async fn answer_at(
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
        let observe = |outcome: Outcome<'_>| {
            let decision = Decision {
                endpoint,
                policy,
                body,
                outcome,
                elapsed: started.elapsed(),
            };
            for observer in &self.observers {
                observer.observe(&decision);
            }
        };
        let review = match Review::from_json(body) {
            Ok(review) => review,
            Err(error) => {
                observe(Outcome::Refused(&error));
                return Err(error);
            }
        };
        let deadline = started + self.budget.of_call(api_timeout);
        let request = &review.request;
        let mut lookups = HashMap::new();
        let mut checked = None;
        let verdict = match decide::plan(request, webhook, policy) {
            Err(denial) => Err(denial),
            Ok(None) => Ok(Allowed::default()),
            Ok(Some(mut checks)) => {
                lookups = self.lookup_owners(&checks, deadline).await;
                // The decision reads the answers, not the questions: the
                // observers get them.
                checked = Some((checks.namespace().to_string(), checks.take_lookups()));
                decide::decide(checks, &lookups, policy)
            }
        };
        let response = respond(&request.uid, verdict, webhook);
        let answer = response.to_review_json(review.version);
        let (namespace, needs) = checked.unwrap_or_default();
        observe(Outcome::Answered(Answered {
            request,
            namespace: &namespace,
            needs: &needs,
            lookups: &lookups,
            response: &response,
            answer: &answer,
        }));
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
            (need.name.clone(), lookup)
        });
        futures::future::join_all(lookups)
            .await
            .into_iter()
            .collect()
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
