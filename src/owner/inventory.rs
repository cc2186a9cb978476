//! The static inventory of `--pods FILE`: the cluster replaced by a list of
//! pods, for running the webhook and `review` without a cluster.

use std::collections::HashMap;
use std::path::Path;

use futures::future::BoxFuture;
use serde::Deserialize;

use super::lookup::{Finished, Lookup, ObservedPod, OwnerLookup, PodQuery, Source};

/// Why an inventory file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    /// The file cannot be read.
    #[error("cannot read pod inventory {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// Not JSON, or not YAML.
    #[error("pod inventory {path} is not valid JSON or YAML: {message}")]
    Parse { path: String, message: String },
    /// A document that is not a Pod or a list of Pods.
    #[error("pod inventory {path}: document {document} is a {kind}, not a Pod or a PodList")]
    NotAPod {
        path: String,
        document: usize,
        kind: String,
    },
    /// A pod without the fields an owner needs.
    #[error("pod inventory {path}: pod #{index} has no metadata.{field}")]
    Incomplete {
        path: String,
        index: usize,
        field: &'static str,
    },
    /// A `status.phase` that is no pod phase (a `kubectl get` STATUS
    /// column such as `Completed` is not one): guessing whether the pod
    /// has finished could allow a finished owner.
    #[error(
        "pod inventory {path}: pod #{index} has status.phase '{phase}', which is not a pod phase \
         (Pending, Running, Succeeded, Failed or Unknown)"
    )]
    UnknownPhase {
        path: String,
        index: usize,
        phase: String,
    },
}

#[derive(Debug, Deserialize)]
struct PodDocument {
    #[serde(default)]
    metadata: PodMeta,
    #[serde(default)]
    status: Option<PodStatus>,
}

#[derive(Debug, Default, Deserialize)]
struct PodStatus {
    #[serde(default)]
    phase: Option<String>,
}

/// The phases the API server writes (`core/v1` `PodPhase`).
const POD_PHASES: [&str; 5] = ["Pending", "Running", "Succeeded", "Failed", "Unknown"];

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    deletion_timestamp: Option<serde_json::Value>,
}

/// A pod of the inventory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventoryPod {
    pub namespace: String,
    pub name: String,
    pub pod: ObservedPod,
}

/// Pods by (namespace, name).
#[derive(Debug, Default, Clone)]
pub struct Inventory {
    pods: HashMap<(String, String), ObservedPod>,
}

impl Inventory {
    /// Read `path`: a `v1` `PodList` or `List` (`kubectl get pods -A -o json`
    /// or `-o yaml`), a single Pod, or a multi-document YAML stream of Pods.
    /// A pod without a namespace is in `default`, as `kubectl apply` would
    /// put it; one whose `status.phase` is `Succeeded` or `Failed` has
    /// finished (SPEC §3 rule 11).
    ///
    /// # Errors
    ///
    /// [`InventoryError`] when the file cannot be read or parsed, holds
    /// something else than pods, or a pod has no name or uid, or a phase
    /// that is no pod phase.
    pub fn from_file(path: &Path) -> Result<Self, InventoryError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| InventoryError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::from_text(&text, &shown)
    }

    /// Parse an inventory from its text; `path` names it in errors.
    ///
    /// # Errors
    ///
    /// As [`Inventory::from_file`].
    pub fn from_text(text: &str, path: &str) -> Result<Self, InventoryError> {
        let documents = parse_documents(text).map_err(|message| InventoryError::Parse {
            path: path.to_string(),
            message,
        })?;
        let mut pods = Vec::new();
        for (document, value) in documents.into_iter().enumerate() {
            collect_pods(value, document + 1, path, &mut pods)?;
        }
        let mut index = HashMap::with_capacity(pods.len());
        for (position, value) in pods.into_iter().enumerate() {
            let pod: PodDocument =
                serde_json::from_value(value).map_err(|e| InventoryError::Parse {
                    path: path.to_string(),
                    message: format!("pod #{}: {e}", position + 1),
                })?;
            let incomplete = |field| InventoryError::Incomplete {
                path: path.to_string(),
                index: position + 1,
                field,
            };
            let name = pod
                .metadata
                .name
                .filter(|n| !n.is_empty())
                .ok_or_else(|| incomplete("name"))?;
            let uid = pod
                .metadata
                .uid
                .filter(|u| !u.is_empty())
                .ok_or_else(|| incomplete("uid"))?;
            let namespace = pod
                .metadata
                .namespace
                .unwrap_or_else(|| "default".to_string());
            let terminating = pod
                .metadata
                .deletion_timestamp
                .is_some_and(|t| !t.is_null());
            let phase = pod
                .status
                .and_then(|status| status.phase)
                .filter(|phase| !phase.is_empty());
            if let Some(phase) = phase.as_deref().filter(|p| !POD_PHASES.contains(p)) {
                return Err(InventoryError::UnknownPhase {
                    path: path.to_string(),
                    index: position + 1,
                    phase: phase.to_string(),
                });
            }
            let finished = phase.as_deref().and_then(Finished::from_phase);
            index.insert(
                (namespace, name),
                ObservedPod {
                    uid,
                    terminating,
                    finished,
                },
            );
        }
        Ok(Self { pods: index })
    }

    /// An inventory of these pods (tests, `review --as-pod`).
    pub fn from_pods(pods: impl IntoIterator<Item = InventoryPod>) -> Self {
        Self {
            pods: pods
                .into_iter()
                .map(|p| ((p.namespace, p.name), p.pod))
                .collect(),
        }
    }

    /// This inventory with `pod` added (or replacing one of its name).
    pub fn with(mut self, pod: InventoryPod) -> Self {
        self.pods.insert((pod.namespace, pod.name), pod.pod);
        self
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<&ObservedPod> {
        // A tuple key of owned strings cannot be borrowed as (&str, &str);
        // the inventory is small and off the production path (the cluster
        // source has its own index), so one allocation per lookup is fine.
        self.pods.get(&(namespace.to_string(), name.to_string()))
    }
}

