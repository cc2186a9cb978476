//! Is the declared owner there? One interface, several sources: the static
//! inventory of `--pods`, or the cluster (watch cache, then a live GET).

use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Serialize;
use tokio::time::Instant;

/// Where an answer about an owner came from: the audit annotation
/// `owner-source` and the `source` label of the lookup metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The in-memory index fed by the pod watch.
    Cache,
    /// A live GET on the API server.
    Api,
    /// The static inventory of `--pods`.
    Inventory,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cache => "cache",
            Self::Api => "api",
            Self::Inventory => "inventory",
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A phase after which no container of the pod runs again (SPEC §3 rule
/// 11). The pod object stays until something deletes it (trap 4), and the
/// garbage collector keeps what it owns until then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Finished {
    Succeeded,
    Failed,
}

impl Finished {
    pub const ALL: [Self; 2] = [Self::Succeeded, Self::Failed];

    /// `status.phase` as the API server writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
        }
    }

    /// The finished phase `phase` names; `None` for `Pending`, `Running`,
    /// `Unknown` (or anything else): a pod that may still run.
    pub fn from_phase(phase: &str) -> Option<Self> {
        match phase {
            "Succeeded" => Some(Self::Succeeded),
            "Failed" => Some(Self::Failed),
            _ => None,
        }
    }
}

impl fmt::Display for Finished {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What is known of a pod that exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedPod {
    pub uid: String,
    /// `deletionTimestamp` is set: the pod is going away.
    pub terminating: bool,
    /// `status.phase` is `Succeeded` or `Failed`: the pod will not run
    /// again, though its object stays.
    pub finished: Option<Finished>,
}

impl ObservedPod {
    /// A pod that may run: not being deleted, not finished.
    pub fn running(uid: impl Into<String>) -> Self {
        Self {
            uid: uid.into(),
            terminating: false,
            finished: None,
        }
    }
}

/// The answer to one lookup.
#[derive(Debug)]
pub struct Lookup {
    pub source: Source,
    /// `Ok(None)`: no pod of that name in that namespace.
    pub outcome: Result<Option<ObservedPod>, LookupError>,
}

impl Lookup {
    /// The `result` label of `ownerguard_owner_lookups_total`.
    pub fn result_label(&self, expected_uid: &str) -> &'static str {
        match &self.outcome {
            Ok(None) => "not_found",
            Ok(Some(pod)) if pod.uid != expected_uid => "uid_mismatch",
            Ok(Some(pod)) if pod.terminating => "terminating",
            Ok(Some(pod)) if pod.finished.is_some() => "finished",
            Ok(Some(_)) => "found",
            Err(LookupError::TimedOut { .. }) => "timeout",
            Err(LookupError::Api { .. }) => "error",
            Err(LookupError::Throttled { .. }) => "throttled",
        }
    }
}

/// How long the owner lookups of one review may take: `--lookup-timeout`,
/// and never more than three quarters of what the API server gives the
/// whole call (its `?timeout=`), so the answer still travels back in time.
/// One rule for `serve` (the deadline of each review), `review` (the same
/// deadline offline), and `doctor` (a `timeoutSeconds` that leaves no room
/// for the lookup fails).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LookupBudget {
    timeout: Duration,
}

impl LookupBudget {
    /// `--lookup-timeout`'s default.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

    /// The part of the API server's time a lookup may take: the rest
    /// carries the decision and the answer back.
    const SHARE_OF_THE_CALL: f64 = 0.75;

    pub fn new(timeout: Duration) -> Self {
        Self { timeout }
    }

    /// `--lookup-timeout` read from `text`, as `serve` reads it and
    /// `doctor` judges it: a duration of at least a millisecond. Zero, or
    /// less, would make every lookup not answered from memory fail at
    /// once.
    ///
    /// # Errors
    ///
    /// Why the text is no such duration, with a value that fits the
    /// chart's default webhook timeout.
    pub fn parse_timeout(text: &str) -> Result<Duration, String> {
        let timeout = crate::k8s::duration::parse_flag(text)?;
        if timeout < Duration::from_millis(1) {
            // The default as an example (`Duration`'s Debug writes `2s`,
            // which this parser reads back).
            return Err(format!(
                "'{text}' is under a millisecond: every lookup not answered from memory would fail; give a duration such as {:?} (the default)",
                Self::DEFAULT_TIMEOUT
            ));
        }
        Ok(timeout)
    }

    /// `--lookup-timeout`.
    pub fn timeout(self) -> Duration {
        self.timeout
    }

