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

/// An RFC 1035 label (a custom resource's lowercased kind): at most 63
/// lowercase alphanumerics and `-`, starting with a letter, ending
/// alphanumeric.
pub fn is_dns1035_label(name: &str) -> bool {
    name.len() <= 63 && is_namespace(name) && name.starts_with(|c: char| c.is_ascii_lowercase())
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

/// Whether a person reads `text` as `word` (lowercase ASCII letters):
/// `Pod`, `POD`, ` pod `, `p-o-d`, `Pod\u{200b}`, Cyrillic `Роd`, fullwidth
/// `Ｐｏｄ`, `P0d` all read as `pod` (SPEC §3 rule 15).
///
/// Read as the Unicode confusable skeleton (UTS #39, `unicode-security`)
/// sees it, in any case: ASCII punctuation is dropped first (it only
/// separates: `p-o-d`; UTS #39 would expand `%` into `°/₀`), then the text
/// is lowercased, skeletonised (which drops default-ignorable characters
/// such as U+200B and maps each homoglyph to its prototype: Cyrillic `о`
/// and the digit `0` to `o`), lowercased again, and only its letters and
/// digits are kept (whitespace, format characters, punctuation of any
/// script and the combining marks the skeleton's decomposition leaves,
/// as in `Ṗod`). The skeleton of the text as written is tried too: a
/// homoglyph of a capital may have no lowercase that is one.
pub fn reads_as(text: &str, word: &str) -> bool {
    reads_as_any(text, &[word])
}

/// Whether a person reads `text` as any of `words`: [`reads_as`], with
/// `text` read once.
pub fn reads_as_any(text: &str, words: &[&str]) -> bool {
    reads_as_one_of(text, &readings(words))
}

/// How `words` read ([`reads_as`]), to compare many texts with them
/// through [`reads_as_one_of`] without reading the words again each time.
pub fn readings(words: &[&str]) -> Vec<String> {
    // The skeleton of each word asked here is the word itself; reading it
    // the same way keeps the comparison right for any other.
    words.iter().map(|word| read(word, true)).collect()
}

/// Whether `text` reads as one of the `readings` of [`readings`].
pub fn reads_as_one_of(text: &str, readings: &[String]) -> bool {
    if text.is_empty() {
        // Reads as nothing, which no word does.
        return readings.iter().any(String::is_empty);
    }
    let matches = |reading: String| readings.contains(&reading);
    matches(read(text, true)) || matches(read(text, false))
}

/// `text` as a person reads it: see [`reads_as`].
fn read(text: &str, lowercase_first: bool) -> String {
    let visible: String = text
        .chars()
        .filter(|c| !c.is_ascii() || c.is_ascii_alphanumeric())
        .collect();
    let prepared = if lowercase_first {
        visible.to_lowercase()
    } else {
        visible
    };
    let skeleton: String = unicode_security::skeleton(&prepared).collect();
    skeleton
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric())
        .collect()
}

/// Whether `api_version` is the core group's `v1` to the garbage
/// collector. The collector resolves an owner with
/// `schema.FromAPIVersionAndKind` (garbagecollector.go, `apiResource`),
/// whose `ParseGroupVersion` (apimachinery
/// pkg/runtime/schema/group_version.go) reads a string with no `/` as the
/// version of group "" and one with a single `/` as `group/version`: so
/// `/v1` is group "", version `v1`, the same as `v1` (SPEC §3 rule 15).
/// `""` and `"/"` are the empty (internal) version, and ` v1` or `V1` a
/// version no API serves.
pub fn is_core_v1(api_version: &str) -> bool {
    matches!(api_version, "v1" | "/v1")
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
    fn what_a_person_reads_as_pod_is_pod() {
        for pod in [
            "Pod",
            "pod",
            "POD",
            " pod ",
            "p-o-d",
            "\"Pod\"",
            "Pod\u{200b}",
            "\u{feff}Pod",
            "P\u{00ad}od",
            "P0d",
            "\u{420}\u{43e}d",
            "P\u{43e}d",
            "P\u{3bf}d",
            "\u{3a1}od",
            "\u{ff30}\u{ff4f}\u{ff44}",
            "\u{1d40f}\u{1d428}\u{1d41d}",
            "\u{1e56}od",
            "Po\u{301}d",
            "Pod\u{2003}",
        ] {
            assert!(reads_as(pod, "pod"), "{pod:?}");
        }
        for pods in ["Pods", "PODS", "P\u{43e}ds", "pod s", "Pod\u{17f}"] {
            // The long s reads as f to UTS #39: `Pod\u{17f}` is `Podf`.
            let expected = !pods.contains('\u{17f}');
            assert_eq!(reads_as(pods, "pods"), expected, "{pods:?}");
        }
        for other in [
            "Podx",
            "Pod1",
            "Pod2",
            "Po\u{212a}d",
            "v1/Pod",
            "pod.v1",
            "Pod Template",
            "PodTemplate",
            "ReplicaSet",
            "",
            "Pd",
            "Poood",
        ] {
            assert!(
                !reads_as(other, "pod") && !reads_as(other, "pods"),
                "{other:?}"
            );
        }
    }

    #[test]
    fn the_collector_reads_slash_v1_as_v1() {
        assert!(is_core_v1("v1") && is_core_v1("/v1"));
        for other in [
            "", "/", "V1", " v1", "v1 ", "v1/", "/v1/", "core/v1", "apps/v1", "v1beta1",
        ] {
            assert!(!is_core_v1(other), "{other:?}");
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
