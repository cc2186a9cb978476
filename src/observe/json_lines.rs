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
use tracing_subscriber::fmt::time::SystemTime;
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
        let mut head = [0u8; HEAD_ROOM];
        let head = timestamp_and_level(&mut head, std::time::SystemTime::now(), meta.level());
        writer.write_str(head)?;
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

/// `,"name":`, the key of a field of a [`DirectLine`].
macro_rules! key {
    ($name:literal) => {
        concat!(",\"", $name, "\":")
    };
}
pub(crate) use key;

/// A line written without `tracing`'s dispatch: the decision log's, one a
/// review. The same bytes as [`JsonLines`] writes for an event of this
/// level and message with these fields in this order (a test holds the
/// two together); `telemetry` decides when a line may go this way.
pub struct DirectLine {
    line: String,
}

impl DirectLine {
    pub fn new(level: &tracing::Level, message: &str) -> Self {
        let mut line = String::with_capacity(512);
        let mut head = [0u8; HEAD_ROOM];
        line.push_str(timestamp_and_level(
            &mut head,
            std::time::SystemTime::now(),
            level,
        ));
        let mut direct = Self { line };
        direct.str(key!("message"), message);
        direct
    }

    /// A field's key, `,"name":`, made at compile time by [`key!`]
    /// (ownerguard's own field names: no escape).
    fn key(&mut self, key: &'static str) {
        self.line.push_str(key);
    }

    pub fn str(&mut self, key: &'static str, value: &str) -> &mut Self {
        self.key(key);
        self.line.push('"');
        // Writing into a `String` cannot fail.
        let _ = Escaped(&mut self.line).write_str(value);
        self.line.push('"');
        self
    }

    /// `value` then `suffix`, as one string.
    pub fn str_then(&mut self, key: &'static str, value: &str, suffix: &str) -> &mut Self {
        self.key(key);
        // Escaping is per character: the two parts escaped apart are the
        // whole escaped (plain text passes whole). Writing into a `String`
        // cannot fail.
        self.line.push('"');
        let _ = Escaped(&mut self.line).write_str(value);
        let _ = Escaped(&mut self.line).write_str(suffix);
        self.line.push('"');
        self
    }

    pub fn u64(&mut self, key: &'static str, value: u64) -> &mut Self {
        self.key(key);
        // As `Fields` writes an integer.
        let _ = write!(self.line, "{value}");
        self
    }

    pub fn bool(&mut self, key: &'static str, value: bool) -> &mut Self {
        self.key(key);
        self.line.push_str(if value { "true" } else { "false" });
        self
    }

    pub fn f64(&mut self, key: &'static str, value: f64) -> &mut Self {
        self.key(key);
        let _ = write_f64(&mut self.line, value);
        self
    }

    /// The line, its target last, as `JsonLines` ends it.
    pub fn finish(mut self, target: &str) -> Vec<u8> {
        self.line.push_str(",\"target\":");
        let _ = write_str(&mut self.line, target);
        self.line.push_str("}\n");
        self.line.into_bytes()
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
                let name = field.name();
                // A field's name is almost always an identifier: `,"name":`
                // in one write, not five.
                let mut key = [0u8; 48];
                match plain_key(&mut key, name) {
                    Some(key) => self.writer.write_str(key)?,
                    None => {
                        self.writer.write_char(',')?;
                        write_str(self.writer, name)?;
                        self.writer.write_char(':')?;
                    }
                }
                value(self.writer)
            })();
        }
    }
}

/// `,"name":` written into `buffer`, when `name` is short and needs no
/// escape.
fn plain_key<'b>(buffer: &'b mut [u8; 48], name: &str) -> Option<&'b str> {
    let bytes = name.as_bytes();
    if bytes.len() > buffer.len() - 4 || plain_prefix(bytes) != bytes.len() {
        return None;
    }
    buffer[0] = b',';
    buffer[1] = b'"';
    buffer[2..2 + bytes.len()].copy_from_slice(bytes);
    buffer[2 + bytes.len()] = b'"';
    buffer[3 + bytes.len()] = b':';
    std::str::from_utf8(&buffer[..4 + bytes.len()]).ok()
}

/// Room for a line's head: the longest, at the last second a `SystemTime`
/// can hold (a year of twelve digits and its sign) and the longest level,
/// is 67 bytes.
const HEAD_ROOM: usize = 80;

