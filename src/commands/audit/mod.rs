//! `ownerguard audit`: what already leaks on a running cluster.
//!
//! The objects of the audited resources are listed by their metadata only
//! (paged), their owners with one paged list of pods (and one of each
//! finished phase, since metadata carries no phase): never a GET per
//! object. Each object that carries the owner label or a Pod reference is
//! classified by the webhook's own decision ([`classify`]). `--fix` adds
//! the missing non-blocking reference and unblocks blocking ones with the
//! patch `/mutate` would make, each under a `resourceVersion`
//! precondition; it never deletes. `serve --audit-interval` runs the same
//! audit and exports its counts.

pub mod classify;
mod report;
pub mod reports;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, PartialObjectMeta, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

pub use classify::{Finding, Kind, State};
pub use report::{print_json, print_table};

use std::process::ExitCode;

use tracing::info;

use crate::commands::cli::{AuditArgs, AuditOutput};

use crate::decide::Policy;
use crate::owner::{Finished, Inventory, InventoryPod, ObservedPod};

/// Objects per page of a list.
const PAGE: u32 = 500;

/// Where an object's version is, in a JSON Patch.
const RESOURCE_VERSION: &str = "/metadata/resourceVersion";

/// What to audit.
#[derive(Debug, Clone)]
pub struct AuditOptions {
    /// Namespaces to audit; none: every namespace.
    pub namespaces: Vec<String>,
    /// `plural` or `plural.group` (`jobs.batch`), as kubectl names them.
    pub resources: Vec<String>,
    /// Add missing references and unblock blocking ones.
    pub fix: bool,
    /// The policy the webhook decides with (its key prefix).
    pub policy: Policy,
    /// Write the findings as policy reports, one per namespace
    /// ([`reports`]).
    pub reports: bool,
    /// Where `--fix`'s repairs are recorded, as Events on the owner pod.
    pub events: Option<crate::observe::events::Events>,
    /// What the observe webhook counted (`serve`, when it runs): listed in
    /// the policy reports of the creating pods' namespaces.
    pub unlabelled: Option<crate::observe::UnlabelledCreates>,
}

/// One object audited that is worth a line: any state but `ok`.
#[derive(Debug, Clone)]
pub struct Line {
    pub resource: String,
    /// The object's `apiVersion` and `kind`, and its uid: what a policy
    /// report names it by.
    pub api_version: String,
    pub kind: String,
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub finding: Finding,
    /// What `--fix` did.
    pub fixed: Option<Fixed>,
}

/// What `--fix` did to one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fixed {
    Patched,
    /// The object changed since it was listed: not patched, and not tried
    /// again (audit again to see it anew).
    Conflict,
    Failed(String),
}

/// What an audit found.
#[derive(Debug, Default)]
pub struct Report {
    /// Every object not `ok`, in the order listed.
    pub lines: Vec<Line>,
    /// How many objects of each resource are in each state, `ok` included.
    pub counts: BTreeMap<(String, State), usize>,
    /// How many objects of each namespace are in each state, `ok`
    /// included: the namespaces that have objects of ownerguard's.
    pub namespaces: BTreeMap<String, BTreeMap<State, usize>>,
    /// Resources that could not be audited, and why (a 403, an unknown
    /// resource): the others were.
    pub errors: Vec<(String, String)>,
}

impl Report {
    /// Whether something is left to act on: a state but `ok` and
    /// `dangling`, not fixed.
    pub fn has_findings(&self) -> bool {
        self.lines
            .iter()
            .any(|line| line.finding.state.is_finding() && line.fixed != Some(Fixed::Patched))
    }

    /// Objects per state, every resource together.
    pub fn totals(&self) -> BTreeMap<State, usize> {
        let mut totals: BTreeMap<State, usize> = State::ALL.iter().map(|s| (*s, 0)).collect();
        for ((_, state), count) in &self.counts {
            *totals.entry(*state).or_default() += count;
        }
        totals
    }
}

/// Why an audit could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The pods, which every class is judged against, could not be listed.
    #[error("cannot list pods{}: {source}", scope(.namespace))]
    Pods {
        namespace: Option<String>,
        #[source]
        source: kube::Error,
    },
}

fn scope(namespace: &Option<String>) -> String {
    namespace
        .as_ref()
        .map(|ns| format!(" in namespace '{ns}'"))
        .unwrap_or_default()
}

