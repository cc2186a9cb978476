//! The JSON log line, written straight into the line's buffer.
//!
//! `serve` logs a line per decision, on the path of every review.
//! tracing-subscriber's own JSON format writes each line through serde_json
//! into an `io::Write` adaptor over the line's `String`, which checks every
//! small piece (a quote, a colon, a key) for UTF-8 again: measured with
//! callgrind at about 26,000 instructions a decision line, an eighth of a
//! whole review (docs/performance.md). This format writes the same line,
//! key for key and byte for byte, with no adaptor and no allocation:
//!
//! `{"timestamp":"…","level":"INFO","message":"…",<fields in order>,"target":"…"}`
//!
//! An event inside a span (ownerguard opens none; a dependency might) is
//! handed to tracing-subscriber's own JSON format, which writes the span
//! list this one does not.

use std::fmt::{self, Write};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::fmt::format::{Format, Json, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The event format of `--log-format json`: tracing-subscriber's JSON
/// with `flatten_event(true)` and `with_current_span(false)`, written
/// directly.
pub struct JsonLines {
    /// For an event inside a span: the format this one writes as.
    in_span: Format<Json, SystemTime>,
}

impl Default for JsonLines {
    fn default() -> Self {
        Self {
            in_span: Format::default()
                .json()
                .flatten_event(true)
                .with_current_span(false),
        }
    }
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let in_span = event
            .parent()
            .and_then(|id| ctx.span(id))
            .or_else(|| ctx.lookup_current())
            .is_some();
        if in_span {
            return self.in_span.format_event(ctx, writer, event);
        }
        // A `log` record (rustls logs through `log`) carries its real
        // target in fields; tracing-subscriber reads it the same way.
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
        writer.write_str("{\"timestamp\":\"")?;
        SystemTime.format_time(&mut writer)?;
        write!(writer, "\",\"level\":\"{}\"", meta.level())?;
        let mut fields = Fields {
            writer: &mut writer,
            result: Ok(()),
        };
        event.record(&mut fields);
        fields.result?;
        writer.write_str(",\"target\":")?;
        write_str(&mut writer, meta.target())?;
        writer.write_str("}\n")
    }
}

/// Writes each field as `,"name":value`, in the order they come.
struct Fields<'a, W: Write> {
    writer: &'a mut W,
    result: fmt::Result,
}

impl<W: Write> Fields<'_, W> {
    fn entry(&mut self, field: &Field, value: impl FnOnce(&mut W) -> fmt::Result) {
        if self.result.is_ok() {
            self.result = (|| {
                self.writer.write_char(',')?;
                write_str(self.writer, field.name())?;
                self.writer.write_char(':')?;
                value(self.writer)
            })();
        }
    }
}

impl<W: Write> Visit for Fields<'_, W> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.entry(field, |w| write_str(w, value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.entry(field, |w| w.write_str(if value { "true" } else { "false" }));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.entry(field, |w| write!(w, "{value}"));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.entry(field, |w| write!(w, "{value}"));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.entry(field, |w| write_f64(w, value));
    }

    /// `%value` and `?value` fields, and what tracing routes here (128-bit
    /// integers, errors): their text as a JSON string, as serde_json's
    /// `collect_str` writes it.
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.entry(field, |w| {
            w.write_char('"')?;
            write!(Escaped(w), "{value:?}")?;
            w.write_char('"')
        });
    }
}

/// A float as serde_json writes one: its shortest form that reads back
/// the same (`1.0`, not `1`), `null` when it is not finite.
fn write_f64(writer: &mut impl Write, value: f64) -> fmt::Result {
    // serde_json writes into any `io::Write`, and a slice is one: no
    // allocation. 32 bytes hold every f64 it writes (at most 24).
    let mut buffer = [0u8; 32];
    let mut rest = &mut buffer[..];
    serde_json::to_writer(&mut rest, &value).map_err(|_| fmt::Error)?;
    let written = 32 - rest.len();
    let text = std::str::from_utf8(&buffer[..written]).map_err(|_| fmt::Error)?;
    writer.write_str(text)
}

