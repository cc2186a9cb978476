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
