//! Decoding that bends where the API server's own types would: a field of
//! the wrong shape in a part ownerguard does not judge reads as absent,
//! never as a malformed review.

use std::collections::BTreeMap;

use serde::Deserialize;

/// A map of strings: `Some(None)` when absent (or null), `None` when it is
/// there but of another shape.
pub(super) fn strings(
    value: &Option<serde_json::Value>,
) -> Option<Option<BTreeMap<String, String>>> {
    match value {
        None => Some(None),
        Some(serde_json::Value::Object(map)) => map
            .iter()
            .map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect::<Option<BTreeMap<_, _>>>()
            .map(Some),
        Some(_) => None,
    }
}

/// The visitor methods of every JSON scalar (and `null`), each reading as
/// absent: what [`lenient`] and [`lenient_list`] take for a value of the
/// wrong shape.
macro_rules! scalars_read_as_absent {
    () => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    };
}

/// A field read only when it is a JSON object; anything else (a custom
/// resource may have a `spec.template` of another shape, or a `spec` that
/// is not an object) reads as absent. The value is never buffered: a map is
/// decoded as it streams by, anything else is skipped.
pub(super) fn lenient<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Visitor<T>(std::marker::PhantomData<T>);

    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Visitor<T> {
        type Value = Option<T>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("any JSON value")
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Some)
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok(None)
        }

        scalars_read_as_absent!();
    }

    deserializer.deserialize_any(Visitor(std::marker::PhantomData))
}

/// A field read only when it is a JSON list, each entry as [`lenient`]
/// reads it: an entry of another shape is a hole, so that the indices stay
/// those of the list as sent. Anything else reads as absent. Nothing is
/// buffered.
pub(super) fn lenient_list<'de, D, T>(deserializer: D) -> Result<Option<Vec<Option<T>>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    /// One entry, read by [`lenient`].
    struct Entry<T>(Option<T>);

    impl<'de, T: Deserialize<'de>> Deserialize<'de> for Entry<T> {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            lenient(deserializer).map(Entry)
        }
    }

    struct Visitor<T>(std::marker::PhantomData<T>);

    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Visitor<T> {
        type Value = Option<Vec<Option<T>>>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("any JSON value")
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut entries = Vec::new();
            while let Some(Entry(entry)) = seq.next_element::<Entry<T>>()? {
                entries.push(entry);
            }
            Ok(Some(entries))
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            while map
                .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                .is_some()
            {}
            Ok(None)
        }

        scalars_read_as_absent!();
    }

    deserializer.deserialize_any(Visitor(std::marker::PhantomData))
}

/// `null` read as the type's default: hand-written reviews use it for
/// "absent", and the answer is the same.
pub(super) fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}