/// `{"timestamp":"<RFC 3339, microseconds, UTC>","level":"<LEVEL>"` into
/// `buffer`: tracing-subscriber's `SystemTime` format (its `DateTime`),
/// digits written directly instead of through `write!` with padding. A
/// clock before 1970 is written as the epoch's first second.
fn timestamp_and_level<'b>(
    buffer: &'b mut [u8; HEAD_ROOM],
    now: std::time::SystemTime,
    level: &tracing::Level,
) -> &'b str {
    let since = now
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since.as_secs();
    let (days, of_day) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    let micros = u64::from(since.subsec_micros());
    // The year as tracing-subscriber's `DateTime` writes it: past 9999
    // signed (ISO 8601's expanded years), and all of its digits, never
    // fewer than four from 1970 on. Every other field is of fixed width:
    // its digits go to their places in a fixed tail, one copy, no call a
    // field.
    const OPEN: &[u8] = b"{\"timestamp\":\"";
    const TAIL: &[u8] = b"-00-00T00:00:00.000000Z\",\"level\":\"";
    let place = |buffer: &mut [u8; HEAD_ROOM], end: usize, mut value: u64| {
        let mut at = end;
        while value > 0 {
            at -= 1;
            buffer[at] = b'0' + (value % 10) as u8;
            value /= 10;
        }
    };
    let mut at = OPEN.len();
    buffer[..at].copy_from_slice(OPEN);
    if year > 9999 {
        buffer[at] = b'+';
        at += 1;
    }
    at += year.checked_ilog10().map_or(1, |log| log as usize + 1);
    place(buffer, at, year);
    buffer[at..at + TAIL.len()].copy_from_slice(TAIL);
    place(buffer, at + 3, month);
    place(buffer, at + 6, day);
    place(buffer, at + 9, of_day / 3600);
    place(buffer, at + 12, of_day / 60 % 60);
    place(buffer, at + 15, of_day % 60);
    place(buffer, at + 22, micros);
    at += TAIL.len();
    let level = level.as_str().as_bytes();
    buffer[at..at + level.len()].copy_from_slice(level);
    at += level.len();
    buffer[at] = b'"';
    // Only ASCII was written.
    std::str::from_utf8(&buffer[..=at]).unwrap_or_default()
}

/// The proleptic Gregorian date of `days` after 1970-01-01 (Howard
/// Hinnant's `civil_from_days`, for dates from 1970 on).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// How many bytes of `bytes` come before the first that [`Escaped`] must
/// look at: a quote, a backslash, below U+0020, DEL or outside ASCII;
/// sixteen at a time where SSE2 is, else eight.
fn plain_prefix(bytes: &[u8]) -> usize {
    // Sixteen at a time where SSE2 is (every x86-64 CPU), the last bytes
    // in one padded look.
    #[cfg(target_arch = "x86_64")]
    {
        crate::admission::json::sse2::first_marked(bytes, crate::admission::json::sse2::log_ends)
    }
    #[cfg(not(target_arch = "x86_64"))]
    plain_prefix_portable(bytes)
}

