//! The audit's findings as policy reports, where platform teams already
//! look (Kyverno's Policy Reporter, `kubectl get reports -A`): one report
//! per namespace, named `ownerguard`, in the API the cluster serves:
//! OpenReports (`openreports.io/v1alpha1` `Report`) when its CRD is
//! installed, else the Kubernetes policy working group's
//! (`wgpolicyk8s.io/v1alpha2` `PolicyReport`), else none.
//!
//! Each pass replaces every report whole (server-side apply, the results
//! an atomic list): a result that no longer holds is gone, and a report
//! never grows beyond [`MAX_RESULTS`]. A namespace that no longer has an
//! object of ownerguard's loses its report.

use std::collections::{BTreeMap, BTreeSet};

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use super::{Line, Report, State};
use crate::observe::unlabelled::WorkloadCount;

/// The name of the report in each namespace.
pub const REPORT_NAME: &str = "ownerguard";

/// The label every report ownerguard writes carries, so that a pass finds
/// the reports it no longer needs (and never another tool's).
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "ownerguard");

/// The field manager of the apply.
const FIELD_MANAGER: &str = "ownerguard-audit";

/// Most results one report holds: the most severe first; the summary still
/// counts them all, and an annotation says how many were left out.
pub const MAX_RESULTS: usize = 1000;

/// Most bytes of results one report holds: a report is one etcd object
/// (1.5 MiB at most by default), and a result with its message and fix is
/// 1 to 2 kB.
pub const MAX_RESULT_BYTES: usize = 1_000_000;

/// The report API a cluster serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportApi {
    /// `openreports.io/v1alpha1`, `Report`: the successor of the
    /// working group's API (Kyverno since 1.15).
    OpenReports,
    /// `wgpolicyk8s.io/v1alpha2`, `PolicyReport`.
    Wgpolicy,
}

impl ReportApi {
    /// Preferred first.
    pub const ALL: [Self; 2] = [Self::OpenReports, Self::Wgpolicy];

    pub fn resource(self) -> ApiResource {
        let (group, version, kind, plural) = match self {
            Self::OpenReports => ("openreports.io", "v1alpha1", "Report", "reports"),
            Self::Wgpolicy => (
                "wgpolicyk8s.io",
                "v1alpha2",
                "PolicyReport",
                "policyreports",
            ),
        };
        let mut resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        resource.plural = plural.to_string();
        resource
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::OpenReports => "openreports.io/v1alpha1 Report",
            Self::Wgpolicy => "wgpolicyk8s.io/v1alpha2 PolicyReport",
        }
    }
}

/// The first report API the cluster serves, by discovery; `None` when it
/// serves neither (or discovery failed: said in the error).
///
/// # Errors
///
/// A discovery error other than "not served" (404).
pub async fn detect(client: &kube::Client) -> Result<Option<ReportApi>, kube::Error> {
    for api in ReportApi::ALL {
        let resource = api.resource();
        match client.list_api_group_resources(&resource.api_version).await {
            Ok(list) if list.resources.iter().any(|r| r.name == resource.plural) => {
                return Ok(Some(api));
            }
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error),
        }
    }
    Ok(None)
}

/// How bad a finding is, in the reports' words.
fn severity(state: State) -> &'static str {
    match state {
        // Nothing will ever delete it / the collector cannot resolve it.
        State::Leaked | State::Contradicting => "high",
        State::OwnerFinished | State::MissingReference | State::Malformed => "medium",
        State::Blocking => "low",
        State::Ok | State::Dangling => "info",
    }
}

/// What to do about a finding, in a sentence.
fn fix_of(line: &Line) -> String {
    let (namespace, resource, name) = (&line.namespace, &line.resource, &line.name);
    match line.finding.state {
        State::Leaked => format!(
            "nothing will delete it: delete it (kubectl delete -n {namespace} {resource} {name}) once its work is done"
        ),
        State::OwnerFinished => "it lives until its finished owner pod is deleted: delete finished worker pods, give their Jobs ttlSecondsAfterFinished, or turn on ownerguard's reaper".into(),
        State::MissingReference => "ownerguard audit --fix adds the owner's non-blocking reference".into(),
        State::Blocking => "ownerguard audit --fix sets blockOwnerDeletion to false".into(),
        State::Contradicting | State::Malformed => {
            "correct its owner labels and ownerReferences as the message says".into()
        }
        State::Ok | State::Dangling => String::new(),
    }
}

