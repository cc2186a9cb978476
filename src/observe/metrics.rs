//! Prometheus metrics, served on `--metrics-addr` at `/metrics`.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::handles::Handles;
use super::{Decision, Observer, Outcome};
use crate::owner::ClusterMetrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    webhook: &'static str,
    operation: &'static str,
    resource: Arc<str>,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WarnedLabels {
    webhook: &'static str,
    mode: &'static str,
    /// The object's namespace, at most [`MAX_NAMESPACE_LABELS`] values,
    /// the rest `other`. Not `namespace`: Prometheus gives that label the
    /// scraped pod's namespace, and would rename this one.
    object_namespace: Arc<str>,
    /// [`crate::decide::Denial::rule`]: a fixed set.
    rule: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UnlabelledLabels {
    /// The creating pod's namespace (not `namespace`: Prometheus gives
    /// that label the scraped pod's).
    pod_namespace: String,
    /// Its workload: `Deployment`, `StatefulSet`, `Job`..., `Pod` for a
    /// pod no controller owns, `unresolved`; at most
    /// [`MAX_WORKLOAD_LABELS`] workloads, the rest `other`.
    workload_kind: String,
    workload: String,
    resource: Arc<str>,
    /// `true` when the object carries some ownerReference.
    referenced: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    webhook: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScopeLabels {
    /// `all`, or one namespace of `--namespace`: bounded by the flags.
    scope: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AuditLabels {
    /// One of `--audit-resource`: bounded by the flag.
    resource: String,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    /// A fixed set: `unproven`, `clock`; `cap`, `source_share`.
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    /// `pods`, `jobs`, `configmaps`: what `release` deletes.
    resource: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LookupLabels {
    source: &'static str,
    result: &'static str,
}

/// The metrics of SPEC §4, in one registry.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    warned: Family<WarnedLabels, Counter>,
    duration: Family<WebhookLabels, Histogram, fn() -> Histogram>,
    lookups: Family<LookupLabels, Counter>,
    cache_pods: Gauge,
    finished_pods: Gauge,
    lookups_in_flight: Gauge,
    watch_healthy: Family<ScopeLabels, Gauge>,
    watch_failures: Family<ScopeLabels, Counter>,
    certificate_expiry: Gauge,
    tls_reload_failures: Counter,
    audit_objects: Family<AuditLabels, Gauge>,
    audit_runs: Family<ResultLabels, Counter>,
    audit_last_run: Gauge,
    reaped_objects: Family<ResourceLabels, Counter>,
    reap_failures: Family<ResourceLabels, Counter>,
    reaper_leader: Gauge,
    restart_kept: Family<ReasonLabels, Counter>,
    restart_leader: Gauge,
    connections: Gauge,
    connections_refused: Family<ReasonLabels, Counter>,
    connections_shed: Family<ReasonLabels, Counter>,
    events: Family<ResultLabels, Counter>,
    unlabelled: Family<UnlabelledLabels, Counter>,
    /// The workloads of `unlabelled` so far (namespace, kind, name).
    workloads: std::sync::Mutex<std::collections::HashSet<Arc<str>>>,
    /// The resources of `unlabelled` so far: a bound of their own, so that
    /// what `/observe` is sent never takes the request metric's slots.
    unlabelled_resources: std::sync::Mutex<std::collections::HashSet<Arc<str>>>,
    /// The `resource` label values seen so far: at most
    /// [`MAX_RESOURCE_LABELS`], the rest counted as `other`.
    resources: std::sync::Mutex<std::collections::HashSet<Arc<str>>>,
    /// The `namespace` label values of `warned` so far.
    namespaces: std::sync::Mutex<std::collections::HashSet<Arc<str>>>,
    /// Handles on the series every review counts into, found without the
    /// families' lookups.
    request_handles: Handles<RequestLabels, Counter>,
    duration_handles: Handles<&'static str, Histogram>,
    lookup_handles: Handles<LookupLabels, Counter>,
}

/// Bound of the `resource` label's values: anything that reaches the port
/// can send reviews, and a label per made-up resource would grow the
/// registry without end.
pub const MAX_RESOURCE_LABELS: usize = 64;

/// Bound of the `namespace` label of the warned decisions: one value per
/// namespace in `warn` or `audit` that had a finding, the rest `other`.
pub const MAX_NAMESPACE_LABELS: usize = 512;

/// Bound of the workloads of the unlabelled creates: one series set per
/// workload that creates without the owner label, the rest `other`.
pub const MAX_WORKLOAD_LABELS: usize = 1000;

/// `value` as a label value while fewer than `max` values were seen (or
/// it was seen before), else `other`: a label that anyone who reaches the
/// port can choose must not grow the registry without end.
fn bounded_label(
    seen: &std::sync::Mutex<std::collections::HashSet<Arc<str>>>,
    value: &str,
    max: usize,
) -> Arc<str> {
    bounded_label_first(seen, value, max).0
}

/// [`bounded_label`], and whether `value` was kept for the first time by
/// this call. The value is shared with the set that bounds it: a label
/// seen before costs no allocation.
fn bounded_label_first(
    seen: &std::sync::Mutex<std::collections::HashSet<Arc<str>>>,
    value: &str,
    max: usize,
) -> (Arc<str>, bool) {
    static OTHER: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| Arc::from("other"));
    let Ok(mut seen) = seen.lock() else {
        return (OTHER.clone(), false);
    };
    if let Some(kept) = seen.get(value) {
        (kept.clone(), false)
    } else if seen.len() < max {
        let kept: Arc<str> = Arc::from(value);
        seen.insert(kept.clone());
        (kept, true)
    } else {
        (OTHER.clone(), false)
    }
}

/// The `operation` label: the four the API server sends, else `other`.
fn operation_label(operation: &str) -> &'static str {
    match operation {
        "CREATE" => "CREATE",
        "UPDATE" => "UPDATE",
        "DELETE" => "DELETE",
        "CONNECT" => "CONNECT",
        "" => "",
        _ => "other",
    }
}

/// From 0.5 ms to about 8 s: a decision from memory takes well under a
/// millisecond, one with a live GET a few, and the API server gives up at
/// `timeoutSeconds` (at most 30 s).
fn duration_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.0005, 2.0, 15,
    ))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("ownerguard");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "admission_requests",
            "Admission reviews answered, by webhook, operation, resource and result (allowed, patched, denied, warned: allowed by a namespace's warn or audit mode where enforce refuses, error)",
            requests.clone(),
        );
        let warned = Family::<WarnedLabels, Counter>::default();
        registry.register(
            "warned_decisions",
            "Refusals a namespace's mode (warn, audit) softened into an allowed answer, by webhook, mode, object namespace and rule (docs/reference/decisions.md#modes)",
            warned.clone(),
        );
        let duration = Family::<WebhookLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            duration_histogram as fn() -> Histogram,
        );
        registry.register(
            "admission_duration_seconds",
            "Time from a review's arrival to its answer, owner lookup included",
            duration.clone(),
        );
        let lookups = Family::<LookupLabels, Counter>::default();
        registry.register(
            "owner_lookups",
            "Owner pod lookups, by source (cache, api, inventory) and result (found, not_found, uid_mismatch, terminating, finished, timeout, error, throttled)",
            lookups.clone(),
        );
        let cache_pods = Gauge::default();
        registry.register(
            "owner_cache_pods",
            "Pods in the owner index",
            cache_pods.clone(),
        );
        let finished_pods = Gauge::default();
        registry.register(
            "owner_cache_finished_pods",
            "Finished pods (phase Succeeded or Failed) known to the owner cache: no owner while their objects stay",
            finished_pods.clone(),
        );
        let lookups_in_flight = Gauge::default();
        registry.register(
            "owner_lookups_in_flight",
            "Live owner GETs in flight (bounded by --lookup-concurrency)",
            lookups_in_flight.clone(),
        );
        let watch_healthy = Family::<ScopeLabels, Gauge>::default();
        registry.register(
            "owner_watch_healthy",
            "1 while the pod watches of a scope (every pod, finished pods) are trusted (listed, not failed, heard from within --watch-silence-limit); 0 while its cache hits are checked live",
            watch_healthy.clone(),
        );
        let watch_failures = Family::<ScopeLabels, Counter>::default();
        registry.register(
            "owner_watch_failures",
            "Pod watch failures (errors, 410 Gone, silent streams), by scope",
            watch_failures.clone(),
        );
        let certificate_expiry = Gauge::default();
        registry.register(
            "tls_certificate_expiry_timestamp_seconds",
            "Expiry (notAfter, Unix time) of the serving certificate in use",
            certificate_expiry.clone(),
        );
        let tls_reload_failures = Counter::default();
        registry.register(
            "tls_reload_failures",
            "Reloads of changed certificate files that failed (unreadable, half-written or mismatched pair); the previous certificate stays in use",
            tls_reload_failures.clone(),
        );
        let audit_objects = Family::<AuditLabels, Gauge>::default();
        registry.register(
            "audit_objects",
            "Objects the last periodic audit (--audit-interval) found, by resource and state (ok, leaked, owner-finished, missing-reference, dangling, blocking, contradicting, malformed)",
            audit_objects.clone(),
        );
        let audit_runs = Family::<ResultLabels, Counter>::default();
        registry.register(
            "audit_runs",
            "Periodic audits run, by result (ok, error: the pods could not be listed, or a resource not audited)",
            audit_runs.clone(),
        );
        // Both results from the start: a first failure is an increase.
        for result in ["ok", "error"] {
            let _ = audit_runs.get_or_create(&ResultLabels { result });
        }
        let audit_last_run = Gauge::default();
        registry.register(
            "audit_last_run_timestamp_seconds",
            "Unix time the last periodic audit completed; 0 before the first",
            audit_last_run.clone(),
        );
        let reaped_objects = Family::<ResourceLabels, Counter>::default();
        registry.register(
            "reaped_objects",
            "Objects the reaper (--reap-finished) deleted for owners that have finished, and --release-restarted for earlier runs of restarted workers, by resource",
            reaped_objects.clone(),
        );
        let reap_failures = Family::<ResourceLabels, Counter>::default();
        registry.register(
            "reap_failures",
            "Objects of finished owners (the reaper) or of earlier runs of restarted workers (--release-restarted) that could not be deleted, by resource (release: the owner's release failed before any delete)",
            reap_failures.clone(),
        );
        let reaper_leader = Gauge::default();
        registry.register(
            "reaper_leader",
            "1 on the replica that holds the reaper's Lease (the one that reaps), 0 on the others",
            reaper_leader.clone(),
        );
        let restart_kept = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "restart_children_kept",
            "Objects of restarted workers (--release-restarted) kept although they may be of an earlier run: unproven (created within --restart-clock-margin of the restart), clock (counted once per restarted pod held: its node's clock ahead beyond the margin)",
            restart_kept.clone(),
        );
        let restart_leader = Gauge::default();
        registry.register(
            "restart_release_leader",
            "1 on the replica that holds the Lease of --release-restarted (the one that releases), 0 on the others",
            restart_leader.clone(),
        );
        let connections = Gauge::default();
        registry.register(
            "connections",
            "HTTPS connections open (bounded by --max-connections; idle ones closed after --idle-timeout)",
            connections.clone(),
        );
        let connections_refused = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "connections_refused",
            "HTTPS connections closed at accept, every connection in the way serving: reason cap (--max-connections open), source_share (its source at --max-connections-per-source)",
            connections_refused.clone(),
        );
        let connections_shed = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "connections_shed",
            "HTTPS connections closed to make room for a new one (one in its handshake, unused, or idle over a second): reason cap (--max-connections open), source_share (the new one's source at --max-connections-per-source: one of its own went)",
            connections_shed.clone(),
        );
        let events = Family::<ResultLabels, Counter>::default();
        registry.register(
            "events",
            "Kubernetes Events on worker pods (reaper, audit --fix, warned creates), by result: recorded, failed, spam (over the per-pod bucket of 25, one more every 5 min), dropped (the queue full)",
            events.clone(),
        );
        let unlabelled = Family::<UnlabelledLabels, Counter>::default();
        registry.register(
            "unlabelled_creates",
            "Objects pods created without the owner label (the observe webhook, when on), by the creating pod's namespace and workload, resource, and whether the object carries any ownerReference",
            unlabelled.clone(),
        );
        Self {
            registry,
            unlabelled,
            workloads: Default::default(),
            unlabelled_resources: Default::default(),
            connections,
            events,
            connections_refused,
            connections_shed,
            audit_objects,
            audit_runs,
            audit_last_run,
            reaped_objects,
            reap_failures,
            reaper_leader,
            restart_kept,
            restart_leader,
            requests,
            warned,
            namespaces: Default::default(),
            duration,
            lookups,
            cache_pods,
            finished_pods,
            lookups_in_flight,
            watch_healthy,
            watch_failures,
            certificate_expiry,
            tls_reload_failures,
            resources: Default::default(),
            request_handles: Handles::default(),
            duration_handles: Handles::default(),
            lookup_handles: Handles::default(),
        }
    }
}

