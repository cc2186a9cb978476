//! The fields of a text log line, written so that no value can forge a
//! line or reach a terminal as a control sequence.
//!
//! A mutating webhook sees `metadata.name` and `generateName` before the
//! API server validates them, so the decision log carries text an
//! attacker chose. tracing-subscriber's text format writes a `%value`
//! (Display) field as it is: a name holding a newline would write a whole
//! fake `decision … result="allowed"` line, and an escape character would
//! drive the terminal. Here every field is written logfmt-style: bare when
//! it is plain, else in double quotes with `\`, `"`, every control
//! character (C0, DEL, C1) and the characters that move or reorder text
//! (line and paragraph separators, bidirectional controls) escaped. The
//! JSON format (json_lines.rs) escapes as JSON does.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

/// tracing-subscriber's `DefaultFields` (the event's message first, then
/// `name=value` pairs), every value escaped.
#[derive(Debug, Default)]
pub struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        let mut visitor = Visitor {
            writer: &mut writer,
            first: true,
            value: String::new(),
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct Visitor<'a, 'writer> {
    writer: &'a mut Writer<'writer>,
    first: bool,
    /// A value formatted before it is escaped (reused across fields).
    value: String,
    result: fmt::Result,
}

impl Visitor<'_, '_> {
    fn write(&mut self, field: &Field) -> fmt::Result {
        let name = field.name();
        // Fields of a `log` record, which tracing-log turns into metadata.
        if name.starts_with("log.") {
            return Ok(());
        }
        if !self.first {
            self.writer.write_char(' ')?;
        }
        self.first = false;
        if name == "message" {
            // The event's own text: written unquoted, as DefaultFields
            // does, but escaped all the same.
            return write_escaped(self.writer, &self.value);
        }
        self.writer
            .write_str(name.strip_prefix("r#").unwrap_or(name))?;
        self.writer.write_char('=')?;
        write_value(self.writer, &self.value)
    }
}

impl Visit for Visitor<'_, '_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        self.value.clear();
        self.value.push_str(value);
        self.result = self.write(field);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        self.value.clear();
        // `%value` fields arrive here too, their Debug being their Display.
        self.result = write!(self.value, "{value:?}").and_then(|()| self.write(field));
    }
}

/// A character written as an escape: a control character, or one that
/// moves or reorders the text around it on a terminal.
fn needs_escape(c: char) -> bool {
    c.is_control() || crate::decide::subject::moves_text(c)
}

/// A value written bare when that reads back as exactly it, else quoted.
fn write_value(w: &mut impl fmt::Write, value: &str) -> fmt::Result {
    let plain = !value.is_empty()
        && !value
            .chars()
            .any(|c| c.is_whitespace() || c == '"' || c == '=' || c == '\\' || needs_escape(c));
    if plain {
        return w.write_str(value);
    }
    w.write_char('"')?;
    for c in value.chars() {
        match c {
            '"' => w.write_str("\\\"")?,
            '\\' => w.write_str("\\\\")?,
            _ => write_char_escaped(w, c)?,
        }
    }
    w.write_char('"')
}

/// Text written unquoted with its control characters escaped.
fn write_escaped(w: &mut impl fmt::Write, text: &str) -> fmt::Result {
    text.chars().try_for_each(|c| write_char_escaped(w, c))
}

fn write_char_escaped(w: &mut impl fmt::Write, c: char) -> fmt::Result {
    match c {
        '\n' => w.write_str("\\n"),
        '\r' => w.write_str("\\r"),
        '\t' => w.write_str("\\t"),
        c if needs_escape(c) => write!(w, "\\u{{{:x}}}", c as u32),
        c => w.write_char(c),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
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

    /// What the text format writes for `events`, one string per line.
    fn logged(events: impl FnOnce()) -> Vec<String> {
        let lines = Lines::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(lines.clone())
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .fmt_fields(EscapedFields)
            .finish();
        tracing::subscriber::with_default(subscriber, events);
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_string).collect()
    }

    #[test]
    fn a_name_with_a_newline_cannot_forge_a_decision_line() {
        let name = "x\n INFO decision uid=1 name=evil result=\"allowed\"";
        let lines = logged(|| tracing::info!(name = %name, result = "denied", "decision"));
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(
            lines[0],
            r#" INFO decision name="x\n INFO decision uid=1 name=evil result=\"allowed\"" result=denied"#
        );
    }

    #[test]
    fn every_control_character_is_escaped_in_every_way_a_field_is_recorded() {
        let controls: Vec<char> = (0u32..=0x9f)
            .filter_map(char::from_u32)
            .filter(|c| c.is_control())
            .chain(['\u{2028}', '\u{2029}', '\u{202e}', '\u{2066}', '\u{200f}'])
            .collect();
        assert_eq!(controls.len(), 65 + 5);
        for c in controls {
            let value = format!("a{c}b");
            let lines = logged(|| {
                tracing::info!(shown = %value, "{}", value);
                tracing::info!(as_str = value.as_str(), "m");
                tracing::warn!(error = %std::io::Error::other(value.clone()), "m");
            });
            assert_eq!(lines.len(), 3, "{c:?}: {lines:?}");
            for line in &lines {
                assert!(
                    !line.chars().any(needs_escape),
                    "{c:?} written raw: {line:?}"
                );
            }
            assert!(
                lines[0].contains(&format!("shown=\"a{}b\"", escaped(c))),
                "{lines:?}"
            );
            assert!(
                lines[0].starts_with(&format!(" INFO a{}b ", escaped(c))),
                "{lines:?}"
            );
        }
    }

    fn escaped(c: char) -> String {
        let mut out = String::new();
        write_char_escaped(&mut out, c).unwrap();
        assert_ne!(out, c.to_string());
        out
    }

    #[test]
    fn plain_values_stay_bare_and_the_rest_is_quoted() {
        let lines = logged(|| {
            tracing::info!(
                name = "agent-1*",
                empty = "",
                spaced = "a b",
                equals = "k=v",
                quote = "say \"hi\"",
                slash = "a\\b",
                "m"
            )
        });
        assert_eq!(
            lines[0],
            r#" INFO m name=agent-1* empty="" spaced="a b" equals="k=v" quote="say \"hi\"" slash="a\\b""#
        );
    }
}
