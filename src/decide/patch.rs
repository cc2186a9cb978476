//! The JSON Patch that ties an object to its owner.
//!
//! The patch is written as it is planned, operation by operation, straight
//! into the JSON text the API server applies: no `serde_json` value is
//! built and serialised again (the answer is on every review's path).
//! Paths are JSON Pointers whose tokens escape `/` as `~1`
//! (`ownerguard.io/owner-uid` becomes `ownerguard.io~1owner-uid`) and `~`
//! as `~0`, as jsonptr writes them (a test holds the two to the same
//! bytes). Every operation is an `add`: on an object member it creates or
//! replaces, so the patch applies whatever the current value, and on a
//! list it appends with `-`, which leaves the indices of other operations
//! valid.

use std::ops::Range;

use crate::admission::write;
use crate::admission::{ObjectMeta, OwnerReference, Template};

/// Operations on one object's metadata (and its templates').
#[derive(Debug, Default, Clone, PartialEq)]
pub struct MetadataPatch {
    /// The operations as JSON text, comma-separated, without the brackets
    /// of the list.
    operations: Vec<u8>,
    /// Maps and lists this patch creates (their pointers, as written), so
    /// that a second entry goes into them instead of replacing them. A set:
    /// an object may have thousands of templates, each a map created.
    created: super::Set<Vec<u8>>,
}

/// The bytes a patch's operations start with room for: a reference, the
/// uid label and an annotation, with their paths (about 330 bytes).
const FIRST_ROOM: usize = 512;

/// The bytes a written pointer starts with room for (a template's map is
/// about 60).
const POINTER_ROOM: usize = 96;

impl MetadataPatch {
    pub fn is_empty(&self) -> bool {
        self.operations.is_empty()
    }

    /// Add the non-blocking reference to pod `name` of `uid`, creating the
    /// list when the object has none.
    pub fn add_owner_reference(&mut self, meta: &ObjectMeta, name: &str, uid: &str) {
        self.add_reference(meta, name, uid, false);
    }

    /// Put back the Pod reference an UPDATE left out: as it was, but
    /// non-blocking.
    pub fn restore_owner_reference(&mut self, meta: &ObjectMeta, old: &OwnerReference) {
        let controller = old.controller.unwrap_or(false);
        self.add_reference(meta, &old.name, &old.uid, controller);
    }

    fn add_reference(&mut self, meta: &ObjectMeta, name: &str, uid: &str, controller: bool) {
        let list = ["metadata", "ownerReferences"];
        let created = self.was_created(list);
        let value = |out: &mut Vec<u8>| owner_reference(out, name, uid, controller);
        if meta.owner_references.is_some() || created {
            self.add(["metadata", "ownerReferences", "-"], value);
        } else {
            let pointer = self.add(list, |out| {
                out.push(b'[');
                value(out);
                out.push(b']');
            });
            self.remember_created(pointer);
        }
    }

    /// Set `blockOwnerDeletion: false` on the reference at `index`.
    pub fn unblock_owner_reference(&mut self, index: usize) {
        let index = index.to_string();
        self.add(
            ["metadata", "ownerReferences", &index, "blockOwnerDeletion"],
            |out| out.extend_from_slice(b"false"),
        );
    }

    /// Set label `key` to `value`, creating the labels when the object has
    /// none.
    pub fn add_label(&mut self, meta: &ObjectMeta, key: &str, value: &str) {
        let exists = meta.labels.is_some();
        self.add_entry(&["metadata"], "labels", exists, key, value);
    }

    /// Set annotation `key` to `value`, creating the annotations when the
    /// object has none.
    pub fn add_annotation(&mut self, meta: &ObjectMeta, key: &str, value: &str) {
        let exists = meta.annotations.is_some();
        self.add_entry(&["metadata"], "annotations", exists, key, value);
    }

    /// Set label `key` of `template`, creating its labels when it has none
    /// (a StatefulSet claim template labelled by the selector only).
    pub fn add_template_label(&mut self, template: &Template, key: &str, value: &str) {
        let base = template.path.metadata_tokens();
        let exists = template.meta.labels.is_some();
        self.add_entry(&tokens(&base), "labels", exists, key, value);
    }