/// The request and lookup metrics of every finished decision: a body that
/// was no review counts as `error`.
impl Observer for Metrics {
    fn observe(&self, decision: &Decision<'_>) {
        let webhook = decision.endpoint.name;
        let seconds = decision.elapsed.as_secs_f64();
        match &decision.outcome {
            Outcome::Refused(_) => self.observe_request(webhook, "", "", "error", seconds),
            Outcome::Answered(answered) => {
                for (need, lookup) in answered.each_lookup() {
                    self.observe_lookup(lookup.source.as_str(), lookup.result_label(&need.uid));
                }
                let request = answered.request;
                self.observe_request(
                    webhook,
                    request.operation.as_str(),
                    &request.resource.resource,
                    answered.result(),
                    seconds,
                );
                if answered.response.allowed {
                    // The request's: a refusal before any lookup leaves
                    // the lookups' namespace unset.
                    let namespace = request.namespace.as_deref().unwrap_or(answered.namespace);
                    for violation in answered.violations {
                        self.observe_warned(
                            webhook,
                            decision.endpoint.mode.as_str(),
                            namespace,
                            violation.rule(),
                        );
                    }
                }
            }
        }
    }
}

/// What the cluster lookup reports (`owner` names the trait, not this type).
impl ClusterMetrics for Metrics {
    fn set_cache_pods(&self, pods: usize) {
        Metrics::set_cache_pods(self, pods);
    }