/// One finding as a report's result.
fn result_of(line: &Line, now: i64) -> Value {
    let finding = &line.finding;
    let mut properties = BTreeMap::from([
        ("owner".to_string(), finding.owner.clone()),
        ("fix".to_string(), fix_of(line)),
        ("resource".to_string(), line.resource.clone()),
    ]);
    if let Some(fixed) = &line.fixed {
        let fixed = match fixed {
            super::Fixed::Patched => "fixed".to_string(),
            super::Fixed::Conflict => "conflict".to_string(),
            super::Fixed::Failed(why) => format!("failed: {why}"),
        };
        properties.insert("fixed".to_string(), fixed);
    }
    json!({
        "source": "ownerguard",
        "policy": "ownerguard",
        "rule": finding.state.as_str(),
        "category": "ownership",
        "result": "fail",
        "scored": true,
        "severity": severity(finding.state),
        "message": finding.detail,
        "properties": properties,
        "resources": [{
            "apiVersion": line.api_version,
            "kind": line.kind,
            "namespace": line.namespace,
            "name": line.name,
            "uid": line.uid,
        }],
        "timestamp": {"seconds": now, "nanos": 0},
    })
}

/// A workload that creates objects without the owner label, as a
/// report's result: a warning, the first thing to label.
fn unlabelled_result(namespace: &str, count: &WorkloadCount, now: i64) -> Value {
    let workload = &count.workload;
    let named = if workload.name.is_empty() {
        "pods whose workload could not be read".to_string()
    } else {
        format!("{} {}", workload.kind, workload.name)
    };
    let fate = if count.referenced {
        "each carries some ownerReference, so some owner's deletion may take it"
    } else {
        "none carries an ownerReference, so nothing will ever delete them"
    };
    let mut result = json!({
        "source": "ownerguard",
        "policy": "ownerguard",
        "rule": "unlabelled-creates",
        "category": "ownership",
        "result": "warn",
        "scored": false,
        "severity": if count.referenced { "low" } else { "medium" },
        "message": format!(
            "{named} created {} {} without the owner label since ownerguard started: {fate}",
            count.creates, count.resource
        ),
        "properties": {
            "creates": count.creates.to_string(),
            "resource": count.resource,
            "fix": "label what the workload's pods create with ownerguard.io/owner-pod: <the pod's name> (docs/usage.md)",
        },
        "timestamp": {"seconds": now, "nanos": 0},
    });
    if !workload.name.is_empty() {
        let api_version = match workload.kind.as_str() {
            "Pod" => "v1",
            "Job" | "CronJob" => "batch/v1",
            "Deployment" | "StatefulSet" | "ReplicaSet" | "DaemonSet" => "apps/v1",
            _ => "",
        };
        result["resources"] = json!([{
            "apiVersion": api_version,
            "kind": workload.kind,
            "namespace": namespace,
            "name": workload.name,
        }]);
    }
    result
}

/// The report of `namespace`: its findings (not `dangling`, which the
/// collector deletes, nor `ok`) as failed results, the workloads of the
/// namespace that create objects without the owner label as warnings,
/// its counts as the summary.
pub fn build(
    api: ReportApi,
    namespace: &str,
    lines: &[&Line],
    counts: &BTreeMap<State, usize>,
    unlabelled: &[WorkloadCount],
    now: i64,
) -> Value {
    let resource = api.resource();
    let mut findings: Vec<&Line> = lines
        .iter()
        .copied()
        .filter(|line| line.finding.state.is_finding())
        .collect();
    let rank = |line: &Line| match severity(line.finding.state) {
        "high" => 0,
        "medium" => 1,
        _ => 2,
    };
    findings.sort_by(|a, b| (rank(a), &a.resource, &a.name).cmp(&(rank(b), &b.resource, &b.name)));
    let mut results: Vec<Value> = Vec::new();
    let mut bytes = 0;
    for line in &findings {
        let result = result_of(line, now);
        bytes += result.to_string().len();
        if results.len() == MAX_RESULTS || bytes > MAX_RESULT_BYTES {
            break;
        }
        results.push(result);
    }
    let mut warned = 0;
    let mut unlabelled: Vec<&WorkloadCount> = unlabelled.iter().collect();
    // Those nothing will delete first, then the most created.
    unlabelled.sort_by_key(|c| (c.referenced, std::cmp::Reverse(c.creates)));
    for count in &unlabelled {
        let result = unlabelled_result(namespace, count, now);
        bytes += result.to_string().len();
        if results.len() == MAX_RESULTS || bytes > MAX_RESULT_BYTES {
            break;
        }
        results.push(result);
        warned += 1;
    }
    let left_out = findings.len() + unlabelled.len() - results.len();
    let count = |states: &[State]| -> usize {
        states
            .iter()
            .map(|s| counts.get(s).copied().unwrap_or(0))
            .sum()
    };
    let mut annotations = BTreeMap::new();
    if left_out > 0 {
        annotations.insert(
            "ownerguard.io/results-left-out".to_string(),
            left_out.to_string(),
        );
    }
    json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {
            "name": REPORT_NAME,
            "namespace": namespace,
            "labels": {MANAGED_BY.0: MANAGED_BY.1},
            "annotations": annotations,
        },
        "summary": {
            "pass": count(&[State::Ok]),
            "fail": findings.len(),
            "warn": warned,
            "error": 0,
            "skip": count(&[State::Dangling]),
        },
        "results": results,
    })
}

