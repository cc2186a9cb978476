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

/// The phases the API server writes (`core/v1` `PodPhase`).
const POD_PHASES: [&str; 5] = ["Pending", "Running", "Succeeded", "Failed", "Unknown"];

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

/// Whether the first character that is not white space opens a JSON
/// object or array (a BOM aside): the file is then read as one JSON
/// document, else as a YAML stream.
fn starts_like_json(reader: &mut impl std::io::BufRead) -> std::io::Result<bool> {
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            return Ok(false);
        }
        let skip = buffer
            .iter()
            .take_while(|b| b.is_ascii_whitespace())
            .count();
        if skip < buffer.len() {
            let first = buffer[skip];
            reader.consume(skip);
            return Ok(first == b'{' || first == b'[');
        }
        let all = buffer.len();
        reader.consume(all);
    }
}

/// The pods decoded so far, each checked as it comes: the index grows
/// pod by pod, and no document is ever held whole.
struct Builder {
    path: String,
    /// The document being read (1-based), for `document N` of an error.
    document: usize,
    pods: HashMap<(String, String), ObservedPod>,
    /// Pods seen, for the `pod #N` of an error.
    count: usize,
    /// The first error, which stops the decoding.
    error: Option<InventoryError>,
}

impl Builder {
    fn new(path: &str) -> Self {
        Self {
            path: path.to_string(),
            document: 1,
            pods: HashMap::new(),
            count: 0,
            error: None,
        }
    }

    fn not_a_pod(&self, document: usize, kind: impl Into<String>) -> InventoryError {
        InventoryError::NotAPod {
            path: self.path.clone(),
            document,
            kind: kind.into(),
        }
    }

