//! Decoding that bends where the API server's own types would: a field of
//! the wrong shape in a part ownerguard does not judge reads as absent,
//! never as a malformed review.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The visitor method of a JSON object that skips it as it streams by
/// and reads it as `$absent`: for a field that wants another shape.
macro_rules! map_skipped {
    ($absent:expr) => {
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            while map
                .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                .is_some()
            {}
            Ok($absent)
        }
    };
}

/// The visitor methods of every JSON value but a string, each reading as
/// another shape: a map or a list skipped as it streams by.
macro_rules! other_shapes_skipped {
    () => {
        map_skipped!(Shaped(None));
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok(Shaped(None))
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(Shaped(None))
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(Shaped(None))
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(Shaped(None))
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(Shaped(None))
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(Shaped(None))
        }
    };
}

/// A JSON value read only as far as the shape ownerguard wants of it (a
/// map of strings, a string): `Shaped(None)` when it has another shape.
/// Nothing is buffered and nothing recursed into: a value of another shape
/// is skipped as it streams by, by serde_json's iterative skip, so no
/// nesting the API server accepts (10,000 levels in a custom resource) can
/// exhaust a stack or turn a decision into a decoding error (SPEC §4).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shaped<T>(pub Option<T>);

impl<'de: 'a, 'a> Deserialize<'de> for Shaped<super::Text<'a>> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use std::borrow::Cow;

        use super::Text;

        struct Visitor;

        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Shaped<Text<'de>>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }

            fn visit_borrowed_str<E>(self, value: &'de str) -> Result<Self::Value, E> {
                Ok(Shaped(Some(Text(Cow::Borrowed(value)))))
            }

            fn visit_str<E>(self, value: &str) -> Result<Self::Value, E> {
                Ok(Shaped(Some(Text(Cow::Owned(value.to_string())))))
            }

            fn visit_string<E>(self, value: String) -> Result<Self::Value, E> {
                Ok(Shaped(Some(Text(Cow::Owned(value)))))
            }

            other_shapes_skipped!();
        }

        deserializer.deserialize_any(Visitor)
    }
}

/// A string of its own: [`Shaped<Text>`] read, then copied out of the
/// body.
impl<'de> Deserialize<'de> for Shaped<String> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let Shaped(text) = Shaped::<super::Text<'de>>::deserialize(deserializer)?;
        Ok(Shaped(text.map(|text| text.0.into_owned())))
    }
}

impl<T: AsRef<str>> Shaped<T> {
    /// The string, copied, when the value was one.
    pub(super) fn to_text(&self) -> Option<String> {
        self.0.as_ref().map(|text| text.as_ref().to_string())
    }
}

impl<'de> Deserialize<'de> for Shaped<BTreeMap<String, String>> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;

        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Shaped<BTreeMap<String, String>>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                // Read to the end whatever the entries are: one that is
                // not a string makes the whole map another shape.
                let mut strings = Some(BTreeMap::new());
                while let Some(key) = map.next_key::<String>()? {
                    match (map.next_value::<Shaped<String>>()?, strings.as_mut()) {
                        (Shaped(Some(value)), Some(strings)) => {
                            strings.insert(key, value);
                        }
                        _ => strings = None,
                    }
                }
                Ok(Shaped(strings))
            }

            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Shaped(None))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Shaped(None))
            }

            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Shaped(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Shaped(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Shaped(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Shaped(None))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Shaped(None))
            }
        }

        deserializer.deserialize_any(Visitor)
    }
}

