//! The decision log: one line per decision (uid, namespace, kind, name or
//! generateName, owner, result, duration), a warning per failed lookup
//! with the error itself (the denial only says a sentence), and a warning
//! for a body that was no review.

use tracing::{Level, info, warn};

use super::json_lines::{DirectLine, key};
use super::telemetry;

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
                    decision.trace_id.as_deref(),
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
    trace_id: Option<&str>,
) {
    let (request, response) = (answered.request, answered.response);
    let (kind, name, generated) = decide::object_name_parts(request);
    // The name and the owner reach `/mutate` before the API server
    // validates them: a 3 MiB name would make a line of up to 18 MiB
    // (escaped), held in the log's queue. Any valid one is logged whole
    // (the owner is `namespace/name/uid`); a `generateName` prefix is
    // logged with a `*` after it.
    let name = bounded(name, NAME_MAX);
    let owner = response
        .audit_annotations
        .get("owner")
        .map_or("", |owner| owner.as_ref());
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
                .map(|violation| violation.as_ref())
        })
        .unwrap_or("");
    let detail = bounded(detail, DETAIL_MAX);
    // Who asked: the API server's authenticated user, bounded like a name
    // (a token's user is whatever its issuer wrote).
    let user = bounded(request.user_info.username.as_str(), NAME_MAX);
    let line = DecisionLine {
        uid: request.uid.as_str(),
        webhook,
        operation: request.operation.as_str(),
        namespace: request.namespace.as_deref().unwrap_or(""),
        kind,
        name: name.as_ref(),
        generated,
        user: user.as_ref(),
        owner: owner.as_ref(),
        mode: decision_mode,
        result: answered.result(),
        code: response.status.as_ref().map_or(200, |s| s.code),
        dry_run: request.dry_run.unwrap_or(false),
        duration_ms: elapsed.as_secs_f64() * 1000.0,
        detail: detail.as_ref(),
        trace_id,
    };
    // One line a review: written straight to the log's writer when the
    // process logs JSON and the line is enabled, without `tracing`'s
    // dispatch and field visitors (most of what the line cost); the same
    // bytes either way (tested below). Inside a span (ownerguard opens
    // none) `tracing` writes it, with the span list.
    match telemetry::direct_json() {
        Some(writer) if tracing::enabled!(Level::INFO) && tracing::Span::current().is_none() => {
            writer.send_line(line.direct());
        }
        _ => line.log(),
    }
}

/// The fields of a decision's line, in the order they are written.
struct DecisionLine<'a> {
    uid: &'a str,
    webhook: &'static str,
    operation: &'a str,
    namespace: &'a str,
    kind: &'a str,
    name: &'a str,
    /// `name` is a `generateName` prefix: logged with a `*` after it.
    generated: bool,
    user: &'a str,
    owner: &'a str,
    mode: &'static str,
    result: &'static str,
    code: u16,
    dry_run: bool,
    duration_ms: f64,
    detail: &'a str,
    /// The trace the review joined (`--tracing`, sampled): the way from
    /// the line to its trace. Absent otherwise.
    trace_id: Option<&'a str>,
}