    fn set_finished_pods(&self, pods: usize) {
        Metrics::set_finished_pods(self, pods);
    }

    fn set_lookups_in_flight(&self, in_flight: usize) {
        Metrics::set_lookups_in_flight(self, in_flight);
    }

    fn set_watch_healthy(&self, scope: &str, healthy: bool) {
        Metrics::set_watch_healthy(self, scope, healthy);
    }

    fn count_watch_failure(&self, scope: &str) {
        Metrics::count_watch_failure(self, scope);
    }
}

impl Metrics {
    pub fn observe_request(
        &self,
        webhook: &'static str,
        operation: &str,
        resource: &str,
        result: &'static str,
        seconds: f64,
    ) {
        let operation = operation_label(operation);
        let hash = self
            .request_handles
            .hash((webhook, operation, resource, result));
        let is = |labels: &RequestLabels| {
            labels.webhook == webhook
                && labels.operation == operation
                && labels.result == result
                && *labels.resource == *resource
        };
        let make = || {
            let labels = RequestLabels {
                webhook,
                operation,
                resource: self.resource_label(resource),
                result,
            };
            let counter = self.requests.get_or_create(&labels).clone();
            // A resource counted as `other` gets no handle of its own:
            // the handles stay as bounded as the label.
            let bounded = *labels.resource == *resource;
            (counter, bounded.then_some(labels))
        };
        self.request_handles.count(hash, is, make, |counter| {
            counter.inc();
        });

        let hash = self.duration_handles.hash(webhook);
        let make = || {
            let labels = WebhookLabels { webhook };
            (self.duration.get_or_create(&labels).clone(), Some(webhook))
        };
        self.duration_handles.count(
            hash,
            |kept: &&'static str| *kept == webhook,
            make,
            |histogram| histogram.observe(seconds),
        );
    }

