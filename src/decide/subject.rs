//! How a message names what it is about: the object (by name, or by
//! `generateName`), its namespace and owner, and the values a client wrote,
//! cut and escaped.

use std::fmt;

/// How an object is named in messages and logs: by name, or by
/// `generateName` on a CREATE that has not been given its name yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectName {
    pub kind: String,
    pub name: String,
    pub generated: bool,
}

impl fmt::Display for ObjectName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.kind.is_empty() {
            "object"
        } else {
            &self.kind
        };
        // The name reaches a mutating webhook before the API server
        // validates it: shown as every value a client wrote.
        if self.generated {
            write!(f, "{} '{}*' (generateName)", Shown(kind), Shown(&self.name))
        } else if self.name.is_empty() {
            write!(f, "{} (no name)", Shown(kind))
        } else {
            write!(f, "{} '{}'", Shown(kind), Shown(&self.name))
        }
    }
}

/// Where a denial happened: the object and its namespace, as every
/// message names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub object: ObjectName,
    pub namespace: String,
    /// The pod the object declares as its owner, once known: a denial
    /// about another pod (a reference's) names it too.
    pub owner: Option<String>,
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} in namespace '{}'",
            self.object,
            Shown(&self.namespace)
        )
    }
}

/// A value the client wrote, shown in a message: cut at 64 characters and
/// with control characters (and those that move or reorder text on a
/// terminal: line and paragraph separators, bidirectional controls)
/// escaped, so a crafted value cannot make a message of megabytes, forge
/// lines in a log, or drive a terminal (`ownerguard review` prints
/// messages).
pub struct Shown<'a>(pub &'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MAX_CHARS: usize = 64;
        for (count, c) in self.0.chars().enumerate() {
            if count == MAX_CHARS {
                return f.write_str("...");
            }
            if c.is_control() || moves_text(c) {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

/// A character that is no control character but moves or reorders the
/// text around it on a terminal.
pub fn moves_text(c: char) -> bool {
    matches!(
        c,
        '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{061c}'
    ) || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// An apiVersion or kind the client wrote, shown so that what differs from
/// `v1`/`Pod` can be seen: as [`Shown`], with every character outside
/// printable ASCII written as its code point (a Cyrillic `о` in `Pоd`
/// shows as `P\u{43e}d`, a zero-width space as `\u{200b}`).
pub struct Spelled<'a>(pub &'a str);

impl fmt::Display for Spelled<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MAX_CHARS: usize = 64;
        for (count, c) in self.0.chars().enumerate() {
            if count == MAX_CHARS {
                return f.write_str("...");
            }
            if c.is_ascii_graphic() || c == ' ' {
                write!(f, "{c}")?;
            } else {
                write!(f, "{}", c.escape_unicode())?;
            }
        }
        Ok(())
    }
}

/// ` (the object's owner is pod '...')` after a pod that is not the
/// object's owner; nothing when it is, or when the object declares none.
pub struct OwnerNote<'a>(pub &'a Option<String>, pub &'a str);

impl fmt::Display for OwnerNote<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(owner) if !owner.is_empty() && owner != self.1 => {
                write!(f, " (the object's owner is pod '{}')", Shown(owner))
            }
            _ => Ok(()),
        }
    }
}

/// `, of the object owned by pod '...'` after a reference's pod, when the
/// object's owner is another pod than the one the reference names.
pub struct OwnedBy<'a>(pub &'a str, pub &'a str);

impl fmt::Display for OwnedBy<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (owner, reference) = (self.0, self.1);
        if owner == reference {
            Ok(())
        } else {
            write!(f, " (the object's owner is pod '{}')", Shown(owner))
        }
    }
}