/// What one pass wrote.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// Namespaces whose report was applied.
    pub applied: usize,
    /// Reports of namespaces with no object of ownerguard's any more.
    pub deleted: usize,
    /// Namespaces whose report could not be written, and why.
    pub failed: Vec<(String, String)>,
}

/// Write `report` as one policy report per namespace it audited objects
/// of, replacing each whole, and delete ownerguard's reports of the
/// namespaces in `scopes` (every namespace when empty) that no longer have
/// any.
///
/// # Errors
///
/// The list of ownerguard's existing reports failing: the pass then
/// writes nothing.
pub async fn write(
    client: &kube::Client,
    api: ReportApi,
    report: &Report,
    unlabelled: &BTreeMap<String, Vec<WorkloadCount>>,
    scopes: &[String],
    now: i64,
) -> Result<Written, kube::Error> {
    let resource = api.resource();
    let selector = format!("{}={}", MANAGED_BY.0, MANAGED_BY.1);
    let mut existing = BTreeSet::new();
    let lists = scoped(client, &resource, scopes);
    for list in &lists {
        let params = ListParams::default().labels(&selector);
        let listed = retry_busy(|| list.list_metadata(&params)).await?;
        for object in listed {
            if object.metadata.name.as_deref() == Some(REPORT_NAME)
                && let Some(namespace) = object.metadata.namespace
            {
                existing.insert(namespace);
            }
        }
    }
    let mut by_namespace: BTreeMap<&str, Vec<&Line>> = BTreeMap::new();
    for line in &report.lines {
        by_namespace.entry(&line.namespace).or_default().push(line);
    }
    let mut written = Written::default();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    // The namespaces with objects of ownerguard's, and those (in scope)
    // whose pods create objects without the owner label.
    let in_scope = |namespace: &str| scopes.is_empty() || scopes.iter().any(|s| s == namespace);
    let no_counts = BTreeMap::new();
    let mut namespaces: BTreeMap<&str, &BTreeMap<State, usize>> = report
        .namespaces
        .iter()
        .map(|(namespace, counts)| (namespace.as_str(), counts))
        .collect();
    for namespace in unlabelled.keys().filter(|n| in_scope(n)) {
        namespaces.entry(namespace.as_str()).or_insert(&no_counts);
    }
    for (&namespace, &counts) in &namespaces {
        // A cluster-scoped resource's objects have no namespace, and no
        // namespaced report to go in.
        if namespace.is_empty() {
            continue;
        }
        let lines = by_namespace.remove(namespace).unwrap_or_default();
        let workloads = unlabelled.get(namespace).map_or(&[][..], Vec::as_slice);
        let object = build(api, namespace, &lines, counts, workloads, now);
        let target: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        let apply = Patch::Apply(&object);
        match retry_busy(|| target.patch(REPORT_NAME, &params, &apply)).await {
            Ok(_) => written.applied += 1,
            Err(error) => written
                .failed
                .push((namespace.to_string(), error.to_string())),
        }
    }
    for namespace in existing {
        if namespaces.contains_key(namespace.as_str()) {
            continue;
        }
        let target: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &namespace, &resource);
        match target.delete(REPORT_NAME, &DeleteParams::default()).await {
            Ok(_) => written.deleted += 1,
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => written.failed.push((namespace, error.to_string())),
        }
    }
    // The reports an earlier pass wrote in the other API (written before
    // its CRD was installed beside this one) no longer hold.
    for other in ReportApi::ALL.into_iter().filter(|other| *other != api) {
        written.deleted += delete_all(client, other, scopes, &selector, &mut written.failed).await;
    }
    Ok(written)
}