    /// One refusal softened by a namespace's mode.
    pub fn observe_warned(
        &self,
        webhook: &'static str,
        mode: &'static str,
        namespace: &str,
        rule: &'static str,
    ) {
        let object_namespace = bounded_label(&self.namespaces, namespace, MAX_NAMESPACE_LABELS);
        self.warned
            .get_or_create(&WarnedLabels {
                webhook,
                mode,
                object_namespace,
                rule,
            })
            .inc();
    }

    /// One object `create`d without the owner label by a pod of
    /// `workload`. True the first time that workload is counted.
    pub fn observe_unlabelled(
        &self,
        create: &crate::observe::unlabelled::UnlabelledCreate,
        workload: &crate::observe::unlabelled::Workload,
    ) -> bool {
        let key = format!(
            "{}/{}/{}",
            create.pod_namespace, workload.kind, workload.name
        );
        // Locked once: whether this call is the workload's first, and its
        // label, from the same look at the set.
        let (label, first) = bounded_label_first(&self.workloads, &key, MAX_WORKLOAD_LABELS);
        let (pod_namespace, workload_kind, workload_name) = if *label == *key {
            (
                create.pod_namespace.clone(),
                workload.kind.clone(),
                workload.name.clone(),
            )
        } else {
            (
                "other".to_string(),
                "other".to_string(),
                "other".to_string(),
            )
        };
        self.unlabelled
            .get_or_create(&UnlabelledLabels {
                pod_namespace,
                workload_kind,
                workload: workload_name,
                resource: bounded_label(
                    &self.unlabelled_resources,
                    &create.resource,
                    MAX_RESOURCE_LABELS,
                ),
                referenced: if create.referenced { "true" } else { "false" },
            })
            .inc();
        first
    }

