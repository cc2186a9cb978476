//! Text of the review, borrowed from its body.

use std::borrow::{Borrow, Cow};
use std::fmt;
use std::ops::Deref;

use serde::{Deserialize, Serialize};

/// A string of the review: borrowed from the request body when it holds
/// no escape (almost always), owned when decoding had to unescape it.
///
/// serde borrows a `Cow<'a, str>` only as a field of its own, never inside
/// an `Option` or a map; this type borrows wherever it is, so the labels,
/// names and references the decision reads cost no allocation.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Text<'a>(pub Cow<'a, str>);

impl<'a> Text<'a> {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The same text, owning its bytes: to keep past the body.
    pub fn into_owned(self) -> Text<'static> {
        Text(Cow::Owned(self.0.into_owned()))
    }
}

impl Deref for Text<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Text<'_> {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Text<'_> {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl PartialEq<str> for Text<'_> {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for Text<'_> {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<String> for Text<'_> {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<Text<'_>> for str {
    fn eq(&self, other: &Text<'_>) -> bool {
        *self == *other.0
    }
}

impl PartialEq<Text<'_>> for &str {
    fn eq(&self, other: &Text<'_>) -> bool {
        **self == *other.0
    }
}

impl PartialEq<Text<'_>> for String {
    fn eq(&self, other: &Text<'_>) -> bool {
        **self == *other.0
    }
}

impl<'a> From<&'a str> for Text<'a> {
    fn from(text: &'a str) -> Self {
        Self(Cow::Borrowed(text))
    }
}

impl From<String> for Text<'_> {
    fn from(text: String) -> Self {
        Self(Cow::Owned(text))
    }
}

impl From<Text<'_>> for String {
    fn from(text: Text<'_>) -> Self {
        text.0.into_owned()
    }
}

impl Serialize for Text<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;

        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Text<'de>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(text)))
            }

            fn visit_str<E>(self, text: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(text.to_string())))
            }

            fn visit_string<E>(self, text: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(text)))
            }
        }

        deserializer.deserialize_str(Visitor)
    }
}
