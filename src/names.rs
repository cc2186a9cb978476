//! What Kubernetes accepts as a name, checked before a name goes anywhere
//! near an API path (SPEC §3 rule 7, §4).
//!
//! The rules are apimachinery's (`IsDNS1123Subdomain`, `IsDNS1123Label`,
//! `IsValidLabelValue`), written out here because they decide what may be
//! looked up: a name that passes cannot carry `/`, `?`, `#`, `%`, a space
//! or anything else with a meaning in a URL.

/// A pod name: an RFC 1123 subdomain (lowercase alphanumerics, `-` and
/// `.`, starting and ending alphanumeric), at most 253 characters.
pub fn is_pod_name(name: &str) -> bool {
    name.len() <= 253 && is_dns_name(name, true)
}

/// A namespace name: an RFC 1123 label (no `.`), at most 63 characters.
pub fn is_namespace(name: &str) -> bool {
    name.len() <= 63 && is_dns_name(name, false)
}

fn is_dns_name(name: &str, dots: bool) -> bool {
    let bytes = name.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
        && bytes
            .iter()
            .all(|b| alnum(b) || *b == b'-' || (dots && *b == b'.'))
        // A subdomain is dot-separated labels: no empty label between dots,
        // none starting or ending with '-'.
        && (!dots
            || name
                .split('.')
                .all(|label| !label.is_empty() && !label.starts_with('-') && !label.ends_with('-')))
}

/// A label value: at most 63 characters of `[A-Za-z0-9._-]`, starting and
/// ending alphanumeric (or empty, which the owner labels never accept).
pub fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    bytes.is_empty()
        || (bytes.len() <= 63
            && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
            && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))
}

/// Whether `uid` can be a pod uid written in a label: a non-empty label
/// value (Kubernetes uids are UUIDs, which fit).
pub fn is_uid(uid: &str) -> bool {
    !uid.is_empty() && is_label_value(uid)
}

/// `segment` percent-encoded for a URL path: everything but RFC 3986's
/// unreserved characters. Names are validated before any lookup, so this
/// changes nothing for a name that gets here; it is the second lock on the
/// same door.
pub fn path_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_names_are_rfc_1123_subdomains() {
        let longest = "a".repeat(253);
        for good in ["w", "w-1", "worker.abc-1", "0w", "a.b.c", longest.as_str()] {
            assert!(is_pod_name(good), "{good}");
        }
        let too_long = "a".repeat(254);
        for bad in [
            "",
            "-w",
            "w-",
            "W",
            "w_1",
            "w/1",
            "w-1?x=1",
            "w-1/status",
            "w#1",
            "w 1",
            "w%2F1",
            "a..b",
            "a.-b",
            "a-.b",
            ".a",
            "é",
            too_long.as_str(),
        ] {
            assert!(!is_pod_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn namespaces_are_rfc_1123_labels() {
        assert!(is_namespace("agents"));
        assert!(is_namespace(&"a".repeat(63)));
        for bad in ["", "a.b", "a/b", "a?b=c", "A", &"a".repeat(64)] {
            assert!(!is_namespace(bad), "{bad:?}");
        }
    }

    #[test]
    fn label_values_follow_apimachinery() {
        for good in ["", "Self", "a_b", "A.b-c", &"a".repeat(63)] {
            assert!(is_label_value(good), "{good:?}");
        }
        for bad in ["_a", "a_", "a/b", "a b", &"a".repeat(64)] {
            assert!(!is_label_value(bad), "{bad:?}");
        }
    }

    #[test]
    fn path_segments_escape_everything_a_url_reads() {
        assert_eq!(path_segment("w-1.a_b~c"), "w-1.a_b~c");
        assert_eq!(path_segment("w-1?x=1"), "w-1%3Fx%3D1");
        assert_eq!(path_segment("w-1/status"), "w-1%2Fstatus");
        assert_eq!(path_segment("a b#%"), "a%20b%23%25");
    }
}
