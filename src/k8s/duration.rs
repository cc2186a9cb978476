//! Go duration syntax (`10s`, `1m30s`, `500ms`, `1.5h`): the API server
//! writes `?timeout=` this way, and the flags read it the same way.

use std::time::Duration;

/// The longest duration Go holds (`math.MaxInt64` nanoseconds, about 292
/// years). `time.ParseDuration` refuses a longer one, and so do we: every
/// flag's duration is then one the clock's arithmetic can add to now
/// without overflowing, wherever it ends up.
pub const LONGEST: Duration = Duration::new(9_223_372_036, 854_775_807);

const LONGEST_NANOS: u64 = i64::MAX as u64;

/// Parse a Go duration as `time.ParseDuration` does, to the nanosecond:
/// each number's whole part exact, its fraction's first 19 digits taken
/// exactly and truncated to the nanosecond (Go multiplies in floating
/// point, so a fraction written past the nanosecond may differ by one), the
/// sum at most [`LONGEST`]. A negative duration (but for zero, which Go
/// writes `-0s` too), whitespace anywhere, an unknown unit or a longer sum
/// is `None`. (Go wraps a sum that reaches 2^64 nanoseconds back to a
/// small one; this refuses it.)
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    parse(text).ok()
}

/// Why a text is not a duration.
#[derive(Debug, PartialEq)]
enum Refusal {
    Malformed,
    TooLong,
}

fn parse(text: &str) -> Result<Duration, Refusal> {
    use Refusal::{Malformed, TooLong};
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(Malformed);
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let whole_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (whole, after) = rest.split_at(whole_end);
        let (fraction, after) = match after.strip_prefix('.') {
            Some(after) => {
                let end = after
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(after.len());
                after.split_at(end)
            }
            None => ("", after),
        };
        if whole.is_empty() && fraction.is_empty() {
            return Err(Malformed);
        }
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let unit: u64 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(Malformed),
        };
        // Digits only, so the one error is overflow.
        let whole: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| TooLong)?
        };
        let mut nanos = whole.checked_mul(unit).ok_or(TooLong)?;
        // Nineteen digits fit a u64; their product with an hour's
        // nanoseconds fits a u128. Digits past them are worth less than a
        // millionth of a nanosecond.
        let mut scale = 1u128;
        let mut part = 0u128;
        for digit in fraction.bytes().take(19) {
            part = part * 10 + u128::from(digit - b'0');
            scale *= 10;
        }
        if part > 0 {
            // Less than `unit` nanoseconds, so it fits a u64; the sum
            // with the whole part may not.
            let fraction = (part * u128::from(unit) / scale) as u64;
            nanos = nanos.checked_add(fraction).ok_or(TooLong)?;
        }
        total = total.checked_add(nanos).ok_or(TooLong)?;
        if total > LONGEST_NANOS {
            return Err(TooLong);
        }
        rest = next;
    }
    if negative && total != 0 {
        return Err(Malformed);
    }
    Ok(Duration::from_nanos(total))
}

/// `clap` value parser for duration flags.
///
/// # Errors
///
/// A message naming the accepted syntax, or the longest duration.
pub fn parse_flag(text: &str) -> Result<Duration, String> {
    parse(text).map_err(|refusal| match refusal {
        Refusal::TooLong => {
            format!(
                "'{text}' is longer than a duration may be (2562047h47m16.854775807s, as in Go)"
            )
        }
        Refusal::Malformed => format!("'{text}' is not a duration such as 2s, 500ms or 1m30s"),
    })
}

/// `clap` value parser for a duration that must not be zero (a period,
/// a timeout that zero would make fire at once).
///
/// # Errors
///
/// [`parse_flag`]'s, or that zero is not allowed.
pub fn parse_nonzero_flag(text: &str) -> Result<Duration, String> {
    match parse_flag(text)? {
        Duration::ZERO => Err(format!("'{text}' is zero: give a duration such as 5s")),
        duration => Ok(duration),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_go_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
    }

    /// What Go 1.26's `time.ParseDuration` answers for each, taken from
    /// Go itself: the limit to the nanosecond, fractions truncated.
    #[test]
    fn durations_are_go_s_to_the_nanosecond() {
        let nanos = |n: u64| Some(Duration::from_nanos(n));
        for (text, go) in [
            ("2562047h47m16.854775807s", Some(LONGEST)),
            ("9223372036854775807ns", Some(LONGEST)),
            ("9223372036.854775807s", Some(LONGEST)),
            ("2562047h47m16.854775808s", None),
            ("9223372036854775808ns", None),
            ("2562048h", None),
            ("3000000000000000h", None),
            ("99999999999999999999999s", None),
            // The whole part fits, the fraction takes the sum past a u64.
            ("18446744073.9s", None),
            ("307445734.9m", None),
            ("5124095.9h", None),
            ("2562047h", nanos(2_562_047 * 3_600_000_000_000)),
            ("123456789.123456789s", nanos(123_456_789_123_456_789)),
            ("16777217.000000001s", nanos(16_777_217_000_000_001)),
            ("2562047h1ns", nanos(2_562_047 * 3_600_000_000_000 + 1)),
            ("0.5ns", nanos(0)),
            ("1.9ns", nanos(1)),
            ("1.0000000005s", nanos(1_000_000_000)),
            ("0.000000001ns", nanos(0)),
            ("1.5h", nanos(5_400_000_000_000)),
            (".5s", nanos(500_000_000)),
            ("5.s", nanos(5_000_000_000)),
            ("+5s", nanos(5_000_000_000)),
            ("1h1h", nanos(7_200_000_000_000)),
            ("3µs", nanos(3_000)),
            ("3μs", nanos(3_000)),
            ("-0s", nanos(0)),
            ("-0", nanos(0)),
            ("+0", nanos(0)),
            ("0.0010019ms", nanos(1_001)),
            ("1.123456789123ms", nanos(1_123_456)),
            ("0.3h", nanos(1_080_000_000_000)),
            // Exactly 48,107,543,284.13 ns.
            (".801792388069m", nanos(48_107_543_284)),
            ("00000000000000000000001s", nanos(1_000_000_000)),
        ] {
            assert_eq!(parse_go_duration(text), go, "{text}");
        }
        // The longest a flag takes can be added to the clock, twice.
        let _ = std::time::Instant::now() + LONGEST + LONGEST;
    }

    #[test]
    fn a_duration_too_long_says_so() {
        let message = parse_flag("3000000h").unwrap_err();
        assert!(message.contains("longer than"), "{message}");
        assert!(message.contains("2562047h47m16.854775807s"), "{message}");
        let message = parse_flag("3x").unwrap_err();
        assert!(message.contains("is not a duration"), "{message}");
        assert!(parse_nonzero_flag("0s").unwrap_err().contains("is zero"));
        assert_eq!(parse_nonzero_flag("1ns"), Ok(Duration::from_nanos(1)));
    }

    #[test]
    fn malformed_durations_are_refused() {
        for bad in [
            "",
            "10",
            "s",
            "-1s",
            "1x",
            "1.2.3s",
            "ms",
            ".s",
            "1e3s",
            "-",
            "+",
            "1s-1s",
            // Whitespace anywhere, as Go refuses it.
            " 1s",
            "5s ",
            "\t5s",
            "1s\n",
            "\u{a0}1s",
            "1 s",
            "1m 30s",
            // Go wraps this sum past 2^64 to zero and answers 0s.
            "9223372036854775808ns9223372036854775808ns",
        ] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }
}
