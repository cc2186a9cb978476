//! Kubernetes Events on the worker pods that ownerguard's actions concern
//! (`kubectl describe pod` shows them): the reaper's releases, `audit
//! --fix`'s repairs and, in warn mode, each warned create.
//!
//! Written through the events API (`events.k8s.io/v1`) by kube-rs's
//! [`Recorder`], which correlates a repeated event into one series, with
//! the spam filter client-go's recorder puts in front of its sink: per
//! object, a bucket of 25 events refilled one every 5 minutes
//! (`EventSourceObjectSpamFilter`'s defaults). Events are handed to one
//! writer task through a bounded queue: a decision never waits on the API,
//! and what does not fit is dropped and counted, so that a loop of
//! refusals cannot flood the API server.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;

use super::Metrics;

/// Events of one object before the bucket is empty.
pub const BURST: u32 = 25;
/// One more token after this long.
pub const REFILL: Duration = Duration::from_secs(300);
/// Events waiting for the writer; beyond it, dropped and counted.
pub const QUEUE: usize = 1024;
/// Objects whose buckets are remembered; the least recently used go first.
const BUCKETS: usize = 4096;
/// A note may hold at most 1 kB (the events API refuses more).
const MAX_NOTE: usize = 1000;

/// The pod an event is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl PodRef {
    fn object_reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(self.namespace.clone()),
            name: Some(self.name.clone()),
            uid: Some(self.uid.clone()),
            ..ObjectReference::default()
        }
    }
}

/// One event to record.
#[derive(Debug, Clone)]
pub struct PodEvent {
    pub pod: PodRef,
    pub warning: bool,
    /// `PascalCase`, at most 128 characters.
    pub reason: &'static str,
    /// What ownerguard did, `PascalCase`.
    pub action: &'static str,
    pub note: String,
}

/// client-go's `EventSourceObjectSpamFilter`: a token bucket per object.
#[derive(Debug)]
pub struct SpamFilter {
    burst: u32,
    refill: Duration,
    buckets: HashMap<PodRef, (f64, Instant)>,
}

impl SpamFilter {
    pub fn new(burst: u32, refill: Duration) -> Self {
        Self {
            burst,
            refill,
            buckets: HashMap::new(),
        }
    }

    /// Whether an event about `pod` may go now (a token taken).
    pub fn allow(&mut self, pod: &PodRef, now: Instant) -> bool {
        if self.buckets.len() >= BUCKETS && !self.buckets.contains_key(pod) {
            // Forget the bucket used longest ago: a full bucket is what a
            // forgotten one becomes anyway.
            if let Some(oldest) = self
                .buckets
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(key, _)| key.clone())
            {
                self.buckets.remove(&oldest);
            }
        }
        let burst = f64::from(self.burst);
        let (tokens, at) = self.buckets.entry(pod.clone()).or_insert((burst, now));
        let refilled = now.saturating_duration_since(*at).as_secs_f64() / self.refill.as_secs_f64();
        *tokens = (*tokens + refilled).min(burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Where events go: a bounded queue to one writer.
#[derive(Clone)]
pub struct Events {
    queue: mpsc::Sender<PodEvent>,
    filter: Arc<Mutex<SpamFilter>>,
    metrics: Arc<Metrics>,
    /// Events queued and not yet written: what [`Events::flush`] waits for.
    pending: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").finish_non_exhaustive()
    }
}

impl Events {
    /// Start the writer on the current runtime; events are recorded as
    /// `controller` (the reporting controller) from `instance` (this
    /// replica's pod name, when known).
    pub fn start(
        client: kube::Client,
        controller: &str,
        instance: Option<String>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let (queue, mut events) = mpsc::channel::<PodEvent>(QUEUE);
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: controller.to_string(),
                instance,
            },
        );
        let writer_metrics = metrics.clone();
        let pending = Arc::new(AtomicUsize::new(0));
        let written = pending.clone();
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                let result = recorder
                    .publish(
                        &Event {
                            type_: if event.warning {
                                EventType::Warning
                            } else {
                                EventType::Normal
                            },
                            reason: event.reason.to_string(),
                            note: Some(bounded_note(event.note)),
                            action: event.action.to_string(),
                            secondary: None,
                        },
                        &event.pod.object_reference(),
                    )
                    .await;
                match result {
                    Ok(()) => writer_metrics.count_event("recorded"),
                    Err(error) => {
                        writer_metrics.count_event("failed");
                        tracing::warn!(namespace = %event.pod.namespace, pod = %event.pod.name,
                            reason = event.reason, %error, "event not recorded");
                    }
                }
                written.fetch_sub(1, Ordering::AcqRel);
            }
        });
        Self {
            queue,
            filter: Arc::new(Mutex::new(SpamFilter::new(BURST, REFILL))),
            metrics,
            pending,
        }
    }

    /// Wait until every event queued so far is written (or failed), at most
    /// `within`: a command records its events before it exits.
    pub async fn flush(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while self.pending.load(Ordering::Acquire) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Record `event`, never waiting: filtered (`spam`) or over the queue
    /// (`dropped`), it is counted and gone.
    pub fn record(&self, event: PodEvent) {
        let allowed = self
            .filter
            .lock()
            .map(|mut filter| filter.allow(&event.pod, Instant::now()))
            .unwrap_or(false);
        if !allowed {
            self.metrics.count_event("spam");
            return;
        }
        self.pending.fetch_add(1, Ordering::AcqRel);
        if self.queue.try_send(event).is_err() {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            self.metrics.count_event("dropped");
        }
    }
}