impl DecisionLine<'_> {
    /// Through `tracing`, in the format the process logs in.
    fn log(&self) {
        let name = if self.generated {
            std::borrow::Cow::Owned(format!("{}*", self.name))
        } else {
            std::borrow::Cow::Borrowed(self.name)
        };
        info!(
            uid = self.uid,
            webhook = self.webhook,
            operation = self.operation,
            namespace = self.namespace,
            kind = self.kind,
            name = name.as_ref(),
            user = self.user,
            owner = self.owner,
            mode = self.mode,
            result = self.result,
            code = self.code,
            dry_run = self.dry_run,
            duration_ms = self.duration_ms,
            detail = self.detail,
            trace_id = self.trace_id,
            "decision"
        );
    }

    /// The JSON line `log` writes under `--log-format json`, written
    /// directly.
    fn direct(&self) -> Vec<u8> {
        let mut line = DirectLine::new(&Level::INFO, "decision");
        line.str(key!("uid"), self.uid)
            .str(key!("webhook"), self.webhook)
            .str(key!("operation"), self.operation)
            .str(key!("namespace"), self.namespace)
            .str(key!("kind"), self.kind)
            .str_then(
                key!("name"),
                self.name,
                if self.generated { "*" } else { "" },
            )
            .str(key!("user"), self.user)
            .str(key!("owner"), self.owner)
            .str(key!("mode"), self.mode)
            .str(key!("result"), self.result)
            .u64(key!("code"), u64::from(self.code))
            .bool(key!("dry_run"), self.dry_run)
            .f64(key!("duration_ms"), self.duration_ms)
            .str(key!("detail"), self.detail);
        if let Some(trace_id) = self.trace_id {
            line.str(key!("trace_id"), trace_id);
        }
        line.finish(module_path!())
    }
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

    /// A patched create of a generated pod's line, plain text throughout.
    fn sample_line() -> DecisionLine<'static> {
        DecisionLine {
            uid: "5f2c7a1e-9b3d-4c8e-a6f1-0d2e4b6c8a90",
            webhook: "mutate",
            operation: "CREATE",
            namespace: "agents",
            kind: "Pod",
            name: "agent-",
            generated: true,
            user: "system:serviceaccount:agents:worker",
            owner: "agents/worker-0/3c5b1f4e-8a0d-4f6e-9b1a-2d7c0e4f5a61",
            mode: "enforce",
            result: "patched",
            code: 200,
            dry_run: false,
            duration_ms: 0.123_456_789,
            detail: "",
            trace_id: None,
        }
    }

    /// The direct line is taken exactly when `tracing` would write the
    /// event: under a filter by target and level, and never under one
    /// that names a field or a span (which decides per event).
    #[test]
    fn the_direct_line_is_written_exactly_when_tracing_would_write_it() {
        for directive in [
            "info",
            "warn",
            "ownerguard=info",
            "ownerguard::observe::log=warn,info",
            "warn,ownerguard[{uid}]=info",
            "warn,ownerguard[{error}]=info",
            "warn,[decide]=info",
        ] {
            let sink = crate::observe::json_lines::tests::Lines::default();
            let filter = tracing_subscriber::EnvFilter::new(directive);
            let direct = telemetry::writes_directly(&filter);
            assert_eq!(direct, !directive.contains('['), "{directive}");
            let subscriber = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_writer(sink.clone())
                .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
                .event_format(crate::observe::json_lines::JsonLines::default())
                .finish();
            let (taken, enabled) = tracing::subscriber::with_default(subscriber, || {
                let enabled = tracing::enabled!(Level::INFO);
                let taken = direct && enabled && tracing::Span::current().is_none();
                sample_line().log();
                (taken, enabled)
            });
            let written = !sink.0.lock().unwrap().is_empty();
            // Under a per-event filter the line goes through `tracing`,
            // which writes it or not; otherwise the two paths agree.
            if direct {
                assert_eq!(taken, written, "OWNERGUARD_LOG={directive}");
            } else {
                assert!(!taken, "OWNERGUARD_LOG={directive}: {enabled}");
            }
        }
    }

    /// The line written directly is, byte for byte but the timestamp's
    /// value, the one the JSON format writes for the `info!` event through
    /// `tracing` (and tracing-subscriber's own JSON format, where no
    /// terminal control is in it): plain fields, fields that need escapes (quotes,
    /// controls, a terminal's controls, text outside ASCII), an empty one,
    /// a `generateName` prefix and its `*`, a denial's code, a float that
    /// is whole and one that is not.
    #[test]
    fn the_direct_line_is_tracing_subscribers_json_line() {
        fn lines() -> [DecisionLine<'static>; 3] {
            let plain = sample_line();
            [
                DecisionLine {
                    name: "a\"b\\c\n\u{1}\u{7f}\u{9b}\u{202e}é",
                    generated: false,
                    detail: "pod \"w\" in namespace \"agents\" is not running",
                    result: "denied",
                    code: 403,
                    dry_run: true,
                    duration_ms: 2.0,
                    ..plain
                },
                DecisionLine {
                    namespace: "",
                    owner: "",
                    duration_ms: 1e-7,
                    trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736"),
                    ..plain
                },
                plain,
            ]
        }
        let log = || lines().iter().for_each(DecisionLine::log);
        let through_tracing = crate::observe::json_lines::tests::logged(true, log);
        // tracing-subscriber's own JSON, which the format follows but for
        // the terminal's controls it escapes (the first line has some).
        let reference = crate::observe::json_lines::tests::logged(false, log);
        assert_eq!(through_tracing[1..], reference[1..]);
        let direct: Vec<String> = lines()
            .iter()
            .map(|line| {
                let line = String::from_utf8(line.direct()).unwrap();
                let line = line.strip_suffix('\n').unwrap();
                let (head, rest) = line.split_at(line.find("\",\"level\"").unwrap());
                assert!(head.starts_with("{\"timestamp\":\"20"), "{line}");
                rest.to_string()
            })
            .collect();
        assert_eq!(direct, through_tracing);
        assert_eq!(direct.len(), 3);
    }
}
