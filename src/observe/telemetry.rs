//! Logs through `tracing`, to standard error (standard output is the
//! `review` command's answer), as text or JSON. `OWNERGUARD_LOG` (or
//! `RUST_LOG`) overrides the level, with `tracing-subscriber`'s syntax.
//!
//! Lines are written by a thread of their own (`log_writer`), not by
//! the task that logs them: `serve` logs a line per decision, and a
//! `write(2)` to standard error can wait (a container runtime's full pipe,
//! a disk's writeback throttling) while it holds stderr's lock, so a slow
//! write on one runtime worker would stall every review on both. The queue
//! holds up to [`QUEUED_LINES`]; when it is full a line waits for room
//! rather than being dropped (the decision log is an audit trail).

use std::io::{BufWriter, IsTerminal};
use std::sync::OnceLock;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::JsonFields;
use tracing_subscriber::util::SubscriberInitExt;

use super::json_lines::JsonLines;
use super::log_writer::{self, LogWriter, WriterGuard};
use super::text_fields::EscapedFields;

/// How log lines are written: `--log-format` (the flag is in
/// `commands::cli`, which reads this type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Lines queued for the writer thread before a logging task waits: about
/// a second of decisions at the highest rate measured, some MiB at most.
pub const QUEUED_LINES: usize = 65_536;

/// What the writer thread gathers before a `write(2)`: some hundred lines.
const WRITE_BUFFER_BYTES: usize = 64 * 1024;

/// Keeps the writer thread; dropping it writes out what is queued.
#[must_use = "dropping the guard stops the log writer"]
pub struct LogGuard {
    _writer: WriterGuard,
}

/// Where lines written without `tracing` go ([`direct_json`]): set once the
/// process logs JSON through [`init`].
static DIRECT_JSON: OnceLock<LogWriter> = OnceLock::new();

/// The log writer a JSON line may be handed to directly, without
/// `tracing`'s dispatch, when the process logs JSON through [`init`]:
/// the decision log's line, one a review, written as `JsonLines` writes
/// it. `None` otherwise (text, tests, a subscriber of someone else's).
pub(crate) fn direct_json() -> Option<&'static LogWriter> {
    DIRECT_JSON.get()
}

/// Whether lines may be written directly under `filter`: only when it
/// filters by target and level alone. A directive that names a span or a
/// field (`ownerguard[{error}]=info`) decides per event, from what the
/// event carries, and the check the direct line makes (`enabled!`) carries
/// nothing: such a filter keeps every line on `tracing`'s path.
pub(crate) fn writes_directly(filter: &EnvFilter) -> bool {
    !filter.to_string().contains('[')
}

pub fn init(format: LogFormat, default_level: &str) -> LogGuard {
    init_with_traces(format, default_level, None)
}

/// [`init`], and with a tracer, the spans of [`traces`](super::traces)
/// exported through it: ownerguard's own (never logged) and the kube
/// client's request spans under an owner lookup (never anything else the
/// process does). Without one, the subscriber is exactly [`init`]'s.
pub fn init_with_traces(
    format: LogFormat,
    default_level: &str,
    tracer: Option<opentelemetry_sdk::trace::Tracer>,
) -> LogGuard {
    let filter = EnvFilter::try_from_env("OWNERGUARD_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new(default_level));
    let direct = writes_directly(&filter);
    // Buffered: the writer thread writes what it has taken off the queue
    // in one `write(2)` and flushes once the queue is empty, instead of a
    // system call a line. A line is never split: BufWriter writes whole
    // buffers of whole lines, and a line over its size directly. Patient:
    // a non-blocking stderr's `EAGAIN` delays a line instead of losing it.
    let (writer, guard) = log_writer::spawn(
        "ownerguard-log",
        BufWriter::with_capacity(WRITE_BUFFER_BYTES, log_writer::Patient(std::io::stderr())),
        QUEUED_LINES,
    );
    if let Some(tracer) = tracer {
        let result = traced_subscriber(format, filter, writer.clone(), tracer).try_init();
        if result.is_ok() && format == LogFormat::Json && direct {
            let _ = DIRECT_JSON.set(writer);
        }
        return LogGuard { _writer: guard };
    }
    // Colours only for a person at a terminal, never into a log collector.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer.clone())
        .with_ansi(std::io::stderr().is_terminal());
    let result = match format {
        // Every field escaped: names come from the request (text_fields.rs).
        LogFormat::Text => builder.fmt_fields(EscapedFields).try_init(),
        // tracing-subscriber's `.json().flatten_event(true)
        // .with_current_span(false)`, written without its per-piece
        // adaptor (json_lines.rs); spans keep their fields as JSON.
        LogFormat::Json => builder
            .fmt_fields(JsonFields::new())
            .event_format(JsonLines::default())
            .try_init()
            .inspect(|()| {
                if direct {
                    let _ = DIRECT_JSON.set(writer.clone());
                }
            }),
    };
    // Already set (a second init in tests): keep the first.
    drop(result);
    LogGuard { _writer: guard }
}

/// The subscriber with the trace layer: the log as [`init`] writes it
/// (the same filter, format and writer; ownerguard's spans left out of
/// it), and the trace layer beside it, which takes ownerguard's spans and
/// the kube client's request spans made under an owner lookup, and no
/// event (a log line never becomes part of a trace).
fn traced_subscriber(
    format: LogFormat,
    filter: EnvFilter,
    writer: LogWriter,
    tracer: opentelemetry_sdk::trace::Tracer,
) -> impl tracing::Subscriber + Send + Sync {
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::{FilterExt, dynamic_filter_fn, filter_fn};
    use tracing_subscriber::layer::SubscriberExt;

    use super::traces::{KUBE_HTTP_SPAN, KUBE_TARGET_PREFIX, LOOKUP_SPAN, TARGET};

    let log = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(std::io::stderr().is_terminal());
    let log = match format {
        LogFormat::Text => log.fmt_fields(EscapedFields).boxed(),
        LogFormat::Json => log
            .fmt_fields(JsonFields::new())
            .event_format(JsonLines::default())
            .boxed(),
    };
    use tracing::level_filters::LevelFilter;
    // Each filter says its most verbose level: an `and` of two takes the
    // lower of their hints, and one without a hint would make the whole
    // subscriber's hint TRACE (every `trace!` and every `log` record then
    // dispatched).
    let not_traces = filter_fn(|meta| !(meta.is_span() && meta.target() == TARGET))
        .with_max_level_hint(LevelFilter::TRACE);
    // Its level hint: nothing above DEBUG (kube's span) is ever taken, so
    // `trace!` calls (rustls logs every record through `log`) stay off at
    // their static check, as without tracing.
    let spans = filter_fn(|meta| {
        meta.is_span()
            && (meta.target() == TARGET
                || (meta.target().starts_with(KUBE_TARGET_PREFIX) && meta.name() == KUBE_HTTP_SPAN))
    })
    .with_max_level_hint(LevelFilter::DEBUG);
    // The kube client makes a span for every request (watches, lists,
    // Events): only one made while an owner lookup is current is part of a
    // review.
    let under_a_lookup = dynamic_filter_fn(|meta, cx| {
        meta.target() == TARGET
            || cx
                .lookup_current()
                .is_some_and(|span| span.name() == LOOKUP_SPAN)
    })
    .with_max_level_hint(LevelFilter::DEBUG);
    let traces = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_level(false)
        .with_tracked_inactivity(false)
        .with_context_activation(false);
    tracing_subscriber::registry()
        .with(log.with_filter(filter.and(not_traces)))
        .with(traces.with_filter(spans.and(under_a_lookup)))
}
