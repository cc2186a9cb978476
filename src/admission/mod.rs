//! The `admission.k8s.io` wire format: what the API server sends and what it
//! accepts back.
//!
//! kube-core has admission types, but they do not fit a webhook on the hot
//! path: they decode the whole object into a `DynamicObject` (measured here at
//! 20–26 % of the throughput of decoding the metadata alone), accept only
//! `v1`, and write `patch` as an array of numbers (kube-rs issue #1781) where
//! the API documents base64. These types decode only what the decision reads
//! and write exactly what kube-apiserver checks (see `APISERVER.md`).

mod error;
pub mod json;
mod lenient;
mod object;
mod response;
mod template;
mod text;
pub mod write;

pub use error::DecodeError;
pub use lenient::{MAX_LIST_ENTRIES, MAX_REFERENCES, MAX_TEMPLATE_VOLUMES};
pub use object::{ObjectHead, ObjectMeta, OwnerReference};
pub use response::{AdmissionResponse, Status};
pub use template::{PodSpecAt, Template, TemplateMeta, TemplatePath, TemplateReference};
pub use text::Text;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use lenient::null_as_default;

pub const ADMISSION_V1: &str = "admission.k8s.io/v1";
pub const ADMISSION_V1BETA1: &str = "admission.k8s.io/v1beta1";

/// The `apiVersion` of a review; the answer is written in the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewVersion {
    V1,
    V1beta1,
}

impl ReviewVersion {
    pub fn api_version(self) -> &'static str {
        match self {
            Self::V1 => ADMISSION_V1,
            Self::V1beta1 => ADMISSION_V1BETA1,
        }
    }
}

/// An incoming `AdmissionReview`, as far as ownerguard reads it.
#[derive(Debug, Deserialize)]
struct ReviewEnvelope<'a> {
    #[serde(rename = "apiVersion", default, borrow)]
    api_version: Option<Text<'a>>,
    #[serde(default, borrow)]
    kind: Option<Text<'a>>,
    #[serde(default, borrow)]
    request: Option<AdmissionRequest<'a>>,
}

/// A decoded review: its version and its request, whose text is borrowed
/// from the body.
#[derive(Debug)]
pub struct Review<'a> {
    pub version: ReviewVersion,
    pub request: AdmissionRequest<'a>,
}

impl<'a> Review<'a> {
    /// Decode an `AdmissionReview` from JSON.
    ///
    /// A review with no `apiVersion` but `kind: AdmissionReview` is taken as
    /// `v1` (hand-written reviews often leave it out); a body that names
    /// neither is not a review.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] when the body is not JSON, not an `AdmissionReview`
    /// of a known version, or has no `request`.
    pub fn from_json(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut review = Self::from_envelope(json::from_slice(body)?)?;
        let request = &mut review.request;
        if request.operation == Operation::Update
            && request.user_info.username.as_str() == SHARED_CONTROLLER_USER
        {
            request.only_references_changed = Some(only_references_changed(body));
        }
        Ok(review)
    }

    fn from_envelope(envelope: ReviewEnvelope<'a>) -> Result<Self, DecodeError> {
        let version = match (envelope.api_version.as_deref(), envelope.kind.as_deref()) {
            (_, Some(kind)) if kind != "AdmissionReview" => {
                return Err(DecodeError::NotAReview(format!("kind '{kind}'")));
            }
            (Some(ADMISSION_V1), _) => ReviewVersion::V1,
            (Some(ADMISSION_V1BETA1), _) => ReviewVersion::V1beta1,
            (Some(other), _) => {
                return Err(DecodeError::NotAReview(format!("apiVersion '{other}'")));
            }
            (None, Some(_)) => ReviewVersion::V1,
            (None, None) => {
                return Err(DecodeError::NotAReview(
                    "neither apiVersion nor kind".to_string(),
                ));
            }
        };
        let request = envelope.request.ok_or(DecodeError::NoRequest)?;
        Ok(Self { version, request })
    }
}