/// Each create a namespace in warn lets through where enforce refuses, as
/// a Warning event on the worker pod it concerns: the pod that sent it
/// (its pod-bound token), else the owner it names. Only `/validate`'s
/// (the final object; `/mutate` saw the same refusal), never a dry run
/// (ownerguard has no side effects there: the webhooks of warn declare
/// `sideEffects: NoneOnDryRun`).
#[derive(Debug)]
pub struct WarnedCreates {
    pub events: Events,
}

impl super::Observer for WarnedCreates {
    fn observe(&self, decision: &super::Decision<'_>) {
        use crate::admission::Operation;
        use crate::decide::{Mode, WebhookKind};
        let super::Outcome::Answered(answered) = &decision.outcome else {
            return;
        };
        let (request, response) = (answered.request, answered.response);
        if decision.endpoint.mode != Mode::Warn
            || decision.endpoint.kind != WebhookKind::Validate
            || request.operation != Operation::Create
            || request.dry_run == Some(true)
            || !response.allowed
            || answered.violations.is_empty()
        {
            return;
        }
        let namespace = request.namespace.as_deref().unwrap_or(answered.namespace);
        let requester = crate::decide::Requester::from_user_info(&request.user_info, namespace)
            .ok()
            .flatten()
            .map(|pod| PodRef {
                namespace: namespace.to_string(),
                name: pod.name.to_string(),
                uid: pod.uid.to_string(),
            });
        // `namespace/name/uid`, as the audit annotation writes it.
        let owner = response.audit_annotations.get("owner").and_then(|owner| {
            let mut parts = owner.splitn(3, '/');
            Some(PodRef {
                namespace: parts.next()?.to_string(),
                name: parts.next()?.to_string(),
                uid: parts.next()?.to_string(),
            })
        });
        let Some(pod) = requester.or(owner) else {
            return;
        };
        let object = crate::decide::object_name(request);
        let refusals: Vec<String> = answered
            .violations
            .iter()
            .map(ToString::to_string)
            .collect();
        self.events.record(PodEvent {
            pod,
            warning: true,
            reason: "OwnershipWouldBeRefused",
            action: "Warn",
            note: format!(
                "namespace '{namespace}' is in ownerguard's warn mode: the create of {object} was let through, but enforce refuses it: {}",
                refusals.join(" | ")
            ),
        });
    }
}

/// `note` cut to what the events API takes, on a character boundary.
fn bounded_note(mut note: String) -> String {
    if note.len() > MAX_NOTE {
        let mut cut = MAX_NOTE - 3;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
        note.push_str("...");
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> PodRef {
        PodRef {
            namespace: "agents".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    #[test]
    fn the_spam_filter_lets_a_burst_through_then_one_per_refill_per_object() {
        let mut filter = SpamFilter::new(BURST, REFILL);
        let start = Instant::now();
        let allowed = (0..100)
            .filter(|_| filter.allow(&pod("w-1"), start))
            .count();
        assert_eq!(allowed, BURST as usize);
        // Another object has its own bucket.
        assert!(filter.allow(&pod("w-2"), start));
        // One token back after REFILL, not before.
        assert!(!filter.allow(&pod("w-1"), start + REFILL / 2));
        assert!(filter.allow(&pod("w-1"), start + REFILL + REFILL / 2));
        assert!(!filter.allow(&pod("w-1"), start + REFILL + REFILL / 2));
    }

    #[test]
    fn a_note_is_cut_to_what_the_api_takes() {
        let note = bounded_note("é".repeat(800));
        assert!(note.len() <= MAX_NOTE && note.ends_with("..."));
        assert_eq!(bounded_note("short".into()), "short");
    }
}
