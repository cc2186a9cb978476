//! The static inventory of `--pods FILE`: the cluster replaced by a list of
//! pods, for running the webhook and `review` without a cluster.
//!
//! The file is read as it streams ([`json`], else [`yaml`]), each pod
//! checked and indexed as it is decoded ([`builder`]); what stays is the
//! index, which answers lookups.

mod builder;
mod json;
mod yaml;

use std::collections::HashMap;
use std::path::Path;

use futures::future::BoxFuture;

use super::lookup::{Lookup, ObservedPod, OwnerLookup, PodQuery, Source};
use builder::Builder;
use json::{Decoded, decode_json, starts_like_json};
use yaml::decode_yaml;

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
    pods: Pods,
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
        let open = || {
            std::fs::File::open(path)
                .map(|file| std::io::BufReader::with_capacity(64 * 1024, file))
                .map_err(|source| InventoryError::Read {
                    path: shown.clone(),
                    source,
                })
        };
        let mut reader = open()?;
        let json = starts_like_json(&mut reader).map_err(|source| InventoryError::Read {
            path: shown.clone(),
            source,
        })?;
        if json {
            let mut builder = Builder::new(&shown);
            match decode_json(serde_json::Deserializer::from_reader(reader), &mut builder) {
                Ok(()) => return Ok(builder.finish()),
                Err(Decoded::Invalid(error)) => return Err(error),
                // Not JSON after all: YAML (of which JSON is a subset) may
                // still read it, as it did the whole file before.
                Err(Decoded::Syntax) => reader = open()?,
            }
        }
        decode_yaml(&mut reader, &shown)
    }

    /// Parse an inventory from its text; `path` names it in errors.
    ///
    /// # Errors
    ///
    /// As [`Inventory::from_file`].
    pub fn from_text(text: &str, path: &str) -> Result<Self, InventoryError> {
        let trimmed = text.trim_start();
        if trimmed.starts_with('{') || trimmed.starts_with('[') {
            let mut builder = Builder::new(path);
            match decode_json(serde_json::Deserializer::from_str(trimmed), &mut builder) {
                Ok(()) => return Ok(builder.finish()),
                Err(Decoded::Invalid(error)) => return Err(error),
                Err(Decoded::Syntax) => {}
            }
        }
        decode_yaml(&mut std::io::Cursor::new(text.as_bytes()), path)
    }

    /// An inventory of these pods (tests, `review --as-pod`).
    pub fn from_pods(pods: impl IntoIterator<Item = InventoryPod>) -> Self {
        Self {
            pods: pods.into_iter().fold(Pods::default(), |mut all, p| {
                all.insert(p.namespace, p.name, p.pod);
                all
            }),
        }
    }

    /// This inventory with `pod` added (or replacing one of its name).
    pub fn with(mut self, pod: InventoryPod) -> Self {
        self.pods.insert(pod.namespace, pod.name, pod.pod);
        self
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<&ObservedPod> {
        self.pods.get(namespace, name)
    }
}

/// Pods by namespace, then name: a lookup borrows both, with no
/// allocation (it is on the path of every review `serve --pods` answers,
/// the benchmarks' source). foldhash, as the cluster's index: the names
/// are the operator's own file, not an attacker's.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Pods {
    by_namespace: HashMap<String, HashMap<String, ObservedPod, FoldHash>, FoldHash>,
    len: usize,
}

type FoldHash = foldhash::fast::RandomState;

impl Pods {
    /// Add `pod` (or replace the one of its name).
    pub(super) fn insert(&mut self, namespace: String, name: String, pod: ObservedPod) {
        let names = self.by_namespace.entry(namespace).or_default();
        if names.insert(name, pod).is_none() {
            self.len += 1;
        }
    }

    fn get(&self, namespace: &str, name: &str) -> Option<&ObservedPod> {
        self.by_namespace.get(namespace)?.get(name)
    }

    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Inventory {
    /// The file's answer: it never waits.
    fn answer(&self, query: &PodQuery<'_>) -> Lookup {
        Lookup {
            source: Source::Inventory,
            outcome: Ok(self.get(query.namespace, query.name).cloned()),
        }
    }
}

impl OwnerLookup for Inventory {
    fn lookup<'a>(&'a self, query: PodQuery<'a>) -> BoxFuture<'a, Lookup> {
        Box::pin(std::future::ready(self.answer(&query)))
    }