    fn resource_label(&self, resource: &str) -> Arc<str> {
        bounded_label(&self.resources, resource, MAX_RESOURCE_LABELS)
    }

    /// One event handed to the recorder, by what became of it.
    pub fn count_event(&self, result: &'static str) {
        self.events.get_or_create(&ResultLabels { result }).inc();
    }

    pub fn observe_lookup(&self, source: &'static str, result: &'static str) {
        let hash = self.lookup_handles.hash((source, result));
        let is = |labels: &LookupLabels| labels.source == source && labels.result == result;
        let make = || {
            let labels = LookupLabels { source, result };
            (self.lookups.get_or_create(&labels).clone(), Some(labels))
        };
        self.lookup_handles.count(hash, is, make, |counter| {
            counter.inc();
        });
    }

    pub fn set_cache_pods(&self, pods: usize) {
        self.cache_pods.set(i64::try_from(pods).unwrap_or(i64::MAX));
    }

    pub fn set_finished_pods(&self, pods: usize) {
        self.finished_pods
            .set(i64::try_from(pods).unwrap_or(i64::MAX));
    }

    pub fn set_lookups_in_flight(&self, in_flight: usize) {
        self.lookups_in_flight
            .set(i64::try_from(in_flight).unwrap_or(i64::MAX));
    }

    pub fn set_watch_healthy(&self, scope: &str, healthy: bool) {
        self.watch_healthy
            .get_or_create(&ScopeLabels {
                scope: scope.to_string(),
            })
            .set(i64::from(healthy));
    }