/// `AdmissionRequest`: the fields the decision reads, their text borrowed
/// from the body.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest<'a> {
    /// Fresh per call; echoed in the response. Not the object's uid.
    #[serde(default, borrow)]
    pub uid: Text<'a>,
    #[serde(default, borrow)]
    pub kind: GroupVersionKind<'a>,
    #[serde(default, borrow)]
    pub resource: GroupVersionResource<'a>,
    #[serde(default, borrow)]
    pub sub_resource: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub name: Option<Text<'a>>,
    /// Absent for cluster-scoped objects.
    #[serde(default, borrow)]
    pub namespace: Option<Text<'a>>,
    pub operation: Operation,
    #[serde(default, borrow, deserialize_with = "null_as_default")]
    pub user_info: UserInfo<'a>,
    // The two heads are boxed: 240 bytes each, present or not, they made
    // the request 800 bytes, which serde moves whole through every layer
    // it returns up (eight copies in `from_json` alone); a box is one
    // allocation, a copy of the pointer each time.
    #[serde(default, borrow)]
    pub object: Option<Box<ObjectHead<'a>>>,
    #[serde(default, borrow)]
    pub old_object: Option<Box<ObjectHead<'a>>>,
    #[serde(default)]
    pub dry_run: Option<bool>,
    /// For an UPDATE by [`SHARED_CONTROLLER_USER`] only: whether the
    /// object is its old self but for `metadata.ownerReferences` (and the
    /// fields the API server keeps itself: `managedFields`,
    /// `resourceVersion`), read from the whole body. The garbage
    /// collector's shape under the user every controller shares is exactly
    /// that; ownerguard otherwise reads only metadata and templates.
    #[serde(skip)]
    pub only_references_changed: Option<bool>,
}

/// The user every controller of kube-controller-manager shares without
/// `--use-service-account-credentials`.
pub const SHARED_CONTROLLER_USER: &str = "system:kube-controller-manager";

/// Whether `object` and `oldObject` of the review in `body` differ only
/// in `metadata.ownerReferences`, `managedFields` and `resourceVersion`.
/// Bytes that are not UTF-8 are read as U+FFFD on both sides alike.
fn only_references_changed(body: &[u8]) -> bool {
    let Ok(review) = serde_json::from_str::<serde_json::Value>(&String::from_utf8_lossy(body))
    else {
        return false;
    };
    let rest = |key: &str| {
        let mut object = review["request"][key].clone();
        if let Some(metadata) = object
            .get_mut("metadata")
            .and_then(serde_json::Value::as_object_mut)
        {
            for field in ["ownerReferences", "managedFields", "resourceVersion"] {
                metadata.remove(field);
            }
        }
        object
    };
    let (new, old) = (rest("object"), rest("oldObject"));
    !new.is_null() && new == old
}

#[derive(Debug, Clone, Deserialize, Default, Serialize, PartialEq, Eq)]
pub struct GroupVersionKind<'a> {
    #[serde(default, borrow)]
    pub group: Text<'a>,
    #[serde(default, borrow)]
    pub version: Text<'a>,
    #[serde(default, borrow)]
    pub kind: Text<'a>,
}

#[derive(Debug, Clone, Deserialize, Default, Serialize, PartialEq, Eq)]
pub struct GroupVersionResource<'a> {
    #[serde(default, borrow)]
    pub group: Text<'a>,
    #[serde(default, borrow)]
    pub version: Text<'a>,
    #[serde(default, borrow)]
    pub resource: Text<'a>,
}

/// The operation under review. Anything else than the four the API server
/// knows is kept as it came, and allowed unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
    Other(String),
}

