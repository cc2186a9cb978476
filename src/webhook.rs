//! One review, start to end: decode, plan, look the owners up inside the
//! time budget, decide, answer; then hand the finished decision to the
//! observers (metrics, the decision log, `--record`). Shared by the HTTP
//! handlers and `ownerguard review`.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::admission::{AdmissionResponse, DecodeError, Review, ReviewVersion, Status};
use crate::deadline::within_at;
use crate::decide::denial::Denial;
use crate::decide::{self, Allowed, Endpoint, LookupNeed, Lookups, Mode, Policy, WebhookKind};
use crate::observe::DecisionLog;
use crate::observe::Metrics;
use crate::observe::traces::{ReviewSpan, Traces};
use crate::observe::unlabelled::{UnlabelledCreate, UnlabelledCreates};
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
    /// Where `/observe` counts what pods create without the owner label.
    unlabelled: Option<UnlabelledCreates>,
    /// `--tracing`: the reviews the API server traces get spans.
    traces: Option<Arc<Traces>>,
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
            unlabelled: None,
            traces: None,
        }
    }

    pub fn with_lookup_budget(mut self, budget: LookupBudget) -> Self {
        self.budget = budget;
        self
    }

    /// Count what `/observe` is sent into `creates`.
    pub fn with_unlabelled(mut self, creates: UnlabelledCreates) -> Self {
        self.unlabelled = Some(creates);
        self
    }

    /// `/observe`: the observe-only view of what pods create without the
    /// owner label. Always allowed, unchanged, at once: the create is
    /// counted ([`crate::observe::unlabelled`]) and nothing is decided.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] when `body` is not an `AdmissionReview` with a
    /// request, as for every path (the observe webhook fails open).
    pub fn observe_unlabelled(&self, body: &[u8]) -> Result<Answer, DecodeError> {
        let review = Review::from_json(body)?;
        let request = &review.request;
        if let (Some(creates), Some(object)) = (&self.unlabelled, &request.object)
            && let Some(create) = UnlabelledCreate::of(request, object, &self.policy.labels.pod)
        {
            creates.record(create);
        }
        let response = AdmissionResponse {
            uid: request.uid.to_string(),
            allowed: true,
            ..AdmissionResponse::default()
        };
        Ok(Answer {
            version: review.version,
            body: response.to_review_json(review.version),
            response,
        })
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
        self.answer_traced(endpoint, body, api_timeout, None).await
    }

    /// Tracing, when on (`--tracing`).
    pub fn traces(&self) -> Option<&Traces> {
        self.traces.as_deref()
    }

    /// With traces: the reviews the API server traces get spans.
    pub fn with_traces(mut self, traces: Arc<Traces>) -> Self {
        self.traces = Some(traces);
        self
    }

    /// [`Self::answer_at`], telling `trace` (the review's span, when it is
    /// traced) what the review asked, each lookup and the answer.
    pub async fn answer_traced(
        &self,
        endpoint: Endpoint,
        body: &[u8],
        api_timeout: Option<Duration>,
        trace: Option<&ReviewSpan>,
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
                trace_id: trace.and_then(ReviewSpan::trace_id),
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
        if let Some(trace) = trace {
            trace.record_request(request);
        }
        let mut decided = Decided::default();
        // A policy of its own only once a mode softens a rule: the
        // common review clones nothing.
        let mut softened: Option<Policy> = None;
        // Decide; in `warn` and `audit`, a refusal a mode may soften is
        // set aside and the review decided again without that rule, so
        // that what ownerguard can complete is completed (SPEC §3 rule
        // 17). Each pass relaxes one more rule, so this ends within as
        // many passes as there are rules to relax.
        let verdict = loop {
            let current = softened.as_ref().unwrap_or(policy);
            let verdict = self
                .decide_once(request, webhook, current, deadline, &mut decided, trace)
                .await;
            let mut relaxed = current.relaxed.clone();
            match verdict {
                Err(denial) if endpoint.mode.softens() && relaxed.relax(&denial) => {
                    softened = Some(Policy {
                        relaxed,
                        ..current.clone()
                    });
                    decided.violations.push(denial);
                }
                verdict => break verdict,
            }
        };
        // In warn and audit nothing the API server sends is refused (SPEC
        // §3 rule 17): what enforce still refuses once every softenable
        // rule is set aside is let through as it was sent, unchanged (no
        // owner was proven to complete it with), and named, with what the
        // garbage collector will do to it as stored.
        let (verdict, stored_as_sent) = match verdict {
            Err(denial) if endpoint.mode.softens() => {
                decided.violations.push(denial);
                let fate = collector_fate(request, &decided.lookups);
                (Ok(Allowed::default()), Some(fate))
            }
            verdict => (verdict, None),
        };
        let note = stored_as_sent.map(|fate| format!("stored as sent, unchanged: {fate}"));
        // The rule, before the answer takes the verdict: the one that
        // refused, or the first a mode let through.
        let rule = trace.and_then(|_| match &verdict {
            Err(denial) => Some(denial.rule()),
            Ok(_) => decided.violations.first().map(Denial::rule),
        });
        let answering = trace.map(ReviewSpan::answer);
        let response = respond_in_mode(
            &request.uid,
            verdict,
            webhook,
            endpoint.mode,
            &decided.violations,
            note.as_deref(),
        );
        let answer = response.to_review_json(review.version);
        drop(answering);
        let answered = Answered {
            request,
            namespace: &decided.namespace,
            needs: &decided.needs,
            lookups: &decided.lookups,
            response: &response,
            answer: &answer,
            violations: &decided.violations,
        };
        if let Some(trace) = trace {
            trace.record_answer(answered.result(), rule);
        }
        observe(Outcome::Answered(answered));
        Ok(Answer {
            version: review.version,
            response,
            body: answer,
        })
    }

    /// One pass of the decision under `policy`: plan, look up what no
    /// earlier pass looked up, decide.
    async fn decide_once(
        &self,
        request: &crate::admission::AdmissionRequest<'_>,
        webhook: WebhookKind,
        policy: &Policy,
        deadline: Instant,
        decided: &mut Decided,
        trace: Option<&ReviewSpan>,
    ) -> Result<Allowed, Denial> {
        let mut checks = match decide::plan(request, webhook, policy)? {
            None => return Ok(Allowed::default()),
            Some(checks) => checks,
        };
        // Borrowed: the first pass, every review's, asks every need.
        let missing: Vec<&LookupNeed> = checks
            .lookups()
            .iter()
            .filter(|need| !decided.has_answer(need))
            .collect();
        if !missing.is_empty() {
            let answers = self
                .lookup_owners(checks.namespace(), &missing, deadline, trace)
                .await;
            // The first pass's answers are the map itself: no second map
            // built to copy them into.
            if decided.lookups.is_empty() {
                decided.lookups = answers;
            } else {
                decided.lookups.extend(answers);
            }
        }
        // The decision reads the answers, not the questions: the
        // observers get them.
        decided.namespace = checks.namespace().to_string();
        // The first pass's needs are the list itself (merged by name when
        // planned); a later pass's are merged into it.
        if decided.needs.is_empty() {
            decided.needs = checks.take_lookups();
        } else {
            for need in checks.take_lookups() {
                decided.remember(need);
            }
        }
        decide::decide(checks, &decided.lookups, policy)
    }

    /// Look every pod of `needs` up once, concurrently, each bound by
    /// `deadline`.
    async fn lookup_owners<'n>(
        &self,
        namespace: &str,
        needs: &[&'n LookupNeed],
        deadline: Instant,
        trace: Option<&ReviewSpan>,
    ) -> Lookups {
        let budget = deadline.saturating_duration_since(Instant::now());
        let look_up = |need: &'n LookupNeed| async move {
            let span = trace.map(|trace| trace.lookup(need.fresh));
            let query = PodQuery {
                namespace,
                name: &need.name,
                expected_uid: &need.uid,
                fresh: need.fresh,
                deadline,
            };
            // An answer in memory needs neither a future nor a timer.
            let now = match &span {
                Some(span) => span.in_scope(|| self.lookup.lookup_now(&query)),
                None => self.lookup.lookup_now(&query),
            };
            let lookup = match now {
                Some(lookup) => lookup,
                None => {
                    // The source bounds itself; this is the guarantee that a
                    // slow one cannot hold the answer past the deadline.
                    let bounded = within_at(deadline, self.lookup.lookup(query));
                    // Only a traced review's lookup runs in a span: the
                    // untraced one polls no wrapper.
                    let outcome = match &span {
                        Some(span) => bounded.instrument(span.clone()).await,
                        None => bounded.await,
                    };
                    outcome.unwrap_or_else(|| Lookup {
                        source: Source::Api,
                        outcome: Err(LookupError::TimedOut { after: budget }),
                    })
                }
            };
            if let Some(span) = &span {
                span.record("ownerguard.lookup.source", lookup.source.as_str());
                span.record("ownerguard.lookup.result", lookup.result_label(&need.uid));
            }
            (need.name.clone(), lookup)
        };
        // One owner is the usual review: awaited as it is, without the
        // joining's allocations.
        if let [need] = needs {
            return [look_up(need).await].into_iter().collect();
        }
        futures::future::join_all(needs.iter().map(|&need| look_up(need)))
            .await
            .into_iter()
            .collect()
    }
}