    /// Set annotation `key` of `template`, creating its annotations when it
    /// has none.
    pub fn add_template_annotation(&mut self, template: &Template, key: &str, value: &str) {
        let base = template.path.metadata_tokens();
        let exists = template.meta.annotations.is_some();
        self.add_entry(&tokens(&base), "annotations", exists, key, value);
    }

    /// `key: value` in the map `map` under `base`, creating the map when it
    /// neither `exists` nor was created by this patch.
    fn add_entry(&mut self, base: &[&str], map: &str, exists: bool, key: &str, value: &str) {
        let map_tokens = || base.iter().copied().chain([map]);
        if exists || self.was_created(map_tokens()) {
            self.add(map_tokens().chain([key]), |out| write::string(out, value));
        } else {
            let pointer = self.add(map_tokens(), |out| {
                out.push(b'{');
                write::string(out, key);
                out.push(b':');
                write::string(out, value);
                out.push(b'}');
            });
            self.remember_created(pointer);
        }
    }

    /// One `add` of the value `value` writes at the pointer of `path`;
    /// where the pointer is in the operations' text.
    fn add<'a>(
        &mut self,
        path: impl IntoIterator<Item = &'a str>,
        value: impl FnOnce(&mut Vec<u8>),
    ) -> Range<usize> {
        let out = &mut self.operations;
        if out.is_empty() {
            // Room for the usual patch (a reference, a label, an
            // annotation) at once, rather than growing to it.
            out.reserve(FIRST_ROOM);
        } else {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"op":"add","path":"#);
        let start = out.len();
        write::pointer(out, path);
        let pointer = start..out.len();
        out.extend_from_slice(br#","value":"#);
        value(out);
        out.push(b'}');
        pointer
    }

    fn was_created<'a>(&self, path: impl IntoIterator<Item = &'a str>) -> bool {
        if self.created.is_empty() {
            return false;
        }
        let mut written = Vec::with_capacity(POINTER_ROOM);
        write::pointer(&mut written, path);
        self.created.contains(&written)
    }

    /// Remember the map or list created by the operation whose pointer is
    /// at `pointer` in the operations' text (copied, not written again).
    fn remember_created(&mut self, pointer: Range<usize>) {
        self.created.insert(self.operations[pointer].to_vec());
    }

    /// Append the operations of `other`, which was built on the same
    /// object.
    pub fn extend(&mut self, other: MetadataPatch) {
        if !other.operations.is_empty() {
            if !self.operations.is_empty() {
                self.operations.push(b',');
            }
            self.operations.extend_from_slice(&other.operations);
        }
        self.created.extend(other.created);
    }

    /// The patch document, as the JSON array the API server applies.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.operations.len() + 2);
        self.write_json(&mut out);
        out
    }

    /// The patch document written onto `out`.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.push(b'[');
        out.extend_from_slice(&self.operations);
        out.push(b']');
    }
}

