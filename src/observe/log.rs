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

/// The longest name or owner logged whole: a DNS subdomain's 253 bytes,
/// the longest any object name can be once the API server validates it.
const NAME_MAX: usize = 253;

/// The longest owner logged whole: `namespace/name/uid` of valid ones
/// (63, 253 and 36 bytes) with room to spare.
const OWNER_MAX: usize = 512;

/// The longest detail logged whole: a refusal, or the refusals a mode
/// softened, each a sentence with its names cut to 64 characters.
const DETAIL_MAX: usize = 16 * 1024;

/// `text` whole when it is at most `max` bytes; else its first `max`
/// bytes (to a character's boundary), `...` and how long it was.
fn bounded(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!("{}... ({} bytes)", &text[..end], text.len()))
}

fn log_decision(
    answered: &Answered<'_>,
    webhook: &'static str,
    decision_mode: &'static str,
    elapsed: std::time::Duration,
) {
    let (request, response) = (answered.request, answered.response);
    let object = decide::object_name(request);
    // The name and the owner reach `/mutate` before the API server
    // validates them: a 3 MiB name would make a line of up to 18 MiB
    // (escaped), held in the log's queue. Any valid one is logged whole
    // (the owner is `namespace/name/uid`).
    let name = bounded(&object.name, NAME_MAX);
    let name = if object.generated {
        format!("{name}*")
    } else {
        name.into_owned()
    };
    let owner = response
        .audit_annotations
        .get("owner")
        .map_or("", String::as_str);
    let owner = bounded(owner, OWNER_MAX);
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
    let detail = bounded(detail, DETAIL_MAX);
    // Who asked: the API server's authenticated user, bounded like a name
    // (a token's user is whatever its issuer wrote).
    let user = bounded(request.user_info.username.as_str(), NAME_MAX);
    info!(
        uid = request.uid.as_str(),
        webhook,
        operation = request.operation.as_str(),
        namespace = request.namespace.as_deref().unwrap_or(""),
        kind = object.kind.as_str(),
        name = name.as_str(),
        user = user.as_ref(),
        owner = owner.as_ref(),
        mode = decision_mode,
        result = answered.result(),
        code = response.status.as_ref().map_or(200, |s| s.code),
        dry_run = request.dry_run.unwrap_or(false),
        duration_ms = elapsed.as_secs_f64() * 1000.0,
        detail = detail.as_ref(),
        "decision"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_text_is_cut_at_a_character_and_says_how_long_it_was() {
        assert_eq!(bounded("w-1", NAME_MAX), "w-1");
        let valid = "a".repeat(NAME_MAX);
        assert_eq!(bounded(&valid, NAME_MAX), valid);
        let long = "é".repeat(2_000_000);
        let cut = bounded(&long, NAME_MAX);
        assert_eq!(cut, format!("{}... (4000000 bytes)", "é".repeat(126)));
    }
}