/// Audit what `options` names; `progress(resource, scanned)` is told after
/// every page.
///
/// # Errors
///
/// [`AuditError::Pods`] when the pods cannot be listed; a resource that
/// cannot be is reported in [`Report::errors`] and the rest audited.
pub async fn audit(
    client: kube::Client,
    options: &AuditOptions,
    mut progress: impl FnMut(&str, usize),
) -> Result<Report, AuditError> {
    let scopes: Vec<Option<&str>> = if options.namespaces.is_empty() {
        vec![None]
    } else {
        options
            .namespaces
            .iter()
            .map(|ns| Some(ns.as_str()))
            .collect()
    };
    let pods = list_pods(&client, &scopes).await?;
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let mut report = Report::default();
    for resource in &options.resources {
        let Some((api_resource, kind)) = resolve(&client, resource).await else {
            report.errors.push((
                resource.clone(),
                "no such resource (name it as kubectl does: plural, or plural.group)".into(),
            ));
            continue;
        };
        let kind = Kind {
            group: &kind.group,
            version: &kind.version,
            kind: &kind.kind,
            plural: &api_resource.plural,
        };
        let mut scanned = 0;
        for namespace in &scopes {
            let api: Api<DynamicObject> = match namespace {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &api_resource),
                None => Api::all_with(client.clone(), &api_resource),
            };
            let mut params = ListParams::default().limit(PAGE);
            loop {
                let page = match api.list_metadata(&params).await {
                    Ok(page) => page,
                    Err(error) => {
                        report.errors.push((resource.clone(), list_error(&error)));
                        break;
                    }
                };
                for object in &page.items {
                    let target = Target {
                        client: &client,
                        api_resource: &api_resource,
                        resource,
                        kind,
                    };
                    audit_object(&target, object, &pods, options, now, &mut report).await;
                }
                scanned += page.items.len();
                progress(resource, scanned);
                match page.metadata.continue_.filter(|token| !token.is_empty()) {
                    Some(token) => params = params.continue_token(&token),
                    None => break,
                }
            }
        }
    }
    Ok(report)
}

/// The resource an object is audited as.
struct Target<'a> {
    client: &'a kube::Client,
    api_resource: &'a ApiResource,
    /// As the user named it (`jobs.batch`).
    resource: &'a str,
    kind: Kind<'a>,
}

async fn audit_object(
    target: &Target<'_>,
    object: &PartialObjectMeta<DynamicObject>,
    pods: &Inventory,
    options: &AuditOptions,
    now: i64,
    report: &mut Report,
) {
    let meta = &object.metadata;
    let resource = target.resource;
    let Some(finding) = classify::classify(meta, target.kind, pods, &options.policy, now) else {
        return;
    };
    *report
        .counts
        .entry((resource.to_string(), finding.state))
        .or_default() += 1;
    let (namespace, name) = (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    );
    *report
        .namespaces
        .entry(namespace.clone())
        .or_default()
        .entry(finding.state)
        .or_default() += 1;
    if finding.state == State::Ok {
        return;
    }
    let fixed = match (&finding.patch, options.fix && finding.state.is_fixable()) {
        (Some(patch), true) => {
            let api = Api::namespaced_with(target.client.clone(), &namespace, target.api_resource);
            Some(fix(&api, &name, meta, patch).await)
        }
        _ => None,
    };
    if let (Some(Fixed::Patched), Some(events)) = (&fixed, &options.events)
        && let Some(owner) = pods.get(&namespace, &finding.owner)
    {
        let what = match finding.state {
            State::Blocking => {
                "set blockOwnerDeletion to false on its ownerReference to this pod in"
            }
            _ => "added this pod's non-blocking ownerReference to",
        };
        events.record(crate::observe::events::PodEvent {
            pod: crate::observe::events::PodRef {
                namespace: namespace.clone(),
                name: finding.owner.clone(),
                uid: owner.uid.clone(),
            },
            warning: false,
            reason: "OwnerReferenceFixed",
            action: "Fix",
            note: format!(
                "ownerguard audit --fix {what} {} '{name}', so that it is deleted with this pod",
                target.kind.kind
            ),
        });
    }
    let kind = target.kind;
    report.lines.push(Line {
        resource: resource.to_string(),
        api_version: if kind.group.is_empty() {
            kind.version.to_string()
        } else {
            format!("{}/{}", kind.group, kind.version)
        },
        kind: kind.kind.to_string(),
        uid: meta.uid.clone().unwrap_or_default(),
        namespace,
        name,
        finding,
        fixed,
    });
}

