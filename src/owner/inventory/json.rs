//! JSON: one document, decoded straight into the [`Builder`] with seeds,
//! a list's items streamed one by one (`kubectl get pods -A -o json`).

use super::InventoryError;
use super::builder::{Builder, Item, ItemsSeen, Kind, stop};

/// Whether the first character that is not white space opens a JSON
/// object or array (a BOM aside): the file is then read as one JSON
/// document, else as a YAML stream.
pub(super) fn starts_like_json(reader: &mut impl std::io::BufRead) -> std::io::Result<bool> {
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

/// Why a JSON decode stopped.
pub(super) enum Decoded {
    /// The text is no JSON: YAML may read it.
    Syntax,
    /// JSON, but no inventory: the error to report.
    Invalid(InventoryError),
}

/// Decode one JSON document straight into `builder`: a list's items are
/// streamed one by one into the index (a `kubectl get pods -A -o json` of
/// a big cluster is never held as values).
pub(super) fn decode_json<'de, R: serde_json::de::Read<'de>>(
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

#[cfg(test)]
mod tests {
    use super::super::tests::both;
    use super::super::{Inventory, InventoryError};
    use crate::owner::ObservedPod;

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