impl OwnerLookup for Inventory {
    fn lookup<'a>(&'a self, query: PodQuery<'a>) -> BoxFuture<'a, Lookup> {
        let outcome = Ok(self.get(query.namespace, query.name).cloned());
        Box::pin(std::future::ready(Lookup {
            source: Source::Inventory,
            outcome,
        }))
    }
}

/// JSON is parsed as one document, anything else as a YAML stream.
fn parse_documents(text: &str) -> Result<Vec<serde_json::Value>, String> {
    let trimmed = text.trim_start();
    if (trimmed.starts_with('{') || trimmed.starts_with('['))
        && let Ok(value) = serde_json::from_str(trimmed)
    {
        return Ok(vec![value]);
    }
    serde_saphyr::from_multiple::<serde_json::Value>(text).map_err(|e| e.to_string())
}

fn collect_pods(
    value: serde_json::Value,
    document: usize,
    path: &str,
    out: &mut Vec<serde_json::Value>,
) -> Result<(), InventoryError> {
    let not_a_pod = |kind: &str| InventoryError::NotAPod {
        path: path.to_string(),
        document,
        kind: kind.to_string(),
    };
    match value {
        serde_json::Value::Null => Ok(()),
        serde_json::Value::Array(items) => {
            out.extend(items);
            Ok(())
        }
        serde_json::Value::Object(mut map) => {
            let kind = map.get("kind").and_then(|k| k.as_str()).map(str::to_string);
            match kind.as_deref() {
                Some("PodList") | Some("List") => {
                    match map.remove("items") {
                        Some(serde_json::Value::Array(items)) => {
                            for item in &items {
                                match item.get("kind").and_then(|k| k.as_str()) {
                                    None | Some("Pod") => {}
                                    Some(other) => return Err(not_a_pod(other)),
                                }
                            }
                            out.extend(items);
                        }
                        Some(serde_json::Value::Null) | None => {}
                        Some(_) => return Err(not_a_pod("list whose items are not a list")),
                    }
                    Ok(())
                }
                Some("Pod") => {
                    out.push(serde_json::Value::Object(map));
                    Ok(())
                }
                Some(other) => Err(not_a_pod(other)),
                None => Err(not_a_pod("document without kind")),
            }
        }
        other => Err(not_a_pod(&format!("{other}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_list_json_is_read() {
        let text = r#"{"apiVersion":"v1","kind":"List","items":[
            {"apiVersion":"v1","kind":"Pod","metadata":{"name":"w-1","namespace":"agents","uid":"u-1"}},
            {"metadata":{"name":"w-2","namespace":"agents","uid":"u-2","deletionTimestamp":"2026-01-01T00:00:00Z"}}]}"#;
        let inventory = Inventory::from_text(text, "pods.json").unwrap();
        assert_eq!(inventory.len(), 2);
        assert_eq!(
            inventory.get("agents", "w-1"),
            Some(&ObservedPod::running("u-1"))
        );
        assert!(inventory.get("agents", "w-2").unwrap().terminating);
        assert_eq!(inventory.get("other", "w-1"), None);
    }

    #[test]
    fn yaml_stream_of_pods_is_read() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: w-1\n  uid: u-1\n---\n\
                    apiVersion: v1\nkind: Pod\nmetadata:\n  name: w-2\n  namespace: agents\n  uid: u-2\n";
        let inventory = Inventory::from_text(text, "pods.yaml").unwrap();
        assert_eq!(
            inventory.get("default", "w-1").map(|p| p.uid.as_str()),
            Some("u-1")
        );
        assert_eq!(
            inventory.get("agents", "w-2").map(|p| p.uid.as_str()),
            Some("u-2")
        );
    }

    #[test]
    fn pod_list_yaml_is_read() {
        let text = "apiVersion: v1\nkind: PodList\nitems:\n- metadata:\n    name: w-1\n    namespace: a\n    uid: u-1\n";
        let inventory = Inventory::from_text(text, "pods.yaml").unwrap();
        assert_eq!(inventory.len(), 1);
    }

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
    fn empty_file_is_an_empty_inventory() {
        assert!(Inventory::from_text("", "pods.yaml").unwrap().is_empty());
    }

    #[test]
    fn other_kinds_are_refused() {
        let err =
            Inventory::from_text("kind: Deployment\nmetadata: {name: d}\n", "x.yaml").unwrap_err();
        assert!(matches!(err, InventoryError::NotAPod { .. }), "{err}");
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
    fn garbage_is_a_parse_error() {
        let err = Inventory::from_text("{not: [valid", "x.yaml").unwrap_err();
        assert!(matches!(err, InventoryError::Parse { .. }), "{err}");
    }
}