    /// The budget of a call the API server gives `api_timeout` (none
    /// given: `--lookup-timeout` alone).
    pub fn of_call(self, api_timeout: Option<Duration>) -> Duration {
        match api_timeout {
            Some(timeout) => self.timeout.min(timeout.mul_f64(Self::SHARE_OF_THE_CALL)),
            None => self.timeout,
        }
    }

    /// Whether a webhook registered with `timeout_seconds` leaves a whole
    /// `--lookup-timeout` to the lookup.
    pub fn fits(self, timeout_seconds: Duration) -> bool {
        self.timeout <= timeout_seconds.mul_f64(Self::SHARE_OF_THE_CALL)
    }
}

impl Default for LookupBudget {
    fn default() -> Self {
        Self::new(Self::DEFAULT_TIMEOUT)
    }
}

/// One pod to look up, and how.
#[derive(Debug, Clone, Copy)]
pub struct PodQuery<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    /// The uid the object declares: a source that may be stale (a cache)
    /// answers alone only when it agrees.
    pub expected_uid: &'a str,
    /// Ask the API server, never a cache alone: the answer decides to put
    /// a reference back.
    pub fresh: bool,
    /// Answer before this.
    pub deadline: Instant,
}

/// A source of owner pods.
pub trait OwnerLookup: Send + Sync {
    /// Look pod `query.name` up in `query.namespace`, answering before
    /// `query.deadline`.
    fn lookup<'a>(&'a self, query: PodQuery<'a>) -> BoxFuture<'a, Lookup>;

    /// The answer [`Self::lookup`] would give, when the source has it in
    /// memory and would not wait for it (an inventory; a cache's young
    /// entry of a healthy watch); `None` when it would wait, or may.
    ///
    /// Asked first, for every lookup: it spares the future's box and the
    /// timer that bounds it, which most reviews never wait on.
    fn lookup_now(&self, _query: &PodQuery<'_>) -> Option<Lookup> {
        None
    }

    /// Whether the source can answer yet (`/readyz`): a cache that has not
    /// listed the pods once would answer "not found" for every owner.
    fn is_ready(&self) -> bool {
        true
    }
}

/// Why an owner could not be checked: the API did not answer in time,
/// answered with an error, or ownerguard's own bound on lookups was
/// reached. Never a verdict on the owner itself.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// No answer inside the request's time budget.
    #[error("owner lookup timed out after {}ms", .after.as_millis())]
    TimedOut { after: Duration },
    /// The API server answered with an error, or could not be reached.
    #[error("owner lookup failed: {source}")]
    Api {
        #[source]
        source: kube::Error,
    },
    /// ownerguard's cap on live lookups (concurrency or rate) left no room
    /// inside the request's time budget.
    #[error("owner lookup throttled: {limit}")]
    Throttled { limit: &'static str },
}

impl LookupError {
    /// What a denial says about the failure: a sentence, never the API
    /// error itself (that goes to the log).
    pub fn summary(&self) -> &'static str {
        match self {
            Self::TimedOut { .. } => "the API server did not answer in time",
            Self::Api {
                source: kube::Error::Api(status),
            } if status.code == 401 || status.code == 403 => {
                "the API server refused ownerguard's lookup"
            }
            Self::Api {
                source: kube::Error::Api(_),
            } => "the API server answered with an error",
            Self::Api { .. } => "the API server could not be reached",
            Self::Throttled { .. } => "ownerguard's limit on live lookups was reached",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lookup_timeout_under_a_millisecond_is_refused_with_a_value_that_fits() {
        for text in ["0s", "0", "-0s", "0.5ms", "999us", "1ns"] {
            let refusal = LookupBudget::parse_timeout(text).unwrap_err();
            assert!(refusal.contains("under a millisecond"), "{text}: {refusal}");
            // The example fits the chart's default webhook timeout (5 s).
            let example = refusal.rsplit("such as ").next().unwrap();
            let example = example.split_whitespace().next().unwrap();
            let example = LookupBudget::parse_timeout(example).unwrap();
            assert!(LookupBudget::new(example).fits(Duration::from_secs(5)));
        }
        assert_eq!(
            LookupBudget::parse_timeout("1ms"),
            Ok(Duration::from_millis(1))
        );
        assert_eq!(
            LookupBudget::parse_timeout("1m30s"),
            Ok(Duration::from_secs(90))
        );
        assert!(
            LookupBudget::parse_timeout("2 s")
                .unwrap_err()
                .contains("is not a duration")
        );
    }
}