/// `value` as a JSON string, quotes included.
fn write_str(writer: &mut impl Write, value: &str) -> fmt::Result {
    writer.write_char('"')?;
    Escaped(writer).write_str(value)?;
    writer.write_char('"')
}

/// Text written through it comes out escaped as the inside of a JSON
/// string, as serde_json escapes it (`"`, `\` and the control characters
/// below U+0020: `\b \t \n \f \r` by name, the rest as `\u00XX`), and
/// beyond it the characters a terminal acts on that JSON lets through:
/// DEL and the C1 controls (U+007F to U+009F), the line and paragraph
/// separators and the bidirectional controls, as `\uXXXX` (the line stays
/// the JSON it was; a person reading the log on a terminal sees the
/// escape, not its effect). All else, everything outside ASCII included,
/// as it is.
struct Escaped<'a, W: Write>(&'a mut W);

impl<W: Write> Write for Escaped<'_, W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let bytes = text.as_bytes();
        let mut start = 0;
        for (at, &byte) in bytes.iter().enumerate() {
            match NEEDS_ESCAPE[usize::from(byte)] {
                Escape::No => continue,
                Escape::Ascii => {
                    // An ASCII byte: `at` is a char boundary.
                    self.0.write_str(&text[start..at])?;
                    match byte {
                        b'"' => self.0.write_str("\\\"")?,
                        b'\\' => self.0.write_str("\\\\")?,
                        b'\n' => self.0.write_str("\\n")?,
                        b'\r' => self.0.write_str("\\r")?,
                        b'\t' => self.0.write_str("\\t")?,
                        0x08 => self.0.write_str("\\b")?,
                        0x0c => self.0.write_str("\\f")?,
                        _ => write!(self.0, "\\u{byte:04x}")?,
                    }
                    start = at + 1;
                }
                Escape::Maybe => {
                    // The lead byte of a character that may be one a
                    // terminal acts on: look at the whole character.
                    let Some(c) = text[at..].chars().next() else {
                        continue;
                    };
                    if c.is_control() || crate::decide::subject::moves_text(c) {
                        self.0.write_str(&text[start..at])?;
                        write!(self.0, "\\u{:04x}", c as u32)?;
                        start = at + c.len_utf8();
                    }
                }
            }
        }
        self.0.write_str(&text[start..])
    }
}

/// What a byte asks of [`Escaped`].
#[derive(Clone, Copy)]
enum Escape {
    No,
    /// `"`, `\`, a control character below U+0020, or DEL.
    Ascii,
    /// The lead byte of a C1 control (0xC2), of U+061C (0xD8) or of the
    /// separators and bidirectional controls (0xE2).
    Maybe,
}