/// A map of strings: `Some(None)` when absent (or null), `None` when it is
/// there but of another shape.
pub(super) fn strings(
    value: &Option<Shaped<BTreeMap<String, String>>>,
) -> Option<Option<BTreeMap<String, String>>> {
    match value {
        None => Some(None),
        Some(Shaped(map)) => map.clone().map(Some),
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

/// The most entries ownerguard reads of a pod spec's `volumes` or a
/// StatefulSet's `volumeClaimTemplates`: an object with more is refused
/// 400 (`too-many-entries`). Mutating webhooks see an object before the
/// API server validates it, and a 3 MiB body of `{},` would otherwise
/// decode into a million entries of some hundred bytes each. No pod comes
/// near it.
pub const MAX_LIST_ENTRIES: usize = 10_000;

/// The most volumes a pod template may give the pods made from it, its
/// StatefulSet's claim templates counted (each becomes a volume of every
/// pod): 2,000 under [`MAX_LIST_ENTRIES`], room for the volumes admission
/// adds to a pod a controller makes, so that no workload admitted makes
/// pods that are refused.
pub const MAX_TEMPLATE_VOLUMES: usize = 8_000;

/// The most `ownerReferences` ownerguard reads of an object: more than
/// etcd's default request limit of 1.5 MiB can hold of the smallest valid
/// ones (about 14 bytes each in protobuf: some 110,000), and the most a
/// review's references can take is about 14 MB. A store with a larger
/// limit could hold an object with more: its updates are refused, the
/// collector's included (a removal cannot be told from an addition past
/// the cut).
pub const MAX_REFERENCES: usize = 131_072;

/// [`capped_list`] of [`MAX_REFERENCES`] entries.
pub(super) fn capped_references<'de, D, T>(deserializer: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    capped_list(deserializer, MAX_REFERENCES)
}

/// The entries of `seq`, each read as `E` and kept as `into` makes it, at
/// most `max` and one more: the one over the bound is kept so that the
/// review is refused (`ObjectHead::overlong_references`, `cut_volumes`);
/// the rest is checked as JSON, not kept.
fn kept_entries<'de, A, E, T>(
    mut seq: A,
    max: usize,
    into: impl Fn(E) -> T,
) -> Result<Vec<T>, A::Error>
where
    A: serde::de::SeqAccess<'de>,
    E: Deserialize<'de>,
{
    let mut entries = Vec::new();
    while entries.len() <= max {
        match seq.next_element::<E>()? {
            Some(entry) => entries.push(into(entry)),
            None => return Ok(entries),
        }
    }
    while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
    Ok(entries)
}

/// `Option<Vec<T>>` from a JSON list or `null`, keeping at most one entry
/// over `max` (so that the review is refused) and checking the rest
/// without keeping it.
fn capped_list<'de, D, T>(deserializer: D, max: usize) -> Result<Option<Vec<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Entries<T>(usize, std::marker::PhantomData<T>);

    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Entries<T> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a sequence")
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Vec<T>, A::Error> {
            kept_entries(seq, self.0, |entry: T| entry)
        }
    }

    struct Capped<T>(usize, std::marker::PhantomData<T>);

    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Capped<T> {
        type Value = Option<Vec<T>>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a sequence or null")
        }

        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D2: serde::Deserializer<'de>>(
            self,
            deserializer: D2,
        ) -> Result<Self::Value, D2::Error> {
            deserializer
                .deserialize_seq(Entries(self.0, std::marker::PhantomData))
                .map(Some)
        }
    }

    deserializer.deserialize_option(Capped(max, std::marker::PhantomData))
}

/// A field read only when it is a JSON list, each entry as [`lenient`]
/// reads it: an entry of another shape is a hole, so that the indices stay
/// those of the list as sent. Anything else reads as absent. Nothing is
/// buffered; at most one entry over [`MAX_LIST_ENTRIES`] is kept.
pub(super) fn lenient_list<'de, D, T>(deserializer: D) -> Result<Option<Vec<Option<T>>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Visitor<T>(std::marker::PhantomData<T>);

    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Visitor<T> {
        type Value = Option<Vec<Option<T>>>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("any JSON value")
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            kept_entries(seq, MAX_LIST_ENTRIES, |Entry(entry): Entry<T>| entry).map(Some)
        }

        map_skipped!(None);
        scalars_read_as_absent!();
    }

    deserializer.deserialize_any(Visitor(std::marker::PhantomData))
}

/// One entry of a list, read by [`lenient`]: `None` when it is no object.
struct Entry<T>(Option<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Entry<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        lenient(deserializer).map(Entry)
    }
}

/// A field read only when it is a JSON list, for the first entry that
/// `wanted` makes something of, given its index in the list as sent and
/// the entry as [`lenient`] reads it. The entries after it, those of
/// another shape, and a value that is no list are passed over as they
/// stream by: nothing is kept but what is found, however long the list.
pub(super) fn first_lenient_entry<'de, D, T, U>(
    deserializer: D,
    wanted: impl Fn(usize, T) -> Option<U>,
) -> Result<Option<U>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Visitor<T, F>(F, std::marker::PhantomData<T>);

    impl<'de, T: Deserialize<'de>, U, F: Fn(usize, T) -> Option<U>> serde::de::Visitor<'de>
        for Visitor<T, F>
    {
        type Value = Option<U>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("any JSON value")
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut index = 0;
            while let Some(Entry(entry)) = seq.next_element::<Entry<T>>()? {
                if let Some(found) = entry.and_then(|entry| (self.0)(index, entry)) {
                    while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                    return Ok(Some(found));
                }
                index += 1;
            }
            Ok(None)
        }

        map_skipped!(None);
        scalars_read_as_absent!();
    }

    deserializer.deserialize_any(Visitor(wanted, std::marker::PhantomData))
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
