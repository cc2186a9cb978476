//! Which webhook decides, and the settings every decision reads.

use crate::decide::mode::{Mode, Relaxed};
use crate::decide::requester::{Delegate, RequesterCheck};
use crate::decide::resolve::OwnerLabels;
use crate::decide::resolve::RequesterPolicy;

/// Which endpoint is deciding.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum WebhookKind {
    /// `/mutate`: injects the reference.
    Mutate,
    /// `/validate`: the same checks, never a patch; guarantees the final
    /// object, after every mutating webhook ran.
    Validate,
    /// `/validate-all`: the chart's cluster-wide switch
    /// (`validation.allPodOwnerReferences`), for the objects that carry no
    /// owner label. It refuses only a Pod reference the garbage collector
    /// cannot resolve to a live pod: one not exactly `v1`/`Pod`, malformed
    /// or with a name no pod can have, or to a pod that is missing, has
    /// another uid or is being deleted. A finished pod is an owner here
    /// (the collector resolves it). Never refuses for a blocking reference
    /// or for who made the request. A failed lookup is allowed with a
    /// warning, as the switch's `failurePolicy: Ignore` allows an outage.
    #[serde(rename = "validate-all")]
    ValidateAll,
}

impl WebhookKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mutate => "mutate",
            Self::Validate => "validate",
            Self::ValidateAll => "validate-all",
        }
    }

    /// Whether this webhook may patch (the others only allow or deny).
    pub fn mutates(self) -> bool {
        self == Self::Mutate
    }

    /// Whether this webhook judges what only ownerguard's policy asks of
    /// an object, beyond what the collector can resolve: a blocking
    /// reference and the requester check. `/validate-all` leaves the first
    /// to the API server's permission check (`update` on `pods/finalizers`
    /// under `OwnerReferencesPermissionEnforcement`): the ephemeral-volume
    /// and resource-claim controllers write `blockOwnerDeletion: true` and
    /// hold that permission. It leaves the second to RBAC: the objects it
    /// sees never opted in by the owner label, and which pod a client names
    /// as owner of an object it may create is not a claim made to
    /// ownerguard; the collector only needs the reference to resolve.
    pub fn judges_policy(self) -> bool {
        self != Self::ValidateAll
    }
}

/// Default of `--max-pod-references`: real objects carry a handful.
pub const DEFAULT_MAX_POD_REFERENCES: usize = 32;

/// The settings the decision depends on.
#[derive(Debug, Clone)]
pub struct Policy {
    pub labels: OwnerLabels,
    pub requester_check: RequesterCheck,
    /// Service accounts that may declare another pod of their namespace.
    pub delegates: Vec<Delegate>,
    /// Allow, with a warning, when an owner cannot be checked.
    pub fail_open: bool,
    /// Most Pod references one object may carry (and pods one review may
    /// look up, beyond the label's owner): above it, 400 before any lookup.
    pub max_pod_references: usize,
    /// The rules a mode softened for this decision (none but under
    /// `warn` or `audit`, and only once the rule refused).
    pub relaxed: Relaxed,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            labels: OwnerLabels::default(),
            requester_check: RequesterCheck::default(),
            delegates: Vec::new(),
            fail_open: false,
            max_pod_references: DEFAULT_MAX_POD_REFERENCES,
            relaxed: Relaxed::default(),
        }
    }
}

impl Policy {
    /// The requester check as `webhook` applies it: `/validate-all` does
    /// not ([`WebhookKind::judges_policy`]), nor a mode that set it aside
    /// for a reference the requester declares for another pod.
    pub(super) fn requester_policy(&self, webhook: WebhookKind) -> RequesterPolicy<'_> {
        self.requester_policy_unless(webhook, self.relaxed.requester_check)
    }

    /// The requester check of an adoption (a pod adding a reference to
    /// another worker's object), relaxed apart from the requester check.
    pub(super) fn adoption_policy(&self, webhook: WebhookKind) -> RequesterPolicy<'_> {
        self.requester_policy_unless(webhook, self.relaxed.adoption)
    }

    /// The requester check of a release (a pod removing another worker's
    /// reference or owner label): a mode that set the check aside for a
    /// reference being added relaxed that rule alone, so a release is
    /// still judged, and named if refused.
    pub(super) fn release_policy(&self, webhook: WebhookKind) -> RequesterPolicy<'_> {
        self.requester_policy_unless(webhook, false)
    }

    /// The requester check as `webhook` applies it, off where `relaxed`.
    fn requester_policy_unless(&self, webhook: WebhookKind, relaxed: bool) -> RequesterPolicy<'_> {
        RequesterPolicy {
            mode: if webhook.judges_policy() && !relaxed {
                self.requester_check
            } else {
                RequesterCheck::Off
            },
            delegates: &self.delegates,
            labels: &self.labels,
        }
    }
}

/// A path the server answers on: the decision it makes, the name it
/// reports under (metrics, logs), and whether a failed lookup is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    pub kind: WebhookKind,
    pub name: &'static str,
    pub fail_open: bool,
    /// The namespace's mode, as the path the API server called says.
    pub mode: Mode,
}

impl Endpoint {
    /// `/mutate`.
    pub const MUTATE: Self = Self {
        kind: WebhookKind::Mutate,
        name: "mutate",
        fail_open: false,
        mode: Mode::Enforce,
    };
    /// `/validate`.
    pub const VALIDATE: Self = Self {
        kind: WebhookKind::Validate,
        name: "validate",
        fail_open: false,
        mode: Mode::Enforce,
    };
    /// `/validate-all`: the chart's cluster-wide switch
    /// (`validation.allPodOwnerReferences`), whose webhook has
    /// `failurePolicy: Ignore`. It refuses only what the collector cannot
    /// resolve to a live pod ([`WebhookKind::ValidateAll`]), and a lookup
    /// that fails is allowed with a warning, as an unreachable ownerguard
    /// would be: an API hiccup must not stop every pod creation that names
    /// a pod as owner (Spark executors, for one).
    pub const VALIDATE_ALL: Self = Self {
        kind: WebhookKind::ValidateAll,
        name: "validate-all",
        fail_open: true,
        mode: Mode::Enforce,
    };

    /// This endpoint in `mode` (`/mutate/warn` is [`Self::MUTATE`] in
    /// [`Mode::Warn`]).
    pub fn in_mode(self, mode: Mode) -> Self {
        Self { mode, ..self }
    }

    pub fn of(kind: WebhookKind) -> Self {
        match kind {
            WebhookKind::Mutate => Self::MUTATE,
            WebhookKind::Validate => Self::VALIDATE,
            WebhookKind::ValidateAll => Self::VALIDATE_ALL,
        }
    }
}
