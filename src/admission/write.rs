//! JSON written straight into a buffer: the answer and its patch are a
//! handful of strings, booleans and fixed keys, so they are written as
//! text instead of built as `serde_json` values and serialised again.
//! Strings are escaped exactly as serde_json escapes them (a test holds
//! the two to the same bytes).

/// What a byte needs in a JSON string: 0 none, else the letter of its
/// short escape, or `u` for `\u00XX`.
const ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// `text` as a JSON string, quotes included.
pub fn string(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    escaped(out, text);
    out.push(b'"');
}

/// The inside of a JSON string holding `text`.
pub fn escaped(out: &mut Vec<u8>, text: &str) {
    let mut bytes = text.as_bytes();
    loop {
        let plain = super::json::plain_prefix_whole(bytes);
        out.extend_from_slice(&bytes[..plain]);
        let Some(&b) = bytes.get(plain) else {
            return;
        };
        escape(out, b);
        bytes = &bytes[plain + 1..];
    }
}

/// The escape of `b`, a byte a JSON string cannot hold as it is.
fn escape(out: &mut Vec<u8>, b: u8) {
    let escape = ESCAPE[usize::from(b)];
    if escape == b'u' {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(b >> 4)],
            HEX[usize::from(b & 0xf)],
        ]);
    } else {
        out.extend_from_slice(&[b'\\', escape]);
    }
}

/// A JSON Pointer (RFC 6901) of `tokens` as a JSON string: `~` written
/// `~0` and `/` written `~1` in each token, each token looked at once for
/// both those and what the JSON string escapes.
pub fn pointer<'a>(out: &mut Vec<u8>, tokens: impl IntoIterator<Item = &'a str>) {
    out.push(b'"');
    for token in tokens {
        out.push(b'/');
        let mut rest = token.as_bytes();
        loop {
            let plain = plain_token_prefix(rest);
            out.extend_from_slice(&rest[..plain]);
            match rest.get(plain) {
                None => break,
                Some(b'~') => out.extend_from_slice(b"~0"),
                Some(b'/') => out.extend_from_slice(b"~1"),
                Some(&b) => escape(out, b),
            }
            rest = &rest[plain + 1..];
        }
    }
    out.push(b'"');
}

/// How many bytes of a pointer's token come before the first that is `~`
/// or `/` or that a JSON string escapes.
#[inline]
fn plain_token_prefix(bytes: &[u8]) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        super::json::sse2::first_marked(bytes, super::json::sse2::pointer_ends)
    }
    #[cfg(not(target_arch = "x86_64"))]
    plain_token_prefix_portable(bytes)
}

/// [`plain_token_prefix`] without SIMD.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn plain_token_prefix_portable(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .position(|&b| b == b'~' || b == b'/' || ESCAPE[usize::from(b)] != 0)
        .unwrap_or(bytes.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let all: String = (0u32..0x80)
            .filter_map(char::from_u32)
            .chain("é€😀\u{2028}".chars())
            .collect();
        for text in ["", "plain", "a\"b\\c/d", "\u{7f}\u{0}\u{1f}", all.as_str()] {
            let mut ours = Vec::new();
            string(&mut ours, text);
            assert_eq!(ours, serde_json::to_vec(text).unwrap(), "{text:?}");
        }
    }

    use proptest::prelude::*;

    /// Strings of the characters that matter to a writer: quotes,
    /// backslashes, controls, DEL, `~` and `/`, non-ASCII, U+2028, astral;
    /// or anything at all.
    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z\"\\\\/~\u{0}-\u{1f}\u{7f}\u{80}\u{e9}\u{2028}\u{2029}\u{feff}\u{1f600}01-]{0,24}",
            any::<String>(),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn any_string_is_written_as_serde_json_writes_it(text in text()) {
            let mut ours = Vec::new();
            string(&mut ours, &text);
            prop_assert_eq!(&ours, &serde_json::to_vec(&text).unwrap());
            prop_assert_eq!(serde_json::from_slice::<String>(&ours).unwrap(), text);
        }

        #[test]
        fn a_tokens_plain_prefix_is_the_bytewise_look(text in text()) {
            let expected = text
                .bytes()
                .position(|b| b == b'~' || b == b'/' || b == b'"' || b == b'\\' || b < 0x20)
                .unwrap_or(text.len());
            prop_assert_eq!(plain_token_prefix(text.as_bytes()), expected);
            prop_assert_eq!(plain_token_prefix_portable(text.as_bytes()), expected);
        }

        #[test]
        fn any_pointer_is_written_as_jsonptr_writes_it(tokens in prop::collection::vec(text(), 0..5)) {
            let mut ours = Vec::new();
            pointer(&mut ours, tokens.iter().map(String::as_str));
            let reference = jsonptr::PointerBuf::from_tokens(&tokens);
            prop_assert_eq!(&ours, &serde_json::to_vec(&reference).unwrap());
            let back: jsonptr::PointerBuf = serde_json::from_slice(&ours).unwrap();
            let back: Vec<String> = back.tokens().map(|t| t.decoded().into_owned()).collect();
            prop_assert_eq!(back, tokens);
        }
    }

    #[test]
    fn pointers_escape_tilde_and_slash_as_jsonptr_does() {
        let tokens = ["metadata", "labels", "ownerguard.io/owner~uid", "", "\"q\""];
        let mut ours = Vec::new();
        pointer(&mut ours, tokens);
        let reference = jsonptr::PointerBuf::from_tokens(tokens);
        assert_eq!(ours, serde_json::to_vec(&reference).unwrap());
    }
}