/// One lookup a byte on the common path.
const NEEDS_ESCAPE: [Escape; 256] = {
    let mut table = [Escape::No; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = Escape::Ascii;
        byte += 1;
    }
    table[b'"' as usize] = Escape::Ascii;
    table[b'\\' as usize] = Escape::Ascii;
    table[0x7f] = Escape::Ascii;
    table[0xc2] = Escape::Maybe;
    table[0xd8] = Escape::Maybe;
    table[0xe2] = Escape::Maybe;
    table
};

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::fmt::format::JsonFields;

    use super::*;

    /// Lines written into memory.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Lines {
        type Writer = Lines;
        fn make_writer(&'a self) -> Lines {
            self.clone()
        }
    }

    /// What `events` log, line by line, with each timestamp's value cut.
    fn logged(json_lines: bool, events: fn()) -> Vec<String> {
        let lines = Lines::default();
        let builder = tracing_subscriber::fmt()
            .with_writer(lines.clone())
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false);
        if json_lines {
            let subscriber = builder
                .fmt_fields(JsonFields::new())
                .event_format(JsonLines::default())
                .finish();
            tracing::subscriber::with_default(subscriber, events);
        } else {
            let subscriber = builder
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .finish();
            tracing::subscriber::with_default(subscriber, events);
        }
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|line| {
                let (head, rest) = line.split_at(line.find("\",\"level\"").unwrap());
                assert!(head.starts_with("{\"timestamp\":\"20"), "{line}");
                rest.to_string()
            })
            .collect()
    }

    #[test]
    fn lines_are_those_of_tracing_subscribers_json() {
        fn events() {
            let error = std::io::Error::other("disk \"full\"\n");
            tracing::info!(
                uid = "705ab4f5",
                webhook = "mutate",
                kind = %"Pod",
                name = %"agent-*",
                code = 200u16,
                delta = -3i64,
                dry_run = false,
                duration_ms = 0.176786,
                whole = 2.0,
                big = u128::MAX,
                detail = "tab\tand \u{1} and é",
                "decision"
            );
            tracing::warn!(%error, "owner lookup failed");
            tracing::error!(debug = ?vec!["a", "b"], "with {} args", 2);
            tracing::debug!("no fields");
            tracing::info!(target: "some::target", message_like = "x", "targeted");
            let span = tracing::info_span!("a span", id = 7);
            span.in_scope(|| tracing::info!(inside = true, "in a span"));
        }
        let ours = logged(true, events);
        let theirs = logged(false, events);
        assert_eq!(ours.len(), 6);
        assert_eq!(ours, theirs);
    }

    fn escaped(text: &str) -> String {
        let mut out = String::new();
        write_str(&mut out, text).unwrap();
        out
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let mut every_control = String::new();
        for c in 0u8..0x20 {
            every_control.push(char::from(c));
        }
        for text in [
            "",
            "plain",
            "quote \" and backslash \\",
            "line\nbreak\r\ttab",
            "delete, é, 🦀",
            every_control.as_str(),
            "\\u0000 is text here",
        ] {
            assert_eq!(
                escaped(text),
                serde_json::to_string(text).unwrap(),
                "{text:?}"
            );
        }
    }

    /// serde_json's escaping, and beyond it every character a terminal
    /// acts on as `\uXXXX`.
    fn expected(text: &str) -> String {
        let mut out = String::new();
        for c in serde_json::to_string(text).unwrap().chars() {
            if c.is_control() || crate::decide::subject::moves_text(c) {
                out.push_str(&format!("\\u{:04x}", c as u32));
            } else {
                out.push(c);
            }
        }
        out
    }

    #[test]
    fn what_a_terminal_acts_on_is_escaped_too() {
        let text = "a\u{7f}b\u{9b}2J\u{202e}c\u{2028}d\u{61c}e\u{85}f\u{a0}é";
        assert_eq!(
            escaped(text),
            "\"a\\u007fb\\u009b2J\\u202ec\\u2028d\\u061ce\\u0085f\u{a0}é\""
        );
        let back: String = serde_json::from_str(&escaped(text)).unwrap();
        assert_eq!(back, text, "still the JSON of the same text");
    }

    proptest::proptest! {
        #[test]
        fn any_string_is_escaped_as_serde_json_escapes_it_and_more(text in "(?s).{0,40}") {
            proptest::prop_assert_eq!(escaped(&text), expected(&text));
            let back: String = serde_json::from_str(&escaped(&text)).unwrap();
            proptest::prop_assert_eq!(back, text);
        }
    }

    #[test]
    fn floats_are_written_as_serde_json_writes_them() {
        for value in [
            0.0,
            1.0,
            -2.5,
            0.176786,
            1e300,
            5e-324,
            f64::MAX,
            f64::MIN_POSITIVE,
        ] {
            let mut out = String::new();
            write_f64(&mut out, value).unwrap();
            assert_eq!(out, serde_json::to_string(&value).unwrap());
        }
        for value in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let mut out = String::new();
            write_f64(&mut out, value).unwrap();
            assert_eq!(out, "null");
        }
    }
}