    pub fn count_watch_failure(&self, scope: &str) {
        self.watch_failures
            .get_or_create(&ScopeLabels {
                scope: scope.to_string(),
            })
            .inc();
    }

    pub fn set_certificate_expiry(&self, unix_seconds: i64) {
        self.certificate_expiry.set(unix_seconds);
    }

    /// The counter of failed certificate reloads, for `serve::tls` to
    /// count into.
    pub fn tls_reload_failures(&self) -> Counter {
        self.tls_reload_failures.clone()
    }

    /// The counts of one audit: every state of every resource audited,
    /// zeros included, so that a class that empties reads 0.
    pub fn set_audit_objects<'a>(
        &self,
        resources: impl IntoIterator<Item = &'a str>,
        count: impl Fn(&str, &'static str) -> usize,
        states: &[&'static str],
    ) {
        for resource in resources {
            for &state in states {
                let labels = AuditLabels {
                    resource: resource.to_string(),
                    state,
                };
                let value = count(resource, state);
                self.audit_objects
                    .get_or_create(&labels)
                    .set(i64::try_from(value).unwrap_or(i64::MAX));
            }
        }
    }

    /// A periodic audit ended; `unix_seconds` when it completed.
    pub fn count_audit_run(&self, ok: bool, unix_seconds: i64) {
        let result = if ok { "ok" } else { "error" };
        self.audit_runs
            .get_or_create(&ResultLabels { result })
            .inc();
        if ok {
            self.audit_last_run.set(unix_seconds);
        }
    }

    pub fn count_reaped(&self, resource: &'static str, objects: usize) {
        self.reaped_objects
            .get_or_create(&ResourceLabels { resource })
            .inc_by(u64::try_from(objects).unwrap_or(u64::MAX));
    }

    pub fn count_reap_failure(&self, resource: &'static str) {
        self.reap_failures
            .get_or_create(&ResourceLabels { resource })
            .inc();
    }

    pub fn connection_opened(&self) {
        self.connections.inc();
    }

    pub fn connection_closed(&self) {
        self.connections.dec();
    }

    pub fn count_connection_refused(&self, reason: &'static str) {
        self.connections_refused
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    pub fn count_connection_shed(&self, reason: &'static str) {
        self.connections_shed
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    pub fn set_reaper_leader(&self, leader: bool) {
        self.reaper_leader.set(i64::from(leader));
    }

    pub fn count_restart_kept(&self, reason: &'static str, objects: usize) {
        self.restart_kept
            .get_or_create(&ReasonLabels { reason })
            .inc_by(u64::try_from(objects).unwrap_or(u64::MAX));
    }

    pub fn set_restart_leader(&self, leader: bool) {
        self.restart_leader.set(i64::from(leader));
    }

    /// The registry in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String does not fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_labels_are_bounded() {
        let metrics = Metrics::default();
        for i in 0..200 {
            metrics.observe_request(
                "mutate",
                &format!("OP{i}"),
                &format!("made-up-{i}"),
                "allowed",
                0.001,
            );
        }
        let text = metrics.encode();
        let series = text
            .lines()
            .filter(|l| l.starts_with("ownerguard_admission_requests_total{"))
            .count();
        assert_eq!(series, MAX_RESOURCE_LABELS + 1, "{text}");
        assert!(text.contains(r#"operation="other",resource="other""#));
    }

    /// The handles count into the registry's own series: the first
    /// observation of a label set makes the series, the rest find it by
    /// its handle, and the text a scrape reads has every one of them.
    #[test]
    fn repeated_observations_all_reach_the_scraped_series() {
        let metrics = Metrics::default();
        for _ in 0..5 {
            metrics.observe_request("mutate", "CREATE", "pods", "patched", 0.001);
            metrics.observe_request("mutate", "CREATE", "jobs", "denied", 0.002);
            metrics.observe_request("validate-all", "UPDATE", "pods", "allowed", 0.003);
            metrics.observe_lookup("inventory", "found");
        }
        metrics.observe_lookup("cache", "missing");
        let text = metrics.encode();
        for expected in [
            r#"ownerguard_admission_requests_total{webhook="mutate",operation="CREATE",resource="pods",result="patched"} 5"#,
            r#"ownerguard_admission_requests_total{webhook="mutate",operation="CREATE",resource="jobs",result="denied"} 5"#,
            r#"ownerguard_admission_requests_total{webhook="validate-all",operation="UPDATE",resource="pods",result="allowed"} 5"#,
            r#"ownerguard_admission_duration_seconds_count{webhook="mutate"} 10"#,
            r#"ownerguard_admission_duration_seconds_count{webhook="validate-all"} 5"#,
            r#"ownerguard_owner_lookups_total{source="inventory",result="found"} 5"#,
            r#"ownerguard_owner_lookups_total{source="cache",result="missing"} 1"#,
        ] {
            assert!(text.contains(expected), "missing {expected} in\n{text}");
        }
        // A label set that differs in one part only is its own series.
        assert!(
            !text.contains(r#"resource="jobs",result="patched""#),
            "{text}"
        );
    }

    /// Threads that race to make the same series count into one.
    #[test]
    fn racing_threads_count_into_one_series() {
        let metrics = Metrics::default();
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for _ in 0..1000 {
                        metrics.observe_request("mutate", "CREATE", "pods", "patched", 0.001);
                        metrics.observe_lookup("api", "found");
                    }
                });
            }
        });
        let text = metrics.encode();
        for expected in [
            r#"ownerguard_admission_requests_total{webhook="mutate",operation="CREATE",resource="pods",result="patched"} 8000"#,
            r#"ownerguard_admission_duration_seconds_count{webhook="mutate"} 8000"#,
            r#"ownerguard_owner_lookups_total{source="api",result="found"} 8000"#,
        ] {
            assert!(text.contains(expected), "missing {expected} in\n{text}");
        }
    }