/// What the garbage collector will do to the object of `request` stored as
/// it was sent, read as the collector reads it: it deletes an object only
/// once every owner is absent, and drops a dangling reference while
/// another owner exists. A Pod reference counts as absent when the lookup
/// found no pod of that name, or one of another uid; a pod that exists
/// (finished or being deleted included) is an owner.
fn collector_fate(request: &crate::admission::AdmissionRequest<'_>, lookups: &Lookups) -> String {
    let references = request
        .object
        .as_ref()
        .and_then(|object| object.metadata.owner_references.as_deref())
        .unwrap_or_default();
    if references.is_empty() {
        return "it has no ownerReference, so the garbage collector will never delete it with a worker"
            .to_string();
    }
    let absent = |r: &&crate::admission::OwnerReference<'_>| {
        r.is_pod()
            && lookups
                .get(r.name.as_str())
                .is_some_and(|lookup| match &lookup.outcome {
                    Ok(None) => true,
                    Ok(Some(pod)) => pod.uid != r.uid.as_str(),
                    Err(_) => false,
                })
    };
    let dangling: Vec<&crate::admission::OwnerReference<'_>> =
        references.iter().filter(absent).collect();
    match dangling.first() {
        None => "its ownerReferences are as its client wrote them; those ownerguard did not look up are unchecked"
            .to_string(),
        Some(r) if dangling.len() == references.len() => format!(
            "its ownerReference to pod '{}' names no pod that exists and it has no other owner, so the garbage collector deletes it once it sees it",
            crate::decide::subject::Shown(&r.name)
        ),
        Some(r) => format!(
            "its ownerReference to pod '{}' names no pod that exists: the garbage collector drops that reference and keeps the object for its other owners",
            crate::decide::subject::Shown(&r.name)
        ),
    }
}