    fn lookup_now(&self, query: &PodQuery<'_>) -> Option<Lookup> {
        Some(self.answer(query))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_an_empty_inventory() {
        assert!(Inventory::from_text("", "pods.yaml").unwrap().is_empty());
    }

    #[test]
    fn garbage_is_a_parse_error() {
        let err = Inventory::from_text("{not: [valid", "x.yaml").unwrap_err();
        assert!(matches!(err, InventoryError::Parse { .. }), "{err}");
    }

    /// `from_file` (streamed from the reader) and `from_text` agree, on
    /// JSON and YAML alike.
    pub(super) fn both(text: &str) -> Result<Inventory, InventoryError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pods");
        std::fs::write(&path, text).unwrap();
        let from_file = Inventory::from_file(&path);
        let from_text = Inventory::from_text(text, &path.display().to_string());
        match (&from_file, &from_text) {
            (Ok(a), Ok(b)) => assert_eq!(a.pods, b.pods, "{text}"),
            // A parse error's column may differ by one between serde_json's
            // reader and its slice: the same error, placed.
            (Err(InventoryError::Parse { .. }), Err(InventoryError::Parse { .. })) => {}
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{text}"),
            _ => panic!("from_file {from_file:?} and from_text {from_text:?} disagree on {text}"),
        }
        from_file
    }

    /// The file never waits: what it answers at once is what its lookup
    /// answers, for a pod it lists and one it does not.
    #[tokio::test]
    async fn the_answer_at_once_is_the_lookups() {
        let yaml = "apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: w-1, namespace: a, uid: u-1}\n";
        let inventory = Inventory::from_text(yaml, "pods.yaml").unwrap();
        for name in ["w-1", "w-2"] {
            let query = PodQuery {
                namespace: "a",
                name,
                expected_uid: "u-1",
                fresh: true,
                deadline: tokio::time::Instant::now(),
            };
            let now = inventory
                .lookup_now(&query)
                .expect("the file answers at once");
            let awaited = inventory.lookup(query).await;
            assert_eq!(format!("{now:?}"), format!("{awaited:?}"));
            assert_eq!(now.outcome.unwrap().is_some(), name == "w-1");
        }
    }

    #[test]
    fn the_items_may_come_before_the_kind_as_kubectl_sorts_them() {
        let text = r#"{"apiVersion":"v1","items":[
            {"apiVersion":"v1","kind":"Pod","metadata":{"name":"w-1","namespace":"a","uid":"u-1","labels":{"x":"y"}},"spec":{"containers":[{"name":"c"}]},"status":{"phase":"Running"}}],
            "kind":"List","metadata":{"resourceVersion":""}}"#;
        assert_eq!(both(text).unwrap().len(), 1);
        let yaml = "apiVersion: v1\nitems:\n- metadata: {name: w-1, namespace: a, uid: u-1}\nkind: PodList\n";
        assert_eq!(both(yaml).unwrap().len(), 1);
    }

    #[test]
    fn what_is_no_list_of_pods_is_refused_by_its_kind() {
        let cases = [
            (
                r#"{"kind":"List","items":[{"kind":"Deployment","metadata":{"name":"d","uid":"u"}}]}"#,
                "is a Deployment",
            ),
            (
                r#"{"kind":"PodList","items":{"a":1}}"#,
                "list whose items are not a list",
            ),
            (
                r#"{"metadata":{"name":"w","uid":"u"}}"#,
                "document without kind",
            ),
            (
                r#"[{"kind":"Service","metadata":{"name":"s","uid":"u"}}]"#,
                "is a Service",
            ),
            ("42", "is a 42"),
            (
                "kind: PodList\nitems: 7\n",
                "list whose items are not a list",
            ),
            (
                "kind: Pod\nmetadata: {name: a, uid: u}\n---\nkind: Job\n",
                "document 2 is a Job",
            ),
            ("{kind: Secret}", "is a Secret"),
        ];
        for (text, says) in cases {
            let err = both(text).unwrap_err();
            assert!(
                matches!(err, InventoryError::NotAPod { .. }),
                "{text}: {err}"
            );
            assert!(err.to_string().contains(says), "{text}: {err}");
        }
    }
}
