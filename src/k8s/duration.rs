//! Go duration syntax (`10s`, `1m30s`, `500ms`, `1.5h`): the API server
//! writes `?timeout=` this way, and the flags read it the same way.

use std::time::Duration;

/// The longest duration Go holds (`math.MaxInt64` nanoseconds, about 292
/// years). `time.ParseDuration` refuses a longer one, and so do we: every
/// flag's duration is then one the clock's arithmetic can add to now
/// without overflowing, wherever it ends up.
pub const LONGEST: Duration = Duration::new(9_223_372_036, 854_775_807);

/// Parse a Go duration. Negative durations, unknown units and durations
/// longer than Go's ([`LONGEST`]) are `None`.
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_end);
        if number.is_empty() || number == "." {
            return None;
        }
        let value: f64 = number.parse().ok()?;
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let seconds = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += value * seconds;
        rest = next;
    }
    Duration::try_from_secs_f64(total)
        .ok()
        .filter(|duration| *duration <= LONGEST)
}

/// `clap` value parser for duration flags.
///
/// # Errors
///
/// A message naming the accepted syntax.
pub fn parse_flag(text: &str) -> Result<Duration, String> {
    parse_go_duration(text).ok_or_else(|| {
        format!("'{text}' is not a duration such as 2s, 500ms or 1m30s, of at most 2562047h")
    })
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

    #[test]
    fn durations_end_where_go_s_do() {
        // Go: time.ParseDuration("2562047h") is fine, "2562048h" overflows.
        assert_eq!(
            parse_go_duration("2562047h"),
            Some(Duration::from_secs(2_562_047 * 3600))
        );
        for too_long in ["2562048h", "3000000000000000h", "99999999999999999999999s"] {
            assert_eq!(parse_go_duration(too_long), None, "{too_long}");
            assert!(
                parse_flag(too_long)
                    .unwrap_err()
                    .contains("at most 2562047h")
            );
        }
        // The longest a flag takes can be added to the clock.
        let _ = std::time::Instant::now() + LONGEST + LONGEST;
    }

    #[test]
    fn malformed_durations_are_refused() {
        for bad in ["", "10", "s", "-1s", "1x", "1.2.3s", "ms"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }
}
