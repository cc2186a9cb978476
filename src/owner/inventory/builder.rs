//! The index an inventory is decoded into, pod by pod: what a pod is
//! read for ([`Item`]), and the checks each pod passes as it comes.

use serde::Deserialize;

use super::{Inventory, InventoryError};
use crate::owner::{Finished, ObservedPod};

/// The phases the API server writes (`core/v1` `PodPhase`).
const POD_PHASES: [&str; 5] = ["Pending", "Running", "Succeeded", "Failed", "Unknown"];

/// The pods decoded so far, each checked as it comes: the index grows
/// pod by pod, and no document is ever held whole.
pub(super) struct Builder {
    pub(super) path: String,
    /// The document being read (1-based), for `document N` of an error.
    pub(super) document: usize,
    pods: super::Pods,
    /// Pods seen, for the `pod #N` of an error.
    count: usize,
    /// The first error, which stops the decoding.
    pub(super) error: Option<InventoryError>,
}

impl Builder {
    pub(super) fn new(path: &str) -> Self {
        Self {
            path: path.to_string(),
            document: 1,
            pods: super::Pods::default(),
            count: 0,
            error: None,
        }
    }

    pub(super) fn not_a_pod(&self, document: usize, kind: impl Into<String>) -> InventoryError {
        InventoryError::NotAPod {
            path: self.path.clone(),
            document,
            kind: kind.into(),
        }
    }

    /// One pod: named, with a uid and a pod phase, or the error.
    pub(super) fn add(&mut self, pod: Item) -> Result<(), InventoryError> {
        self.count += 1;
        let index = self.count;
        let incomplete = |field| InventoryError::Incomplete {
            path: self.path.clone(),
            index,
            field,
        };
        let meta = pod.metadata.unwrap_or_default();
        let name = meta
            .name
            .filter(|n| !n.is_empty())
            .ok_or_else(|| incomplete("name"))?;
        let uid = meta
            .uid
            .filter(|u| !u.is_empty())
            .ok_or_else(|| incomplete("uid"))?;
        let namespace = meta.namespace.unwrap_or_else(|| "default".to_string());
        let phase = pod
            .status
            .and_then(|status| status.phase)
            .filter(|phase| !phase.is_empty());
        if let Some(phase) = phase.as_deref().filter(|p| !POD_PHASES.contains(p)) {
            return Err(InventoryError::UnknownPhase {
                path: self.path.clone(),
                index,
                phase: phase.to_string(),
            });
        }
        let finished = phase.as_deref().and_then(Finished::from_phase);
        self.pods.insert(
            namespace,
            name,
            ObservedPod {
                uid,
                terminating: meta.deletion_timestamp.is_some(),
                finished,
            },
        );
        Ok(())
    }

    /// A list's item: a Pod, or without kind (`kubectl` writes it; a list
    /// of another kind is refused).
    pub(super) fn add_item(&mut self, document: usize, item: Item) -> Result<(), InventoryError> {
        match item.kind.as_ref().map(Kind::as_str) {
            None | Some("Pod") => self.add(item),
            Some(other) => Err(self.not_a_pod(document, other)),
        }
    }

    pub(super) fn finish(self) -> Inventory {
        Inventory { pods: self.pods }
    }
}

/// Stop the decoder with `error` kept in the builder.
pub(super) fn stop<E: serde::de::Error>(builder: &mut Builder, error: InventoryError) -> E {
    let message = error.to_string();
    builder.error.get_or_insert(error);
    E::custom(message)
}

/// What a pod (or a list's item) is read for; every other field is
/// skipped undecoded.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Item {
    #[serde(default)]
    pub(super) kind: Option<Kind>,
    #[serde(default)]
    pub(super) metadata: Option<PodMeta>,
    #[serde(default)]
    pub(super) status: Option<PodStatus>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PodMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    /// Present and not null: the pod is being deleted.
    #[serde(default)]
    deletion_timestamp: Option<serde::de::IgnoredAny>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct PodStatus {
    #[serde(default)]
    phase: Option<String>,
}

/// A `kind`: a string, or something else (no kind a list can name).
#[derive(Debug)]
pub(super) struct Kind(Option<String>);

