//! Reading the lookups for one decision: whether each pod is there,
//! alive, with its uid; and the warnings and the owner for the audit
//! annotations, gathered as it goes.

use crate::decide::denial::Denial;
use crate::decide::resolve::Claim;
use crate::decide::subject::Subject;
use crate::owner::{Finished, Source};

use super::CheckedOwner;

/// What a lookup says of a pod that must be `uid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Liveness {
    /// There, with that uid, not being deleted.
    Live,
    NotFound,
    OtherUid,
    Terminating,
    /// Phase `Succeeded` or `Failed` (SPEC §3 rule 11): no owner, like a
    /// pod being deleted, but its object (and so what it owns) stays.
    Finished(Finished),
    /// The lookup failed: `--fail-open` decides.
    Unknown(&'static str),
}

/// Reads the lookups for one decision, and gathers the warnings and the
/// owner for the audit annotations as it goes.
pub(super) struct Judge<'a> {
    pub(super) at: Subject,
    pub(super) lookups: &'a super::Lookups,
    pub(super) fail_open: bool,
    /// A finished pod is an owner (`/validate-all` only).
    pub(super) finished_is_owner: bool,
    /// Finished pods a mode takes as declared owners (rule 17): only where
    /// an owner is required, never for whether a reference is put back or
    /// may go ([`Judge::is_live`] stays strict).
    pub(super) finished_owners: &'a [String],
    pub(super) warnings: Vec<String>,
    pub(super) owner: Option<CheckedOwner>,
}

impl Judge<'_> {
    pub(super) fn liveness(&self, name: &str, uid: &str) -> Liveness {
        match self.lookups.get(name).map(|lookup| &lookup.outcome) {
            None => Liveness::Unknown("no lookup was made"),
            Some(Err(error)) => Liveness::Unknown(error.summary()),
            Some(Ok(None)) => Liveness::NotFound,
            Some(Ok(Some(pod))) if pod.uid != uid => Liveness::OtherUid,
            Some(Ok(Some(pod))) if pod.terminating => Liveness::Terminating,
            Some(Ok(Some(_))) if self.finished_is_owner => Liveness::Live,
            Some(Ok(Some(pod))) => pod.finished.map_or(Liveness::Live, Liveness::Finished),
        }
    }

    /// Remember the first owner found alive, for the audit annotations.
    pub(super) fn checked(&mut self, name: &str, uid: &str) {
        // The annotation names the object's owner, never another pod a
        // reference names (even when the owner itself went unchecked).
        if self.at.owner.as_deref().is_some_and(|owner| owner != name) {
            return;
        }
        let source = self
            .lookups
            .get(name)
            .map_or(Source::Inventory, |l| l.source);
        self.owner
            .get_or_insert_with(|| CheckedOwner::new(&self.at.namespace, name, uid, source));
    }

    /// Take the warnings a plan settled, and require every owner it
    /// claims ([`Judge::require_owner`]).
    pub(super) fn require_owners(
        &mut self,
        claims: &[Claim],
        warnings: Vec<String>,
    ) -> Result<(), Denial> {
        self.warnings.extend(warnings);
        claims
            .iter()
            .try_for_each(|claim| self.require_owner(claim))
    }

    /// A declared owner must be there, with its uid, not being deleted and
    /// not finished.
    pub(super) fn require_owner(&mut self, claim: &Claim) -> Result<(), Denial> {
        let owner = || claim.name.clone();
        match self.liveness(&claim.name, &claim.uid) {
            Liveness::Live => {
                self.checked(&claim.name, &claim.uid);
                Ok(())
            }
            Liveness::NotFound => Err(Denial::OwnerNotFound {
                at: self.at.clone(),
                owner: owner(),
            }),
            Liveness::OtherUid => Err(Denial::OwnerUidMismatch {
                at: self.at.clone(),
                owner: owner(),
                declared: claim.uid.clone(),
            }),
            Liveness::Terminating => Err(Denial::OwnerTerminating {
                at: self.at.clone(),
                owner: owner(),
            }),
            Liveness::Finished(_) if self.finished_owners.contains(&claim.name) => {
                self.checked(&claim.name, &claim.uid);
                Ok(())
            }
            Liveness::Finished(phase) => Err(Denial::OwnerFinished {
                at: self.at.clone(),
                owner: owner(),
                phase,
            }),
            Liveness::Unknown(reason) => self.unchecked(&claim.name, reason),
        }
    }

    /// A pod the garbage collector can resolve: there with its uid, being
    /// deleted or finished included (a controller's reference to a pod it
    /// is condemning: the object is meant to go with it).
    pub(super) fn require_resolvable(&mut self, claim: &Claim) -> Result<(), Denial> {
        match self.liveness(&claim.name, &claim.uid) {
            Liveness::Live | Liveness::Terminating | Liveness::Finished(_) => {
                self.checked(&claim.name, &claim.uid);
                Ok(())
            }
            _ => self.require_owner(claim),
        }
    }

    /// Whether pod `name` is alive with `uid`, for a decision that keeps a
    /// live owner's ownership: a pod being deleted or finished is not (its
    /// reference may go, is never put back, and its labels may follow). A
    /// failed lookup denies (503), or under `--fail-open` counts as gone,
    /// with a warning.
    pub(super) fn is_live(&mut self, name: &str, uid: &str) -> Result<bool, Denial> {
        match self.liveness(name, uid) {
            Liveness::Live => {
                self.checked(name, uid);
                Ok(true)
            }
            Liveness::Unknown(reason) => self.unchecked(name, reason).map(|()| false),
            Liveness::NotFound
            | Liveness::OtherUid
            | Liveness::Terminating
            | Liveness::Finished(_) => Ok(false),
        }
    }

    pub(super) fn unchecked(&mut self, name: &str, reason: &'static str) -> Result<(), Denial> {
        if self.fail_open {
            self.warnings.push(format!(
                "owner pod '{name}' not checked (lookup failed), allowed by --fail-open"
            ));
            Ok(())
        } else {
            Err(Denial::LookupFailed {
                at: self.at.clone(),
                owner: name.to_string(),
                reason,
            })
        }
    }
}
