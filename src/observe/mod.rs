//! What is told about the decisions. The pipeline ([`crate::webhook`])
//! hands every finished decision to its observers ([`Observer`]): the
//! metrics ([`Metrics`]), the decision log ([`DecisionLog`]), and `--record`
//! ([`Recorder`], in the test-case format of [`fixture`]). An observer never
//! changes an answer; it sees the answer already written. [`telemetry`]
//! sets up the logs themselves.

pub mod events;
pub mod fixture;
mod handles;
mod json_lines;
mod log;
mod log_writer;
pub(crate) mod metrics;
mod record;
pub mod telemetry;
mod text_fields;
pub mod traces;
pub mod unlabelled;

pub use log::{DecisionLog, result_label};
pub use metrics::Metrics;
pub use record::Recorder;
pub use unlabelled::UnlabelledCreates;

use std::time::Duration;

use crate::admission::{AdmissionRequest, AdmissionResponse, DecodeError};
use crate::decide::{Endpoint, LookupNeed, Policy};
use crate::owner::Lookup;

/// One finished decision, as its observers see it.
#[derive(Debug)]
pub struct Decision<'a> {
    /// The path that answered, and the policy it decided with (the
    /// cluster-wide endpoint's fails open).
    pub endpoint: Endpoint,
    pub policy: &'a Policy,
    /// The body as it was received.
    pub body: &'a [u8],
    pub outcome: Outcome<'a>,
    /// From the body's arrival to the answer written.
    pub elapsed: Duration,
    /// The trace the review joined, when it was traced (`--tracing`).
    pub trace_id: Option<String>,
}

/// How a decision ended.
#[derive(Debug)]
pub enum Outcome<'a> {
    /// The body was no review to decide: answered 400, nothing decided.
    Refused(&'a DecodeError),
    /// Decided and answered.
    Answered(Answered<'a>),
}

/// A review decided: the request, what was looked up, the answer.
#[derive(Debug)]
pub struct Answered<'a> {
    pub request: &'a AdmissionRequest<'a>,
    /// The namespace every lookup was made in.
    pub namespace: &'a str,
    /// What was asked of the owner lookup, and what it answered, by pod
    /// name (none when nothing needed a lookup).
    pub needs: &'a [LookupNeed],
    pub lookups: &'a crate::decide::Lookups,
    pub response: &'a AdmissionResponse,
    /// The response `AdmissionReview` as sent.
    pub answer: &'a [u8],
    /// The refusals the namespace's mode softened (`warn`, `audit`): the
    /// answer allowed what they would have refused.
    pub violations: &'a [crate::decide::Denial],
}

impl Answered<'_> {
    /// The `result` of the decision: `denied`, `patched` or `allowed`, and
    /// `warned` when a mode let through what enforce refuses (the request
    /// metric's label and the decision log's).
    pub fn result(&self) -> &'static str {
        if self.response.allowed && !self.violations.is_empty() {
            "warned"
        } else {
            result_label(self.response)
        }
    }

    /// Each lookup made, with the uid the object expected of the pod.
    pub fn each_lookup(&self) -> impl Iterator<Item = (&LookupNeed, &Lookup)> {
        self.needs
            .iter()
            .filter_map(|need| Some((need, self.lookups.get(&need.name)?)))
    }
}

/// Told of every finished decision, on the request's task: keep it cheap,
/// and hand slow work (a file to write) to another thread.
pub trait Observer: Send + Sync {
    fn observe(&self, decision: &Decision<'_>);
}