/// Apply `patch` (what `/mutate` would make) to the object, only if it is
/// still at the `resourceVersion` it was listed at. The patch tests that
/// version first (a JSON Patch whose `test` fails is refused whole, 422),
/// and the patched object carries it, so that a change between the API
/// server's read and its write is refused too (409). Either is a
/// conflict, reported and not tried again.
async fn fix(
    api: &Api<DynamicObject>,
    name: &str,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    patch: &Value,
) -> Fixed {
    let Some(version) = meta.resource_version.as_deref() else {
        return Fixed::Failed("no resourceVersion to patch under".into());
    };
    let mut ops = vec![
        json!({"op": "test", "path": RESOURCE_VERSION, "value": version}),
        json!({"op": "replace", "path": RESOURCE_VERSION, "value": version}),
    ];
    ops.extend(patch.as_array().into_iter().flatten().cloned());
    let patch: json_patch::Patch = match serde_json::from_value(Value::Array(ops)) {
        Ok(patch) => patch,
        Err(error) => return Fixed::Failed(error.to_string()),
    };
    match api
        .patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
    {
        Ok(_) => Fixed::Patched,
        Err(kube::Error::Api(status))
            if status.code == 409
                || (status.code == 422 && status.message.contains(RESOURCE_VERSION)) =>
        {
            Fixed::Conflict
        }
        Err(error) => Fixed::Failed(list_error(&error)),
    }
}

/// The pods of `scopes`, with their phase: the metadata of every pod, and
/// the pods of each finished phase (metadata carries no phase).
async fn list_pods(
    client: &kube::Client,
    scopes: &[Option<&str>],
) -> Result<Inventory, AuditError> {
    let mut found = Vec::new();
    for namespace in scopes {
        let api: Api<Pod> = match namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        let failed = |source| AuditError::Pods {
            namespace: namespace.map(str::to_string),
            source,
        };
        let mut finished: BTreeMap<(String, String, String), Finished> = BTreeMap::new();
        for phase in Finished::ALL {
            let params = ListParams::default().fields(&format!("status.phase={phase}"));
            for pod in list_all(&api, params).await.map_err(failed)? {
                if let Some(key) = key_of(&pod) {
                    finished.insert(key, phase);
                }
            }
        }
        for pod in list_all(&api, ListParams::default())
            .await
            .map_err(failed)?
        {
            let Some(key) = key_of(&pod) else { continue };
            let pod_state = ObservedPod {
                uid: key.2.clone(),
                terminating: pod.metadata.deletion_timestamp.is_some(),
                finished: finished.get(&key).copied(),
            };
            found.push(InventoryPod {
                namespace: key.0,
                name: key.1,
                pod: pod_state,
            });
        }
    }
    Ok(Inventory::from_pods(found))
}

fn key_of(pod: &PartialObjectMeta<Pod>) -> Option<(String, String, String)> {
    let meta = &pod.metadata;
    Some((
        meta.namespace.clone()?,
        meta.name.clone()?,
        meta.uid.clone()?,
    ))
}

async fn list_all(
    api: &Api<Pod>,
    params: ListParams,
) -> Result<Vec<PartialObjectMeta<Pod>>, kube::Error> {
    let mut params = params.limit(PAGE);
    let mut all = Vec::new();
    loop {
        let page = api.list_metadata(&params).await?;
        all.extend(page.items);
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(all),
        }
    }
}

/// The resource `name` (`plural` or `plural.group`): the built-in ones a
/// worker creates by a table, any other through the API's discovery.
async fn resolve(client: &kube::Client, name: &str) -> Option<(ApiResource, GroupVersionKind)> {
    let (plural, group) = name.split_once('.').unwrap_or((name, ""));
    let known = KNOWN
        .iter()
        .find(|(p, g, _, _)| *p == plural && *g == group)
        .map(|(_, group, version, kind)| GroupVersionKind::gvk(group, version, kind));
    if let Some(gvk) = known {
        let mut resource = ApiResource::from_gvk(&gvk);
        resource.plural = plural.to_string();
        return Some((resource, gvk));
    }
    let discovered = kube::discovery::group(client, group).await.ok()?;
    let (resource, _) = discovered
        .recommended_resources()
        .into_iter()
        .find(|(resource, _)| resource.plural == plural)?;
    let gvk = GroupVersionKind::gvk(&resource.group, &resource.version, &resource.kind);
    Some((resource, gvk))
}

