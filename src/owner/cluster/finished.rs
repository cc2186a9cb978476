//! The pods that have finished, by phase.
//!
//! A metadata-only watch carries no `status`, so it cannot tell a pod that
//! has finished (SPEC §3 rule 11). Two more metadata-only watches per
//! scope, with the field selectors `status.phase=Succeeded` and
//! `status.phase=Failed`, keep the finished pods apart: a small set, and
//! the index of every pod stays as it was. The API server filters a
//! field-selected watch on each change, old object against new: a pod
//! that starts matching arrives as ADDED, one that stops matching
//! (deleted, or a phase that changed) as DELETED. One watch per phase
//! rather than one `!=` selector: field selectors have no set operator,
//! and `status.phase!=Pending,status.phase!=Running,status.phase!=Unknown`
//! would also select a pod with no phase, which has not finished; each
//! watch also knows its phase, which the denial names and `--record`
//! writes down. A reaper subscribes to the same set
//! ([`FinishedPods::subscribe`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::sync::broadcast;

use super::index::{PodIndex, Scope};
use crate::owner::Finished;

/// A pod that has finished, as a subscriber sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub phase: Finished,
}

impl FinishedPod {
    pub(super) fn of(metadata: &ObjectMeta, phase: Finished) -> Option<Self> {
        Some(Self {
            namespace: metadata.namespace.clone()?,
            name: metadata.name.clone()?,
            uid: metadata.uid.clone()?,
            phase,
        })
    }
}

/// A change of the set of finished pods, for a subscriber (the reaper of
/// issue 16).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishedChange {
    /// The pod entered a finished phase (ADDED on the phase's watch).
    Finished(FinishedPod),
    /// The pod left the set: deleted, or no more in that phase.
    Gone(FinishedPod),
    /// The pods of `phase` in `scope` were listed anew (after a 410 Gone or
    /// a failure): changes may have been missed, read
    /// [`FinishedPods::snapshot`].
    Relisted { scope: Scope, phase: Finished },
}

/// How many changes a slow subscriber may fall behind before it is told
/// it lagged (and should read the snapshot again).
pub(super) const FINISHED_CHANGES_BUFFER: usize = 1024;

/// The pods that have finished (phase `Succeeded` or `Failed`), by phase:
/// fed by the field-selected watches, read by every lookup that hits the
/// index (SPEC §3 rule 11), and open to subscribers.
///
/// Like the index, it may be stale: a pod that finished a moment ago may
/// not be here yet. The live GET reads the phase itself.
pub struct FinishedPods {
    pub(super) succeeded: PodIndex,
    pub(super) failed: PodIndex,
    pub(super) changes: broadcast::Sender<FinishedChange>,
}

impl Default for FinishedPods {
    fn default() -> Self {
        Self {
            succeeded: PodIndex::default(),
            failed: PodIndex::default(),
            changes: broadcast::channel(FINISHED_CHANGES_BUFFER).0,
        }
    }
}

impl FinishedPods {
    pub(super) fn of(&self, phase: Finished) -> &PodIndex {
        match phase {
            Finished::Succeeded => &self.succeeded,
            Finished::Failed => &self.failed,
        }
    }

    /// The phase pod `name` of `namespace` has finished in, when it is
    /// known finished with `uid` (a newer pod of the same name is another
    /// pod).
    pub fn phase_of(&self, namespace: &str, name: &str, uid: &str) -> Option<Finished> {
        Finished::ALL
            .into_iter()
            .find(|&phase| self.of(phase).contains(namespace, name, uid))
    }

    /// How many finished pods are known.
    pub fn len(&self) -> usize {
        self.succeeded.len() + self.failed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every finished pod known now.
    pub fn snapshot(&self) -> Vec<FinishedPod> {
        Finished::ALL
            .into_iter()
            .flat_map(|phase| {
                self.of(phase)
                    .entries()
                    .into_iter()
                    .map(move |(namespace, name, uid)| FinishedPod {
                        namespace,
                        name,
                        uid,
                        phase,
                    })
            })
            .collect()
    }

    /// The changes from now on. Take the [`FinishedPods::snapshot`] after
    /// subscribing, and again on [`FinishedChange::Relisted`] or when the
    /// receiver reports that it lagged.
    pub fn subscribe(&self) -> broadcast::Receiver<FinishedChange> {
        self.changes.subscribe()
    }

    /// Tell the subscribers, if there are any (nothing is built for none).
    pub(super) fn notify(&self, change: impl FnOnce() -> Option<FinishedChange>) {
        if self.changes.receiver_count() > 0
            && let Some(change) = change()
        {
            // No receiver left in between: nobody to tell.
            let _ = self.changes.send(change);
        }
    }
}
