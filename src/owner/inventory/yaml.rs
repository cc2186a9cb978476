//! YAML: a stream of documents (`kubectl get pods -A -o yaml`, or Pods
//! separated by `---`), each judged by its kind once whole, a list's items
//! indexed as read through a thread-local sink.

use serde::Deserialize;

use super::builder::{Builder, Item, ItemsSeen, Kind, PodMeta, PodStatus, stop};
use super::{Inventory, InventoryError};

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

impl Builder {
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
}

/// A YAML stream, document by document from the reader: each document's
/// pods are typed and indexed as read (never a tree of values, nor a list
/// of them).
pub(super) fn decode_yaml(
    reader: &mut impl std::io::Read,
    path: &str,
) -> Result<Inventory, InventoryError> {
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
    use super::super::{Inventory, InventoryError};

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
    fn other_kinds_are_refused() {
        let err =
            Inventory::from_text("kind: Deployment\nmetadata: {name: d}\n", "x.yaml").unwrap_err();
        assert!(matches!(err, InventoryError::NotAPod { .. }), "{err}");
    }
}