/// The reference ownerguard sets: `controller: false` so it never competes
/// with a real controller, `blockOwnerDeletion: false` because `true` needs
/// `update` on `pods/finalizers` under `OwnerReferencesPermissionEnforcement`.
fn owner_reference(out: &mut Vec<u8>, name: &str, uid: &str, controller: bool) {
    out.extend_from_slice(br#"{"apiVersion":"v1","kind":"Pod","name":"#);
    write::string(out, name);
    out.extend_from_slice(br#","uid":"#);
    write::string(out, uid);
    out.extend_from_slice(if controller {
        br#","controller":true,"blockOwnerDeletion":false}"#
    } else {
        br#","controller":false,"blockOwnerDeletion":false}"#
    });
}

fn tokens(owned: &[String]) -> Vec<&str> {
    owned.iter().map(String::as_str).collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use json_patch::Patch;
    use serde_json::{Value, json};

    use super::*;

    /// The reference as the API server reads it back.
    fn owner_reference(name: &str, uid: &str, controller: bool) -> Value {
        let mut out = Vec::new();
        super::owner_reference(&mut out, name, uid, controller);
        serde_json::from_slice(&out).unwrap()
    }
    use crate::admission::{PodSpecAt, TemplateMeta, TemplatePath};

    fn apply(object: &mut Value, patch: &MetadataPatch) {
        let patch: Patch = serde_json::from_slice(&patch.to_json()).unwrap();
        json_patch::patch(object, &patch).unwrap();
    }

    #[test]
    fn reference_list_is_created_when_missing() {
        let mut object = json!({"metadata": {"name": "a"}});
        let mut patch = MetadataPatch::default();
        patch.add_owner_reference(&ObjectMeta::default(), "w-1", "u-1");
        apply(&mut object, &patch);
        assert_eq!(
            object["metadata"]["ownerReferences"],
            json!([owner_reference("w-1", "u-1", false)])
        );
    }

    #[test]
    fn reference_is_appended_to_an_existing_list() {
        let mut object = json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "r"}]}});
        let meta = ObjectMeta {
            owner_references: Some(vec![OwnerReference::default()]),
            ..Default::default()
        };
        let mut patch = MetadataPatch::default();
        patch.add_owner_reference(&meta, "w-1", "u-1");
        apply(&mut object, &patch);
        let references = object["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(references.len(), 2);
        assert_eq!(references[0]["kind"], "ReplicaSet");
        assert_eq!(references[1], owner_reference("w-1", "u-1", false));
    }

    #[test]
    fn label_key_slash_is_escaped_as_tilde_one() {
        let meta = ObjectMeta {
            labels: Some(BTreeMap::new()),
            ..Default::default()
        };
        let mut patch = MetadataPatch::default();
        patch.add_label(&meta, "ownerguard.io/owner-uid", "u-1");
        let text = String::from_utf8(patch.to_json()).unwrap();
        assert!(
            text.contains("/metadata/labels/ownerguard.io~1owner-uid"),
            "{text}"
        );
        let mut object = json!({"metadata": {"labels": {}}});
        apply(&mut object, &patch);
        assert_eq!(
            object["metadata"]["labels"]["ownerguard.io/owner-uid"],
            "u-1"
        );
    }

    #[test]
    fn labels_are_created_when_missing() {
        let mut patch = MetadataPatch::default();
        patch.add_label(&ObjectMeta::default(), "ownerguard.io/owner-uid", "u-1");
        let mut object = json!({"metadata": {}});
        apply(&mut object, &patch);
        assert_eq!(
            object["metadata"]["labels"],
            json!({"ownerguard.io/owner-uid": "u-1"})
        );
    }

    #[test]
    fn unblocking_sets_false_whether_the_field_exists_or_not() {
        let mut patch = MetadataPatch::default();
        patch.unblock_owner_reference(0);
        patch.unblock_owner_reference(1);
        let mut object = json!({"metadata": {"ownerReferences": [{"blockOwnerDeletion": true, "controller": true}, {}]}});
        apply(&mut object, &patch);
        assert_eq!(
            object["metadata"]["ownerReferences"],
            json!([{"blockOwnerDeletion": false, "controller": true}, {"blockOwnerDeletion": false}])
        );
    }

    #[test]
    fn a_second_entry_goes_into_the_map_the_patch_created() {
        let mut patch = MetadataPatch::default();
        let meta = ObjectMeta::default();
        patch.add_annotation(&meta, "a/x", "1");
        patch.add_annotation(&meta, "a/y", "2");
        patch.add_owner_reference(&meta, "w-1", "u-1");
        patch.restore_owner_reference(
            &meta,
            &OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: "w-2".into(),
                uid: "u-2".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
        );
        let mut object = json!({"metadata": {}});
        apply(&mut object, &patch);
        assert_eq!(
            object["metadata"]["annotations"],
            json!({"a/x": "1", "a/y": "2"})
        );
        assert_eq!(
            object["metadata"]["ownerReferences"],
            json!([
                owner_reference("w-1", "u-1", false),
                owner_reference("w-2", "u-2", true)
            ])
        );
    }

    fn template(path: TemplatePath, labels: Option<&[(&str, &str)]>) -> Template {
        Template {
            path,
            meta: TemplateMeta {
                labels: labels.map(|l| {
                    l.iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect()
                }),
                annotations: None,
                pod_reference: None,
            },
            added_labels: std::sync::Arc::default(),
            key: None,
        }
    }

    #[test]
    fn template_entries_go_under_the_template_metadata() {
        let mut patch = MetadataPatch::default();
        let pod_of_job = template(TemplatePath::JobTemplatePodTemplate, Some(&[("k", "v")]));
        patch.add_template_label(&pod_of_job, "a/uid", "u-1");
        let pod = template(TemplatePath::PodTemplate, Some(&[]));
        patch.add_template_annotation(&pod, "a/name", "w-1");
        let mut object = json!({"spec": {
            "template": {"metadata": {"labels": {}}},
            "jobTemplate": {"spec": {"template": {"metadata": {"labels": {"k": "v"}}}}},
        }});
        apply(&mut object, &patch);
        assert_eq!(
            object["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"],
            json!({"k": "v", "a/uid": "u-1"})
        );
        assert_eq!(
            object["spec"]["template"]["metadata"]["annotations"],
            json!({"a/name": "w-1"})
        );
    }

    #[test]
    fn list_templates_are_addressed_by_index_and_their_maps_created() {
        let mut patch = MetadataPatch::default();
        // A claim template labelled by the StatefulSet's selector only.
        let claim = template(TemplatePath::VolumeClaimTemplate(1), None);
        patch.add_template_label(&claim, "a/owner-uid", "u-1");
        patch.add_template_annotation(&claim, "a/owner-pod-name", "w-1");
        let ephemeral = template(
            TemplatePath::EphemeralVolume(PodSpecAt::JobTemplatePodTemplate, 0),
            Some(&[("a/owner-pod", "w-1")]),
        );
        patch.add_template_label(&ephemeral, "a/owner-uid", "u-1");
        let text = String::from_utf8(patch.to_json()).unwrap();
        assert!(
            text.contains("/spec/volumeClaimTemplates/1/metadata/labels"),
            "{text}"
        );
        assert!(
            text.contains("/spec/jobTemplate/spec/template/spec/volumes/0/ephemeral/volumeClaimTemplate/metadata/labels/a~1owner-uid"),
            "{text}"
        );
        let mut object = json!({"spec": {
            "volumeClaimTemplates": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}],
            "jobTemplate": {"spec": {"template": {"spec": {"volumes": [
                {"name": "s", "ephemeral": {"volumeClaimTemplate": {"metadata": {"labels": {"a/owner-pod": "w-1"}}}}},
            ]}}}},
        }});
        apply(&mut object, &patch);
        assert_eq!(
            object["spec"]["volumeClaimTemplates"],
            json!([
                {"metadata": {"name": "a"}},
                {"metadata": {"name": "b", "labels": {"a/owner-uid": "u-1"}, "annotations": {"a/owner-pod-name": "w-1"}}},
            ])
        );
        assert_eq!(
            object["spec"]["jobTemplate"]["spec"]["template"]["spec"]["volumes"][0]["ephemeral"]["volumeClaimTemplate"]
                ["metadata"]["labels"],
            json!({"a/owner-pod": "w-1", "a/owner-uid": "u-1"})
        );
    }

    mod any_text {
        use base64::Engine;
        use proptest::prelude::*;

        use super::*;
        use crate::admission::{AdmissionResponse, ReviewVersion, Status};

        /// Names, uids, keys and values of every character class a JSON
        /// string or a JSON Pointer escapes, or anything at all.
        fn text() -> impl Strategy<Value = String> {
            prop_oneof![
                "[a-z\"\\\\/~\u{0}-\u{1f}\u{7f}\u{e9}\u{2028}\u{2029}\u{1f600}01-]{0,12}",
                Just("-".to_string()),
                Just(String::new()),
                any::<String>(),
            ]
        }

        fn entries() -> impl Strategy<Value = Vec<(String, String)>> {
            prop::collection::vec((text(), text()), 0..4)
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

            /// The patch, inside the answer as the API server reads it (the
            /// answer decoded by serde_json, its patch base64-decoded and
            /// applied by json-patch), sets exactly what was asked, whatever
            /// the characters of the names, keys and values.
            #[test]
            fn the_answer_applies_as_planned(
                name in text(),
                uid in text(),
                labels in entries(),
                annotations in entries(),
                template_labels in entries(),
                has_labels: bool,
                has_references: bool,
                review_uid in text(),
                message in text(),
                warnings in prop::collection::vec(text(), 0..3),
                audit in entries(),
            ) {
                let meta = ObjectMeta {
                    labels: has_labels.then(BTreeMap::new),
                    owner_references: has_references.then(Vec::new),
                    ..Default::default()
                };
                let mut patch = MetadataPatch::default();
                for (key, value) in &labels {
                    patch.add_label(&meta, key, value);
                }
                for (key, value) in &annotations {
                    patch.add_annotation(&meta, key, value);
                }
                let claim = template(TemplatePath::VolumeClaimTemplate(0), None);
                for (key, value) in &template_labels {
                    patch.add_template_label(&claim, key, value);
                }
                patch.add_owner_reference(&meta, &name, &uid);

                let response = AdmissionResponse {
                    uid: review_uid.clone(),
                    allowed: true,
                    status: Some(Status { status: "Success", message: message.clone(), reason: "", code: 200 }),
                    patch: (!patch.is_empty()).then(|| patch.to_json()),
                    // The keys are ownerguard's own, `&'static` in the
                    // type: the generated ones live as long as the test.
                    audit_annotations: audit
                        .iter()
                        .map(|(key, value)| (&*String::leak(key.clone()), value.clone().into()))
                        .collect(),
                    warnings: warnings.clone(),
                };
                let answer: Value =
                    serde_json::from_slice(&response.to_review_json(ReviewVersion::V1)).unwrap();
                let response_of = &answer["response"];
                prop_assert_eq!(&response_of["uid"], &json!(review_uid));
                prop_assert_eq!(&response_of["status"]["message"], &json!(message));
                if warnings.is_empty() {
                    prop_assert!(response_of.get("warnings").is_none());
                } else {
                    prop_assert_eq!(&response_of["warnings"], &json!(warnings));
                }
                let audit: BTreeMap<String, String> = audit.into_iter().collect();
                if audit.is_empty() {
                    prop_assert!(response_of.get("auditAnnotations").is_none());
                } else {
                    prop_assert_eq!(&response_of["auditAnnotations"], &json!(audit));
                }
                let encoded = response_of["patch"].as_str().unwrap();
                let decoded = base64::engine::general_purpose::STANDARD.decode(encoded).unwrap();
                prop_assert_eq!(&decoded, &patch.to_json());
                let operations: Patch = serde_json::from_slice(&decoded).unwrap();

                let mut object = json!({
                    "metadata": {"name": "x"},
                    "spec": {"volumeClaimTemplates": [{"metadata": {"name": "c"}}]},
                });
                if has_labels {
                    object["metadata"]["labels"] = json!({});
                }
                if has_references {
                    object["metadata"]["ownerReferences"] = json!([]);
                }
                json_patch::patch(&mut object, &operations).unwrap();

                let expected = |entries: &[(String, String)]| -> BTreeMap<String, String> {
                    entries.iter().cloned().collect()
                };
                let read = |value: &Value| -> Option<BTreeMap<String, String>> {
                    serde_json::from_value(value.clone()).ok()
                };
                let labels_now = read(&object["metadata"]["labels"]);
                if has_labels || !labels.is_empty() {
                    prop_assert_eq!(labels_now, Some(expected(&labels)));
                } else {
                    prop_assert_eq!(labels_now, None);
                }
                if !annotations.is_empty() {
                    prop_assert_eq!(read(&object["metadata"]["annotations"]), Some(expected(&annotations)));
                }
                if !template_labels.is_empty() {
                    prop_assert_eq!(
                        read(&object["spec"]["volumeClaimTemplates"][0]["metadata"]["labels"]),
                        Some(expected(&template_labels))
                    );
                }
                prop_assert_eq!(
                    &object["metadata"]["ownerReferences"],
                    &json!([{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid,
                             "controller": false, "blockOwnerDeletion": false}])
                );
            }
        }
    }
}