impl From<&str> for Operation {
    fn from(value: &str) -> Self {
        match value {
            "CREATE" => Self::Create,
            "UPDATE" => Self::Update,
            "DELETE" => Self::Delete,
            "CONNECT" => Self::Connect,
            _ => Self::Other(value.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for Operation {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Text::deserialize(deserializer).map(|text| Self::from(text.as_str()))
    }
}

impl Operation {
    pub fn as_str(&self) -> &str {
        match self {
            Self::Create => "CREATE",
            Self::Update => "UPDATE",
            Self::Delete => "DELETE",
            Self::Connect => "CONNECT",
            Self::Other(other) => other,
        }
    }
}

impl Default for Operation {
    fn default() -> Self {
        Self::Other(String::new())
    }
}

#[derive(Debug, Clone, Deserialize, Default)]
pub struct UserInfo<'a> {
    #[serde(default, borrow)]
    pub username: Text<'a>,
    /// Only the pod identity of a pod-bound token ([`EXTRA_POD_NAME`],
    /// [`EXTRA_POD_UID`]): the decision reads no other key, and the rest
    /// (credential id, node name and uid...) are skipped undecoded.
    #[serde(default, borrow = "'a", deserialize_with = "pod_identity")]
    pub extra: BTreeMap<&'static str, Vec<Text<'a>>>,
}

/// `userInfo.extra`, keeping only the keys of the pod identity; `null`
/// reads as empty. A kept key whose value is no list of strings is a
/// malformed review, as before; the last of a repeated key wins, as in
/// Go's decoder.
fn pod_identity<'de: 'a, 'a, D>(
    deserializer: D,
) -> Result<BTreeMap<&'static str, Vec<Text<'a>>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    /// A key of `extra`: one of the identity's, or another (unallocated).
    struct Key(Option<&'static str>);

    impl<'de> Deserialize<'de> for Key {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct Visitor;
            impl serde::de::Visitor<'_> for Visitor {
                type Value = Key;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a key of userInfo.extra")
                }
                fn visit_bytes<E: serde::de::Error>(self, key: &[u8]) -> Result<Key, E> {
                    Ok(Key([EXTRA_POD_NAME, EXTRA_POD_UID]
                        .into_iter()
                        .find(|k| k.as_bytes() == key)))
                }
                fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Key, E> {
                    self.visit_bytes(key.as_bytes())
                }
            }
            // Matched by its bytes, as a field's name: most keys are
            // passed over, so none is checked for UTF-8 first.
            deserializer.deserialize_identifier(Visitor)
        }
    }

    struct Visitor;

    impl<'de> serde::de::Visitor<'de> for Visitor {
        type Value = BTreeMap<&'static str, Vec<Text<'de>>>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of lists of strings, or null")
        }

        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }

        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }

        fn visit_some<D: serde::Deserializer<'de>>(
            self,
            deserializer: D,
        ) -> Result<Self::Value, D::Error> {
            deserializer.deserialize_map(self)
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut kept = BTreeMap::new();
            while let Some(Key(key)) = map.next_key::<Key>()? {
                match key {
                    Some(key) => {
                        kept.insert(key, map.next_value::<Vec<Text<'de>>>()?);
                    }
                    None => {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
            }
            Ok(kept)
        }
    }

    deserializer.deserialize_option(Visitor)
}

/// The key under which a pod-bound service-account token names its pod.
pub const EXTRA_POD_NAME: &str = "authentication.kubernetes.io/pod-name";
/// The key under which a pod-bound service-account token gives its pod's uid.
pub const EXTRA_POD_UID: &str = "authentication.kubernetes.io/pod-uid";

#[cfg(test)]
mod tests {
    use base64::Engine;

    use super::*;

    /// `value` decoded by the server's decoder, from its JSON text (kept
    /// for the test's life: the decoded value borrows it).
    fn decoded<T: serde::Deserialize<'static>>(value: serde_json::Value) -> T {
        json::from_slice(Vec::leak(serde_json::to_vec(&value).unwrap())).unwrap()
    }

    #[test]
    fn review_without_api_version_but_with_kind_is_v1() {
        let review = Review::from_json(
            br#"{"kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE"}}"#,
        )
        .unwrap();
        assert_eq!(review.version, ReviewVersion::V1);
    }

    /// An ephemeral volume's claim template is keyed by its volume's name
    /// as the body spells it, escapes decoded; a name of another shape
    /// keys nothing; volumes without a template are holes in the indices.
    #[test]
    fn an_ephemeral_template_is_keyed_by_its_volumes_name() {
        let claim = r#"{"volumeClaimTemplate":{"metadata":{"labels":{"a":"b"}}}}"#;
        let body = format!(
            r#"{{"kind":"AdmissionReview","request":{{"uid":"u","operation":"CREATE","object":{{"apiVersion":"v1","kind":"Pod","metadata":{{}},"spec":{{"volumes":[{{"name":"plain","ephemeral":{claim}}},{{"name":"scratch","emptyDir":{{}}}},{{"name":"es\u0063aped/\"~","ephemeral":{claim}}},{{"name":7,"ephemeral":{claim}}},{{"ephemeral":{claim},"name":"after"}}]}}}}}}}}"#
        );
        let review = Review::from_json(body.as_bytes()).unwrap();
        let keys: Vec<_> = review
            .request
            .object
            .unwrap()
            .templates()
            .into_iter()
            .map(|t| (t.path, t.key))
            .collect();
        let at = |index| TemplatePath::EphemeralVolume(PodSpecAt::Object, index);
        assert_eq!(
            keys,
            [
                (at(0), Some("plain".to_string())),
                (at(2), Some("escaped/\"~".to_string())),
                (at(3), None),
                (at(4), Some("after".to_string())),
            ]
        );
    }

    #[test]
    fn review_v1beta1_keeps_its_version() {
        let review = Review::from_json(
            br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u","operation":"DELETE"}}"#,
        )
        .unwrap();
        assert_eq!(review.version, ReviewVersion::V1beta1);
        assert_eq!(review.request.operation, Operation::Delete);
    }

    #[test]
    fn body_of_another_kind_is_not_a_review() {
        let err =
            Review::from_json(br#"{"apiVersion":"v1","kind":"Pod","metadata":{}}"#).unwrap_err();
        assert!(matches!(err, DecodeError::NotAReview(_)), "{err:?}");
    }

    #[test]
    fn unknown_admission_version_is_not_a_review() {
        let err = Review::from_json(
            br#"{"apiVersion":"admission.k8s.io/v2","request":{"operation":"CREATE"}}"#,
        )
        .unwrap_err();
        assert!(matches!(err, DecodeError::NotAReview(_)), "{err:?}");
    }

    #[test]
    fn review_without_request_is_refused() {
        let err =
            Review::from_json(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#)
                .unwrap_err();
        assert!(matches!(err, DecodeError::NoRequest), "{err:?}");
    }

    #[test]
    fn invalid_text_in_fields_not_read_is_still_malformed() {
        // The API server passes a RawExtension's bytes through as sent,
        // invalid UTF-8 included: passed over, whatever they are.
        let invalid_utf8 = b"{\"kind\":\"AdmissionReview\",\"request\":{\"operation\":\"CREATE\",\"object\":{\"data\":{\"k\":\"\xff\xfe\x80\"}}}}";
        assert!(Review::from_json(invalid_utf8).is_ok());
        // What ownerguard reads is a typed string, UTF-8 from Go's encoder:
        // anything else is malformed.
        let read = b"{\"kind\":\"AdmissionReview\",\"request\":{\"operation\":\"CREATE\",\"object\":{\"metadata\":{\"labels\":{\"a\":\"\xff\"}}}}}";
        assert!(matches!(Review::from_json(read), Err(DecodeError::Json(_))));
        let control = b"{\"kind\":\"AdmissionReview\",\"request\":{\"operation\":\"CREATE\",\"object\":{\"spec\":\"\x01\"}}}";
        assert!(matches!(
            Review::from_json(control),
            Err(DecodeError::Json(_))
        ));
        let lone_surrogate = br#"{"kind":"AdmissionReview","request":{"operation":"CREATE","object":{"data":"\ud800"}}}"#;
        // The one leniency, deliberate: a lone surrogate escape in a field
        // ownerguard does not read is not checked (serde_json skips it
        // undecoded). Checking it means decoding the whole object, the cost
        // this module avoids; the API server's Go encoder never writes one.
        assert!(Review::from_json(lone_surrogate).is_ok());
    }

    #[test]
    fn only_the_pod_identity_of_extra_is_kept() {
        let review = |extra: &str| {
            Review::from_json(String::leak(format!(
                r#"{{"kind":"AdmissionReview","request":{{"operation":"CREATE","userInfo":{{"extra":{extra}}}}}}}"#
            )).as_bytes())
        };
        let kept = review(
            r#"{"authentication.kubernetes.io/credential-id":["JTI=1"],"authentication.kubernetes.io/pod-name":["w-0"],"other":{"not":"a list"},"authentication.kubernetes.io/pod-uid":["u-1"]}"#,
        )
        .unwrap()
        .request
        .user_info
        .extra;
        assert_eq!(
            kept,
            BTreeMap::from([
                (EXTRA_POD_NAME, vec![Text::from("w-0")]),
                (EXTRA_POD_UID, vec![Text::from("u-1")]),
            ])
        );
        // A key written with escapes is still the key.
        let escaped = review(r#"{"authentication.kubernetes.io\/pod-name":["w-0"]}"#).unwrap();
        assert_eq!(escaped.request.user_info.extra[EXTRA_POD_NAME], ["w-0"]);
        // The last of a repeated key wins, as in Go.
        let repeated = review(
            r#"{"authentication.kubernetes.io/pod-name":["w-0"],"authentication.kubernetes.io/pod-name":["w-1"]}"#,
        )
        .unwrap();
        assert_eq!(repeated.request.user_info.extra[EXTRA_POD_NAME], ["w-1"]);
        assert!(review("null").unwrap().request.user_info.extra.is_empty());
        // The identity's own keys keep their shape.
        for bad in [
            r#"{"authentication.kubernetes.io/pod-name":"w-0"}"#,
            r#"{"authentication.kubernetes.io/pod-uid":[1]}"#,
            r#"["authentication.kubernetes.io/pod-name"]"#,
        ] {
            assert!(matches!(review(bad), Err(DecodeError::Json(_))), "{bad}");
        }
    }

    #[test]
    fn malformed_json_is_a_json_error() {
        let err = Review::from_json(b"{\"apiVersion\":").unwrap_err();
        assert!(matches!(err, DecodeError::Json(_)), "{err:?}");
    }

    #[test]
    fn null_metadata_user_info_and_extra_read_as_absent() {
        let review = Review::from_json(
            br#"{"kind":"AdmissionReview","request":{"operation":"UPDATE","userInfo":{"extra":null},"object":{"metadata":null},"oldObject":null}}"#,
        )
        .unwrap();
        assert!(review.request.object.unwrap().metadata.labels.is_none());
        assert!(review.request.old_object.is_none());
    }

    #[test]
    fn templates_of_another_shape_are_not_pod_templates() {
        let head = |spec: &str| -> ObjectHead {
            json::from_str(String::leak(format!(
                r#"{{"metadata": {{}}, "spec": {spec}}}"#
            )))
            .unwrap()
        };
        for spec in [
            r#""a string""#,
            r#"{"template": 3}"#,
            r#"{"template": {"metadata": "x"}}"#,
            r#"{"template": {"metadata": {"labels": {"replicas": 3}}}}"#,
            r#"{"template": {"metadata": {"labels": {"a": "b"}, "annotations": ["x"]}}}"#,
            r#"{"jobTemplate": [1, 2]}"#,
            r#"{"volumeClaimTemplates": {"metadata": {"labels": {"a": "b"}}}}"#,
            r#"{"volumeClaimTemplates": [3, "x", {"metadata": {"labels": [1]}}]}"#,
            r#"{"volumes": [{"ephemeral": "x"}, {"ephemeral": {"volumeClaimTemplate": 3}}]}"#,
            r#"{"template": {"spec": {"volumes": {"ephemeral": {}}}}}"#,
            r#"{"metadata": {"labels": {"a": "b"}}}"#,
        ] {
            assert!(head(spec).templates().is_empty(), "{spec}");
        }
        let templates = head(r#"{"template": {"metadata": {"labels": {"a": "b"}}}}"#).templates();
        assert_eq!(templates.len(), 1);
        assert_eq!(templates[0].path, TemplatePath::PodTemplate);
    }

    #[test]
    fn list_templates_keep_the_indices_of_the_list_as_sent() {
        let head: ObjectHead = decoded(serde_json::json!({
            "metadata": {},
            "spec": {
                "selector": {"matchLabels": {"app": "db", "o/p": "w-1"}},
                "volumeClaimTemplates": [
                    null,
                    {"metadata": {"name": "data", "labels": {"app": "x"}}},
                    {"metadata": {"name": "logs"}},
                ],
                "template": {"spec": {"volumes": [
                    {"name": "a", "emptyDir": {}},
                    {"name": "b", "ephemeral": {"volumeClaimTemplate": {"metadata": {"labels": {"o/p": "w-1"}}}}},
                ]}},
            },
        }));
        let templates = head.templates();
        let paths: Vec<String> = templates.iter().map(|t| t.path.field()).collect();
        assert_eq!(
            paths,
            [
                "spec.volumeClaimTemplates[1]",
                "spec.volumeClaimTemplates[2]",
                "spec.template.spec.volumes[1].ephemeral.volumeClaimTemplate",
            ]
        );
        // A StatefulSet's claims take the selector's labels over the
        // template's own.
        assert_eq!(templates[0].label("app"), Some("db"));
        assert_eq!(templates[1].label("o/p"), Some("w-1"));
        assert_eq!(templates[1].meta.labels, None);
        assert_eq!(
            templates[2].path.metadata_tokens(),
            [
                "spec",
                "template",
                "spec",
                "volumes",
                "1",
                "ephemeral",
                "volumeClaimTemplate",
                "metadata"
            ]
        );
    }

    #[test]
    fn claim_templates_share_the_selector_instead_of_a_copy_each() {
        // 2,000 selector labels and 2,000 claim templates: a copy of the
        // selector in each would be 4 million map entries from a 140 KB
        // body (an attacker's StatefulSet reaches the mutating webhook
        // before the API server validates it).
        let match_labels: serde_json::Map<String, serde_json::Value> = (0..2000)
            .map(|i| (format!("k{i}"), serde_json::Value::from("")))
            .collect();
        let claims: Vec<serde_json::Value> = (0..2000)
            .map(|i| serde_json::json!({"metadata": {"name": format!("c{i}")}}))
            .collect();
        let head: ObjectHead = decoded(serde_json::json!({
            "metadata": {},
            "spec": {"selector": {"matchLabels": match_labels}, "volumeClaimTemplates": claims},
        }));
        let templates = head.templates();
        assert_eq!(templates.len(), 2000);
        assert_eq!(templates[0].added_labels.len(), 2000);
        assert!(
            templates
                .iter()
                .all(|t| std::sync::Arc::ptr_eq(&t.added_labels, &templates[0].added_labels))
        );
        assert_eq!(templates[1999].label("k1999"), Some(""));
    }

    #[test]
    fn spec_metadata_is_a_template_of_a_resource_claim_template_only() {
        let object = |api_version: &str, kind: &str| -> ObjectHead {
            decoded(serde_json::json!({
                "apiVersion": api_version, "kind": kind, "metadata": {},
                "spec": {"metadata": {"labels": {"a": "b"}}, "spec": {"devices": {}}},
            }))
        };
        let templates = object("resource.k8s.io/v1", "ResourceClaimTemplate").templates();
        assert_eq!(templates.len(), 1);
        assert_eq!(templates[0].path, TemplatePath::ResourceClaimTemplate);
        assert_eq!(templates[0].path.metadata_tokens(), ["spec", "metadata"]);
        assert!(
            object("example.com/v1", "ResourceClaimTemplate")
                .templates()
                .is_empty()
        );
        assert!(
            object("resource.k8s.io/v1", "ResourceClaim")
                .templates()
                .is_empty()
        );
    }

    #[test]
    fn patch_is_written_base64_with_its_type() {
        let response = AdmissionResponse {
            uid: "abc".into(),
            allowed: true,
            patch: Some(br#"[{"op":"add","path":"/a","value":1}]"#.to_vec()),
            ..Default::default()
        };
        let json: serde_json::Value =
            serde_json::from_slice(&response.to_review_json(ReviewVersion::V1)).unwrap();
        assert_eq!(json["apiVersion"], ADMISSION_V1);
        assert_eq!(json["kind"], "AdmissionReview");
        assert_eq!(json["response"]["uid"], "abc");
        assert_eq!(json["response"]["patchType"], "JSONPatch");
        let patch = json["response"]["patch"]
            .as_str()
            .expect("patch is a string");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap();
        assert_eq!(decoded, br#"[{"op":"add","path":"/a","value":1}]"#);
    }

    /// The patch's encoder works in SIMD blocks with a scalar tail: every
    /// length across several blocks, every byte value, reads back whole
    /// through the reference decoder, padding included, and the fields
    /// written after it are intact.
    #[test]
    fn a_patch_of_any_length_reads_back_whole() {
        for len in 0..=300usize {
            let patch: Vec<u8> = (0..len).map(|i| (i * 73 + len) as u8).collect();
            let response = AdmissionResponse {
                uid: "u".into(),
                allowed: true,
                patch: Some(patch.clone()),
                warnings: vec!["after".into()],
                ..Default::default()
            };
            let json: serde_json::Value =
                serde_json::from_slice(&response.to_review_json(ReviewVersion::V1)).unwrap();
            let encoded = json["response"]["patch"].as_str().expect("patch");
            assert_eq!(encoded.len(), len.div_ceil(3) * 4, "length {len}");
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .unwrap_or_else(|e| panic!("length {len}: {e}"));
            assert_eq!(decoded, patch, "length {len}");
            assert_eq!(json["response"]["patchType"], "JSONPatch");
            assert_eq!(json["response"]["warnings"][0], "after");
        }
    }

    #[test]
    fn unpatched_answer_has_no_patch_fields() {
        let response = AdmissionResponse {
            uid: "u".into(),
            allowed: true,
            ..Default::default()
        };
        let json: serde_json::Value =
            serde_json::from_slice(&response.to_review_json(ReviewVersion::V1beta1)).unwrap();
        assert!(json["response"].get("patch").is_none());
        assert!(json["response"].get("patchType").is_none());
        assert_eq!(json["apiVersion"], ADMISSION_V1BETA1);
    }
}