/// [`plain_prefix`] without SIMD: eight bytes at a time in a word, then
/// one by one.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn plain_prefix_portable(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::MAX / 255;
    const HIGH: u64 = ONES << 7;
    let mut at = 0;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(chunk);
        let x = u64::from_le_bytes(eight);
        let zero = |v: u64| v.wrapping_sub(ONES) & !v;
        let special = (x.wrapping_sub(ONES * 0x20) & !x)
            | zero(x ^ (ONES * u64::from(b'"')))
            | zero(x ^ (ONES * u64::from(b'\\')))
            | zero(x ^ (ONES * 0x7f))
            | x;
        if special & HIGH != 0 {
            break;
        }
        at += 8;
    }
    while let Some(&byte) = bytes.get(at) {
        if !matches!(NEEDS_ESCAPE[usize::from(byte)], Escape::No) || byte >= 0x80 {
            break;
        }
        at += 1;
    }
    at
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
        // Most text is plain ASCII: passed on whole, in one write.
        let plain = plain_prefix(bytes);
        if plain == bytes.len() {
            return self.0.write_str(text);
        }
        let mut start = 0;
        for (at, &byte) in bytes.iter().enumerate().skip(plain) {
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
pub(super) mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::fmt::format::JsonFields;

    use super::*;

    /// Lines written into memory.
    #[derive(Clone, Default)]
    pub(in crate::observe) struct Lines(pub(in crate::observe) Arc<Mutex<Vec<u8>>>);

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
    pub(in crate::observe) fn logged(json_lines: bool, events: fn()) -> Vec<String> {
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

    /// The head of a line is tracing-subscriber's timestamp: held to the
    /// `time` crate's calendar over four centuries of instants, leap days,
    /// ends of months and years, and the microsecond cut.
    #[test]
    fn timestamps_are_written_as_tracing_subscriber_writes_them() {
        use std::time::{Duration, UNIX_EPOCH};
        let mut instants: Vec<u64> = vec![
            0,
            951_782_399,     // 2000-02-28T23:59:59
            951_868_800,     // 2000-03-01
            1_709_164_800,   // 2024-02-29
            1_735_689_599,   // 2024-12-31T23:59:59
            4_107_542_400,   // 2100-03-01
            13_569_465_599,  // 2399-12-31T23:59:59
            253_402_300_799, // 9999-12-31T23:59:59
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            instants.push(seed % 13_569_465_600);
        }
        for (i, secs) in instants.into_iter().enumerate() {
            let nanos = (i as u32).wrapping_mul(2_654_435_761) % 1_000_000_000;
            let at = UNIX_EPOCH + Duration::new(secs, nanos);
            let reference = time::OffsetDateTime::from_unix_timestamp(secs as i64).unwrap();
            let expected = format!(
                "{{\"timestamp\":\"{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z\",\"level\":\"INFO\"",
                reference.year(),
                reference.month() as u8,
                reference.day(),
                reference.hour(),
                reference.minute(),
                reference.second(),
                nanos / 1_000
            );
            let mut buffer = [0u8; HEAD_ROOM];
            assert_eq!(
                timestamp_and_level(&mut buffer, at, &tracing::Level::INFO),
                expected
            );
        }
        // Past the year 9999 (which `time` does not reach here), a sign
        // and every digit of the year, as tracing-subscriber's `DateTime`
        // writes it (`+{}`).
        let mut buffer = [0u8; HEAD_ROOM];
        assert_eq!(
            timestamp_and_level(
                &mut buffer,
                UNIX_EPOCH + Duration::new(253_402_300_800 + 86_400 + 3_723, 5_000),
                &tracing::Level::ERROR
            ),
            "{\"timestamp\":\"+10000-01-02T01:02:03.000005Z\",\"level\":\"ERROR\""
        );
        // The last second a `SystemTime` holds: the whole head still fits.
        if let Some(last) = UNIX_EPOCH.checked_add(Duration::new(i64::MAX as u64, 999_999_999)) {
            let mut buffer = [0u8; HEAD_ROOM];
            let head = timestamp_and_level(&mut buffer, last, &tracing::Level::ERROR);
            let line: serde_json::Value = serde_json::from_str(&format!("{head}}}")).unwrap();
            assert_eq!(line["level"], "ERROR", "{head}");
            assert!(
                line["timestamp"].as_str().unwrap().starts_with('+'),
                "{head}"
            );
            assert!(
                line["timestamp"].as_str().unwrap().ends_with(".999999Z"),
                "{head}"
            );
        }
        // And the shape of tracing-subscriber's own, now.
        let mut theirs = String::new();
        tracing_subscriber::fmt::time::FormatTime::format_time(
            &SystemTime,
            &mut Writer::new(&mut theirs),
        )
        .unwrap();
        let mut buffer = [0u8; HEAD_ROOM];
        let ours = timestamp_and_level(
            &mut buffer,
            std::time::SystemTime::now(),
            &tracing::Level::WARN,
        );
        assert_eq!(
            ours.len(),
            "{\"timestamp\":\"".len() + theirs.len() + "\",\"level\":\"WARN\"".len()
        );
        assert_eq!(ours[14..18], theirs[..4]);
    }

    #[test]
    fn the_plain_prefix_stops_where_a_byte_by_byte_look_stops() {
        let alphabet = [
            "a", "Z", " ", "~", "\"", "\\", "\u{1}", "\u{7f}", "é", "\u{2028}", "0",
        ];
        let mut seed = 7u64;
        for _ in 0..5_000 {
            let mut text = String::new();
            for _ in 0..(seed % 80) {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                // Mostly plain, sometimes not.
                let pick = (seed >> 33) as usize % 64;
                text.push_str(alphabet.get(pick).copied().unwrap_or("x"));
            }
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let expected = text
                .bytes()
                .position(|b| !matches!(NEEDS_ESCAPE[usize::from(b)], Escape::No) || b >= 0x80)
                .unwrap_or(text.len());
            assert_eq!(plain_prefix(text.as_bytes()), expected, "{text:?}");
            assert_eq!(plain_prefix_portable(text.as_bytes()), expected, "{text:?}");
        }
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