    /// Made-up resources past the label's bound are counted as `other`
    /// and get no handle each: the handles stay as bounded as the series.
    #[test]
    fn handles_are_bounded_as_the_labels_are() {
        let metrics = Metrics::default();
        for round in 0..2 {
            for i in 0..500 {
                metrics.observe_request(
                    "mutate",
                    "CREATE",
                    &format!("made-up-{i}"),
                    "allowed",
                    0.001,
                );
            }
            let text = metrics.encode();
            let other = format!(
                r#"ownerguard_admission_requests_total{{webhook="mutate",operation="CREATE",resource="other",result="allowed"}} {}"#,
                (500 - MAX_RESOURCE_LABELS) * (round + 1)
            );
            assert!(text.contains(&other), "missing {other} in\n{text}");
        }
        assert_eq!(metrics.request_handles.len(), MAX_RESOURCE_LABELS);
    }

    #[test]
    fn metric_names_match_the_spec() {
        let metrics = Metrics::default();
        metrics.observe_request("mutate", "CREATE", "pods", "patched", 0.001);
        metrics.observe_lookup("inventory", "found");
        metrics.set_cache_pods(3);
        metrics.set_finished_pods(2);
        metrics.observe_lookup("cache", "finished");
        metrics.set_certificate_expiry(1_900_000_000);
        metrics.tls_reload_failures().inc();
        let text = metrics.encode();
        for expected in [
            r#"ownerguard_admission_requests_total{webhook="mutate",operation="CREATE",resource="pods",result="patched"} 1"#,
            r#"ownerguard_admission_duration_seconds_count{webhook="mutate"} 1"#,
            r#"ownerguard_owner_lookups_total{source="inventory",result="found"} 1"#,
            "ownerguard_owner_cache_pods 3",
            "ownerguard_owner_cache_finished_pods 2",
            r#"ownerguard_owner_lookups_total{source="cache",result="finished"} 1"#,
            "ownerguard_tls_certificate_expiry_timestamp_seconds 1900000000",
            "ownerguard_tls_reload_failures_total 1",
        ] {
            assert!(text.contains(expected), "missing {expected} in\n{text}");
        }
    }
}