/// What the passes of one decision asked and learnt.
#[derive(Debug, Default)]
struct Decided {
    /// The namespace every lookup was made in.
    namespace: String,
    needs: Vec<LookupNeed>,
    lookups: Lookups,
    /// The refusals a mode softened, in the order they came.
    violations: Vec<Denial>,
}

impl Decided {
    /// Whether an earlier pass answered `need`: the same pod, looked up
    /// live when `need` asks for it.
    fn has_answer(&self, need: &LookupNeed) -> bool {
        self.lookups.contains_key(&need.name)
            && self
                .needs
                .iter()
                .any(|asked| asked.name == need.name && (asked.fresh || !need.fresh))
    }

    fn remember(&mut self, need: LookupNeed) {
        match self.needs.iter_mut().find(|asked| asked.name == need.name) {
            Some(asked) => asked.fresh |= need.fresh,
            None => self.needs.push(need),
        }
    }
}

/// The `AdmissionResponse` of a verdict reached in `mode` after the
/// refusals in `violations` were softened: allowed, it carries them as
/// audit annotations (`mode`, `violation`, `violation-rules`) and, in
/// `warn`, as warnings to the client, the message whole, cut in parts
/// under 120 characters each. A refusal that stands carries none of them:
/// its message is the one to act on.
pub fn respond_in_mode(
    uid: &str,
    verdict: Result<Allowed, Denial>,
    webhook: WebhookKind,
    mode: Mode,
    violations: &[Denial],
    stored_as_sent: Option<&str>,
) -> AdmissionResponse {
    let mut response = respond(uid, verdict, webhook);
    if response.allowed && !violations.is_empty() {
        let messages: Vec<String> = violations.iter().map(ToString::to_string).collect();
        let rules: Vec<&str> = violations.iter().map(Denial::rule).collect();
        let notes = &mut response.audit_annotations;
        notes.insert("mode", Cow::Borrowed(mode.as_str()));
        notes.insert("violation", Cow::Owned(messages.join(" | ")));
        notes.insert("violation-rules", Cow::Owned(rules.join(",")));
        if let Some(note) = stored_as_sent {
            notes.insert("collector", Cow::Owned(note.to_string()));
        }
        if mode.warns() {
            // What decided the answer first, so that the warnings' budget
            // never cuts it: the refusal that stands (the last one) and
            // what the collector will do, then the rules set aside.
            let would_refuse = |message: &str| {
                format!("ownerguard {} mode: would refuse: {message}", mode.as_str())
            };
            let mut texts = Vec::new();
            let softened = match (stored_as_sent, messages.split_last()) {
                (Some(note), Some((standing, rest))) => {
                    texts.push(would_refuse(standing));
                    texts.push(format!("ownerguard {} mode: {note}", mode.as_str()));
                    rest
                }
                _ => &messages[..],
            };
            texts.extend(softened.iter().map(|message| would_refuse(message)));
            let mut warnings: Vec<String> = texts.iter().flat_map(|t| warning_parts(t)).collect();
            warnings.append(&mut response.warnings);
            response.warnings = warnings;
        }
    }
    response.warnings = within_warning_budget(std::mem::take(&mut response.warnings));
    response
}

