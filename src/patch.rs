//! The JSON Patch that ties an object to its owner.
//!
//! Paths are built token by token with `jsonptr`, which escapes `/` as `~1`
//! (`ownerguard.io/owner-uid` becomes `ownerguard.io~1owner-uid`) and `~` as
//! `~0`. Every operation is an `add`: on an object member it creates or
//! replaces, so the patch applies whatever the current value, and on a list
//! it appends with `-`, which leaves the indices of other operations valid.

use json_patch::{AddOperation, Patch, PatchOperation};
use jsonptr::PointerBuf;
use serde_json::{Value, json};

use crate::admission::ObjectMeta;

/// Operations on one object's metadata.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct MetadataPatch {
    operations: Vec<PatchOperation>,
}

impl MetadataPatch {
    pub fn is_empty(&self) -> bool {
        self.operations.is_empty()
    }

    /// Add the non-blocking reference to pod `name` of `uid`, creating the
    /// list when the object has none.
    pub fn add_owner_reference(&mut self, meta: &ObjectMeta, name: &str, uid: &str) {
        let reference = owner_reference(name, uid);
        let (path, value) = match &meta.owner_references {
            Some(_) => (pointer(&["metadata", "ownerReferences", "-"]), reference),
            None => (
                pointer(&["metadata", "ownerReferences"]),
                Value::Array(vec![reference]),
            ),
        };
        self.add(path, value);
    }

    /// Set `blockOwnerDeletion: false` on the reference at `index`.
    pub fn unblock_owner_reference(&mut self, index: usize) {
        let index = index.to_string();
        self.add(
            pointer(&["metadata", "ownerReferences", &index, "blockOwnerDeletion"]),
            Value::Bool(false),
        );
    }

    /// Set label `key` to `value`, creating the labels when the object has
    /// none.
    pub fn add_label(&mut self, meta: &ObjectMeta, key: &str, value: &str) {
        match &meta.labels {
            Some(_) => self.add(
                pointer(&["metadata", "labels", key]),
                Value::String(value.into()),
            ),
            None => self.add(pointer(&["metadata", "labels"]), json!({ key: value })),
        }
    }

    fn add(&mut self, path: PointerBuf, value: Value) {
        self.operations
            .push(PatchOperation::Add(AddOperation { path, value }));
    }

    /// The patch document, as the JSON array the API server applies.
    pub fn to_json(&self) -> Vec<u8> {
        // A list of add operations with string paths always serialises.
        serde_json::to_vec(&Patch(self.operations.clone())).unwrap_or_default()
    }

    /// The patch as a JSON value, for reading (golden files, `--record`).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(Patch(self.operations.clone())).unwrap_or(Value::Null)
    }
}

/// The reference ownerguard sets: `controller: false` so it never competes
/// with a real controller, `blockOwnerDeletion: false` because `true` needs
/// `update` on `pods/finalizers` under `OwnerReferencesPermissionEnforcement`.
pub fn owner_reference(name: &str, uid: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "name": name,
        "uid": uid,
        "controller": false,
        "blockOwnerDeletion": false,
    })
}

fn pointer(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().copied())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::admission::OwnerReference;

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
            json!([owner_reference("w-1", "u-1")])
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
        assert_eq!(references[1], owner_reference("w-1", "u-1"));
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
}