/// Delete ownerguard's reports of `api` in `scopes` (every namespace when
/// empty); none when the cluster does not serve `api`. How many went.
async fn delete_all(
    client: &kube::Client,
    api: ReportApi,
    scopes: &[String],
    selector: &str,
    failed: &mut Vec<(String, String)>,
) -> usize {
    let resource = api.resource();
    let lists = scoped(client, &resource, scopes);
    let mut deleted = 0;
    for list in &lists {
        let listed = match list
            .list_metadata(&ListParams::default().labels(selector))
            .await
        {
            Ok(listed) => listed,
            // Not served: nothing of it to delete.
            Err(kube::Error::Api(status)) if status.code == 404 => continue,
            Err(error) => {
                failed.push((api.name().to_string(), error.to_string()));
                continue;
            }
        };
        for object in listed {
            let (Some(name), Some(namespace)) = (object.metadata.name, object.metadata.namespace)
            else {
                continue;
            };
            if name != REPORT_NAME {
                continue;
            }
            let target: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &namespace, &resource);
            match target.delete(REPORT_NAME, &DeleteParams::default()).await {
                Ok(_) => deleted += 1,
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => failed.push((namespace, error.to_string())),
            }
        }
    }
    deleted
}

/// The APIs of `resource` to list in `scopes`: every namespace when empty.
fn scoped(
    client: &kube::Client,
    resource: &ApiResource,
    scopes: &[String],
) -> Vec<Api<DynamicObject>> {
    if scopes.is_empty() {
        vec![Api::all_with(client.clone(), resource)]
    } else {
        scopes
            .iter()
            .map(|ns| Api::namespaced_with(client.clone(), ns, resource))
            .collect()
    }
}