impl Kind {
    pub(super) fn as_str(&self) -> &str {
        self.0.as_deref().unwrap_or("kind that is not a string")
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        Ok(Self(value.as_str().map(str::to_string)))
    }
}

/// What an object's `items` was.
#[derive(Default)]
pub(super) enum ItemsSeen {
    #[default]
    Absent,
    /// Streamed into the index.
    List,
    Other,
}

#[cfg(test)]
mod tests {
    use super::super::tests::both;
    use super::super::{Inventory, InventoryError};
    use crate::owner::Finished;

    #[test]
    fn the_phase_is_read_from_json_and_yaml_lists_and_streams() {
        let json = r#"{"apiVersion":"v1","kind":"PodList","items":[
            {"metadata":{"name":"done","namespace":"a","uid":"u-1"},"status":{"phase":"Succeeded"}},
            {"metadata":{"name":"evicted","namespace":"a","uid":"u-2"},"status":{"phase":"Failed","reason":"Evicted"}},
            {"metadata":{"name":"runs","namespace":"a","uid":"u-3"},"status":{"phase":"Running"}},
            {"metadata":{"name":"new","namespace":"a","uid":"u-4"},"status":{}},
            {"metadata":{"name":"bare","namespace":"a","uid":"u-5"},"status":null}]}"#;
        let yaml_list = "apiVersion: v1\nkind: PodList\nitems:\n\
                         - metadata: {name: done, namespace: a, uid: u-1}\n  status: {phase: Succeeded}\n\
                         - metadata: {name: evicted, namespace: a, uid: u-2}\n  status: {phase: Failed}\n\
                         - metadata: {name: runs, namespace: a, uid: u-3}\n  status: {phase: Running}\n";
        let yaml_stream = "kind: Pod\nmetadata: {name: done, namespace: a, uid: u-1}\nstatus: {phase: Succeeded}\n\
                           ---\nkind: Pod\nmetadata: {name: evicted, namespace: a, uid: u-2}\nstatus: {phase: Failed}\n\
                           ---\nkind: Pod\nmetadata: {name: runs, namespace: a, uid: u-3}\nstatus: {phase: Pending}\n";
        for text in [json, yaml_list, yaml_stream] {
            let inventory = Inventory::from_text(text, "pods").unwrap();
            let phase = |name| inventory.get("a", name).unwrap().finished;
            assert_eq!(phase("done"), Some(Finished::Succeeded), "{text}");
            assert_eq!(phase("evicted"), Some(Finished::Failed), "{text}");
            assert_eq!(phase("runs"), None, "{text}");
        }
        let inventory = Inventory::from_text(json, "pods.json").unwrap();
        assert_eq!(inventory.get("a", "new").unwrap().finished, None);
        assert_eq!(inventory.get("a", "bare").unwrap().finished, None);
    }

    #[test]
    fn a_phase_that_is_not_a_pod_phase_is_refused() {
        let text = "kind: Pod\nmetadata: {name: w-1, uid: u-1}\nstatus: {phase: Completed}\n";
        let err = Inventory::from_text(text, "x.yaml").unwrap_err();
        assert!(
            matches!(&err, InventoryError::UnknownPhase { phase, .. } if phase == "Completed"),
            "{err}"
        );
    }

    #[test]
    fn pod_without_uid_is_refused() {
        let err = Inventory::from_text("kind: Pod\nmetadata: {name: w-1}\n", "x.yaml").unwrap_err();
        assert!(
            matches!(err, InventoryError::Incomplete { field: "uid", .. }),
            "{err}"
        );
    }

    #[test]
    fn a_pod_without_a_name_or_uid_is_named_by_its_place() {
        let text = r#"{"kind":"List","items":[{"metadata":{"name":"a","uid":"u-1"}},{"metadata":{"name":"b"}}]}"#;
        let err = both(text).unwrap_err();
        assert!(
            matches!(
                err,
                InventoryError::Incomplete {
                    index: 2,
                    field: "uid",
                    ..
                }
            ),
            "{err}"
        );
        let err = both("- metadata: {uid: u-1}\n").unwrap_err();
        assert!(
            matches!(
                err,
                InventoryError::Incomplete {
                    index: 1,
                    field: "name",
                    ..
                }
            ),
            "{err}"
        );
    }
}