/// (plural, group, version, kind) of the built-in resources a worker makes.
const KNOWN: [(&str, &str, &str, &str); 11] = [
    ("pods", "", "v1", "Pod"),
    ("configmaps", "", "v1", "ConfigMap"),
    ("secrets", "", "v1", "Secret"),
    ("services", "", "v1", "Service"),
    ("persistentvolumeclaims", "", "v1", "PersistentVolumeClaim"),
    ("jobs", "batch", "v1", "Job"),
    ("cronjobs", "batch", "v1", "CronJob"),
    ("deployments", "apps", "v1", "Deployment"),
    ("replicasets", "apps", "v1", "ReplicaSet"),
    ("statefulsets", "apps", "v1", "StatefulSet"),
    ("daemonsets", "apps", "v1", "DaemonSet"),
];

/// An API error in a sentence (a 403 says so).
fn list_error(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if status.code == 403 => {
            format!("forbidden (403): {}", status.message)
        }
        kube::Error::Api(status) => {
            format!("{} {}: {}", status.code, status.reason, status.message)
        }
        other => other.to_string(),
    }
}

/// `ownerguard audit`: exit 0 when nothing but `ok` and `dangling` (or
/// all fixed), 1 otherwise, 2 on error (a resource not audited included).
pub async fn run(args: AuditArgs) -> ExitCode {
    let options = AuditOptions {
        namespaces: args.namespaces,
        resources: args.resources,
        fix: args.fix,
        policy: Policy {
            labels: crate::decide::OwnerLabels::new(&args.key_prefix),
            ..Policy::default()
        },
        reports: args.reports,
        events: None,
        unlabelled: None,
    };
    let client = match crate::k8s::client::connect(&args.cluster.target()).await {
        Ok(client) => client,
        Err(error) => {
            eprintln!("ownerguard audit: {error}");
            return ExitCode::from(2);
        }
    };
    // --fix's repairs are recorded as Events on their owner pods.
    let events = options.fix.then(|| {
        crate::observe::events::Events::start(
            client.clone(),
            "ownerguard-audit",
            None,
            std::sync::Arc::new(crate::observe::Metrics::default()),
        )
    });
    let options = AuditOptions {
        events: events.clone(),
        ..options
    };
    let report = audit(client.clone(), &options, |resource, scanned| {
        eprintln!("audit: {resource}: {scanned} object(s) scanned");
    })
    .await;
    let report = match report {
        Ok(report) => report,
        Err(error) => {
            eprintln!("ownerguard audit: {error}");
            return ExitCode::from(2);
        }
    };
    info!(
        findings = report.lines.len(),
        errors = report.errors.len(),
        "audit done"
    );
    match args.output {
        AuditOutput::Table => print!("{}", print_table(&report)),
        AuditOutput::Json => print!("{}", print_json(&report)),
    }
    if let Some(events) = &events {
        events.flush(std::time::Duration::from_secs(10)).await;
    }
    let mut reports_failed = false;
    if options.reports {
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        match write_reports(&client, &options, &report, now).await {
            Ok(Some((api, written))) => {
                eprintln!(
                    "audit: {} {} report(s) written, {} deleted",
                    written.applied,
                    api.name(),
                    written.deleted
                );
                for (namespace, error) in &written.failed {
                    eprintln!("audit: the report of namespace {namespace} not written: {error}");
                }
                reports_failed = !written.failed.is_empty();
            }
            Ok(None) => eprintln!(
                "audit: no report written: the cluster serves neither openreports.io/v1alpha1 nor wgpolicyk8s.io/v1alpha2 (install one's CRDs)"
            ),
            Err(error) => {
                eprintln!("audit: no report written: {error}");
                reports_failed = true;
            }
        }
    }
    if !report.errors.is_empty() || reports_failed {
        ExitCode::from(2)
    } else if report.has_findings() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Write `report` as policy reports in the API the cluster serves;
/// `Ok(None)` when it serves none.
///
/// # Errors
///
/// The audit was incomplete (a resource not listed whole: its reports
/// would drop findings that still hold, so they are left as they were),
/// or discovery, or the list of the existing reports, failed.
pub async fn write_reports(
    client: &kube::Client,
    options: &AuditOptions,
    report: &Report,
    now: i64,
) -> Result<Option<(reports::ReportApi, reports::Written)>, String> {
    if let Some((resource, error)) = report.errors.first() {
        return Err(format!(
            "the audit of {resource} was incomplete ({error}): the reports are left as they were"
        ));
    }
    let Some(api) = reports::detect(client).await.map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let unlabelled = options
        .unlabelled
        .as_ref()
        .map(crate::observe::UnlabelledCreates::by_namespace)
        .unwrap_or_default();
    let written = reports::write(client, api, report, &unlabelled, &options.namespaces, now)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Some((api, written)))
}