    /// One pod: named, with a uid and a pod phase, or the error.
    fn add(&mut self, pod: Item) -> Result<(), InventoryError> {
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
            (namespace, name),
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
    fn add_item(&mut self, document: usize, item: Item) -> Result<(), InventoryError> {
        match item.kind.as_ref().map(Kind::as_str) {
            None | Some("Pod") => self.add(item),
            Some(other) => Err(self.not_a_pod(document, other)),
        }
    }

    /// A whole document of a YAML stream, its items already indexed as
    /// they were read: judged by its kind once it is whole.
    fn add_document(&mut self, doc: Document) -> Result<(), InventoryError> {
        let document = self.document;
        match doc {
            Document::Null | Document::Items => Ok(()),
            Document::Scalar(shown) => Err(self.not_a_pod(document, shown)),
            Document::Object(object) => {
                match (object.kind.as_ref().map(Kind::as_str), object.items) {
                    (Some("PodList" | "List"), ItemsSeen::Other) => {
                        Err(self.not_a_pod(document, "list whose items are not a list"))
                    }
                    (Some("PodList" | "List"), _) => Ok(()),
                    (Some("Pod"), ItemsSeen::Absent) => self.add(Item {
                        kind: None,
                        metadata: object.metadata,
                        status: object.status,
                    }),
                    (Some("Pod"), _) => Err(self.not_a_pod(document, "Pod with items")),
                    (Some(other), _) => Err(self.not_a_pod(document, other)),
                    (None, _) => Err(self.not_a_pod(document, "document without kind")),
                }
            }
        }
    }

    fn finish(self) -> Inventory {
        Inventory { pods: self.pods }
    }
}

/// What a pod (or a list's item) is read for; every other field is
/// skipped undecoded.
#[derive(Debug, Default, Deserialize)]
struct Item {
    #[serde(default)]
    kind: Option<Kind>,
    #[serde(default)]
    metadata: Option<PodMeta>,
    #[serde(default)]
    status: Option<PodStatus>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodMeta {
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
struct PodStatus {
    #[serde(default)]
    phase: Option<String>,
}

/// A `kind`: a string, or something else (no kind a list can name).
#[derive(Debug)]
struct Kind(Option<String>);

impl Kind {
    fn as_str(&self) -> &str {
        self.0.as_deref().unwrap_or("kind that is not a string")
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        Ok(Self(value.as_str().map(str::to_string)))
    }
}

thread_local! {
    /// The index a YAML stream is read into. serde-saphyr streams
    /// documents from a reader but takes no seed, so a list's items reach
    /// the index through here, one by one, instead of a list of them.
    static YAML_SINK: std::cell::RefCell<Option<Builder>> = const { std::cell::RefCell::new(None) };
}

/// Index `item` of the YAML document being read; the error, kept in the
/// builder, stops the parser.
fn sink_item<E: serde::de::Error>(item: Item) -> Result<(), E> {
    YAML_SINK.with(|sink| {
        let mut sink = sink.borrow_mut();
        let Some(builder) = sink.as_mut() else {
            return Err(E::custom("a YAML item read outside an inventory"));
        };
        let document = builder.document;
        builder
            .add_item(document, item)
            .map_err(|error| stop(builder, error))
    })
}

/// A list's `items` in a YAML document, streamed into [`YAML_SINK`].
struct YamlItems(ItemsSeen);

impl Default for YamlItems {
    fn default() -> Self {
        Self(ItemsSeen::Absent)
    }
}

impl<'de> Deserialize<'de> for YamlItems {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = YamlItems;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of pods")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<YamlItems, A::Error> {
                while let Some(item) = seq.next_element::<Item>()? {
                    sink_item(item)?;
                }
                Ok(YamlItems(ItemsSeen::List))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<YamlItems, E> {
                Ok(YamlItems(ItemsSeen::Absent))
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<YamlItems, E> {
                Ok(YamlItems(ItemsSeen::Absent))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<YamlItems, A::Error> {
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(YamlItems(ItemsSeen::Other))
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<YamlItems, E> {
                Ok(YamlItems(ItemsSeen::Other))
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<YamlItems, E> {
                Ok(YamlItems(ItemsSeen::Other))
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<YamlItems, E> {
                Ok(YamlItems(ItemsSeen::Other))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<YamlItems, E> {
                Ok(YamlItems(ItemsSeen::Other))
            }
            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<YamlItems, E> {
                Ok(YamlItems(ItemsSeen::Other))
            }
        }
        deserializer.deserialize_any(Visit)
    }
}

/// A document of a YAML stream.
enum Document {
    Null,
    /// A bare list of pods (indexed as read).
    Items,
    Object(Box<ObjectDocument>),
    /// Anything else, as shown in the error.
    Scalar(String),
}

#[derive(Default)]
struct ObjectDocument {
    kind: Option<Kind>,
    items: ItemsSeen,
    metadata: Option<PodMeta>,
    status: Option<PodStatus>,
}

impl<'de> Deserialize<'de> for Document {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Document;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a Pod, a PodList or a List")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Document, A::Error> {
                let mut object = ObjectDocument::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "kind" => object.kind = map.next_value()?,
                        "metadata" => object.metadata = map.next_value()?,
                        "status" => object.status = map.next_value()?,
                        "items" => object.items = map.next_value::<YamlItems>()?.0,
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(Document::Object(Box::new(object)))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Document, A::Error> {
                while let Some(item) = seq.next_element::<Item>()? {
                    sink_item(item)?;
                }
                Ok(Document::Items)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Document, E> {
                Ok(Document::Null)
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Document, E> {
                Ok(Document::Null)
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Document, E> {
                Ok(Document::Scalar(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Document, E> {
                Ok(Document::Scalar(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Document, E> {
                Ok(Document::Scalar(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Document, E> {
                Ok(Document::Scalar(v.to_string()))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Document, E> {
                Ok(Document::Scalar(format!("{v:?}")))
            }
        }
        deserializer.deserialize_any(Visit)
    }
}

/// Why a JSON decode stopped.
enum Decoded {
    /// The text is no JSON: YAML may read it.
    Syntax,
    /// JSON, but no inventory: the error to report.
    Invalid(InventoryError),
}

/// Decode one JSON document straight into `builder`: a list's items are
/// streamed one by one into the index (a `kubectl get pods -A -o json` of
/// a big cluster is never held as values).
fn decode_json<'de, R: serde_json::de::Read<'de>>(
    mut deserializer: serde_json::Deserializer<R>,
    builder: &mut Builder,
) -> Result<(), Decoded> {
    let outcome = serde::de::DeserializeSeed::deserialize(TopSeed { builder }, &mut deserializer)
        .and_then(|()| deserializer.end());
    match outcome {
        Ok(()) => Ok(()),
        Err(error) => Err(match builder.error.take() {
            Some(invalid) => Decoded::Invalid(invalid),
            None if error.is_syntax() || error.is_eof() => Decoded::Syntax,
            None => Decoded::Invalid(InventoryError::Parse {
                path: builder.path.clone(),
                message: error.to_string(),
            }),
        }),
    }
}

/// The JSON document: an object (Pod, PodList, List), a bare list of
/// pods, null; anything else is no inventory.
struct TopSeed<'a> {
    builder: &'a mut Builder,
}

/// Stop the decoder with `error` kept in the builder.
fn stop<E: serde::de::Error>(builder: &mut Builder, error: InventoryError) -> E {
    let message = error.to_string();
    builder.error.get_or_insert(error);
    E::custom(message)
}

impl<'de> serde::de::DeserializeSeed<'de> for TopSeed<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for TopSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a Pod, a PodList or a List")
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(item) = seq.next_element::<Item>()? {
            if let Err(error) = self.builder.add_item(1, item) {
                return Err(stop(self.builder, error));
            }
        }
        Ok(())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let (mut kind, mut metadata, mut status) = (None::<Kind>, None, None);
        // Items may come before the kind (kubectl sorts the keys): each is
        // streamed into the index as it comes, and the kind judged after.
        let mut items = ItemsSeen::Absent;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "kind" => kind = map.next_value()?,
                "metadata" => metadata = map.next_value()?,
                "status" => status = map.next_value()?,
                "items" => {
                    items = map.next_value_seed(ItemsSeed {
                        builder: self.builder,
                    })?;
                }
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        let builder = self.builder;
        let outcome = match (kind.as_ref().map(Kind::as_str), items) {
            (Some("PodList" | "List"), ItemsSeen::Other) => {
                Err(builder.not_a_pod(1, "list whose items are not a list"))
            }
            (Some("PodList" | "List"), _) => Ok(()),
            (Some("Pod"), ItemsSeen::Absent) => builder.add(Item {
                kind: None,
                metadata,
                status,
            }),
            (Some("Pod"), _) => Err(builder.not_a_pod(1, "Pod with items")),
            (Some(other), _) => Err(builder.not_a_pod(1, other)),
            (None, _) => Err(builder.not_a_pod(1, "document without kind")),
        };
        outcome.map_err(|error| stop(builder, error))
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<(), E> {
        Err(stop(self.builder, self.builder.not_a_pod(1, v.to_string())))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<(), E> {
        Err(stop(self.builder, self.builder.not_a_pod(1, v.to_string())))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<(), E> {
        Err(stop(self.builder, self.builder.not_a_pod(1, v.to_string())))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        Err(stop(self.builder, self.builder.not_a_pod(1, v.to_string())))
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        Err(stop(
            self.builder,
            self.builder.not_a_pod(1, format!("{v:?}")),
        ))
    }
}

/// What an object's `items` was.
#[derive(Default)]
enum ItemsSeen {
    #[default]
    Absent,
    /// Streamed into the index.
    List,
    Other,
}

/// A JSON list's `items`, each pod into the index as it is read.
struct ItemsSeed<'a> {
    builder: &'a mut Builder,
}

impl<'de> serde::de::DeserializeSeed<'de> for ItemsSeed<'_> {
    type Value = ItemsSeen;
    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<ItemsSeen, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ItemsSeed<'_> {
    type Value = ItemsSeen;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of pods")
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<ItemsSeen, A::Error> {
        while let Some(item) = seq.next_element::<Item>()? {
            if let Err(error) = self.builder.add_item(1, item) {
                return Err(stop(self.builder, error));
            }
        }
        Ok(ItemsSeen::List)
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<ItemsSeen, E> {
        Ok(ItemsSeen::Absent)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<ItemsSeen, A::Error> {
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(ItemsSeen::Other)
    }
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<ItemsSeen, E> {
        Ok(ItemsSeen::Other)
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<ItemsSeen, E> {
        Ok(ItemsSeen::Other)
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<ItemsSeen, E> {
        Ok(ItemsSeen::Other)
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<ItemsSeen, E> {
        Ok(ItemsSeen::Other)
    }
    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<ItemsSeen, E> {
        Ok(ItemsSeen::Other)
    }
}

/// A YAML stream, document by document from the reader: each document's
/// pods are typed and indexed as read (never a tree of values, nor a list
/// of them).
fn decode_yaml(reader: &mut impl std::io::Read, path: &str) -> Result<Inventory, InventoryError> {
    /// Takes the builder out of the sink however the decoding ends.
    struct Sink;
    impl Sink {
        fn take(&self) -> Option<Builder> {
            YAML_SINK.with(|sink| sink.borrow_mut().take())
        }
    }
    impl Drop for Sink {
        fn drop(&mut self) {
            self.take();
        }
    }
    YAML_SINK.with(|sink| *sink.borrow_mut() = Some(Builder::new(path)));
    let guard = Sink;
    // The parser's budgets bound a document's size (250,000 nodes, a
    // million events, 64 MiB of scalars): a big cluster's `kubectl get
    // pods -A -o yaml` is one document far beyond them. The file is the
    // operator's, read typed and pod by pod, so size is not what the
    // budget guards here; the alias limits (the billion-laughs guard) stay.
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_reader_input_bytes: None,
            max_events: usize::MAX,
            max_nodes: usize::MAX,
            max_total_scalar_bytes: usize::MAX,
            max_documents: usize::MAX,
        },
    };
    let with = |f: &mut dyn FnMut(&mut Builder) -> Result<(), InventoryError>| {
        YAML_SINK.with(|sink| match sink.borrow_mut().as_mut() {
            Some(builder) => f(builder),
            None => Ok(()),
        })
    };
    for document in serde_saphyr::read_with_options::<_, Document>(reader, options) {
        match document {
            Ok(document) => {
                let mut document = Some(document);
                with(&mut |builder| {
                    let outcome = document.take().map_or(Ok(()), |d| builder.add_document(d));
                    builder.document += 1;
                    outcome
                })?;
            }
            Err(error) => {
                let kept = guard.take().and_then(|mut builder| builder.error.take());
                return Err(kept.unwrap_or_else(|| InventoryError::Parse {
                    path: path.to_string(),
                    message: error.to_string(),
                }));
            }
        }
    }
    Ok(guard.take().map(Builder::finish).unwrap_or_default())
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

    /// `from_file` (streamed from the reader) and `from_text` agree, on
    /// JSON and YAML alike.
    fn both(text: &str) -> Result<Inventory, InventoryError> {
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

    #[test]
    fn a_field_of_the_wrong_type_or_truncated_json_is_a_parse_error() {
        for text in [
            r#"{"kind":"List","items":[{"metadata":{"name":7,"uid":"u"}}]}"#,
            r#"{"kind":"List","items":[{"metadata":{"name":"a","uid":"u"}"#,
        ] {
            let err = both(text).unwrap_err();
            assert!(matches!(err, InventoryError::Parse { .. }), "{text}: {err}");
        }
    }
}