/// `call`, again after the delay the API server asks (at most 3 tries,
/// 1 to 5 s apart) while it answers 429: a CRD's storage answers so for a
/// moment after the CRD is established, and the priority-and-fairness
/// filter when busy.
async fn retry_busy<T, F, Fut>(mut call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut tries = 0;
    loop {
        match call().await {
            Err(kube::Error::Api(status)) if status.code == 429 && tries < 2 => {
                tries += 1;
                let wait = status
                    .details
                    .as_ref()
                    .map_or(1, |d| d.retry_after_seconds)
                    .clamp(1, 5);
                tokio::time::sleep(std::time::Duration::from_secs(u64::from(wait))).await;
            }
            result => return result,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::audit::Finding;
    use std::time::Duration;

    fn line(state: State, name: &str) -> Line {
        Line {
            resource: "configmaps".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            uid: format!("uid-{name}"),
            namespace: "agents".into(),
            name: name.into(),
            finding: Finding {
                state,
                owner: "w-1".into(),
                age: Some(Duration::from_secs(60)),
                detail: format!("{name} is {}", state.as_str()),
                patch: None,
            },
            fixed: None,
        }
    }

    #[test]
    fn a_report_holds_each_finding_with_its_object_rule_severity_and_fix() {
        let lines = [
            line(State::Blocking, "b"),
            line(State::Leaked, "l"),
            line(State::Dangling, "d"),
        ];
        let counts = BTreeMap::from([
            (State::Ok, 4),
            (State::Blocking, 1),
            (State::Leaked, 1),
            (State::Dangling, 1),
        ]);
        for api in ReportApi::ALL {
            let report = build(
                api,
                "agents",
                &lines.iter().collect::<Vec<_>>(),
                &counts,
                &[],
                7,
            );
            assert_eq!(report["kind"], api.resource().kind.as_str());
            assert_eq!(report["metadata"]["name"], REPORT_NAME);
            assert_eq!(report["metadata"]["labels"][MANAGED_BY.0], MANAGED_BY.1);
            assert_eq!(
                report["summary"],
                json!({"pass": 4, "fail": 2, "warn": 0, "error": 0, "skip": 1})
            );
            let results = report["results"].as_array().unwrap();
            // The most severe first; the dangling one (the collector
            // deletes it) is no result.
            assert_eq!(results.len(), 2);
            assert_eq!(results[0]["rule"], "leaked");
            assert_eq!(results[0]["severity"], "high");
            assert_eq!(results[0]["result"], "fail");
            assert_eq!(
                results[0]["resources"][0],
                json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "agents", "name": "l", "uid": "uid-l"})
            );
            assert!(
                results[0]["properties"]["fix"]
                    .as_str()
                    .unwrap()
                    .contains("kubectl delete -n agents configmaps l")
            );
            assert_eq!(results[1]["rule"], "blocking");
            assert!(
                results[1]["properties"]["fix"]
                    .as_str()
                    .unwrap()
                    .contains("--fix")
            );
        }
    }

    #[test]
    fn a_report_never_grows_beyond_its_bytes() {
        let lines: Vec<Line> = (0..MAX_RESULTS)
            .map(|i| {
                let mut line = line(State::Leaked, &format!("cm-{i}"));
                line.finding.detail = "why ".repeat(500);
                line
            })
            .collect();
        let counts = BTreeMap::from([(State::Leaked, lines.len())]);
        let report = build(
            ReportApi::Wgpolicy,
            "agents",
            &lines.iter().collect::<Vec<_>>(),
            &counts,
            &[],
            7,
        );
        let results = report["results"].as_array().unwrap();
        assert!(results.len() < MAX_RESULTS);
        assert!(report["results"].to_string().len() <= MAX_RESULT_BYTES);
        assert_eq!(
            report["metadata"]["annotations"]["ownerguard.io/results-left-out"],
            (MAX_RESULTS - results.len()).to_string()
        );
    }

    #[test]
    fn a_report_never_grows_beyond_its_bound() {
        let lines: Vec<Line> = (0..MAX_RESULTS + 5)
            .map(|i| line(State::Leaked, &format!("cm-{i}")))
            .collect();
        let counts = BTreeMap::from([(State::Leaked, lines.len())]);
        let report = build(
            ReportApi::OpenReports,
            "agents",
            &lines.iter().collect::<Vec<_>>(),
            &counts,
            &[],
            7,
        );
        assert_eq!(report["results"].as_array().unwrap().len(), MAX_RESULTS);
        assert_eq!(report["summary"]["fail"], MAX_RESULTS + 5);
        assert_eq!(
            report["metadata"]["annotations"]["ownerguard.io/results-left-out"],
            "5"
        );
    }

    #[test]
    fn a_report_warns_of_the_workloads_that_create_without_the_owner_label() {
        use crate::observe::unlabelled::Workload;
        let count = |kind: &str, name: &str, referenced: bool, creates: u64| WorkloadCount {
            workload: Workload {
                kind: kind.into(),
                name: name.into(),
            },
            resource: "configmaps".into(),
            referenced,
            creates,
        };
        let unlabelled = [
            count("StatefulSet", "planner", true, 40),
            count("Deployment", "web", false, 3),
            count("unresolved", "", false, 1),
        ];
        let lines = [line(State::Leaked, "l")];
        let counts = BTreeMap::from([(State::Leaked, 1)]);
        let report = build(
            ReportApi::OpenReports,
            "agents",
            &lines.iter().collect::<Vec<_>>(),
            &counts,
            &unlabelled,
            7,
        );
        assert_eq!(report["summary"]["fail"], 1);
        assert_eq!(report["summary"]["warn"], 3);
        let results = report["results"].as_array().unwrap();
        // The findings first; then what nothing will delete, the most
        // created first.
        let rules: Vec<&str> = results
            .iter()
            .map(|r| r["rule"].as_str().unwrap())
            .collect();
        assert_eq!(
            rules,
            [
                "leaked",
                "unlabelled-creates",
                "unlabelled-creates",
                "unlabelled-creates"
            ]
        );
        let web = &results[1];
        assert_eq!(web["result"], "warn");
        assert_eq!(
            web["resources"],
            json!([{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "agents", "name": "web"}])
        );
        let message = web["message"].as_str().unwrap();
        assert!(
            message.contains("Deployment web created 3 configmaps"),
            "{message}"
        );
        assert!(
            message.contains("nothing will ever delete them"),
            "{message}"
        );
        assert!(results[2].get("resources").is_none(), "{}", results[2]);
        assert_eq!(results[3]["resources"][0]["name"], "planner");
        assert!(
            results[3]["message"]
                .as_str()
                .unwrap()
                .contains("some owner's deletion may take it")
        );
    }
}