/// The duration of the Lease of the reports' writer: it is renewed at
/// each pass, so it spans a pass and the gap to the next, with a minute
/// more for a pass that runs long; a writer that is gone is replaced at
/// the latest two passes later.
pub fn report_lease_duration(interval: std::time::Duration) -> std::time::Duration {
    interval + std::time::Duration::from_secs(60)
}

/// `serve --audit-interval`: the same audit every `interval`, its counts
/// exported as `ownerguard_audit_objects{resource,state}` by every
/// replica; with `--audit-reports`, its findings as policy reports,
/// written by the one replica that holds `writer`'s Lease (two writers
/// would replace each other's reports with what each saw). Never fixes.
pub async fn periodically(
    client: kube::Client,
    options: AuditOptions,
    interval: std::time::Duration,
    writer: Option<crate::commands::reaper::LeaseSettings>,
    metrics: std::sync::Arc<crate::observe::Metrics>,
) {
    let mut lease =
        writer.map(|settings| crate::commands::reaper::Lease::new(client.clone(), settings));
    let states: Vec<&'static str> = State::ALL.iter().map(|s| s.as_str()).collect();
    let mut tick = tokio::time::interval(interval);
    // Which report API the cluster serves is said once, not every pass.
    let mut said: Option<Option<reports::ReportApi>> = None;
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = || k8s_openapi::jiff::Timestamp::now().as_second();
        match audit(client.clone(), &options, |_, _| {}).await {
            Ok(report) => {
                let count = |resource: &str, state: &str| {
                    report
                        .counts
                        .iter()
                        .filter(|((r, s), _)| r == resource && s.as_str() == state)
                        .map(|(_, n)| *n)
                        .sum()
                };
                let audited = options
                    .resources
                    .iter()
                    .filter(|r| !report.errors.iter().any(|(e, _)| e == *r))
                    .map(String::as_str);
                metrics.set_audit_objects(audited, count, &states);
                for (resource, error) in &report.errors {
                    tracing::warn!(%resource, %error, "periodic audit: resource not audited");
                }
                let totals = report.totals();
                info!(
                    findings = report
                        .lines
                        .iter()
                        .filter(|l| l.finding.state.is_finding())
                        .count(),
                    leaked = totals[&State::Leaked],
                    "periodic audit done"
                );
                let mut ok = report.errors.is_empty();
                let writes = match lease.as_mut() {
                    Some(lease) => lease.hold().await,
                    None => false,
                };
                if options.reports && !writes {
                    tracing::debug!(
                        "periodic audit: another replica holds the Lease and writes the policy reports"
                    );
                }
                if options.reports && writes {
                    match write_reports(&client, &options, &report, now()).await {
                        Ok(outcome) => {
                            let api = outcome.as_ref().map(|(api, _)| *api);
                            if said != Some(api) {
                                match api {
                                    Some(api) => info!(
                                        api = api.name(),
                                        "periodic audit: findings written as policy reports"
                                    ),
                                    None => tracing::warn!(
                                        "periodic audit: no policy report written: the cluster serves neither openreports.io/v1alpha1 nor wgpolicyk8s.io/v1alpha2"
                                    ),
                                }
                                said = Some(api);
                            }
                            if let Some((_, written)) = outcome {
                                for (namespace, error) in &written.failed {
                                    tracing::warn!(%namespace, %error, "periodic audit: policy report not written");
                                    ok = false;
                                }
                            }
                        }
                        Err(error) => {
                            tracing::warn!(%error, "periodic audit: policy reports not written");
                            ok = false;
                        }
                    }
                }
                metrics.count_audit_run(ok, now());
            }
            Err(error) => {
                tracing::warn!(%error, "periodic audit failed");
                metrics.count_audit_run(false, now());
            }
        }
    }
}
