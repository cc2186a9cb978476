//! `serve --record DIR`: every reviewed request written down as a
//! ready-to-commit test case in the format of [`crate::observe::fixture`]. A user
//! turns real cluster traffic into regression tests with one flag.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;
use tracing::warn;

use super::fixture::{self, CaseConfig};
use super::{Answered, Decision, Observer, Outcome};
use crate::decide::resolve::OwnerLabels;
use crate::owner::ObservedPod;

/// Writes cases under one directory, off the request path.
pub struct Recorder {
    dir: PathBuf,
    sequence: AtomicU64,
}

impl Recorder {
    /// # Errors
    ///
    /// When `dir` cannot be created.
    pub fn new(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        // Continue the numbering of an earlier run into the same directory.
        let existing = std::fs::read_dir(dir)?.count() as u64;
        Ok(Self {
            dir: dir.to_path_buf(),
            sequence: AtomicU64::new(existing),
        })
    }
}

/// Every decision written down as a case, in the background. A failure is
/// logged: recording never changes an answer. A body that was no review
/// is not a case.
impl Observer for Recorder {
    fn observe(&self, decision: &Decision<'_>) {
        let Outcome::Answered(answered) = &decision.outcome else {
            return;
        };
        let seen = Seen::of(answered);
        let policy = decision.policy;
        let sequence = self.sequence.fetch_add(1, Ordering::Relaxed);
        let config = CaseConfig {
            description: None,
            webhook: decision.endpoint.kind,
            requester_check: policy.requester_check,
            fail_open: policy.fail_open,
            key_prefix: Some(policy.labels.prefix.clone())
                .filter(|prefix| *prefix != OwnerLabels::default().prefix),
            lookup_failures: seen.failures,
            delegates: policy
                .delegates
                .iter()
                .map(|d| format!("{}/{}", d.namespace, d.service_account))
                .collect(),
            max_pod_references: Some(policy.max_pod_references)
                .filter(|max| *max != crate::decide::DEFAULT_MAX_POD_REFERENCES),
            mode: decision.endpoint.mode,
        };
        let (request, response, pods, dir) = (
            decision.body.to_vec(),
            answered.answer.to_vec(),
            fixture::pods_yaml(&seen.pods),
            self.dir.clone(),
        );
        let write = move || {
            if let Err(error) = write_case(&dir, sequence, &config, &request, &pods, &response) {
                warn!(%error, dir = %dir.display(), "could not record the request");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => drop(handle.spawn_blocking(write)),
            Err(_) => write(),
        }
    }
}

/// What the lookups of one review found: the pods that exist, and the
/// owners whose lookup failed (replayed as failures).
#[derive(Default)]
struct Seen {
    pods: Vec<(String, String, ObservedPod)>,
    failures: Vec<String>,
}

impl Seen {
    fn of(answered: &Answered<'_>) -> Self {
        let mut seen = Self::default();
        for (name, lookup) in answered.lookups {
            match &lookup.outcome {
                Ok(Some(pod)) => {
                    seen.pods
                        .push((answered.namespace.to_string(), name.clone(), pod.clone()))
                }
                Ok(None) => {}
                Err(_) => seen.failures.push(name.clone()),
            }
        }
        seen.pods.sort_by(|a, b| a.1.cmp(&b.1));
        seen.failures.sort();
        seen
    }
}

fn write_case(
    dir: &Path,
    sequence: u64,
    config: &CaseConfig,
    request: &[u8],
    pods: &str,
    response: &[u8],
) -> std::io::Result<()> {
    // Bytes that are not UTF-8 where ownerguard does not read (a
    // RawExtension's, passed through by the API server) are kept as U+FFFD:
    // the case decides as the request did.
    let mut review: Value = serde_json::from_str(&String::from_utf8_lossy(request))?;
    fixture::strip_managed_fields(&mut review);
    let response: Value = serde_json::from_slice(response)?;
    let case = dir.join(case_name(sequence, &review));
    std::fs::create_dir_all(&case)?;
    let pretty = |value: &Value| serde_json::to_string_pretty(value).map(|text| text + "\n");
    std::fs::write(case.join(fixture::REQUEST), pretty(&review)?)?;
    std::fs::write(case.join(fixture::PODS), pods)?;
    let config_yaml = serde_saphyr::to_string(config).map_err(std::io::Error::other)?;
    std::fs::write(case.join(fixture::CASE), config_yaml)?;
    if let Ok(Some(object)) = fixture::patched_object(&review, &response) {
        let parts = fixture::patchable_parts(&object);
        std::fs::write(case.join(fixture::PATCHED), pretty(&parts)?)?;
    }
    std::fs::write(
        case.join(fixture::RESPONSE),
        pretty(&fixture::readable_response(response))?,
    )?;
    Ok(())
}

/// `0007-create-pod-agent-abc`: the order of arrival, then what it was.
fn case_name(sequence: u64, review: &Value) -> String {
    let request = &review["request"];
    let metadata = &request["object"]["metadata"];
    let name = metadata["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .or(metadata["generateName"].as_str())
        .or(request["name"].as_str())
        .unwrap_or("unnamed");
    let raw = format!(
        "{sequence:04}-{}-{}-{name}",
        request["operation"].as_str().unwrap_or("unknown"),
        request["kind"]["kind"].as_str().unwrap_or("object")
    );
    raw.to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect::<String>()
        .trim_end_matches('-')
        .to_string()
}