/// The most characters of warnings one answer carries: half of the 4 KiB
/// the API server passes on for a whole request (`truncateAtTotalRunes`,
/// k8s.io/apiserver pkg/endpoints/filters/warning.go), which every webhook
/// and admission plugin of the request shares; past those 4 KiB it drops
/// the warnings that follow and logs an error.
pub const WARNING_BUDGET: usize = 2 * 1024;

/// `warnings` without repeats (the API server drops them too), kept in
/// order while they fit in [`WARNING_BUDGET`], the last one kept saying
/// how many more were left out: an update of an object with thousands of
/// blocking references would otherwise answer megabytes of warnings that
/// the API server throws away, and crowd out the other webhooks'.
pub fn within_warning_budget(warnings: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    let mut warnings: Vec<String> = warnings
        .into_iter()
        .filter(|w| seen.insert(w.clone()))
        .collect();
    let total: usize = warnings.iter().map(|w| w.chars().count()).sum();
    if total <= WARNING_BUDGET {
        return warnings;
    }
    let note = |left_out: usize| {
        let s = if left_out == 1 { "" } else { "s" };
        format!("ownerguard: {left_out} more warning{s} left out (the API server keeps 4 KiB)")
    };
    // Room for the note, whatever the count it says.
    let room = WARNING_BUDGET - note(warnings.len()).chars().count();
    let mut used = 0;
    let kept = warnings
        .iter()
        .take_while(|w| {
            used += w.chars().count();
            used <= room
        })
        .count();
    let left_out = warnings.len() - kept;
    warnings.truncate(kept);
    warnings.push(note(left_out));
    warnings
}

/// `text` as warnings of at most 119 characters each, cut between words
/// where it can be: read in order, they say the whole text (a client may
/// cut a longer warning at 120; kubectl prints each on its own line).
pub fn warning_parts(text: &str) -> Vec<String> {
    const MAX: usize = 119;
    const MORE: &str = "... ";
    let mut parts = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let prefix = if parts.is_empty() { "" } else { MORE };
        let room = MAX - prefix.len();
        if rest.len() <= room {
            parts.push(format!("{prefix}{rest}"));
            break;
        }
        let mut cut = room;
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let cut = rest[..cut]
            .rfind(' ')
            .filter(|&space| space > room / 2)
            .unwrap_or(cut);
        parts.push(format!("{prefix}{}", rest[..cut].trim_end()));
        rest = rest[cut..].trim_start();
    }
    parts
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
            if let Some(owner) = allowed.owner {
                audit_annotations.insert("owner-source", Cow::Borrowed(owner.source.as_str()));
                audit_annotations.insert("owner", Cow::Owned(owner.into_annotation()));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn chars(warnings: &[String]) -> usize {
        warnings.iter().map(|w| w.chars().count()).sum()
    }

    #[test]
    fn warnings_within_the_budget_are_answered_whole() {
        let warnings: Vec<String> = (0..WARNING_BUDGET / 119)
            .map(|i| format!("{i:03}{}", "a".repeat(116)))
            .collect();
        assert_eq!(within_warning_budget(warnings.clone()), warnings);
        // A repeat is said once, as the API server would.
        let twice = vec!["same".to_string(), "other".to_string(), "same".to_string()];
        assert_eq!(within_warning_budget(twice), ["same", "other"]);
    }

    #[test]
    fn warnings_past_the_budget_end_with_how_many_were_left_out() {
        // An update unblocking a thousand references, each a warning.
        let allowed = Allowed {
            warnings: (0..1000)
                .map(|i| format!("ownerReference #{i} to pod 'w-{i}' had blockOwnerDeletion: true; set to false ({})", "é".repeat(40)))
                .collect(),
            ..Allowed::default()
        };
        let all = allowed.warnings.clone();
        let response = respond_in_mode(
            "u",
            Ok(allowed),
            WebhookKind::Mutate,
            Mode::Enforce,
            &[],
            None,
        );
        let warnings = response.warnings;
        assert!(chars(&warnings) <= WARNING_BUDGET, "{}", chars(&warnings));
        let kept = warnings.len() - 1;
        assert!(kept > 10, "{kept}");
        assert_eq!(warnings[..kept], all[..kept]);
        assert_eq!(
            warnings[kept],
            format!(
                "ownerguard: {} more warnings left out (the API server keeps 4 KiB)",
                1000 - kept
            )
        );
        // Once within it, kept as it is.
        assert_eq!(within_warning_budget(warnings.clone()), warnings);
    }
}
