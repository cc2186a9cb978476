//! Modes (SPEC §3 rule 17): `enforce` refuses, `warn` and `audit` let
//! through what a mode may soften, completed as far as ownerguard can.
//!
//! A mode never weakens the guarantee the collector depends on. What it
//! may soften is a rule whose object, once allowed and completed, the
//! garbage collector still resolves and collects with its owner:
//!
//! - the requester check where it refuses a reference being added (a pod
//!   declaring or adopting another pod's object): the reference is still
//!   the looked-up owner's whole tuple; who asked for it is ownerguard's
//!   policy, not the collector's. Never a release (a pod removing another
//!   worker's reference or label): what is left names no owner;
//! - a finished owner (rule 11), the very pod refused only: the collector
//!   resolves a finished pod, whose object stays, and collects the object
//!   when it is deleted (the reaper's or a Job's cleanup), as
//!   `/validate-all` already takes it. Every other question about that pod
//!   (whether its reference is put back, may be removed) stays as enforce
//!   answers it;
//! - a blocking reference on `/validate`: `blockOwnerDeletion` changes a
//!   foreground deletion's wait, not what is collected, and the API
//!   server's own permission check still judges it.
//!
//! Every other refusal is what enforce refuses: in warn and audit the
//! request is let through as it was sent, unchanged (no owner was proven
//! to complete it with), named with what the collector will do to it
//! (`webhook`): a namespace that only asked to be told is never refused.
//! docs/reference/decisions.md#modes has the table.

use super::denial::Denial;

/// How a namespace's refusals are applied: the path the API server calls
/// (`/mutate`, `/mutate/warn`, `/mutate/audit`, the same for
/// `/validate`), chosen by the chart's webhook entries from the
/// namespace's `<keyPrefix>/mode` label.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Refuse.
    #[default]
    Enforce,
    /// Never refuse: complete what a mode may soften, let the rest
    /// through as sent, with a warning to the client carrying the
    /// refusal's message, an audit annotation and the decision counted as
    /// `warned`.
    Warn,
    /// As `warn`, without the warning to the client.
    Audit,
}

impl Mode {
    pub const ALL: [Self; 3] = [Self::Enforce, Self::Warn, Self::Audit];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Enforce => "enforce",
            Self::Warn => "warn",
            Self::Audit => "audit",
        }
    }

    /// The mode a path suffix names (`warn` of `/mutate/warn`).
    pub fn from_path_suffix(suffix: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|mode| mode.as_str() == suffix)
    }

    /// Whether this mode lets through what it may soften.
    pub fn softens(self) -> bool {
        self != Self::Enforce
    }

    /// Whether the client hears of what was softened.
    pub fn warns(self) -> bool {
        self == Self::Warn
    }
}

/// The rules a decision is re-made without, once a mode softened them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Relaxed {
    /// The requester check is off for a reference the requester declares
    /// for another pod.
    pub requester_check: bool,
    /// The requester check is off for a reference a pod adds to another
    /// worker's object (an adoption): relaxed apart, so that each is named
    /// when it refuses.
    pub adoption: bool,
    /// These finished pods are owners, as the collector resolves them:
    /// those a softened refusal named, no other.
    pub finished_owners: Vec<String>,
    /// `/validate` lets a blocking Pod reference be.
    pub blocking_reference: bool,
}

impl Relaxed {
    /// Relax the rule `denial` broke. `false` when no mode may soften it,
    /// or it is relaxed already (the decision cannot then change).
    pub fn relax(&mut self, denial: &Denial) -> bool {
        let rule = match denial {
            Denial::RequesterNotOwner { .. } => &mut self.requester_check,
            Denial::RequesterAdoptsObject { .. } => &mut self.adoption,
            Denial::OwnerFinished { owner, .. } => {
                if self.finished_owners.contains(owner) {
                    return false;
                }
                self.finished_owners.push(owner.clone());
                return true;
            }
            Denial::BlockingReference { .. } => &mut self.blocking_reference,
            _ => return false,
        };
        !std::mem::replace(rule, true)
    }
}

/// Whether any mode may soften `denial` (the table of the module's doc).
pub fn softenable(denial: &Denial) -> bool {
    Relaxed::default().relax(denial)
}
