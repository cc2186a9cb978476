//! The decision log: one line per decision (uid, namespace, kind, name or
//! generateName, owner, result, duration), a warning per failed lookup
//! with the error itself (the denial only says a sentence), and a warning
//! for a body that was no review.

use tracing::{info, warn};

use super::{Answered, Decision, Observer, Outcome};
use crate::admission::AdmissionResponse;
use crate::decide;

/// Writes the decision log through `tracing`.
#[derive(Debug, Default)]
pub struct DecisionLog;

impl Observer for DecisionLog {
    fn observe(&self, decision: &Decision<'_>) {
        let webhook = decision.endpoint.name;
        match &decision.outcome {
            Outcome::Refused(error) => {
                warn!(webhook, %error, "refused a body that is not a review");
            }
            Outcome::Answered(answered) => {
                for (need, lookup) in answered.each_lookup() {
                    if let Err(error) = &lookup.outcome {
                        warn!(namespace = answered.namespace, pod = %need.name, %error, "owner lookup failed");
                    }
                }
                log_decision(
                    answered,
                    webhook,
                    decision.endpoint.mode.as_str(),
                    decision.elapsed,
                );
            }
        }
    }
}

/// The `result` of a decision: `denied`, `patched` or `allowed` (the
/// request metric's label too).
pub fn result_label(response: &AdmissionResponse) -> &'static str {
    match (response.allowed, response.patch.is_some()) {
        (false, _) => "denied",
        (true, true) => "patched",
        (true, false) => "allowed",
    }
}

fn log_decision(
    answered: &Answered<'_>,
    webhook: &'static str,
    decision_mode: &'static str,
    elapsed: std::time::Duration,
) {
    let (request, response) = (answered.request, answered.response);
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
    // A warned decision's detail is what enforce would have refused.
    let detail = response
        .status
        .as_ref()
        .map(|s| s.message.as_str())
        .or_else(|| {
            response
                .audit_annotations
                .get("violation")
                .map(String::as_str)
        })
        .unwrap_or("");
    info!(
        uid = request.uid.as_str(),
        webhook,
        operation = request.operation.as_str(),
        namespace = request.namespace.as_deref().unwrap_or(""),
        kind = object.kind.as_str(),
        name = name.as_str(),
        owner,
        mode = decision_mode,
        result = answered.result(),
        code = response.status.as_ref().map_or(200, |s| s.code),
        dry_run = request.dry_run.unwrap_or(false),
        duration_ms = elapsed.as_secs_f64() * 1000.0,
        detail,
        "decision"
    );
}
