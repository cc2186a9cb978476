//! One test per rule of SPEC §3, named after it. Each runs `plan` and
//! `decide` with the lookups a scenario implies, and checks the exact
//! denial variant or the patched metadata.

use serde_json::{Value, json};

use super::*;
use crate::admission::{AdmissionRequest, EXTRA_POD_NAME, EXTRA_POD_UID};
use crate::decide::requester::RequesterCheck;
use crate::decide::subject::Subject;
use crate::owner::LookupError;
use crate::owner::ObservedPod;

const NS: &str = "agents";

/// A request (or any part of one) decoded by the server's own decoder,
/// from the JSON text of `value`.
///
/// The request borrows its text, as the server's does; a test's text is
/// small and kept for the test binary's life.
fn decoded<T: serde::Deserialize<'static>>(
    value: Value,
) -> Result<T, crate::admission::DecodeError> {
    let text: &'static [u8] = Vec::leak(serde_json::to_vec(&value).expect("a value writes"));
    crate::admission::json::from_slice(text)
}

fn request(
    operation: &str,
    object: Value,
    old: Option<Value>,
) -> (AdmissionRequest<'static>, Value) {
    let review = json!({
        "uid": "req-1",
        "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "namespace": NS,
        "operation": operation,
        "userInfo": {"username": "alice"},
        "object": object,
        "oldObject": old,
    });
    (decoded(review.clone()).unwrap(), review)
}

fn from_pod(mut review: Value, name: &str, uid: &str) -> AdmissionRequest<'static> {
    review["userInfo"] = json!({
        "username": format!("system:serviceaccount:{NS}:worker"),
        "extra": {EXTRA_POD_NAME: [name], EXTRA_POD_UID: [uid]},
    });
    decoded(review).unwrap()
}

fn object(labels: Value, references: Option<Value>) -> Value {
    let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "prompt-1", "namespace": NS, "labels": labels}, "data": {"a": "b"}});
    if let Some(references) = references {
        object["metadata"]["ownerReferences"] = references;
    }
    object
}

fn owner_labels(name: &str, uid: &str) -> Value {
    json!({"ownerguard.io/owner-pod": name, "ownerguard.io/owner-uid": uid})
}

fn pod_reference(name: &str, uid: &str, block: Option<bool>) -> Value {
    let mut reference =
        json!({"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid, "controller": false});
    if let Some(block) = block {
        reference["blockOwnerDeletion"] = json!(block);
    }
    reference
}

fn running(pods: &[(&str, &str)]) -> crate::decide::Lookups {
    pods.iter()
        .map(|(name, uid)| {
            let pod = ObservedPod::running(*uid);
            (
                name.to_string(),
                Lookup {
                    source: Source::Inventory,
                    outcome: Ok(Some(pod)),
                },
            )
        })
        .collect()
}

fn run(
    request: &AdmissionRequest,
    webhook: WebhookKind,
    policy: &Policy,
    lookups: crate::decide::Lookups,
) -> Result<Allowed, Denial> {
    match plan(request, webhook, policy)? {
        None => Ok(Allowed::default()),
        Some(checks) => {
            for need in checks.lookups() {
                assert!(
                    lookups.contains_key(&need.name) || lookups.is_empty(),
                    "unexpected lookup of {}",
                    need.name
                );
            }
            decide(checks, &lookups, policy)
        }
    }
}

fn mutate(request: &AdmissionRequest, lookups: crate::decide::Lookups) -> Result<Allowed, Denial> {
    run(request, WebhookKind::Mutate, &Policy::default(), lookups)
}

/// Apply the patch the way the API server does, to the whole object.
fn patched(object: &Value, allowed: &Allowed) -> Value {
    let mut object = object.clone();
    let patch: json_patch::Patch = serde_json::from_slice(&allowed.patch.to_json()).unwrap();
    json_patch::patch(&mut object, &patch).unwrap();
    object
}

#[test]
fn create_without_owner_label_or_pod_reference_is_allowed_unchanged() {
    let (req, _) = request("CREATE", object(json!({"app": "x"}), None), None);
    let allowed = mutate(&req, crate::decide::Lookups::default()).unwrap();
    assert!(allowed.patch.is_empty());
    assert!(allowed.owner.is_none());
}

#[test]
fn create_with_owner_label_gets_the_non_blocking_reference() {
    let obj = object(owner_labels("w-1", "uid-1"), None);
    let (req, _) = request("CREATE", obj.clone(), None);
    let allowed = mutate(&req, running(&[("w-1", "uid-1")])).unwrap();
    let result = patched(&obj, &allowed);
    assert_eq!(
        result["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Pod", "name": "w-1", "uid": "uid-1", "controller": false, "blockOwnerDeletion": false}])
    );
    assert_eq!(result["data"], obj["data"], "only metadata changes");
    let owner = allowed.owner.unwrap();
    assert_eq!(owner.annotation(), "agents/w-1/uid-1");
    assert_eq!(owner.name(), "w-1");
    assert_eq!(owner.source, Source::Inventory);
}

#[test]
fn mutation_is_idempotent_on_its_own_output() {
    let obj = object(
        json!({"ownerguard.io/owner-pod": "w-1"}),
        Some(json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "r"}])),
    );
    let (_, review) = request("CREATE", obj.clone(), None);
    let req = from_pod(review, "w-1", "uid-1");
    let first = mutate(&req, running(&[("w-1", "uid-1")])).unwrap();
    assert!(!first.patch.is_empty());
    let once = patched(&obj, &first);
    let (_, review) = request("CREATE", once.clone(), None);
    let again = from_pod(review, "w-1", "uid-1");
    let second = mutate(&again, running(&[("w-1", "uid-1")])).unwrap();
    assert!(
        second.patch.is_empty(),
        "second pass patched: {:?}",
        second.patch
    );
}

#[test]
fn missing_uid_label_is_added_from_the_requesting_owner() {
    let obj = object(json!({"ownerguard.io/owner-pod": "w-1"}), None);
    let (_, review) = request("CREATE", obj.clone(), None);
    let req = from_pod(review, "w-1", "uid-1");
    let allowed = mutate(&req, running(&[("w-1", "uid-1")])).unwrap();
    let result = patched(&obj, &allowed);
    assert_eq!(
        result["metadata"]["labels"]["ownerguard.io/owner-uid"],
        "uid-1"
    );
    assert_eq!(result["metadata"]["ownerReferences"][0]["uid"], "uid-1");
}

#[test]
fn missing_uid_label_from_a_user_is_missing_owner_uid() {
    let (req, _) = request(
        "CREATE",
        object(json!({"ownerguard.io/owner-pod": "w-1"}), None),
        None,
    );
    let err = mutate(&req, running(&[("w-1", "uid-1")])).unwrap_err();
    assert!(matches!(err, Denial::MissingOwnerUid { .. }), "{err:?}");
    assert_eq!(err.code(), 400);
}

#[test]
fn existing_reference_with_the_owner_uid_is_not_duplicated_and_keeps_its_controller() {
    let mut reference = pod_reference("w-1", "uid-1", Some(true));
    reference["controller"] = json!(true);
    let obj = object(owner_labels("w-1", "uid-1"), Some(json!([reference])));
    let (req, _) = request("CREATE", obj.clone(), None);
    let allowed = mutate(&req, running(&[("w-1", "uid-1")])).unwrap();
    let result = patched(&obj, &allowed);
    let references = result["metadata"]["ownerReferences"].as_array().unwrap();
    assert_eq!(references.len(), 1);
    assert_eq!(references[0]["controller"], true);
    assert_eq!(references[0]["blockOwnerDeletion"], false);
    assert_eq!(allowed.warnings.len(), 1, "{:?}", allowed.warnings);
}

#[test]
fn existing_reference_without_block_owner_deletion_gets_it_false() {
    let obj = object(
        owner_labels("w-1", "uid-1"),
        Some(json!([pod_reference("w-1", "uid-1", None)])),
    );
    let (req, _) = request("CREATE", obj.clone(), None);
    let allowed = mutate(&req, running(&[("w-1", "uid-1")])).unwrap();
    assert_eq!(
        patched(&obj, &allowed)["metadata"]["ownerReferences"][0]["blockOwnerDeletion"],
        false
    );
    assert!(allowed.warnings.is_empty());
}

#[test]
fn owner_not_found_is_denied_403() {
    let (req, _) = request("CREATE", object(owner_labels("w-1", "uid-1"), None), None);
    let lookups = crate::decide::Lookups::from_iter([(
        "w-1".to_string(),
        Lookup {
            source: Source::Cache,
            outcome: Ok(None),
        },
    )]);
    let err = mutate(&req, lookups).unwrap_err();
    assert!(matches!(err, Denial::OwnerNotFound { .. }), "{err:?}");
    assert_eq!(err.code(), 403);
    assert_eq!(
        err.to_string(),
        "ConfigMap 'prompt-1': owner pod 'w-1' not found in namespace 'agents': an ownerReference only holds \
         in the namespace of its owner, so the worker must run in the namespace of the objects it creates"
    );
}

#[test]
fn owner_with_another_uid_is_owner_uid_mismatch() {
    let (req, _) = request("CREATE", object(owner_labels("w-1", "A"), None), None);
    let err = mutate(&req, running(&[("w-1", "B")])).unwrap_err();
    assert!(matches!(err, Denial::OwnerUidMismatch { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("owner pod 'w-1' does not have uid 'A'"),
        "{message}"
    );
    assert!(message.contains("downward API metadata.uid"), "{message}");
    // The real uid is not for whoever posts a review to learn.
    assert!(!message.contains('B'), "{message}");
}

#[test]
fn owner_being_deleted_is_owner_terminating() {
    let (req, _) = request("CREATE", object(owner_labels("w-1", "uid-1"), None), None);
    let pod = ObservedPod {
        terminating: true,
        ..ObservedPod::running("uid-1")
    };
    let lookups = crate::decide::Lookups::from_iter([(
        "w-1".to_string(),
        Lookup {
            source: Source::Api,
            outcome: Ok(Some(pod)),
        },
    )]);
    let err = mutate(&req, lookups).unwrap_err();
    assert!(matches!(err, Denial::OwnerTerminating { .. }), "{err:?}");
}

fn failed_lookup() -> crate::decide::Lookups {
    let error = LookupError::TimedOut {
        after: std::time::Duration::from_secs(2),
    };
    crate::decide::Lookups::from_iter([(
        "w-1".to_string(),
        Lookup {
            source: Source::Api,
            outcome: Err(error),
        },
    )])
}

#[test]
fn lookup_failure_is_denied_503() {
    let (req, _) = request("CREATE", object(owner_labels("w-1", "uid-1"), None), None);
    let err = mutate(&req, failed_lookup()).unwrap_err();
    assert!(matches!(err, Denial::LookupFailed { .. }), "{err:?}");
    assert_eq!(err.code(), 503);
}

#[test]
fn lookup_failure_under_fail_open_is_allowed_with_a_warning() {
    let obj = object(owner_labels("w-1", "uid-1"), None);
    let (req, _) = request("CREATE", obj.clone(), None);
    let policy = Policy {
        fail_open: true,
        ..Policy::default()
    };
    let allowed = run(&req, WebhookKind::Mutate, &policy, failed_lookup()).unwrap();
    assert_eq!(allowed.warnings.len(), 1);
    assert_eq!(
        patched(&obj, &allowed)["metadata"]["ownerReferences"][0]["uid"],
        "uid-1"
    );
}

#[test]
fn requester_declaring_another_owner_is_denied_under_enforce_and_warned_under_warn() {
    let (_, review) = request("CREATE", object(owner_labels("w-2", "uid-2"), None), None);
    let req = from_pod(review, "w-1", "uid-1");
    let err = mutate(&req, running(&[("w-2", "uid-2")])).unwrap_err();
    assert!(matches!(err, Denial::RequesterNotOwner { .. }), "{err:?}");
    let policy = Policy {
        requester_check: RequesterCheck::Warn,
        ..Policy::default()
    };
    let allowed = run(
        &req,
        WebhookKind::Mutate,
        &policy,
        running(&[("w-2", "uid-2")]),
    )
    .unwrap();
    assert_eq!(allowed.warnings.len(), 1);
    assert!(!allowed.patch.is_empty());
}

#[test]
fn client_set_pod_reference_is_looked_up_and_unblocked_with_a_warning() {
    let obj = object(
        json!({}),
        Some(json!([pod_reference("w-1", "uid-1", Some(true))])),
    );
    let (req, _) = request("CREATE", obj.clone(), None);
    let allowed = mutate(&req, running(&[("w-1", "uid-1")])).unwrap();
    assert_eq!(
        patched(&obj, &allowed)["metadata"]["ownerReferences"][0]["blockOwnerDeletion"],
        false
    );
    assert_eq!(allowed.warnings.len(), 1);
    assert!(allowed.warnings[0].len() < 120);
}

#[test]
fn client_set_pod_reference_to_a_missing_pod_is_denied() {
    let obj = object(
        json!({}),
        Some(json!([pod_reference("gone", "uid-9", None)])),
    );
    let (req, _) = request("CREATE", obj, None);
    let lookups = crate::decide::Lookups::from_iter([(
        "gone".to_string(),
        Lookup {
            source: Source::Inventory,
            outcome: Ok(None),
        },
    )]);
    let err = mutate(&req, lookups).unwrap_err();
    assert!(
        matches!(err, Denial::OwnerNotFound { ref owner, .. } if owner == "gone"),
        "{err:?}"
    );
}

#[test]
fn pod_reference_without_uid_is_malformed_reference() {
    let obj = object(
        json!({}),
        Some(json!([{"apiVersion": "v1", "kind": "Pod", "name": "w-1"}])),
    );
    let (req, _) = request("CREATE", obj, None);
    let err = mutate(&req, crate::decide::Lookups::default()).unwrap_err();
    assert!(
        matches!(err, Denial::MalformedReference { field: "uid", .. }),
        "{err:?}"
    );
    assert_eq!(err.code(), 400);
}

#[test]
fn cluster_scoped_object_with_owner_label_is_cluster_scoped() {
    let (_, mut review) = request("CREATE", object(owner_labels("w-1", "uid-1"), None), None);
    review.as_object_mut().unwrap().remove("namespace");
    review["object"]["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("namespace");
    let req: AdmissionRequest = decoded(review).unwrap();
    let err = mutate(&req, crate::decide::Lookups::default()).unwrap_err();
    assert!(matches!(err, Denial::ClusterScoped { .. }), "{err:?}");
}

#[test]
fn generate_name_names_the_object_before_it_has_a_name() {
    let mut obj = object(owner_labels("w-1", "uid-1"), None);
    obj["metadata"].as_object_mut().unwrap().remove("name");
    obj["metadata"]["generateName"] = json!("agent-");
    let (req, _) = request("CREATE", obj, None);
    let err = mutate(
        &req,
        crate::decide::Lookups::from_iter([(
            "w-1".to_string(),
            Lookup {
                source: Source::Cache,
                outcome: Ok(None),
            },
        )]),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("ConfigMap 'agent-*' (generateName)"),
        "{err}"
    );
}

#[test]
fn validate_denies_an_owner_label_without_its_reference() {
    let (req, _) = request("CREATE", object(owner_labels("w-1", "uid-1"), None), None);
    let err = run(
        &req,
        WebhookKind::Validate,
        &Policy::default(),
        running(&[("w-1", "uid-1")]),
    )
    .unwrap_err();
    assert!(matches!(err, Denial::ReferenceMissing { .. }), "{err:?}");
}

#[test]
fn validate_denies_a_blocking_reference() {
    let obj = object(
        owner_labels("w-1", "uid-1"),
        Some(json!([pod_reference("w-1", "uid-1", Some(true))])),
    );
    let (req, _) = request("CREATE", obj, None);
    let err = run(
        &req,
        WebhookKind::Validate,
        &Policy::default(),
        running(&[("w-1", "uid-1")]),
    )
    .unwrap_err();
    assert!(matches!(err, Denial::BlockingReference { .. }), "{err:?}");
}

#[test]
fn validate_allows_the_mutated_object_without_a_patch() {
    let obj = object(
        owner_labels("w-1", "uid-1"),
        Some(json!([pod_reference("w-1", "uid-1", Some(false))])),
    );
    let (req, _) = request("CREATE", obj, None);
    let allowed = run(
        &req,
        WebhookKind::Validate,
        &Policy::default(),
        running(&[("w-1", "uid-1")]),
    )
    .unwrap();
    assert!(allowed.patch.is_empty());
    assert!(allowed.owner.is_some());
}

#[test]
fn update_may_not_change_the_owner_label() {
    let old = object(
        owner_labels("w-1", "uid-1"),
        Some(json!([pod_reference("w-1", "uid-1", Some(false))])),
    );
    let new = object(
        owner_labels("w-2", "uid-1"),
        Some(json!([pod_reference("w-1", "uid-1", Some(false))])),
    );
    let (req, _) = request("UPDATE", new, Some(old));
    let err = mutate(&req, crate::decide::Lookups::default()).unwrap_err();
    assert!(matches!(err, Denial::OwnerLabelChanged { .. }), "{err:?}");
}

#[test]
fn update_may_not_add_the_owner_label() {
    let old = object(json!({}), None);
    let new = object(owner_labels("w-1", "uid-1"), None);
    let (req, _) = request("UPDATE", new, Some(old));
    let err = mutate(&req, crate::decide::Lookups::default()).unwrap_err();
    assert!(matches!(err, Denial::OwnerLabelAdded { .. }), "{err:?}");
    assert!(err.to_string().contains("create a new object"), "{err}");
}

#[test]
fn update_may_not_remove_a_running_owners_reference() {
    let old = object(
        owner_labels("w-1", "uid-1"),
        Some(json!([pod_reference("w-1", "uid-1", Some(false))])),
    );
    let new = object(owner_labels("w-1", "uid-1"), Some(json!([])));
    let (req, _) = request("UPDATE", new, Some(old));
    let err = run(
        &req,
        WebhookKind::Validate,
        &Policy::default(),
        running(&[("w-1", "uid-1")]),
    )
    .unwrap_err();
    assert!(
        matches!(err, Denial::OwnerReferenceRemoved { .. }),
        "{err:?}"
    );
}

#[test]
fn update_making_the_owner_reference_blocking_is_unblocked() {
    let old = object(
        owner_labels("w-1", "uid-1"),
        Some(json!([pod_reference("w-1", "uid-1", Some(false))])),
    );
    let new = object(
        owner_labels("w-1", "uid-1"),
        Some(json!([pod_reference("w-1", "uid-1", Some(true))])),
    );
    let (req, _) = request("UPDATE", new.clone(), Some(old.clone()));
    let allowed = mutate(&req, crate::decide::Lookups::default()).unwrap();
    assert_eq!(
        patched(&new, &allowed)["metadata"]["ownerReferences"][0]["blockOwnerDeletion"],
        false
    );
    let (req, _) = request("UPDATE", new, Some(old));
    let err = run(
        &req,
        WebhookKind::Validate,
        &Policy::default(),
        crate::decide::Lookups::default(),
    )
    .unwrap_err();
    assert!(matches!(err, Denial::BlockingReference { .. }), "{err:?}");
}

#[test]
fn update_of_an_object_labelled_before_install_is_allowed() {
    let old = object(owner_labels("w-1", "uid-1"), None);
    let mut new = old.clone();
    new["data"] = json!({"changed": "yes"});
    let (req, _) = request("UPDATE", new, Some(old));
    let allowed = mutate(&req, crate::decide::Lookups::default()).unwrap();
    assert!(allowed.patch.is_empty());
    let allowed = run(
        &req,
        WebhookKind::Validate,
        &Policy::default(),
        crate::decide::Lookups::default(),
    )
    .unwrap();
    assert!(allowed.patch.is_empty());
}

#[test]
fn update_adding_a_pod_reference_checks_it_as_on_create() {
    let old = object(json!({}), None);
    let new = object(
        json!({}),
        Some(json!([pod_reference("gone", "uid-9", None)])),
    );
    let (req, _) = request("UPDATE", new, Some(old));
    let lookups = crate::decide::Lookups::from_iter([(
        "gone".to_string(),
        Lookup {
            source: Source::Cache,
            outcome: Ok(None),
        },
    )]);
    let err = mutate(&req, lookups).unwrap_err();
    assert!(matches!(err, Denial::OwnerNotFound { .. }), "{err:?}");
}

#[test]
fn update_keeping_the_pod_references_looks_nothing_up() {
    let refs = json!([pod_reference("w-1", "uid-1", Some(false))]);
    let old = object(owner_labels("w-1", "uid-1"), Some(refs.clone()));
    let new = object(owner_labels("w-1", "uid-1"), Some(refs));
    let (req, _) = request("UPDATE", new, Some(old));
    let checks = plan(&req, WebhookKind::Mutate, &Policy::default()).unwrap();
    assert!(checks.is_none_or(|c| c.lookups().is_empty()));
}

#[test]
fn update_without_old_object_is_missing_old_object() {
    let (req, _) = request("UPDATE", object(owner_labels("w-1", "uid-1"), None), None);
    let err = mutate(&req, crate::decide::Lookups::default()).unwrap_err();
    assert!(matches!(err, Denial::MissingOldObject { .. }), "{err:?}");
}

#[test]
fn delete_and_connect_are_allowed_unchanged() {
    for operation in ["DELETE", "CONNECT"] {
        let (req, _) = request(operation, object(owner_labels("w-1", "uid-1"), None), None);
        assert_eq!(
            plan(&req, WebhookKind::Mutate, &Policy::default())
                .unwrap()
                .map(|c| c.lookups().to_vec()),
            None
        );
    }
}

#[test]
fn warnings_stay_under_120_characters() {
    let long = format!(
        "owner pod '{}' not checked (lookup failed), allowed by --fail-open",
        "w".repeat(200)
    );
    let short = short_warning(long);
    assert!(short.len() < 120, "{} characters", short.len());
    assert!(short.ends_with("..."));
    assert_eq!(short_warning("brief".into()), "brief");
}

/// What a lookup found: `Ok(Some((uid, terminating)))`, `Ok(None)` for no
/// such pod, `Err(())` for a failed lookup.
type Found<'a> = Result<Option<(&'a str, bool)>, ()>;

fn lookups(pods: &[(&str, Found<'_>)]) -> crate::decide::Lookups {
    pods.iter()
        .map(|(name, outcome)| {
            let outcome = match outcome {
                Ok(Some((uid, terminating))) => Ok(Some(ObservedPod {
                    terminating: *terminating,
                    ..ObservedPod::running(*uid)
                })),
                Ok(None) => Ok(None),
                Err(()) => Err(LookupError::TimedOut {
                    after: std::time::Duration::from_secs(2),
                }),
            };
            let lookup = Lookup {
                source: Source::Api,
                outcome,
            };
            (name.to_string(), lookup)
        })
        .collect()
}

fn validate(request: &AdmissionRequest, pods: crate::decide::Lookups) -> Result<Allowed, Denial> {
    run(request, WebhookKind::Validate, &Policy::default(), pods)
}

fn as_user(mut review: Value, username: &str) -> AdmissionRequest<'static> {
    review["userInfo"] = json!({"username": username});
    decoded(review).unwrap()
}

fn with_extras(mut review: Value, username: &str, extra: Value) -> AdmissionRequest<'static> {
    review["userInfo"] = json!({"username": username, "extra": extra});
    decoded(review).unwrap()
}

fn owned(name: &str, uid: &str) -> Value {
    object(
        owner_labels(name, uid),
        Some(json!([pod_reference(name, uid, Some(false))])),
    )
}

// SPEC §3 rule 6: a reference is the whole tuple.

#[test]
fn an_entry_with_the_owners_uid_but_another_kind_contradicts_the_owner() {
    for (api_version, kind, name) in [
        ("v1", "pod", "w-1"),
        ("v1", "ConfigMap", "w-1"),
        ("apps/v1", "ReplicaSet", "rs"),
        ("v1", "Pod", "w-2"),
    ] {
        let entry = json!({"apiVersion": api_version, "kind": kind, "name": name, "uid": "uid-1"});
        let obj = object(owner_labels("w-1", "uid-1"), Some(json!([entry])));
        let (req, _) = request("CREATE", obj, None);
        let err = mutate(&req, running(&[("w-1", "uid-1"), ("w-2", "uid-2")])).unwrap_err();
        assert!(
            matches!(
                err,
                Denial::ContradictingReference { .. } | Denial::InexactPodReference { .. }
            ),
            "{kind} {name}: {err:?}"
        );
        assert_eq!(err.code(), 400, "{kind} {name}");
    }
}

#[test]
fn a_reference_that_means_a_pod_must_be_exactly_v1_pod() {
    for (api_version, kind) in [
        ("v1", "pod"),
        ("apps/v1", "Pod"),
        ("v1beta1", "Pod"),
        ("", "POD"),
    ] {
        let entry = json!({"apiVersion": api_version, "kind": kind, "name": "w-1", "uid": "uid-9"});
        let (req, _) = request("CREATE", object(json!({}), Some(json!([entry]))), None);
        let err = mutate(&req, crate::decide::Lookups::default()).unwrap_err();
        assert!(
            matches!(err, Denial::InexactPodReference { .. }),
            "{api_version} {kind}: {err:?}"
        );
    }
}

#[test]
fn two_pod_references_with_one_uid_contradict_each_other() {
    let refs = json!([
        pod_reference("w-1", "uid-1", None),
        pod_reference("w-2", "uid-1", None)
    ]);
    let (req, _) = request("CREATE", object(json!({}), Some(refs)), None);
    let err = mutate(&req, crate::decide::Lookups::default()).unwrap_err();
    assert!(
        matches!(err, Denial::ContradictingReference { index: 1, .. }),
        "{err:?}"
    );
}

// SPEC §3 rule 7: names are validated before any lookup.

#[test]
fn a_reference_name_that_is_not_a_pod_name_is_denied_before_any_lookup() {
    for name in [
        "w-1?x=1",
        "w-1/status",
        "w-1#x",
        "w 1",
        "W-1",
        "w-1%2Fx",
        "..",
    ] {
        let refs = json!([pod_reference(name, "uid-1", None)]);
        let (req, _) = request("CREATE", object(json!({}), Some(refs)), None);
        for fail_open in [false, true] {
            let policy = Policy {
                fail_open,
                ..Policy::default()
            };
            let err = plan(&req, WebhookKind::Mutate, &policy).unwrap_err();
            assert!(
                matches!(err, Denial::InvalidReferenceName { .. }),
                "{name}: {err:?}"
            );
            assert_eq!(err.code(), 400);
        }
    }
}

#[test]
fn a_namespace_that_is_not_a_namespace_name_is_denied_before_any_lookup() {
    for namespace in ["agents/pods/w-2?x=", "Agents", "a.b"] {
        let (_, mut review) = request("CREATE", object(owner_labels("w-1", "uid-1"), None), None);
        review["namespace"] = json!(namespace);
        review["object"]["metadata"]["namespace"] = json!(namespace);
        let req: AdmissionRequest = decoded(review).unwrap();
        let err = plan(&req, WebhookKind::Mutate, &Policy::default()).unwrap_err();
        assert!(
            matches!(err, Denial::InvalidNamespace { .. }),
            "{namespace}: {err:?}"
        );
        assert_eq!(err.code(), 400);
    }
}

#[test]
fn an_object_in_another_namespace_than_the_request_is_denied() {
    let (_, mut review) = request("CREATE", object(owner_labels("w-1", "uid-1"), None), None);
    review["object"]["metadata"]["namespace"] = json!("elsewhere");
    let req: AdmissionRequest = decoded(review).unwrap();
    let err = plan(&req, WebhookKind::Mutate, &Policy::default()).unwrap_err();
    assert!(matches!(err, Denial::InvalidNamespace { .. }), "{err:?}");
}

// SPEC §3 rule 8: who is a pod.

#[test]
fn a_node_user_with_pod_extras_is_not_the_requesting_pod() {
    let (_, review) = request(
        "CREATE",
        object(json!({"ownerguard.io/owner-pod": "w-1"}), None),
        None,
    );
    let extras = json!({EXTRA_POD_NAME: ["w-1"], EXTRA_POD_UID: ["uid-1"]});
    for username in [
        "system:node:node-1",
        "alice",
        "system:serviceaccount:elsewhere:worker",
        "system:serviceaccount:agents:",
    ] {
        let req = with_extras(review.clone(), username, extras.clone());
        let err = mutate(&req, running(&[("w-1", "uid-1")])).unwrap_err();
        assert!(
            matches!(err, Denial::MissingOwnerUid { .. }),
            "{username}: {err:?}"
        );
    }
}

#[test]
fn malformed_pod_extras_are_denied_400() {
    let (_, review) = request("CREATE", object(owner_labels("w-1", "uid-1"), None), None);
    let user = "system:serviceaccount:agents:worker";
    for extra in [
        json!({EXTRA_POD_NAME: ["w-1"]}),
        json!({EXTRA_POD_UID: ["uid-1"]}),
        json!({EXTRA_POD_NAME: [], EXTRA_POD_UID: ["uid-1"]}),
        json!({EXTRA_POD_NAME: [""], EXTRA_POD_UID: ["uid-1"]}),
        json!({EXTRA_POD_NAME: ["w-1", "w-2"], EXTRA_POD_UID: ["uid-1"]}),
        json!({EXTRA_POD_NAME: ["w-1/status"], EXTRA_POD_UID: ["uid-1"]}),
    ] {
        let req = with_extras(review.clone(), user, extra.clone());
        let err = mutate(&req, running(&[("w-1", "uid-1")])).unwrap_err();
        assert!(
            matches!(err, Denial::MalformedIdentity { .. }),
            "{extra}: {err:?}"
        );
        assert_eq!(err.code(), 400);
    }
}

// SPEC §3 rule 9: half a claim.

#[test]
fn a_uid_label_without_the_owner_label_is_a_half_claim() {
    let (req, _) = request(
        "CREATE",
        object(json!({"ownerguard.io/owner-uid": "uid-1"}), None),
        None,
    );
    let err = mutate(&req, crate::decide::Lookups::default()).unwrap_err();
    assert!(matches!(err, Denial::HalfClaim { .. }), "{err:?}");
    assert_eq!(err.code(), 400);
}

// SPEC §3 rule 10: the work of one review is bounded.

#[test]
fn more_pod_references_than_the_limit_are_denied_before_any_lookup() {
    let refs: Vec<Value> = (0..33)
        .map(|i| pod_reference(&format!("w-{i}"), &format!("uid-{i}"), None))
        .collect();
    let (req, _) = request("CREATE", object(json!({}), Some(json!(refs))), None);
    let err = plan(&req, WebhookKind::Mutate, &Policy::default()).unwrap_err();
    assert!(
        matches!(
            err,
            Denial::TooManyReferences {
                count: 33,
                limit: 32,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.code(), 400);
    let refs: Vec<Value> = (0..32)
        .map(|i| pod_reference(&format!("w-{i}"), &format!("uid-{i}"), None))
        .collect();
    let (req, _) = request("CREATE", object(json!({}), Some(json!(refs))), None);
    let checks = plan(&req, WebhookKind::Mutate, &Policy::default())
        .unwrap()
        .unwrap();
    assert_eq!(checks.lookups().len(), 32);
}

#[test]
fn one_lookup_per_pod_name() {
    let refs = json!([pod_reference("w-1", "uid-1", None)]);
    let (req, _) = request(
        "CREATE",
        object(owner_labels("w-1", "uid-1"), Some(refs)),
        None,
    );
    let checks = plan(&req, WebhookKind::Mutate, &Policy::default())
        .unwrap()
        .unwrap();
    assert_eq!(checks.lookups().len(), 1);
}

// Messages: a failed lookup says a sentence, never the API's error.

#[test]
fn a_failed_lookup_is_told_in_a_sentence() {
    let (req, _) = request("CREATE", object(owner_labels("w-1", "uid-1"), None), None);
    let message = mutate(&req, failed_lookup()).unwrap_err().to_string();
    assert!(
        message.contains("the API server did not answer in time"),
        "{message}"
    );
    assert!(!message.contains("Status {"), "{message}");
}

// UPDATE: the tuple, blocking, orphaning.

#[test]
fn update_renaming_or_rekinding_the_owners_reference_is_denied_403() {
    for (api_version, kind, name) in [
        ("v1", "Pod", "w-2"),
        ("v1", "pod", "w-1"),
        ("apps/v1", "Pod", "w-1"),
    ] {
        let new = object(
            owner_labels("w-1", "uid-1"),
            Some(json!([{"apiVersion": api_version, "kind": kind, "name": name, "uid": "uid-1"}])),
        );
        let (req, _) = request("UPDATE", new, Some(owned("w-1", "uid-1")));
        let err = mutate(&req, running(&[("w-1", "uid-1")])).unwrap_err();
        assert!(
            matches!(err, Denial::OwnerReferenceChanged { .. }),
            "{kind} {name}: {err:?}"
        );
        assert_eq!(err.code(), 403);
    }
}

#[test]
fn update_may_not_make_any_pod_reference_blocking() {
    let old = object(
        json!({}),
        Some(json!([pod_reference("w-2", "uid-2", Some(false))])),
    );
    let new = object(
        json!({}),
        Some(json!([pod_reference("w-2", "uid-2", Some(true))])),
    );
    let (req, _) = request("UPDATE", new.clone(), Some(old));
    let allowed = mutate(&req, crate::decide::Lookups::default()).unwrap();
    assert_eq!(
        patched(&new, &allowed)["metadata"]["ownerReferences"][0]["blockOwnerDeletion"],
        false
    );
    assert_eq!(allowed.warnings.len(), 1);
    let err = validate(&req, crate::decide::Lookups::default()).unwrap_err();
    assert!(matches!(err, Denial::BlockingReference { .. }), "{err:?}");
    // The object has no owner label: the mutating webhook never sees it,
    // so the message does not send the user there.
    assert!(!err.to_string().contains("mutating"), "{err}");
}

#[test]
fn the_garbage_collector_may_orphan_whatever_the_owner() {
    let new = object(owner_labels("w-1", "uid-1"), Some(json!([])));
    let (_, review) = request("UPDATE", new.clone(), Some(owned("w-1", "uid-1")));
    let req = as_user(
        review,
        "system:serviceaccount:kube-system:generic-garbage-collector",
    );
    for webhook in [WebhookKind::Mutate, WebhookKind::Validate] {
        // The owner still shows as running: an orphaning owner is only
        // Terminating. Nothing is looked up, nothing restored.
        let allowed = run(
            &req,
            webhook,
            &Policy::default(),
            crate::decide::Lookups::default(),
        )
        .unwrap();
        assert!(allowed.patch.is_empty(), "{:?}", allowed.patch);
    }
}

#[test]
fn removing_the_reference_of_a_gone_owner_is_allowed_labels_kept() {
    let new = object(owner_labels("w-1", "uid-1"), Some(json!([])));
    let (req, _) = request("UPDATE", new, Some(owned("w-1", "uid-1")));
    for gone in [
        Ok(None),
        Ok(Some(("uid-other", false))),
        Ok(Some(("uid-1", true))),
    ] {
        for webhook in [WebhookKind::Mutate, WebhookKind::Validate] {
            let allowed =
                run(&req, webhook, &Policy::default(), lookups(&[("w-1", gone)])).unwrap();
            assert!(allowed.patch.is_empty(), "{gone:?}");
        }
    }
}

#[test]
fn removing_a_client_set_reference_of_a_running_pod_is_denied() {
    let old = object(
        json!({}),
        Some(json!([pod_reference("w-2", "uid-2", Some(false))])),
    );
    let new = object(json!({}), Some(json!([])));
    let (req, _) = request("UPDATE", new, Some(old));
    let err = mutate(&req, running(&[("w-2", "uid-2")])).unwrap_err();
    assert!(
        matches!(err, Denial::OwnerReferenceRemoved { .. }),
        "{err:?}"
    );
}

#[test]
fn update_turning_another_reference_into_a_pod_reference_checks_it() {
    let old = object(
        json!({}),
        Some(
            json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "uid-9"}]),
        ),
    );
    let new = object(
        json!({}),
        Some(json!([pod_reference("gone", "uid-9", None)])),
    );
    let (req, _) = request("UPDATE", new, Some(old));
    let err = mutate(&req, lookups(&[("gone", Ok(None))])).unwrap_err();
    assert!(matches!(err, Denial::OwnerNotFound { .. }), "{err:?}");
}

// Everyday workflows (issue 8): replace, disown, templates, names, delegates.

#[test]
fn a_replace_that_leaves_out_the_reference_and_uid_label_gets_them_back() {
    let original = object(json!({"ownerguard.io/owner-pod": "w-1"}), None);
    let (req, _) = request("UPDATE", original.clone(), Some(owned("w-1", "uid-1")));
    let checks = plan(&req, WebhookKind::Mutate, &Policy::default())
        .unwrap()
        .unwrap();
    assert!(
        checks.lookups().iter().all(|need| need.fresh),
        "liveness for a restore is checked live: {:?}",
        checks.lookups()
    );
    let allowed = mutate(&req, running(&[("w-1", "uid-1")])).unwrap();
    let result = patched(&original, &allowed);
    assert_eq!(result["metadata"]["labels"], owner_labels("w-1", "uid-1"));
    assert_eq!(
        result["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Pod", "name": "w-1", "uid": "uid-1", "controller": false, "blockOwnerDeletion": false}])
    );
    assert_eq!(allowed.warnings.len(), 2, "{:?}", allowed.warnings);
    // What /validate then sees is the restored object, and it passes.
    let (req, _) = request("UPDATE", result, Some(owned("w-1", "uid-1")));
    assert!(validate(&req, running(&[("w-1", "uid-1")])).is_ok());
}

#[test]
fn a_replace_of_an_orphan_is_not_tied_back_to_its_gone_owner() {
    let orphan = object(owner_labels("w-1", "uid-1"), None);
    let original = object(json!({"ownerguard.io/owner-pod": "w-1"}), None);
    let (req, _) = request("UPDATE", original, Some(orphan));
    let allowed = mutate(&req, lookups(&[("w-1", Ok(None))])).unwrap();
    assert!(allowed.patch.is_empty());
}

#[test]
fn validate_denies_a_running_owners_uid_label_left_out() {
    let mut new = owned("w-1", "uid-1");
    new["metadata"]["labels"] = json!({"ownerguard.io/owner-pod": "w-1"});
    let (req, _) = request("UPDATE", new, Some(owned("w-1", "uid-1")));
    let err = validate(&req, running(&[("w-1", "uid-1")])).unwrap_err();
    assert!(matches!(err, Denial::OwnerLabelOmitted { .. }), "{err:?}");
}

#[test]
fn owner_labels_may_go_once_no_running_owner_holds_the_object() {
    // Orphaned: the collector removed the reference, the owner is gone.
    let orphan = object(owner_labels("w-1", "uid-1"), Some(json!([])));
    let (req, _) = request("UPDATE", object(json!({}), Some(json!([]))), Some(orphan));
    assert!(
        mutate(&req, crate::decide::Lookups::default())
            .unwrap()
            .patch
            .is_empty()
    );
    // Still owned by a running owner: refused, with the way out.
    let (req, _) = request(
        "UPDATE",
        object(
            json!({}),
            Some(json!([pod_reference("w-1", "uid-1", Some(false))])),
        ),
        Some(owned("w-1", "uid-1")),
    );
    let err = mutate(&req, running(&[("w-1", "uid-1")])).unwrap_err();
    assert!(matches!(err, Denial::OwnerLabelRemoved { .. }), "{err:?}");
    assert!(err.to_string().contains("--cascade=orphan"), "{err}");
    // The same, the owner gone: allowed.
    assert!(mutate(&req, lookups(&[("w-1", Ok(None))])).is_ok());
}

#[test]
fn removing_only_the_owner_label_leaves_half_a_claim() {
    let new = object(json!({"ownerguard.io/owner-uid": "uid-1"}), Some(json!([])));
    let (req, _) = request(
        "UPDATE",
        new,
        Some(object(owner_labels("w-1", "uid-1"), Some(json!([])))),
    );
    let err = mutate(&req, crate::decide::Lookups::default()).unwrap_err();
    assert!(matches!(err, Denial::HalfClaim { .. }), "{err:?}");
}

fn job(template_labels: Value) -> Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "step-1", "namespace": NS, "labels": {"ownerguard.io/owner-pod": "w-1"}},
        "spec": {"template": {"metadata": {"labels": template_labels}, "spec": {"containers": []}}},
    })
}

#[test]
fn a_pod_template_with_the_owner_label_gets_the_uid_label() {
    let obj = job(json!({"ownerguard.io/owner-pod": "w-1", "app": "agent"}));
    let (_, review) = request("CREATE", obj.clone(), None);
    let req = from_pod(review, "w-1", "uid-1");
    let allowed = mutate(&req, running(&[("w-1", "uid-1")])).unwrap();
    let result = patched(&obj, &allowed);
    assert_eq!(
        result["spec"]["template"]["metadata"]["labels"],
        json!({"ownerguard.io/owner-pod": "w-1", "ownerguard.io/owner-uid": "uid-1", "app": "agent"})
    );
    // The pod the Job controller makes from it: no pod identity, the
    // template's labels only. It is admitted with the worker's reference.
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "step-1-", "namespace": NS, "labels": result["spec"]["template"]["metadata"]["labels"]},
    });
    let (_, review) = request("CREATE", pod.clone(), None);
    let req = as_user(review, "system:serviceaccount:kube-system:job-controller");
    let allowed = mutate(&req, running(&[("w-1", "uid-1")])).unwrap();
    assert_eq!(
        patched(&pod, &allowed)["metadata"]["ownerReferences"][0]["uid"],
        "uid-1"
    );
}

#[test]
fn a_cronjobs_job_template_and_its_pod_template_get_the_uid_label() {
    let labels = json!({"ownerguard.io/owner-pod": "w-1"});
    let obj = json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": NS, "labels": labels},
        "spec": {"schedule": "* * * * *", "jobTemplate": {
            "metadata": {"labels": labels},
            "spec": {"template": {"metadata": {"labels": labels}}},
        }},
    });
    let (_, review) = request("CREATE", obj.clone(), None);
    let req = from_pod(review, "w-1", "uid-1");
    let result = patched(&obj, &mutate(&req, running(&[("w-1", "uid-1")])).unwrap());
    let complete = json!({"ownerguard.io/owner-pod": "w-1", "ownerguard.io/owner-uid": "uid-1"});
    assert_eq!(
        result["spec"]["jobTemplate"]["metadata"]["labels"],
        complete
    );
    assert_eq!(
        result["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"],
        complete
    );
}

#[test]
fn a_pod_template_naming_another_owner_is_denied() {
    let obj = job(json!({"ownerguard.io/owner-pod": "w-2"}));
    let (_, review) = request("CREATE", obj, None);
    let req = from_pod(review, "w-1", "uid-1");
    let err = mutate(&req, running(&[("w-1", "uid-1")])).unwrap_err();
    assert!(
        matches!(err, Denial::TemplateOwnerMismatch { .. }),
        "{err:?}"
    );
}

#[test]
fn a_spec_template_of_another_shape_is_not_a_pod_template() {
    let mut obj = job(json!({}));
    obj["spec"]["template"] = json!("a string in a custom resource");
    let (_, review) = request("CREATE", obj, None);
    let req = from_pod(review, "w-1", "uid-1");
    assert!(mutate(&req, running(&[("w-1", "uid-1")])).is_ok());
}

#[test]
fn self_is_the_requesting_pod_whatever_the_length_of_its_name() {
    let long = format!(
        "{}-28391234-x7k2p",
        "nightly-report-generation-worker".repeat(3)
    );
    assert!(long.len() > 63);
    let obj = object(json!({"ownerguard.io/owner-pod": "Self"}), None);
    let (_, review) = request("CREATE", obj.clone(), None);
    let req = from_pod(review, &long, "uid-1");
    let allowed = mutate(&req, running(&[(long.as_str(), "uid-1")])).unwrap();
    let result = patched(&obj, &allowed);
    assert_eq!(
        result["metadata"]["ownerReferences"][0]["name"],
        long.as_str()
    );
    assert_eq!(
        result["metadata"]["annotations"]["ownerguard.io/owner-pod-name"],
        long.as_str()
    );
    // The completed object names its owner for anyone: a user's update
    // keeps it, a controller's pod made from it would too.
    let (_, review) = request("CREATE", result.clone(), None);
    let again = as_user(review, "system:serviceaccount:kube-system:job-controller");
    assert!(
        mutate(&again, running(&[(long.as_str(), "uid-1")]))
            .unwrap()
            .patch
            .is_empty()
    );
}

#[test]
fn self_without_pod_identity_is_denied_400() {
    let (req, _) = request(
        "CREATE",
        object(json!({"ownerguard.io/owner-pod": "Self"}), None),
        None,
    );
    let err = mutate(&req, crate::decide::Lookups::default()).unwrap_err();
    assert!(
        matches!(err, Denial::SelfWithoutPodIdentity { .. }),
        "{err:?}"
    );
    assert_eq!(err.code(), 400);
}

#[test]
fn a_worker_naming_another_pod_hears_that_first_not_the_uid() {
    let (_, review) = request(
        "CREATE",
        object(json!({"ownerguard.io/owner-pod": "w-1"}), None),
        None,
    );
    // Its $HOSTNAME was not its pod name (an indexed Job, say).
    let req = from_pod(review, "step-7-0-x7k2p", "uid-7");
    let err = mutate(&req, crate::decide::Lookups::default()).unwrap_err();
    assert!(matches!(err, Denial::RequesterNotOwner { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("downward API"), "{message}");
    assert!(message.contains("step-7-0-x7k2p"), "{message}");
}

#[test]
fn a_delegate_may_declare_another_pod_of_its_namespace_still_looked_up() {
    let (_, review) = request("CREATE", object(owner_labels("w-1", "uid-1"), None), None);
    let req = from_pod(review, "broker-0", "uid-b");
    let err = mutate(&req, running(&[("w-1", "uid-1")])).unwrap_err();
    assert!(
        err.to_string().contains("--delegate agents/worker"),
        "{err}"
    );
    let policy = Policy {
        delegates: vec!["agents/worker".parse().unwrap()],
        ..Policy::default()
    };
    assert!(
        run(
            &req,
            WebhookKind::Mutate,
            &policy,
            running(&[("w-1", "uid-1")])
        )
        .is_ok()
    );
    let err = run(
        &req,
        WebhookKind::Mutate,
        &policy,
        lookups(&[("w-1", Ok(None))]),
    )
    .unwrap_err();
    assert!(matches!(err, Denial::OwnerNotFound { .. }), "{err:?}");
}

/// Every denial names the object, the namespace, the owner and a fix.
#[test]
fn every_denial_names_object_namespace_owner_and_fix() {
    let at = Subject {
        object: ObjectName {
            kind: "Job".into(),
            name: "step-7".into(),
            generated: false,
        },
        namespace: "agents".to_string(),
        owner: None,
    };
    let owner = "w-1".to_string();
    let key = "ownerguard.io/owner-uid".to_string();
    let denials = vec![
        Denial::InvalidOwnerName {
            at: at.clone(),
            what: "label",
            key: key.clone(),
            pod_key: key.clone(),
            value: "w-1_".into(),
        },
        Denial::InvalidOwnerUid {
            at: at.clone(),
            owner: owner.clone(),
            key: key.clone(),
            value: "".into(),
        },
        Denial::MissingOwnerUid {
            at: at.clone(),
            owner: owner.clone(),
            key: key.clone(),
        },
        Denial::UidDisagreesWithRequester {
            at: at.clone(),
            owner: owner.clone(),
            key: key.clone(),
            declared: "a".into(),
        },
        Denial::RequesterNotOwner {
            at: at.clone(),
            owner: owner.clone(),
            requester: "w-2".into(),
            service_account: "agents/worker".into(),
            key: key.clone(),
        },
        Denial::RequesterAdoptsObject {
            at: at.clone(),
            owner: owner.clone(),
            requester: "w-2".into(),
            reference: "w-2".into(),
            same_name: crate::decide::denial::SameName::No,
            service_account: "agents/worker".into(),
        },
        Denial::RequesterReleasesObject {
            at: at.clone(),
            owner: owner.clone(),
            requester: "w-2".into(),
            same_name: crate::decide::denial::SameName::No,
            service_account: "agents/worker".into(),
        },
        Denial::SelfWithoutPodIdentity {
            at: at.clone(),
            key: "ownerguard.io/owner-pod (w-1 unknown)".into(),
        },
        Denial::SelfOnCopiedLabels {
            at: at.clone(),
            key: key.clone(),
            owner: owner.clone(),
        },
        Denial::SelfInDefaultedJobLabels {
            at: at.clone(),
            key: key.clone(),
            owner: owner.clone(),
        },
        Denial::StrayOwnerAnnotation {
            at: at.clone(),
            owner: owner.clone(),
            label: "w-2".into(),
            key: key.clone(),
            pod_key: key.clone(),
        },
        Denial::HalfClaim {
            at: at.clone(),
            key: "label ownerguard.io/owner-uid of w-1".into(),
            pod_key: key.clone(),
        },
        Denial::OwnerNotFound {
            at: at.clone(),
            owner: owner.clone(),
        },
        Denial::OwnerUidMismatch {
            at: at.clone(),
            owner: owner.clone(),
            declared: "a".into(),
        },
        Denial::OwnerTerminating {
            at: at.clone(),
            owner: owner.clone(),
        },
        Denial::OwnerFinished {
            at: at.clone(),
            owner: owner.clone(),
            phase: crate::owner::Finished::Failed,
        },
        Denial::LookupFailed {
            at: at.clone(),
            owner: owner.clone(),
            reason: "timed out",
        },
        Denial::InvalidNamespace {
            object: at.object.clone(),
            namespace: "agents".into(),
            owner: owner.clone(),
            problem: "is not a namespace name",
        },
        Denial::MalformedIdentity {
            at: at.clone(),
            owner: owner.clone(),
            keys: "pod-name",
            problem: "no value",
        },
        Denial::MalformedReference {
            at: at.clone(),
            owner: owner.clone(),
            index: 0,
            field: "uid",
        },
        Denial::InvalidReferenceName {
            at: at.clone(),
            owner: owner.clone(),
            reference: "w-1/status".into(),
            index: 0,
        },
        Denial::InexactPodReference {
            at: at.clone(),
            owner: owner.clone(),
            reference: "w-2".into(),
            index: 0,
            api_version: "v1".into(),
            kind: "pod".into(),
        },
        Denial::ContradictingReference {
            at: at.clone(),
            owner: owner.clone(),
            index: 1,
            api_version: "v1".into(),
            kind: "pod".into(),
            name: "w-1".into(),
        },
        Denial::ConflictingUid {
            at: at.clone(),
            owner: owner.clone(),
            index: 1,
        },
        Denial::TooManyReferences {
            at: at.clone(),
            owner: owner.clone(),
            count: 40,
            limit: 32,
        },
        Denial::TooManyEntries {
            at: at.clone(),
            owner: Some(owner.clone()),
            field: "metadata.ownerReferences".into(),
            limit: 10_000,
        },
        Denial::TemplateOwnerMismatch {
            at: at.clone(),
            owner: owner.clone(),
            template: "claim template",
            field: "spec.volumeClaimTemplates[0]".into(),
            template_owner: "w-2".into(),
            what: "in its owner-pod label",
        },
        Denial::TemplateUidUnknown {
            at: at.clone(),
            owner: owner.clone(),
            template: "pod template",
            field: "spec.template".into(),
            key: key.clone(),
        },
        Denial::TemplatePodReference {
            at: at.clone(),
            owner: owner.clone(),
            template: "claim template",
            field: "spec.volumeClaimTemplates[0]".into(),
            index: 0,
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: "w-2".into(),
        },
        Denial::OwnerLabelChanged {
            at: at.clone(),
            owner: owner.clone(),
            key: key.clone(),
            old: "'a'".into(),
            new: "'b'".into(),
        },
        Denial::OwnerLabelAdded {
            at: at.clone(),
            owner: owner.clone(),
            key: key.clone(),
        },
        Denial::OwnerLabelRemoved {
            at: at.clone(),
            owner: owner.clone(),
            key: key.clone(),
        },
        Denial::OwnerReferenceRemoved {
            at: at.clone(),
            owner: owner.clone(),
        },
        Denial::OwnerReferenceChanged {
            at: at.clone(),
            owner: owner.clone(),
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: "w-2".into(),
        },
        Denial::MissingOldObject {
            at: at.clone(),
            owner: owner.clone(),
        },
        Denial::MissingObject {
            owner: owner.clone(),
            at: at.clone(),
            operation: "CREATE of w-1's object".into(),
        },
        Denial::ReferenceMissing {
            at: at.clone(),
            owner: owner.clone(),
            uid: "u".into(),
        },
        Denial::BlockingReference {
            at: at.clone(),
            owner: owner.clone(),
            labelled: true,
        },
        Denial::OwnerLabelOmitted {
            at: at.clone(),
            owner: owner.clone(),
            key: key.clone(),
        },
    ];
    // A variant added without a line above fails to compile here.
    let listed = |denial: &Denial| match denial {
        Denial::InvalidOwnerName { .. }
        | Denial::InvalidOwnerUid { .. }
        | Denial::MissingOwnerUid { .. }
        | Denial::UidDisagreesWithRequester { .. }
        | Denial::RequesterNotOwner { .. }
        | Denial::RequesterAdoptsObject { .. }
        | Denial::RequesterReleasesObject { .. }
        | Denial::SelfWithoutPodIdentity { .. }
        | Denial::SelfOnCopiedLabels { .. }
        | Denial::SelfInDefaultedJobLabels { .. }
        | Denial::StrayOwnerAnnotation { .. }
        | Denial::HalfClaim { .. }
        | Denial::OwnerNotFound { .. }
        | Denial::OwnerUidMismatch { .. }
        | Denial::OwnerTerminating { .. }
        | Denial::OwnerFinished { .. }
        | Denial::LookupFailed { .. }
        | Denial::InvalidNamespace { .. }
        | Denial::MalformedIdentity { .. }
        | Denial::MalformedReference { .. }
        | Denial::InvalidReferenceName { .. }
        | Denial::InexactPodReference { .. }
        | Denial::ContradictingReference { .. }
        | Denial::ConflictingUid { .. }
        | Denial::TooManyReferences { .. }
        | Denial::TooManyEntries { .. }
        | Denial::TemplateOwnerMismatch { .. }
        | Denial::TemplateUidUnknown { .. }
        | Denial::TemplatePodReference { .. }
        | Denial::OwnerLabelChanged { .. }
        | Denial::OwnerLabelAdded { .. }
        | Denial::OwnerLabelRemoved { .. }
        | Denial::OwnerReferenceRemoved { .. }
        | Denial::OwnerReferenceChanged { .. }
        | Denial::MissingOldObject { .. }
        | Denial::MissingObject { .. }
        | Denial::ReferenceMissing { .. }
        | Denial::BlockingReference { .. }
        | Denial::OwnerLabelOmitted { .. } => true,
        Denial::ClusterScoped { .. } => false,
    };
    assert_eq!(denials.iter().filter(|d| listed(d)).count(), 39);
    for denial in denials {
        let message = denial.to_string();
        assert!(message.contains("Job 'step-7'"), "no object: {message}");
        assert!(message.contains("'agents'"), "no namespace: {message}");
        assert!(message.contains("w-1"), "no owner: {message}");
        // The fix follows the last colon: a sentence that says what to do.
        let fix = message.rsplit(": ").next().unwrap();
        assert!(fix.split_whitespace().count() >= 4, "no fix: {message}");
    }
    // The cluster-scoped denial has no namespace to name: it says so.
    let message = Denial::ClusterScoped {
        object: at.object,
        owner,
        what: "labels".into(),
    }
    .to_string();
    assert!(
        message.contains("has no namespace") && message.contains("w-1"),
        "{message}"
    );
}

#[test]
fn client_values_in_messages_are_cut_and_escaped() {
    let at = Subject {
        object: ObjectName {
            kind: "Pod".into(),
            name: "a".into(),
            generated: false,
        },
        namespace: "agents".into(),
        owner: None,
    };
    let long = format!("x\n{}", "y".repeat(10_000));
    let message = Denial::InvalidReferenceName {
        at,
        owner: long.clone(),
        reference: long,
        index: 0,
    }
    .to_string();
    assert!(message.len() < 400, "{} characters", message.len());
    assert!(!message.contains('\n'), "{message}");
}

#[test]
fn an_update_of_an_object_with_thousands_of_references_is_linear_work() {
    // Found by review: comparing every pair of 27,000 references held a
    // core for seconds. Decided here in well under one, even unoptimised.
    let mut refs: Vec<Value> = (0..20_000)
        .map(|i| json!({"apiVersion": "x/v1", "kind": "F", "name": "a", "uid": i.to_string()}))
        .collect();
    refs.push(pod_reference("w-1", "uid-1", Some(false)));
    let old = object(owner_labels("w-1", "uid-1"), Some(json!(refs.clone())));
    let mut labels = owner_labels("w-1", "uid-1");
    labels["x"] = json!("y");
    let new = object(labels, Some(json!(refs)));
    let (req, _) = request("UPDATE", new, Some(old));
    let allowed = mutate(&req, crate::decide::Lookups::default()).unwrap();
    assert!(allowed.patch.is_empty());
}

#[test]
fn a_template_update_leaves_an_old_incomplete_template_alone() {
    // A Job made before ownerguard: its template never got the uid label.
    // Patching it now would be refused (a Job's template is immutable) or
    // restart a Deployment's pods.
    let mut old = job(json!({"ownerguard.io/owner-pod": "w-1"}));
    old["metadata"]["labels"] = owner_labels("w-1", "uid-1");
    old["metadata"]["ownerReferences"] = json!([pod_reference("w-1", "uid-1", Some(false))]);
    let mut new = old.clone();
    new["metadata"]["labels"]["x"] = json!("y");
    let (req, _) = request("UPDATE", new, Some(old.clone()));
    assert!(
        mutate(&req, crate::decide::Lookups::default())
            .unwrap()
            .patch
            .is_empty()
    );
    // A template the update labels anew is completed, once its owner is
    // found running with that uid, as on CREATE.
    let mut unlabelled = old.clone();
    unlabelled["spec"]["template"]["metadata"]["labels"] = json!({});
    let (req, _) = request("UPDATE", old.clone(), Some(unlabelled));
    let allowed = mutate(&req, running(&[("w-1", "uid-1")])).unwrap();
    assert_eq!(
        patched(&old, &allowed)["spec"]["template"]["metadata"]["labels"]["ownerguard.io/owner-uid"],
        "uid-1"
    );
}

#[test]
fn a_template_labelled_anew_on_update_is_checked_against_the_running_owner() {
    // A Deployment whose template the update labels for its owner: what
    // its controller makes from it is checked against that pod, so the
    // update is too, as a CREATE of the same object would be.
    let template = |labels: Value| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "agents", "labels": {}},
            "spec": {"template": {"metadata": {"labels": labels}}}})
    };
    // Recorded uid, owner gone: refused, never completed with a uid no pod has.
    let mut old = template(json!({"app": "a"}));
    old["metadata"]["labels"] = owner_labels("w-1", "uid-1");
    old["metadata"]["ownerReferences"] = json!([pod_reference("w-1", "uid-1", Some(false))]);
    let mut new = old.clone();
    new["spec"]["template"]["metadata"]["labels"] =
        json!({"app": "a", "ownerguard.io/owner-pod": "w-1"});
    let (req, _) = request("UPDATE", new.clone(), Some(old.clone()));
    for webhook in [WebhookKind::Mutate, WebhookKind::Validate] {
        let gone = lookups(&[("w-1", Ok(None))]);
        let err = run(&req, webhook, &Policy::default(), gone).unwrap_err();
        assert_eq!(err.code(), 403, "{webhook:?}: {err}");
        assert!(err.to_string().contains("'w-1' not found"), "{err}");
    }
    // The owner runs with another uid (the name was reused): refused.
    let err = mutate(&req, running(&[("w-1", "uid-2")])).unwrap_err();
    assert!(
        err.to_string().contains("does not have uid 'uid-1'"),
        "{err}"
    );
    assert!(mutate(&req, running(&[("w-1", "uid-1")])).is_ok());

    // Labelled by name only (before ownerguard), the template given a
    // stale uid: refused, though the object records none to compare.
    let mut legacy = template(json!({"app": "a"}));
    legacy["metadata"]["labels"] = json!({"ownerguard.io/owner-pod": "w-1"});
    let mut stale = legacy.clone();
    stale["spec"]["template"]["metadata"]["labels"] =
        json!({"app": "a", "ownerguard.io/owner-pod": "w-1", "ownerguard.io/owner-uid": "uid-0"});
    let (req, _) = request("UPDATE", stale, Some(legacy));
    for webhook in [WebhookKind::Mutate, WebhookKind::Validate] {
        let err = run(
            &req,
            webhook,
            &Policy::default(),
            running(&[("w-1", "uid-1")]),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("does not have uid 'uid-0'"),
            "{webhook:?}: {err}"
        );
    }

    // Only the uid label left out (a replace of the original manifest),
    // the owner gone: put back without asking, since what is made from it
    // is refused anyway.
    let mut labelled = old.clone();
    labelled["spec"]["template"]["metadata"]["labels"] =
        json!({"app": "a", "ownerguard.io/owner-pod": "w-1", "ownerguard.io/owner-uid": "uid-1"});
    let mut replaced = labelled.clone();
    replaced["spec"]["template"]["metadata"]["labels"] =
        json!({"app": "a", "ownerguard.io/owner-pod": "w-1"});
    let (req, _) = request("UPDATE", replaced.clone(), Some(labelled));
    let allowed = mutate(&req, lookups(&[("w-1", Ok(None))])).unwrap();
    assert_eq!(
        patched(&replaced, &allowed)["spec"]["template"]["metadata"]["labels"]["ownerguard.io/owner-uid"],
        "uid-1"
    );
}

// SPEC §3 rule 11: a finished owner is no owner.

/// Pod `name` with `uid`, finished in `phase`.
fn finished(name: &str, uid: &str, phase: crate::owner::Finished) -> crate::decide::Lookups {
    let pod = ObservedPod {
        finished: Some(phase),
        ..ObservedPod::running(uid)
    };
    crate::decide::Lookups::from_iter([(
        name.to_string(),
        Lookup {
            source: Source::Api,
            outcome: Ok(Some(pod)),
        },
    )])
}

#[test]
fn rule_11_create_for_a_succeeded_or_failed_owner_is_denied_403_owner_finished() {
    use crate::owner::Finished;
    for phase in [Finished::Succeeded, Finished::Failed] {
        // /mutate: the labels alone; /validate: the object /mutate made.
        let cases = [
            (
                WebhookKind::Mutate,
                object(owner_labels("w-1", "uid-1"), None),
            ),
            (WebhookKind::Validate, owned("w-1", "uid-1")),
        ];
        for (webhook, obj) in cases {
            let (req, _) = request("CREATE", obj, None);
            let err = run(
                &req,
                webhook,
                &Policy::default(),
                finished("w-1", "uid-1", phase),
            )
            .unwrap_err();
            assert!(
                matches!(err, Denial::OwnerFinished { phase: p, .. } if p == phase),
                "{phase} {webhook:?}: {err:?}"
            );
            assert_eq!(err.code(), 403);
            let message = err.to_string();
            assert!(
                message.contains(&format!("owner pod 'w-1' has finished (phase {phase})")),
                "{message}"
            );
            assert!(message.contains("running worker pod"), "{message}");
            // The uid the requester named is fine to repeat; no other is
            // known to the message.
            assert!(!message.contains("uid-"), "{message}");
        }
    }
}

#[test]
fn rule_11_a_pod_reference_alone_to_a_finished_pod_is_denied() {
    let obj = object(
        json!({}),
        Some(json!([pod_reference("w-2", "uid-2", Some(false))])),
    );
    let (req, _) = request("CREATE", obj, None);
    let err = mutate(
        &req,
        finished("w-2", "uid-2", crate::owner::Finished::Failed),
    )
    .unwrap_err();
    assert!(matches!(err, Denial::OwnerFinished { .. }), "{err:?}");
}

#[test]
fn rule_11_a_finished_pod_being_deleted_is_told_as_being_deleted() {
    let (req, _) = request("CREATE", object(owner_labels("w-1", "uid-1"), None), None);
    let pod = ObservedPod {
        terminating: true,
        finished: Some(crate::owner::Finished::Succeeded),
        ..ObservedPod::running("uid-1")
    };
    let lookups = crate::decide::Lookups::from_iter([(
        "w-1".to_string(),
        Lookup {
            source: Source::Api,
            outcome: Ok(Some(pod)),
        },
    )]);
    let err = mutate(&req, lookups).unwrap_err();
    assert!(matches!(err, Denial::OwnerTerminating { .. }), "{err:?}");
}

#[test]
fn rule_11_update_removing_the_reference_of_a_finished_owner_is_allowed_not_restored() {
    use crate::owner::Finished;
    for phase in [Finished::Succeeded, Finished::Failed] {
        // A deliberate removal, labels kept.
        let new = object(owner_labels("w-1", "uid-1"), Some(json!([])));
        let (req, _) = request("UPDATE", new, Some(owned("w-1", "uid-1")));
        for webhook in [WebhookKind::Mutate, WebhookKind::Validate] {
            let lookups = finished("w-1", "uid-1", phase);
            let allowed = run(&req, webhook, &Policy::default(), lookups).unwrap();
            assert!(allowed.patch.is_empty(), "{phase} {webhook:?}");
            assert!(allowed.warnings.is_empty(), "{:?}", allowed.warnings);
        }
        // A kubectl replace of the original manifest: neither the
        // reference nor the uid label comes back for a finished owner.
        let original = object(json!({"ownerguard.io/owner-pod": "w-1"}), None);
        let (req, _) = request("UPDATE", original, Some(owned("w-1", "uid-1")));
        let allowed = mutate(&req, finished("w-1", "uid-1", phase)).unwrap();
        assert!(allowed.patch.is_empty(), "{phase}: {:?}", allowed.patch);
        let allowed = validate(&req, finished("w-1", "uid-1", phase)).unwrap();
        assert!(allowed.patch.is_empty());
    }
}

#[test]
fn rule_11_owner_labels_may_go_once_the_owner_has_finished() {
    let (req, _) = request(
        "UPDATE",
        object(
            json!({}),
            Some(json!([pod_reference("w-1", "uid-1", Some(false))])),
        ),
        Some(owned("w-1", "uid-1")),
    );
    for webhook in [WebhookKind::Mutate, WebhookKind::Validate] {
        let lookups = finished("w-1", "uid-1", crate::owner::Finished::Failed);
        assert!(run(&req, webhook, &Policy::default(), lookups).is_ok());
    }
    // The same while the owner runs: refused (the rule the finished owner
    // is exempt from).
    let err = mutate(&req, running(&[("w-1", "uid-1")])).unwrap_err();
    assert!(matches!(err, Denial::OwnerLabelRemoved { .. }), "{err:?}");
}

#[test]
fn rule_11_a_client_set_reference_to_a_finished_pod_may_be_removed() {
    let old = object(
        json!({}),
        Some(json!([pod_reference("w-2", "uid-2", Some(false))])),
    );
    let (req, _) = request("UPDATE", object(json!({}), Some(json!([]))), Some(old));
    let allowed = mutate(
        &req,
        finished("w-2", "uid-2", crate::owner::Finished::Succeeded),
    )
    .unwrap();
    assert!(allowed.patch.is_empty());
}

#[test]
fn rule_11_update_adding_a_reference_to_a_finished_pod_is_denied() {
    let (req, _) = request(
        "UPDATE",
        object(
            json!({}),
            Some(json!([pod_reference("w-2", "uid-2", Some(false))])),
        ),
        Some(object(json!({}), None)),
    );
    for webhook in [WebhookKind::Mutate, WebhookKind::Validate] {
        let lookups = finished("w-2", "uid-2", crate::owner::Finished::Failed);
        let err = run(&req, webhook, &Policy::default(), lookups).unwrap_err();
        assert!(matches!(err, Denial::OwnerFinished { .. }), "{err:?}");
    }
}

#[test]
fn rule_11_the_lookup_metric_counts_a_finished_owner_as_finished() {
    let lookup = finished("w-1", "uid-1", crate::owner::Finished::Succeeded)
        .remove("w-1")
        .unwrap();
    assert_eq!(lookup.result_label("uid-1"), "finished");
    assert_eq!(lookup.result_label("uid-2"), "uid_mismatch");
}

// Issue 14 (SPEC §3 UPDATE): no pod makes itself co-owner of another
// worker's object, nor adopts an orphaned one.

/// An UPDATE from pod `name` (uid `uid`) of `old` into `new`.
fn update_from_pod(new: Value, old: Value, name: &str, uid: &str) -> AdmissionRequest<'static> {
    let (_, review) = request("UPDATE", new, Some(old));
    from_pod(review, name, uid)
}

/// `meta` with `references` added to its `ownerReferences`.
fn with_references(mut object: Value, references: &[Value]) -> Value {
    let list = object["metadata"]
        .as_object_mut()
        .unwrap()
        .entry("ownerReferences")
        .or_insert_with(|| json!([]));
    list.as_array_mut()
        .unwrap()
        .extend(references.iter().cloned());
    object
}

#[test]
fn update_requester_check_a_pod_adding_itself_to_another_workers_object_is_denied() {
    let own = pod_reference("w-2", "uid-2", Some(false));
    let alive = || running(&[("w-1", "uid-1"), ("w-2", "uid-2")]);
    // Every way an update adds a reference of its own to an object whose
    // owner is w-1: labelled and referenced, orphaned (no reference left,
    // the label kept), only w-1's reference (no label), only the owner
    // label (made before install).
    let labelled = owned("w-1", "uid-1");
    let orphan = object(owner_labels("w-1", "uid-1"), Some(json!([])));
    let unlabelled = object(
        json!({}),
        Some(json!([pod_reference("w-1", "uid-1", None)])),
    );
    let legacy = object(json!({"ownerguard.io/owner-pod": "w-1"}), None);
    let self_object = {
        let mut object = owned("w-1", "uid-1");
        object["metadata"]["labels"]["ownerguard.io/owner-pod"] = json!("Self");
        object["metadata"]["annotations"] = json!({"ownerguard.io/owner-pod-name": "w-1"});
        object
    };
    for old in [labelled, orphan, unlabelled, legacy, self_object] {
        let new = with_references(old.clone(), std::slice::from_ref(&own));
        let req = update_from_pod(new, old.clone(), "w-2", "uid-2");
        for webhook in [WebhookKind::Mutate, WebhookKind::Validate] {
            let err = run(&req, webhook, &Policy::default(), alive()).unwrap_err();
            assert!(
                matches!(&err, Denial::RequesterAdoptsObject { owner, requester, .. } if owner == "w-1" && requester == "w-2"),
                "{old}: {err:?}"
            );
            assert_eq!(err.code(), 403);
            let message = err.to_string();
            for part in [
                "prompt-1",
                "'agents'",
                "w-1",
                "w-2",
                "--delegate agents/worker",
            ] {
                assert!(message.contains(part), "{part}: {message}");
            }
        }
    }
    // An entry of another kind rewritten into the requester's reference
    // under its uid, and the requester's reference under another uid.
    let old = with_references(
        owned("w-1", "uid-1"),
        &[json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "uid-2"})],
    );
    let mut rewritten = owned("w-1", "uid-1");
    rewritten = with_references(rewritten, std::slice::from_ref(&own));
    let req = update_from_pod(rewritten, old, "w-2", "uid-2");
    let err = mutate(&req, alive()).unwrap_err();
    assert!(
        matches!(err, Denial::RequesterAdoptsObject { .. }),
        "{err:?}"
    );
    let other_uid = with_references(
        owned("w-1", "uid-1"),
        &[pod_reference("w-2", "uid-9", Some(false))],
    );
    let req = update_from_pod(other_uid, owned("w-1", "uid-1"), "w-2", "uid-2");
    let err = mutate(&req, alive()).unwrap_err();
    assert!(
        matches!(err, Denial::RequesterAdoptsObject { .. }),
        "{err:?}"
    );
    // A co-owner's object: w-2 may not add itself beside w-3 either.
    let co_owned = with_references(
        object(json!({}), Some(json!([]))),
        &[pod_reference("w-3", "uid-3", Some(false))],
    );
    let new = with_references(co_owned.clone(), std::slice::from_ref(&own));
    let req = update_from_pod(new, co_owned, "w-2", "uid-2");
    let err = mutate(&req, alive()).unwrap_err();
    assert!(
        matches!(&err, Denial::RequesterAdoptsObject { owner, .. } if owner == "w-3"),
        "{err:?}"
    );
}

#[test]
fn update_requester_check_a_new_pod_of_the_owners_name_is_another_worker() {
    // The object belongs to w-1 under uid-1; a pod named w-1 with another
    // uid (the worker replaced) adds itself under its own uid.
    let old = object(
        json!({}),
        Some(json!([pod_reference("w-1", "uid-1", None)])),
    );
    let new = with_references(old.clone(), &[pod_reference("w-1", "uid-new", Some(false))]);
    let req = update_from_pod(new, old, "w-1", "uid-new");
    let err = mutate(&req, running(&[("w-1", "uid-new")])).unwrap_err();
    assert!(
        matches!(
            &err,
            Denial::RequesterAdoptsObject {
                same_name: crate::decide::denial::SameName::EarlierPod,
                ..
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("an earlier pod of that name"), "{message}");
    assert!(!message.contains("uid-1"), "{message}");
}

#[test]
fn update_requester_check_an_object_labelled_by_name_only_proves_no_owner() {
    // Labelled by name before ownerguard (or its uid label removed since):
    // a pod of that name may be the one that made it, or a later one.
    let legacy = object(json!({"ownerguard.io/owner-pod": "w-1"}), None);
    let new = with_references(
        legacy.clone(),
        &[pod_reference("w-1", "uid-1", Some(false))],
    );
    let req = update_from_pod(new, legacy, "w-1", "uid-1");
    let err = mutate(&req, running(&[("w-1", "uid-1")])).unwrap_err();
    assert!(
        matches!(
            &err,
            Denial::RequesterAdoptsObject {
                same_name: crate::decide::denial::SameName::UidUnknown,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("records no uid"), "{err}");
}

#[test]
fn update_requester_check_a_pod_releases_only_what_it_owns() {
    // A new pod of the old owner's name strips the uid label of its
    // predecessor's orphan (to adopt it by name next): refused.
    let orphan = object(owner_labels("w-1", "uid-old"), Some(json!([])));
    let stripped = object(json!({"ownerguard.io/owner-pod": "w-1"}), Some(json!([])));
    let req = update_from_pod(stripped, orphan.clone(), "w-1", "uid-new");
    let err = mutate(&req, running(&[("w-1", "uid-new")])).unwrap_err();
    assert!(
        matches!(
            &err,
            Denial::RequesterReleasesObject {
                same_name: crate::decide::denial::SameName::EarlierPod,
                ..
            }
        ),
        "{err:?}"
    );
    // Another pod removing the reference of an owner being deleted (the
    // collector's orphaning is the collector's, rule 14): refused.
    let owned = owned("w-1", "uid-1");
    let orphaned = object(owner_labels("w-1", "uid-1"), Some(json!([])));
    let req = update_from_pod(orphaned.clone(), owned.clone(), "w-2", "uid-2");
    let err = mutate(&req, lookups(&[("w-1", Ok(Some(("uid-1", true))))])).unwrap_err();
    assert!(
        matches!(&err, Denial::RequesterReleasesObject { owner, requester, .. } if owner == "w-1" && requester == "w-2"),
        "{err:?}"
    );
    // Another pod removing every owner label of an orphan: refused.
    let unlabelled = object(json!({}), Some(json!([])));
    let req = update_from_pod(unlabelled.clone(), orphan.clone(), "w-2", "uid-2");
    assert!(matches!(
        mutate(&req, running(&[])).unwrap_err(),
        Denial::RequesterReleasesObject { .. }
    ));
    // The owner itself, and a person or controller: as before.
    let req = update_from_pod(orphaned.clone(), owned.clone(), "w-1", "uid-1");
    assert!(mutate(&req, lookups(&[("w-1", Ok(Some(("uid-1", true))))])).is_ok());
    let (req, _) = request("UPDATE", unlabelled, Some(orphan));
    assert!(mutate(&req, running(&[])).is_ok());
    // A replace by another pod that leaves out what ownerguard added while
    // the owner runs releases nothing: it is put back.
    let replaced = object(json!({"ownerguard.io/owner-pod": "w-1"}), None);
    let req = update_from_pod(replaced, owned, "w-2", "uid-2");
    let allowed = mutate(&req, lookups(&[("w-1", Ok(Some(("uid-1", false))))])).unwrap();
    assert!(!allowed.patch.is_empty());
}

#[test]
fn update_a_reference_beside_the_owners_may_go_while_its_pod_runs() {
    // The statefulset controller's claim retention: it marks a claim with
    // its pod's controller reference on scale-down, and takes it back when
    // the pod returns to the set; the worker's reference stays.
    let marked = with_references(
        owned("w-1", "uid-1"),
        &[
            json!({"apiVersion": "v1", "kind": "Pod", "name": "db-3", "uid": "uid-db", "controller": true, "blockOwnerDeletion": false}),
        ],
    );
    let (_, review) = request("UPDATE", owned("w-1", "uid-1"), Some(marked.clone()));
    let req = as_user(
        review,
        "system:serviceaccount:kube-system:statefulset-controller",
    );
    let allowed = mutate(&req, running(&[("w-1", "uid-1"), ("db-3", "uid-db")])).unwrap();
    assert!(allowed.patch.is_empty());
    // The owner's own reference stays judged: refused while it runs.
    let bare = object(owner_labels("w-1", "uid-1"), Some(json!([])));
    let (_, review) = request("UPDATE", bare, Some(owned("w-1", "uid-1")));
    let req = as_user(
        review,
        "system:serviceaccount:kube-system:statefulset-controller",
    );
    assert!(matches!(
        validate(&req, running(&[("w-1", "uid-1")])).unwrap_err(),
        Denial::OwnerReferenceRemoved { .. }
    ));
    // Without the owner's reference (an object from before ownerguard),
    // every running pod's reference stays.
    let legacy = object(
        owner_labels("w-1", "uid-1"),
        Some(json!([pod_reference("db-3", "uid-db", Some(false))])),
    );
    let bare = object(owner_labels("w-1", "uid-1"), Some(json!([])));
    let (req, _) = request("UPDATE", bare, Some(legacy));
    assert!(matches!(
        mutate(&req, running(&[("w-1", "uid-1"), ("db-3", "uid-db")])).unwrap_err(),
        Denial::OwnerReferenceRemoved { .. }
    ));
}

#[test]
fn update_requester_check_what_still_passes() {
    // The owner completing its own object made before install, which
    // records its uid.
    let legacy = object(owner_labels("w-1", "uid-1"), None);
    let new = with_references(
        legacy.clone(),
        &[pod_reference("w-1", "uid-1", Some(false))],
    );
    let req = update_from_pod(new.clone(), legacy.clone(), "w-1", "uid-1");
    assert!(mutate(&req, running(&[("w-1", "uid-1")])).is_ok());
    let legacy = object(json!({"ownerguard.io/owner-pod": "w-1"}), None);
    // The owner itself, adding nothing new: its own object, any edit.
    let mut edited = owned("w-1", "uid-1");
    edited["data"]["a"] = json!("c");
    let req = update_from_pod(edited, owned("w-1", "uid-1"), "w-1", "uid-1");
    assert!(
        mutate(&req, running(&[("w-1", "uid-1")]))
            .unwrap()
            .patch
            .is_empty()
    );
    // A pod adding its reference to an object nobody owns: as on CREATE.
    let nobodys = object(json!({"app": "x"}), None);
    let new = with_references(
        nobodys.clone(),
        &[pod_reference("w-2", "uid-2", Some(false))],
    );
    let req = update_from_pod(new, nobodys, "w-2", "uid-2");
    assert!(mutate(&req, running(&[("w-2", "uid-2")])).is_ok());
    // A controller or a person (no pod identity) is not checked; the
    // reference is still looked up.
    let new = with_references(
        legacy.clone(),
        &[pod_reference("w-1", "uid-1", Some(false))],
    );
    let (req, _) = request("UPDATE", new, Some(legacy.clone()));
    assert!(mutate(&req, running(&[("w-1", "uid-1")])).is_ok());
    let orphan = object(owner_labels("w-1", "uid-1"), Some(json!([])));
    let adopted = with_references(
        orphan.clone(),
        &[pod_reference("w-2", "uid-2", Some(false))],
    );
    let (_, review) = request("UPDATE", adopted.clone(), Some(orphan.clone()));
    let req = as_user(review, "system:serviceaccount:kube-system:job-controller");
    assert!(mutate(&req, running(&[("w-2", "uid-2")])).is_ok());
    // A kubectl replace by the owner: what ownerguard added comes back.
    let replaced = object(json!({"ownerguard.io/owner-pod": "w-1"}), None);
    let req = update_from_pod(replaced, owned("w-1", "uid-1"), "w-1", "uid-1");
    let allowed = mutate(&req, lookups(&[("w-1", Ok(Some(("uid-1", false))))])).unwrap();
    assert!(!allowed.patch.is_empty());
}

#[test]
fn update_requester_check_warn_off_and_delegates() {
    let orphan = object(owner_labels("w-1", "uid-1"), Some(json!([])));
    let adopted = with_references(
        orphan.clone(),
        &[pod_reference("w-2", "uid-2", Some(false))],
    );
    let req = update_from_pod(adopted, orphan, "w-2", "uid-2");
    let alive = || running(&[("w-2", "uid-2")]);
    let warn = Policy {
        requester_check: RequesterCheck::Warn,
        ..Policy::default()
    };
    let allowed = run(&req, WebhookKind::Mutate, &warn, alive()).unwrap();
    assert!(
        allowed
            .warnings
            .iter()
            .any(|w| w.contains("owned by pod 'w-1'")),
        "{:?}",
        allowed.warnings
    );
    let off = Policy {
        requester_check: RequesterCheck::Off,
        ..Policy::default()
    };
    let allowed = run(&req, WebhookKind::Mutate, &off, alive()).unwrap();
    assert!(allowed.warnings.is_empty(), "{:?}", allowed.warnings);
    let delegates = Policy {
        delegates: vec!["agents/worker".parse().unwrap()],
        ..Policy::default()
    };
    assert!(run(&req, WebhookKind::Mutate, &delegates, alive()).is_ok());
    // Still looked up.
    let err = run(
        &req,
        WebhookKind::Mutate,
        &delegates,
        lookups(&[("w-2", Ok(None))]),
    )
    .unwrap_err();
    assert!(matches!(err, Denial::OwnerNotFound { .. }), "{err:?}");
}

// Issue 14 (SPEC §3 rule 13): /validate-all refuses only what the
// collector cannot resolve to a live pod.

/// A claim the ephemeral-volume controller makes for pod w-1.
fn ephemeral_claim(reference: Value) -> AdmissionRequest<'static> {
    let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "w-1-scratch", "namespace": NS, "ownerReferences": [reference]}});
    let (_, review) = request("CREATE", claim, None);
    as_user(
        review,
        "system:serviceaccount:kube-system:ephemeral-volume-controller",
    )
}

fn controller_reference(name: &str, uid: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid,
        "controller": true, "blockOwnerDeletion": true})
}

#[test]
fn validate_all_leaves_a_blocking_reference_to_the_api_server() {
    let req = ephemeral_claim(controller_reference("w-1", "uid-1"));
    let all =
        |req: &AdmissionRequest, pods| run(req, WebhookKind::ValidateAll, &Policy::default(), pods);
    let allowed = all(&req, running(&[("w-1", "uid-1")])).unwrap();
    assert!(
        allowed.patch.is_empty() && allowed.warnings.is_empty(),
        "{allowed:?}"
    );
    // /validate still denies it: the labelled objects' policy.
    let err = validate(&req, running(&[("w-1", "uid-1")])).unwrap_err();
    assert!(matches!(err, Denial::BlockingReference { .. }), "{err:?}");
    // The requester check is not /validate-all's: a pod of the namespace
    // naming another pod is RBAC's business there.
    let (_, review) = request(
        "CREATE",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "exec-1", "namespace": NS,
            "ownerReferences": [controller_reference("w-1", "uid-1")]}}),
        None,
    );
    let from_driver = from_pod(review, "driver-0", "uid-d");
    assert!(all(&from_driver, running(&[("w-1", "uid-1")])).is_ok());
}

#[test]
fn validate_all_refuses_what_the_collector_cannot_resolve() {
    let all =
        |req: &AdmissionRequest, pods| run(req, WebhookKind::ValidateAll, &Policy::default(), pods);
    let gone = ephemeral_claim(controller_reference("w-1", "uid-1"));
    for (found, code) in [
        (Ok(None), 403),
        (Ok(Some(("uid-other", false))), 403),
        // A pod being deleted: its claims would go with it (the
        // ephemeral-volume controller skips such pods itself).
        (Ok(Some(("uid-1", true))), 403),
    ] {
        let err = all(&gone, lookups(&[("w-1", found)])).unwrap_err();
        assert_eq!(err.code(), code, "{found:?}: {err:?}");
    }
    // (A failed lookup is allowed with a warning there, as its webhook's
    // failurePolicy Ignore allows an outage: the endpoint's, in webhook.rs,
    // pinned by the golden test validate_all_fails_open_where_validate_fails_closed.)
    for reference in [
        json!({"apiVersion": "v1", "kind": "P\u{43e}d", "name": "w-1", "uid": "uid-1"}),
        json!({"apiVersion": "apps/v1", "kind": "Pod", "name": "w-1", "uid": "uid-1"}),
        json!({"apiVersion": "v1", "kind": "Pod", "name": "w-1?x=1", "uid": "uid-1"}),
        json!({"apiVersion": "v1", "kind": "Pod", "name": "w-1"}),
    ] {
        let err = all(
            &ephemeral_claim(reference.clone()),
            crate::decide::Lookups::default(),
        )
        .unwrap_err();
        assert_eq!(err.code(), 400, "{reference}: {err:?}");
    }
}

// Issue 14 (SPEC §3 rule 14): the collector first.

#[test]
fn the_collectors_removal_is_recognised_before_the_limit() {
    let refs: Vec<Value> = (0..40)
        .map(|i| pod_reference(&format!("p-{i}"), &format!("uid-p{i}"), Some(false)))
        .collect();
    let old = with_references(owned("w-1", "uid-1"), &refs);
    // The owner w-1 is being deleted with propagationPolicy Orphan: the
    // collector removes its reference, 40 others left.
    let mut new = old.clone();
    new["metadata"]["ownerReferences"]
        .as_array_mut()
        .unwrap()
        .remove(0);
    let (_, review) = request("UPDATE", new.clone(), Some(old.clone()));
    let collector = as_user(
        review.clone(),
        "system:serviceaccount:kube-system:generic-garbage-collector",
    );
    for webhook in [
        WebhookKind::Mutate,
        WebhookKind::Validate,
        WebhookKind::ValidateAll,
    ] {
        let allowed = run(
            &collector,
            webhook,
            &Policy::default(),
            crate::decide::Lookups::default(),
        )
        .unwrap();
        assert!(allowed.patch.is_empty(), "{webhook:?}");
    }
    // Anyone else making that update is refused before any lookup.
    let (person, _) = request("UPDATE", new, Some(old));
    let err = mutate(&person, crate::decide::Lookups::default()).unwrap_err();
    assert!(matches!(err, Denial::TooManyReferences { .. }), "{err:?}");
    // The collector with malformed pod extras (it never has any) still
    // removes: identity is not checked before it.
    let odd = with_extras(
        review,
        "system:serviceaccount:kube-system:generic-garbage-collector",
        json!({EXTRA_POD_NAME: ["w-1"]}),
    );
    assert!(mutate(&odd, crate::decide::Lookups::default()).is_ok());
}

// Issue 14 item 7: no uid the requester did not name; homoglyphs; `/v1`.

#[test]
fn a_changed_uid_label_is_refused_without_quoting_the_owners_uid() {
    let mut new = owned("w-1", "uid-secret-1");
    new["metadata"]["labels"]["ownerguard.io/owner-uid"] = json!("uid-mine");
    let (req, _) = request("UPDATE", new, Some(owned("w-1", "uid-secret-1")));
    let err = mutate(&req, crate::decide::Lookups::default()).unwrap_err();
    assert!(matches!(err, Denial::OwnerLabelChanged { .. }), "{err:?}");
    let message = err.to_string();
    assert!(!message.contains("uid-secret-1"), "{message}");
    assert!(
        message.contains("uid-mine") && message.contains("w-1"),
        "{message}"
    );
}

#[test]
fn a_kind_a_person_reads_as_pod_must_be_exactly_v1_pod() {
    // Each a homoglyph of Pod the collector cannot resolve: beside the
    // owner's reference it would make the object immortal.
    for kind in [
        "P\u{43e}d",                // Cyrillic o
        "\u{420}od",                // Cyrillic Er
        "P\u{3bf}d",                // Greek omicron
        "\u{ff30}\u{ff4f}\u{ff44}", // fullwidth
        "P0d",
        "Pod\u{200b}",
        "Po\u{301}d",
        "P\u{43e}ds",
    ] {
        let obj = owned("w-1", "uid-1");
        let obj = with_references(
            obj,
            &[json!({"apiVersion": "v1", "kind": kind, "name": "w-2", "uid": "uid-2"})],
        );
        let (req, _) = request("CREATE", obj, None);
        let err = mutate(&req, running(&[("w-1", "uid-1"), ("w-2", "uid-2")])).unwrap_err();
        assert!(
            matches!(err, Denial::InexactPodReference { .. }),
            "{kind:?}: {err:?}"
        );
        assert_eq!(err.code(), 400);
    }
}

#[test]
fn a_homoglyph_kind_is_spelt_out_in_the_denial() {
    // "kind 'Pod' ... write kind Pod" would read as nonsense: the message
    // shows the code point that differs.
    let obj = with_references(
        owned("w-1", "uid-1"),
        &[json!({"apiVersion": "v1", "kind": "P\u{43e}d\u{200b}", "name": "w-2", "uid": "uid-2"})],
    );
    let (req, _) = request("CREATE", obj, None);
    let message = mutate(&req, crate::decide::Lookups::default())
        .unwrap_err()
        .to_string();
    assert!(message.contains("kind 'P\\u{43e}d\\u{200b}'"), "{message}");
}

#[test]
fn slash_v1_is_v1_to_the_collector() {
    // `/v1` is group "", version v1 to the collector: the owner's own
    // reference, not a contradiction, and nothing to add.
    let reference = json!({"apiVersion": "/v1", "kind": "Pod", "name": "w-1", "uid": "uid-1",
        "controller": false, "blockOwnerDeletion": false});
    let obj = object(owner_labels("w-1", "uid-1"), Some(json!([reference])));
    let (req, _) = request("CREATE", obj, None);
    let allowed = mutate(&req, running(&[("w-1", "uid-1")])).unwrap();
    assert!(allowed.patch.is_empty(), "{:?}", allowed.patch);
    assert!(validate(&req, running(&[("w-1", "uid-1")])).is_ok());
    // Rewritten to `v1` on an UPDATE, it is the same reference.
    let (req, _) = request("UPDATE", owned("w-1", "uid-1"), Some(obj_with_slash_v1()));
    assert!(mutate(&req, running(&[("w-1", "uid-1")])).is_ok());
    // Anything else is not v1.
    for api_version in ["/", "", "v1/", "/v1/", " v1"] {
        let reference =
            json!({"apiVersion": api_version, "kind": "Pod", "name": "w-1", "uid": "uid-1"});
        let obj = object(owner_labels("w-1", "uid-1"), Some(json!([reference])));
        let (req, _) = request("CREATE", obj, None);
        let err = mutate(&req, running(&[("w-1", "uid-1")])).unwrap_err();
        assert_eq!(err.code(), 400, "{api_version:?}: {err:?}");
    }
}

fn obj_with_slash_v1() -> Value {
    let reference = json!({"apiVersion": "/v1", "kind": "Pod", "name": "w-1", "uid": "uid-1",
        "controller": false, "blockOwnerDeletion": false});
    object(owner_labels("w-1", "uid-1"), Some(json!([reference])))
}

// SPEC §3 rule 12: every template of the object is a template, and what a
// controller makes from an admitted workload is admitted.

const CONTROLLER: &str = "system:serviceaccount:kube-system:statefulset-controller";

fn claim_spec() -> Value {
    json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}})
}

/// A StatefulSet of the worker `w-1`, its selector and pod template
/// labelled for it, with `claims` as its claim templates.
fn worker_statefulset(claims: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": NS, "labels": {"ownerguard.io/owner-pod": "w-1"}},
        "spec": {
            "selector": {"matchLabels": {"app": "db", "ownerguard.io/owner-pod": "w-1"}},
            "template": {"metadata": {"labels": {"app": "db", "ownerguard.io/owner-pod": "w-1"}}},
            "volumeClaimTemplates": claims,
        },
    })
}

/// A CREATE of `object` by the worker `w-1`, mutated; the patched object.
fn created_by_worker(object: &Value) -> Value {
    let (_, review) = request("CREATE", object.clone(), None);
    let req = from_pod(review, "w-1", "uid-1");
    patched(object, &mutate(&req, running(&[("w-1", "uid-1")])).unwrap())
}

/// What `controller` makes is admitted by both webhooks: the patched
/// object.
fn admitted_from_controller(object: &Value, controller: &str) -> Value {
    let (_, review) = request("CREATE", object.clone(), None);
    let req = as_user(review, controller);
    let allowed = mutate(&req, running(&[("w-1", "uid-1"), ("agent-1", "uid-a")]))
        .unwrap_or_else(|d| panic!("{controller}'s {object} refused: {d}"));
    let result = patched(object, &allowed);
    let (_, review) = request("CREATE", result.clone(), None);
    let req = as_user(review, controller);
    validate(&req, running(&[("w-1", "uid-1"), ("agent-1", "uid-a")]))
        .unwrap_or_else(|d| panic!("/validate refuses {result}: {d}"));
    result
}

#[test]
fn rule_12_statefulset_claim_templates_get_the_uid_label_even_labelled_by_the_selector() {
    let owner = json!({"ownerguard.io/owner-pod": "w-1"});
    let set = worker_statefulset(json!([
        {"metadata": {"name": "data", "labels": owner}, "spec": claim_spec()},
        // Labelled by the selector only: its claims carry the owner
        // label all the same (getPersistentVolumeClaims).
        {"metadata": {"name": "logs"}, "spec": claim_spec()},
    ]));
    let result = created_by_worker(&set);
    let complete = |labels: Value| {
        let mut labels = labels;
        labels["ownerguard.io/owner-uid"] = json!("uid-1");
        labels
    };
    assert_eq!(
        result["spec"]["volumeClaimTemplates"][0]["metadata"]["labels"],
        complete(owner.clone())
    );
    assert_eq!(
        result["spec"]["volumeClaimTemplates"][1]["metadata"]["labels"],
        json!({"ownerguard.io/owner-uid": "uid-1"})
    );
    // The claim of the second template: its labels and the selector's.
    let claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "logs-db-0", "namespace": NS,
            "labels": {"ownerguard.io/owner-uid": "uid-1", "app": "db", "ownerguard.io/owner-pod": "w-1"}},
    });
    let made = admitted_from_controller(&claim, CONTROLLER);
    assert_eq!(made["metadata"]["ownerReferences"][0]["name"], "w-1");
}

#[test]
fn rule_12_thousands_of_claim_templates_are_completed_and_restored() {
    // 3,000 claim templates labelled through the selector: each gets its
    // uid label on CREATE, and an UPDATE that leaves every one out (a
    // replace of the original manifest), in the reverse order, gets each
    // put back. Each old template is found by a map, not by a scan of the
    // old list for each new one, and each labels map the patch creates is
    // remembered in a set: both were quadratic, minutes of one core for a
    // body well under the API server's limit.
    const CLAIMS: usize = 3000;
    let claims: Vec<Value> = (0..CLAIMS)
        .map(|i| json!({"metadata": {"name": format!("c{i}")}, "spec": claim_spec()}))
        .collect();
    let set = worker_statefulset(json!(claims));
    let uid_label = json!({"ownerguard.io/owner-uid": "uid-1"});
    let created = created_by_worker(&set);
    let labels_of = |object: &Value| -> Vec<Value> {
        object["spec"]["volumeClaimTemplates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|claim| claim["metadata"]["labels"].clone())
            .collect()
    };
    assert_eq!(labels_of(&created), vec![uid_label.clone(); CLAIMS]);

    let mut replaced = created.clone();
    let mut claims = claims;
    claims.reverse();
    replaced["spec"]["volumeClaimTemplates"] = json!(claims);
    let (req, _) = request("UPDATE", replaced.clone(), Some(created));
    let allowed = mutate(&req, running(&[("w-1", "uid-1")])).unwrap();
    assert_eq!(
        labels_of(&patched(&replaced, &allowed)),
        vec![uid_label; CLAIMS]
    );
}

#[test]
fn rule_10_a_list_past_the_bound_is_refused_400_and_not_kept_whole() {
    use crate::admission::{MAX_LIST_ENTRIES, MAX_REFERENCES, MAX_TEMPLATE_VOLUMES};
    // An unvalidated object's ownerReferences: {} entries, a Pod reference
    // to a pod that is gone past the bound. Its entries past the bound are
    // not kept, so the review is refused, by every webhook, labelled or not.
    let mut references = vec![json!({}); MAX_REFERENCES + 50];
    references.push(pod_reference("gone", "uid-gone", Some(false)));
    let unlabelled = object(json!({}), Some(json!(references)));
    let (req, _) = request("CREATE", unlabelled, None);
    assert_eq!(
        req.object
            .as_ref()
            .unwrap()
            .metadata
            .owner_references
            .as_ref()
            .unwrap()
            .len(),
        MAX_REFERENCES + 1
    );
    for webhook in [
        WebhookKind::Mutate,
        WebhookKind::Validate,
        WebhookKind::ValidateAll,
    ] {
        let err = run(
            &req,
            webhook,
            &Policy::default(),
            crate::decide::Lookups::default(),
        )
        .unwrap_err();
        assert_eq!(err.code(), 400, "{webhook:?}: {err}");
        assert_eq!(err.rule(), "too-many-entries");
        assert!(
            err.to_string()
                .contains("metadata.ownerReferences holds more than 131072 entries"),
            "{err}"
        );
    }
    // At the bound: judged as any other.
    let at_bound = object(
        owner_labels("w-1", "uid-1"),
        Some(json!(vec![
            json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u"});
            MAX_LIST_ENTRIES
        ])),
    );
    let (req, _) = request("CREATE", at_bound, None);
    mutate(&req, running(&[("w-1", "uid-1")])).unwrap();

    // A pod template's volumes (a labelled Job), past the bound of what a
    // template may give its pods.
    let mut job = job(json!({"app": "a"}));
    job["spec"]["template"]["spec"] = json!({"volumes": vec![json!(0); MAX_TEMPLATE_VOLUMES + 1]});
    let (req, _) = request("CREATE", job, None);
    let err = mutate(&req, crate::decide::Lookups::default()).unwrap_err();
    assert!(
        err.to_string().contains("spec.template.spec.volumes"),
        "{err}"
    );
    // A StatefulSet's pods get a volume a claim template besides the
    // template's: the two count together, under the pod's own bound, so
    // that its pods (with what admission adds) are never refused.
    let set = |volumes: usize, claims: usize| {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": NS, "labels": owner_labels("w-1", "uid-1")},
        "spec": {
            "template": {"spec": {"volumes": vec![json!({"name": "v", "emptyDir": {}}); volumes]}},
            "volumeClaimTemplates": vec![json!({}); claims],
        }})
    };
    let (req, _) = request("CREATE", set(4_000, 4_001), None);
    let err = mutate(&req, crate::decide::Lookups::default()).unwrap_err();
    assert!(
        err.to_string().contains(
            "spec.template.spec.volumes with spec.volumeClaimTemplates holds more than 8000"
        ),
        "{err}"
    );
    // A pod's own volumes: the pod's bound.
    let pod = |volumes: usize| {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "agent-1", "namespace": NS, "labels": owner_labels("w-1", "uid-1")},
            "spec": {"volumes": vec![json!({"name": "v", "emptyDir": {}}); volumes]}})
    };
    let (req, _) = request("CREATE", pod(MAX_LIST_ENTRIES), None);
    mutate(&req, running(&[("w-1", "uid-1")])).unwrap();
    let (req, _) = request("CREATE", pod(MAX_LIST_ENTRIES + 1), None);
    let err = mutate(&req, running(&[("w-1", "uid-1")])).unwrap_err();
    assert!(
        err.to_string()
            .contains("spec.volumes holds more than 10000"),
        "{err}"
    );

    // Not where templates are not judged: an unlabelled pod's Pod
    // reference on /validate-all is judged as the collector resolves it.
    let mut unlabelled = pod(MAX_LIST_ENTRIES + 1);
    unlabelled["metadata"]["labels"] = json!({});
    unlabelled["metadata"]["ownerReferences"] = json!([pod_reference("w-1", "uid-1", Some(false))]);
    let (req, _) = request("CREATE", unlabelled, None);
    run(
        &req,
        WebhookKind::ValidateAll,
        &Policy::default(),
        running(&[("w-1", "uid-1")]),
    )
    .unwrap();
    // Nor the old object's volumes: one stored with more may be shrunk.
    let mut stored = set(0, MAX_LIST_ENTRIES + 1);
    stored["metadata"]["ownerReferences"] = json!([pod_reference("w-1", "uid-1", Some(false))]);
    let mut shrunk = set(0, 1);
    shrunk["metadata"]["ownerReferences"] = stored["metadata"]["ownerReferences"].clone();
    let (req, _) = request("UPDATE", shrunk, Some(stored.clone()));
    if let Err(err) = mutate(&req, running(&[("w-1", "uid-1")])) {
        assert_ne!(err.rule(), "too-many-entries", "{err}");
    }
    // Nor the collector's removal of the reference of an object stored
    // with more: its sync must never stall.
    let mut bare = stored.clone();
    bare["metadata"]["ownerReferences"] = json!([]);
    stored["spec"]["template"]["spec"]["volumes"] = json!(vec![
        json!({"name": "v", "emptyDir": {}});
        MAX_LIST_ENTRIES + 1
    ]);
    bare["spec"] = stored["spec"].clone();
    let (_, review) = request("UPDATE", bare, Some(stored));
    let req = as_user(review, GARBAGE_COLLECTOR);
    mutate(&req, crate::decide::Lookups::default()).unwrap();

    // A template stored with more volumes than a person may now write: a
    // controller's update (a scale) and a person's that adds none pass;
    // one that adds a volume is refused.
    let mut replicas = set(MAX_TEMPLATE_VOLUMES + 500, 0);
    replicas["kind"] = json!("ReplicaSet");
    replicas["metadata"]["ownerReferences"] = json!([pod_reference("w-1", "uid-1", Some(false))]);
    let mut scaled = replicas.clone();
    scaled["spec"]["replicas"] = json!(3);
    let (_, review) = request("UPDATE", scaled.clone(), Some(replicas.clone()));
    let req = as_user(
        review.clone(),
        "system:serviceaccount:kube-system:replicaset-controller",
    );
    mutate(&req, running(&[("w-1", "uid-1")])).unwrap();
    let req = as_user(review, "alice");
    mutate(&req, running(&[("w-1", "uid-1")])).unwrap();
    let mut grown = replicas.clone();
    grown["spec"]["template"]["spec"]["volumes"] = json!(vec![
        json!({"name": "v", "emptyDir": {}});
        MAX_TEMPLATE_VOLUMES + 501
    ]);
    let (req, _) = request("UPDATE", grown, Some(replicas));
    let err = mutate(&req, running(&[("w-1", "uid-1")])).unwrap_err();
    assert_eq!(err.rule(), "too-many-entries", "{err}");

    // References cut in the old object: the collector's update too is
    // refused, since a removal cannot be told from an addition past the
    // cut (no object holds so many at etcd's default limit).
    let many = |extra: usize| {
        let mut references = vec![
            json!({"apiVersion": "x/v1", "kind": "F", "name": "a", "uid": "u"});
            MAX_REFERENCES + 1
        ];
        references.extend((0..extra).map(|_| pod_reference("w-1", "uid-1", Some(false))));
        object(owner_labels("w-1", "uid-1"), Some(json!(references)))
    };
    let (_, review) = request("UPDATE", many(0), Some(many(1)));
    let req = as_user(review, GARBAGE_COLLECTOR);
    let err = mutate(&req, crate::decide::Lookups::default()).unwrap_err();
    assert_eq!(err.rule(), "too-many-entries", "{err}");
}

#[test]
fn rule_12_ephemeral_claim_templates_of_a_pod_and_of_a_job_template_get_the_uid_label() {
    let ephemeral = |labels: Value| {
        json!([
            {"name": "scratch", "emptyDir": {}},
            {"name": "work", "ephemeral": {"volumeClaimTemplate": {"metadata": {"labels": labels}, "spec": claim_spec()}}},
        ])
    };
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "agent-1", "namespace": NS, "labels": {"ownerguard.io/owner-pod": "w-1"}},
        "spec": {"containers": [], "volumes": ephemeral(json!({"ownerguard.io/owner-pod": "Self"}))},
    });
    let result = created_by_worker(&pod);
    let template = &result["spec"]["volumes"][1]["ephemeral"]["volumeClaimTemplate"]["metadata"];
    assert_eq!(template["labels"]["ownerguard.io/owner-uid"], "uid-1");
    assert_eq!(
        template["annotations"]["ownerguard.io/owner-pod-name"],
        "w-1"
    );
    // The ephemeral-volume controller's claim: the template's labels and
    // annotations, the pod as blocking controller.
    let claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "agent-1-work", "namespace": NS, "labels": template["labels"],
            "annotations": template["annotations"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "agent-1", "uid": "uid-a",
                "controller": true, "blockOwnerDeletion": true}]},
    });
    let made = admitted_from_controller(
        &claim,
        "system:serviceaccount:kube-system:ephemeral-volume-controller",
    );
    let references = made["metadata"]["ownerReferences"].as_array().unwrap();
    assert_eq!(references.len(), 2, "{made}");
    assert_eq!(references[0]["controller"], true);

    let mut job = job(json!({"ownerguard.io/owner-pod": "w-1"}));
    job["spec"]["template"]["spec"]["volumes"] =
        ephemeral(json!({"ownerguard.io/owner-pod": "w-1"}));
    let result = created_by_worker(&job);
    assert_eq!(
        result["spec"]["template"]["spec"]["volumes"][1]["ephemeral"]["volumeClaimTemplate"]["metadata"]
            ["labels"]["ownerguard.io/owner-uid"],
        "uid-1"
    );
    assert!(
        result["spec"]["template"]["spec"]["volumes"][0]
            .get("ephemeral")
            .is_none()
    );
}

#[test]
fn rule_12_a_claim_template_naming_another_owner_is_denied_400_with_its_field() {
    let set = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": NS, "labels": {"ownerguard.io/owner-pod": "w-1"}},
        "spec": {"volumeClaimTemplates": [
            {"metadata": {"name": "data"}},
            {"metadata": {"name": "logs", "labels": {"ownerguard.io/owner-pod": "w-2"}}},
        ]},
    });
    let (_, review) = request("CREATE", set, None);
    let req = from_pod(review, "w-1", "uid-1");
    let err = mutate(&req, running(&[("w-1", "uid-1")])).unwrap_err();
    assert!(
        matches!(err, Denial::TemplateOwnerMismatch { .. }),
        "{err:?}"
    );
    assert_eq!(err.code(), 400);
    let message = err.to_string();
    assert!(
        message.contains("claim template spec.volumeClaimTemplates[1]"),
        "{message}"
    );
    assert!(message.contains("'w-2'"), "{message}");

    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "agent-1", "namespace": NS, "labels": {"ownerguard.io/owner-pod": "w-1"}},
        "spec": {"volumes": [{"name": "w", "ephemeral": {"volumeClaimTemplate": {"metadata": {
            "labels": {"ownerguard.io/owner-pod": "Self"},
            "annotations": {"ownerguard.io/owner-pod-name": "w-2"}}}}}]},
    });
    let (_, review) = request("CREATE", pod.clone(), None);
    let err = mutate(
        &from_pod(review, "w-1", "uid-1"),
        running(&[("w-1", "uid-1")]),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("spec.volumes[0].ephemeral.volumeClaimTemplate"),
        "{err}"
    );
    // Another uid is another owner too.
    pod["spec"]["volumes"][0]["ephemeral"]["volumeClaimTemplate"]["metadata"] =
        json!({"labels": {"ownerguard.io/owner-pod": "w-1", "ownerguard.io/owner-uid": "uid-2"}});
    let (_, review) = request("CREATE", pod, None);
    let err = mutate(
        &from_pod(review, "w-1", "uid-1"),
        running(&[("w-1", "uid-1")]),
    )
    .unwrap_err();
    assert!(
        matches!(err, Denial::TemplateOwnerMismatch { .. }),
        "{err:?}"
    );
}

fn deployment(labels: Value, template_labels: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "agents", "namespace": NS, "labels": labels},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": template_labels}, "spec": {"containers": []}}},
    })
}

/// The deployment controller's ReplicaSet: the template's labels plus
/// `pod-template-hash`, the Deployment's annotations.
fn replica_set_of(deployment: &Value) -> Value {
    let mut labels = deployment["spec"]["template"]["metadata"]["labels"].clone();
    labels["pod-template-hash"] = json!("5d8f9c7b6d");
    let mut template = deployment["spec"]["template"].clone();
    template["metadata"]["labels"] = labels.clone();
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "agents-5d8f9c7b6d", "namespace": NS, "labels": labels,
            "annotations": deployment["metadata"]["annotations"],
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "agents",
                "uid": "uid-d", "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"template": template},
    })
}

#[test]
fn rule_12_self_on_a_deployment_and_its_worker_s_name_on_the_template_are_one_owner() {
    let object = deployment(
        json!({"ownerguard.io/owner-pod": "Self"}),
        json!({"app": "agent", "ownerguard.io/owner-pod": "w-1"}),
    );
    let result = created_by_worker(&object);
    assert_eq!(
        result["metadata"]["annotations"]["ownerguard.io/owner-pod-name"],
        "w-1"
    );
    // Its ReplicaSet: the name on the label, the Deployment's annotation
    // restating it. One owner, admitted.
    let made = admitted_from_controller(
        &replica_set_of(&result),
        "system:serviceaccount:kube-system:deployment-controller",
    );
    assert_eq!(made["metadata"]["ownerReferences"][1]["name"], "w-1");
}

#[test]
fn rule_12_a_deployment_labelled_by_name_with_a_self_template_gets_the_name_annotation() {
    let object = deployment(
        json!({"ownerguard.io/owner-pod": "w-1"}),
        json!({"app": "agent", "ownerguard.io/owner-pod": "Self"}),
    );
    let result = created_by_worker(&object);
    // The ReplicaSet takes the Deployment's annotations: the name must be
    // there for its `Self`, sent without pod identity.
    assert_eq!(
        result["metadata"]["annotations"]["ownerguard.io/owner-pod-name"],
        "w-1"
    );
    let template = &result["spec"]["template"]["metadata"];
    assert_eq!(
        template["annotations"]["ownerguard.io/owner-pod-name"],
        "w-1"
    );
    assert_eq!(template["labels"]["ownerguard.io/owner-uid"], "uid-1");
    let made = admitted_from_controller(
        &replica_set_of(&result),
        "system:serviceaccount:kube-system:deployment-controller",
    );
    // Its own template is complete already: only the reference is added.
    assert_eq!(made["spec"], replica_set_of(&result)["spec"]);
    // Idempotent, and /validate accepts what /mutate made.
    let (_, review) = request("CREATE", result.clone(), None);
    let again = from_pod(review, "w-1", "uid-1");
    assert!(
        mutate(&again, running(&[("w-1", "uid-1")]))
            .unwrap()
            .patch
            .is_empty()
    );
    assert!(validate(&again, running(&[("w-1", "uid-1")])).is_ok());
}

#[test]
fn rule_12_a_job_template_labelled_by_name_gets_the_name_when_its_pod_template_says_self() {
    let labels = json!({"ownerguard.io/owner-pod": "w-1"});
    let object = json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": NS, "labels": labels},
        "spec": {"jobTemplate": {"metadata": {"labels": labels},
            "spec": {"template": {"metadata": {"labels": {"ownerguard.io/owner-pod": "Self"}}}}}},
    });
    let result = created_by_worker(&object);
    let job_template = &result["spec"]["jobTemplate"];
    assert_eq!(
        job_template["metadata"]["annotations"]["ownerguard.io/owner-pod-name"],
        "w-1"
    );
    // The Job the CronJob controller makes (getJobFromTemplate2): the Job
    // template's labels and annotations, admitted without a change but
    // the reference.
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "nightly-29433600", "namespace": NS,
            "labels": job_template["metadata"]["labels"], "annotations": job_template["metadata"]["annotations"]},
        "spec": job_template["spec"],
    });
    let made =
        admitted_from_controller(&job, "system:serviceaccount:kube-system:cronjob-controller");
    assert_eq!(made["spec"], job["spec"]);
    assert!(made["metadata"].get("ownerReferences").is_some());
}

#[test]
fn rule_12_a_resource_claim_templates_claim_metadata_is_a_template() {
    let object = json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu", "namespace": NS, "labels": {"ownerguard.io/owner-pod": "w-1"}},
        "spec": {"metadata": {"labels": {"ownerguard.io/owner-pod": "w-1"}}, "spec": {"devices": {}}},
    });
    let result = created_by_worker(&object);
    assert_eq!(
        result["spec"]["metadata"]["labels"]["ownerguard.io/owner-uid"],
        "uid-1"
    );
    let mut other = object.clone();
    other["spec"]["metadata"]["labels"]["ownerguard.io/owner-pod"] = json!("w-2");
    let (_, review) = request("CREATE", other, None);
    let err = mutate(
        &from_pod(review, "w-1", "uid-1"),
        running(&[("w-1", "uid-1")]),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("ResourceClaim template spec"),
        "{err}"
    );
}

#[test]
fn rule_12_a_claim_template_carrying_a_pod_reference_is_denied_400_as_its_claims_would_carry_it() {
    // The statefulset controller deep-copies a claim template's metadata
    // onto every claim, ownerReferences included: each claim would be
    // owned by whatever pod the template names.
    let pod = |kind: &str, name: &str, uid: &str| json!({"apiVersion": "v1", "kind": kind, "name": name, "uid": uid});
    let config_map =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "prompts", "uid": "uid-cm"});
    let cases = [
        // Another running worker: the requester check never saw it.
        (json!([pod("Pod", "w-2", "uid-2")]), 0, "w-2"),
        // A pod that does not exist: every claim refused or collected.
        (json!([pod("Pod", "ghost", "uid-g")]), 0, "ghost"),
        // The worker itself: ownerguard gives each claim that reference.
        (json!([pod("Pod", "w-1", "uid-1")]), 0, "w-1"),
        // A kind the collector cannot resolve.
        (json!([pod("pod", "w-1", "uid-1")]), 0, "w-1"),
        // Behind an entry that is no pod, found at its index.
        (
            json!([config_map.clone(), pod("Pod", "w-2", "uid-2")]),
            1,
            "w-2",
        ),
    ];
    let pods = || running(&[("w-1", "uid-1"), ("w-2", "uid-2")]);
    // A CREATE of `object` by the worker w-1.
    let created = |object: Value| from_pod(request("CREATE", object, None).1, "w-1", "uid-1");
    for (references, index, named) in cases {
        for labelled in [true, false] {
            let mut metadata = json!({"name": "data", "ownerReferences": references});
            if labelled {
                metadata["labels"] = json!({"ownerguard.io/owner-pod": "w-1"});
            }
            let set = worker_statefulset(json!([
                {"metadata": {"name": "logs"}, "spec": claim_spec()},
                {"metadata": metadata, "spec": claim_spec()},
            ]));
            // /validate sees it as /mutate would have completed it.
            let mut completed = set.clone();
            completed["metadata"]["ownerReferences"] = json!([{
                "apiVersion": "v1", "kind": "Pod", "name": "w-1", "uid": "uid-1",
                "controller": false, "blockOwnerDeletion": false,
            }]);
            completed["metadata"]["labels"]["ownerguard.io/owner-uid"] = json!("uid-1");
            for err in [
                mutate(&created(set), pods()).unwrap_err(),
                validate(&created(completed), pods()).unwrap_err(),
            ] {
                assert!(
                    matches!(err, Denial::TemplatePodReference { .. }),
                    "{references}: {err:?}"
                );
                assert_eq!(err.code(), 400);
                let message = err.to_string();
                assert!(
                    message.contains(&format!(
                        "claim template spec.volumeClaimTemplates[1] carries ownerReferences[{index}]"
                    )),
                    "{message}"
                );
                assert!(message.contains(&format!("'{named}'")), "{message}");
                assert!(message.contains("owner pod is 'w-1'"), "{message}");
                assert!(
                    message.contains(
                        "remove ownerReferences from spec.volumeClaimTemplates[1].metadata"
                    ),
                    "{message}"
                );
            }
        }
    }

    // A reference to no pod is not ownerguard's to judge; a list of
    // another shape is no reference.
    for references in [
        json!([config_map]),
        json!("x"),
        json!([1, "y", null]),
        json!({}),
    ] {
        let set = worker_statefulset(json!([
            {"metadata": {"name": "data", "ownerReferences": references}, "spec": claim_spec()},
        ]));
        mutate(&created(set), pods()).unwrap_or_else(|d| panic!("{references}: {d}"));
    }

    // Another kind's claim templates become what its own controller makes
    // of them: not judged for their references.
    let mut widget = worker_statefulset(json!([
        {"metadata": {"name": "data", "ownerReferences": [pod("Pod", "w-2", "uid-2")]}, "spec": claim_spec()},
    ]));
    widget["apiVersion"] = json!("example.com/v1");
    widget["kind"] = json!("Cluster");
    mutate(&created(widget), pods())
        .unwrap_or_else(|d| panic!("a custom resource's claim template: {d}"));

    // A kind that only reads as Pod is spelt by code point in the message.
    let set = worker_statefulset(json!([
        {"metadata": {"name": "data", "ownerReferences": [pod("P\u{200b}od", "w-2", "uid-2")]}, "spec": claim_spec()},
    ]));
    let err = mutate(&created(set), pods()).unwrap_err();
    assert!(
        err.to_string().contains("naming P\\u{200b}od 'w-2'"),
        "{err}"
    );

    // An UPDATE is not judged for it: the API server refuses any change
    // to a StatefulSet's claim templates, and one made before is as it was.
    let set = worker_statefulset(json!([
        {"metadata": {"name": "data", "ownerReferences": [pod("Pod", "w-2", "uid-2")]}, "spec": claim_spec()},
    ]));
    let mut old = set.clone();
    old["metadata"]["labels"]["ownerguard.io/owner-uid"] = json!("uid-1");
    old["metadata"]["ownerReferences"] = json!([pod("Pod", "w-1", "uid-1")]);
    let mut new = old.clone();
    new["spec"]["replicas"] = json!(3);
    let (_, review) = request("UPDATE", new, Some(old));
    let req = from_pod(review, "w-1", "uid-1");
    mutate(&req, pods()).unwrap_or_else(|d| panic!("a scale refused: {d}"));
}

#[test]
fn rule_12_a_claim_template_of_another_shape_is_left_alone() {
    let object = json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": NS, "labels": {"ownerguard.io/owner-pod": "w-1"}},
        "spec": {
            "volumeClaimTemplates": [{"metadata": {"labels": {"ownerguard.io/owner-pod": 3}}}, "x"],
            "volumes": {"ephemeral": {"volumeClaimTemplate": {"metadata": {"labels": {"ownerguard.io/owner-pod": "w-2"}}}}},
            "metadata": {"labels": {"ownerguard.io/owner-pod": "w-2"}},
        },
    });
    let (_, review) = request("CREATE", object.clone(), None);
    let allowed = mutate(
        &from_pod(review, "w-1", "uid-1"),
        running(&[("w-1", "uid-1")]),
    )
    .unwrap();
    assert_eq!(patched(&object, &allowed)["spec"], object["spec"]);
}

#[test]
fn rule_12_an_update_making_the_template_self_completes_it_and_names_the_owner_on_the_object() {
    let mut old = deployment(
        owner_labels("w-1", "uid-1"),
        json!({"app": "agent", "ownerguard.io/owner-pod": "w-1", "ownerguard.io/owner-uid": "uid-1"}),
    );
    old["metadata"]["ownerReferences"] = json!([pod_reference("w-1", "uid-1", Some(false))]);
    let mut new = old.clone();
    new["spec"]["template"]["metadata"]["labels"] =
        json!({"app": "agent", "ownerguard.io/owner-pod": "Self"});
    let (req, _) = request("UPDATE", new.clone(), Some(old.clone()));
    let allowed = mutate(&req, running(&[("w-1", "uid-1")])).unwrap();
    let result = patched(&new, &allowed);
    assert_eq!(
        result["metadata"]["annotations"]["ownerguard.io/owner-pod-name"],
        "w-1"
    );
    // The annotation restates the owner: no change of ownership, on
    // reinvocation or on /validate.
    let (req, _) = request("UPDATE", result.clone(), Some(old));
    assert!(
        mutate(&req, running(&[("w-1", "uid-1")]))
            .unwrap()
            .patch
            .is_empty()
    );
    assert!(validate(&req, running(&[("w-1", "uid-1")])).is_ok());
}

// SPEC §3 rule 16: the collector under every identity it can have; no
// controller's sync stalls on a refusal.

#[test]
fn rule_16_the_collector_is_recognised_as_the_controller_managers_own_user_too() {
    // Over the reference limit, the owner still running (an orphaning
    // owner is only Terminating): nothing looked up, nothing restored.
    let policy = Policy::default();
    let kept: Vec<Value> = (0..policy.max_pod_references + 4)
        .map(|i| pod_reference(&format!("co-{i}"), &format!("uid-co-{i}"), Some(false)))
        .collect();
    let mut old_refs = kept.clone();
    old_refs.push(pod_reference("w-1", "uid-1", Some(false)));
    let old = object(owner_labels("w-1", "uid-1"), Some(json!(old_refs)));
    let new = object(owner_labels("w-1", "uid-1"), Some(json!(kept)));
    let (_, review) = request("UPDATE", new, Some(old));
    for user in [GARBAGE_COLLECTOR, CONTROLLER_MANAGER] {
        let req = as_user(review.clone(), user);
        for webhook in [WebhookKind::Mutate, WebhookKind::Validate] {
            let allowed = run(&req, webhook, &policy, crate::decide::Lookups::default()).unwrap();
            assert!(allowed.patch.is_empty(), "{user}: {:?}", allowed.patch);
        }
    }
    // Anyone else removing the running owner's reference over the limit is
    // refused before any lookup.
    let err = run(
        &as_user(review, "alice"),
        WebhookKind::Mutate,
        &policy,
        crate::decide::Lookups::default(),
    )
    .unwrap_err();
    assert!(matches!(err, Denial::TooManyReferences { .. }), "{err:?}");
}

#[test]
fn rule_16_the_collectors_unblocking_in_a_foreground_deletion_is_its_own() {
    let blocking = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "uid-rs", "controller": true, "blockOwnerDeletion": true});
    let mut unblocked = blocking.clone();
    unblocked["blockOwnerDeletion"] = json!(false);
    let old = object(
        owner_labels("w-1", "uid-1"),
        Some(json!([
            pod_reference("w-1", "uid-1", Some(false)),
            blocking
        ])),
    );
    let new = object(
        owner_labels("w-1", "uid-1"),
        Some(json!([
            pod_reference("w-1", "uid-1", Some(false)),
            unblocked
        ])),
    );
    let (_, review) = request("UPDATE", new, Some(old));
    for user in [GARBAGE_COLLECTOR, CONTROLLER_MANAGER] {
        let allowed = mutate(
            &as_user(review.clone(), user),
            crate::decide::Lookups::default(),
        )
        .unwrap();
        assert!(
            allowed.patch.is_empty() && allowed.warnings.is_empty(),
            "{user}"
        );
    }
}

#[test]
fn rule_16_a_controllers_reference_to_the_pod_it_condemns_on_its_claim_is_admitted() {
    // The statefulset controller's claim retention (whenScaled: Delete):
    // the claim of a condemned pod gets that pod as controller, while the
    // pod is being deleted or has finished.
    let claim = |refs: Value| {
        let mut object = object(owner_labels("w-1", "uid-1"), Some(refs));
        object["kind"] = json!("PersistentVolumeClaim");
        object["metadata"]["name"] = json!("data-db-2");
        object
    };
    let condemned = json!({"apiVersion": "v1", "kind": "Pod", "name": "db-2", "uid": "uid-db-2", "controller": true, "blockOwnerDeletion": true});
    let old = claim(json!([pod_reference("w-1", "uid-1", Some(false))]));
    let new = claim(json!([
        pod_reference("w-1", "uid-1", Some(false)),
        condemned
    ]));
    let (_, mut review) = request("UPDATE", new.clone(), Some(old));
    review["kind"] = json!({"group": "", "version": "v1", "kind": "PersistentVolumeClaim"});
    review["resource"] =
        json!({"group": "", "version": "v1", "resource": "persistentvolumeclaims"});
    let req = as_user(
        review.clone(),
        "system:serviceaccount:kube-system:statefulset-controller",
    );
    let terminating = || lookups(&[("db-2", Ok(Some(("uid-db-2", true))))]);
    // The controller works from its informer's cache: by the time the
    // update arrives the pod may run, be terminating or finished, be gone,
    // or be gone and recreated under another uid, or the lookup may fail.
    // Whatever the order, the update is admitted (a refusal stalls the
    // set's sync), made non-blocking as every Pod reference (the
    // controller compares only uid and controller, so nothing churns),
    // the worker's reference kept.
    for pods in [
        running(&[("db-2", "uid-db-2")]),
        terminating(),
        finished("db-2", "uid-db-2", crate::owner::Finished::Failed),
        lookups(&[("db-2", Ok(None))]),
        lookups(&[("db-2", Ok(Some(("uid-other", false))))]),
        lookups(&[("db-2", Err(()))]),
        crate::decide::Lookups::default(),
    ] {
        let allowed = mutate(&req, pods).unwrap();
        let stored = patched(&new, &allowed);
        let references = &stored["metadata"]["ownerReferences"];
        assert_eq!(references[1]["blockOwnerDeletion"], json!(false));
        assert_eq!(references[1]["controller"], json!(true));
        assert_eq!(references[0]["uid"], json!("uid-1"));
    }
    // The controller manager's shared user is the statefulset controller
    // too, without per-controller credentials.
    let shared = as_user(review.clone(), CONTROLLER_MANAGER);
    assert!(mutate(&shared, lookups(&[("db-2", Ok(None))])).is_ok());
    // The worker's own reference stays judged in the same update: taken
    // away while the worker runs, it is refused.
    let mut unblocked = condemned.clone();
    unblocked["blockOwnerDeletion"] = json!(false);
    let (_, mut swapped) = request(
        "UPDATE",
        claim(json!([unblocked])),
        Some(claim(json!([pod_reference("w-1", "uid-1", Some(false))]))),
    );
    swapped["kind"] = json!({"group": "", "version": "v1", "kind": "PersistentVolumeClaim"});
    let req_swapped = as_user(
        swapped,
        "system:serviceaccount:kube-system:statefulset-controller",
    );
    let err = validate(&req_swapped, running(&[("w-1", "uid-1")])).unwrap_err();
    assert!(
        matches!(err, Denial::OwnerReferenceRemoved { .. }),
        "{err:?}"
    );
    // A pod (a worker's token) adding that reference is judged as ever.
    let from_worker = from_pod(review.clone(), "w-1", "uid-1");
    let err = mutate(&from_worker, terminating()).unwrap_err();
    assert!(!matches!(err, Denial::OwnerFinished { .. }), "{err:?}");
    // So is anyone but the statefulset controller (a user tying the claim
    // to a finished pod would keep it until that pod's object goes), and
    // the controller on a claim that is not that pod's.
    let finished_pod = || finished("db-2", "uid-db-2", crate::owner::Finished::Succeeded);
    let err = mutate(&as_user(review.clone(), "mallory"), finished_pod()).unwrap_err();
    assert!(matches!(err, Denial::OwnerFinished { .. }), "{err:?}");
    let mut other_claim = review;
    other_claim["object"]["metadata"]["name"] = json!("prompt-1");
    let req = as_user(
        other_claim,
        "system:serviceaccount:kube-system:statefulset-controller",
    );
    let err = mutate(&req, finished_pod()).unwrap_err();
    assert!(matches!(err, Denial::OwnerFinished { .. }), "{err:?}");
}

#[test]
fn rule_16_a_copy_updated_by_its_controller_is_never_refused() {
    // Endpoints made before the Service (unlabelled), relabelled by the
    // endpoints controller with the Service's labels: the owner label is
    // added, which an UPDATE may not do, but this is a copy.
    let mut old = object(json!({}), None);
    old["kind"] = json!("Endpoints");
    let mut new = object(owner_labels("w-1", "uid-1"), None);
    new["kind"] = json!("Endpoints");
    let (_, mut review) = request("UPDATE", new.clone(), Some(old));
    review["kind"] = json!({"group": "", "version": "v1", "kind": "Endpoints"});
    let req = as_user(
        review.clone(),
        "system:serviceaccount:kube-system:endpoint-controller",
    );
    let allowed = mutate(&req, running(&[("w-1", "uid-1")])).unwrap();
    assert_eq!(
        patched(&new, &allowed)["metadata"]["ownerReferences"][0]["uid"],
        json!("uid-1")
    );
    assert!(
        mutate(&req, lookups(&[("w-1", Ok(None))]))
            .unwrap()
            .patch
            .is_empty()
    );
    assert!(
        validate(&req, crate::decide::Lookups::default())
            .unwrap()
            .patch
            .is_empty()
    );
    // By anyone else it is the update it looks like.
    let err = mutate(&as_user(review, "alice"), running(&[("w-1", "uid-1")])).unwrap_err();
    assert!(matches!(err, Denial::OwnerLabelAdded { .. }), "{err:?}");
}

#[test]
fn rule_16_a_copy_resynced_without_its_owners_reference_is_left_as_it_is() {
    // Endpoints labelled for w-1 with only the Service's reference (the
    // collector removed w-1's, or the copy was made while w-1 was
    // gone): the controller's resync (a finalizer removed) changes
    // nothing ownerguard judges, and the chart does not send it.
    let service = json!([{"apiVersion": "v1", "kind": "Service", "name": "web", "uid": "uid-svc", "controller": true, "blockOwnerDeletion": false}]);
    let mut old = object(owner_labels("w-1", "uid-1"), Some(service.clone()));
    old["kind"] = json!("Endpoints");
    old["metadata"]["finalizers"] = json!(["example.com/f"]);
    let mut new = old.clone();
    new["metadata"]["finalizers"] = json!([]);
    for user in [
        CONTROLLER_MANAGER,
        "system:serviceaccount:kube-system:endpoint-controller",
    ] {
        let (_, mut review) = request("UPDATE", new.clone(), Some(old.clone()));
        review["kind"] = json!({"group": "", "version": "v1", "kind": "Endpoints"});
        let req = as_user(review, user);
        for webhook in [WebhookKind::Mutate, WebhookKind::Validate] {
            assert!(
                plan(&req, webhook, &Policy::default()).unwrap().is_none(),
                "{user} {webhook:?}"
            );
        }
    }
    // Relabelled for another owner, it is a copy anew: w-2's reference is
    // injected.
    let mut relabelled = new.clone();
    relabelled["metadata"]["labels"] = owner_labels("w-2", "uid-2");
    let (_, mut review) = request("UPDATE", relabelled.clone(), Some(old));
    review["kind"] = json!({"group": "", "version": "v1", "kind": "Endpoints"});
    let req = as_user(review, CONTROLLER_MANAGER);
    let allowed = mutate(&req, running(&[("w-2", "uid-2")])).unwrap();
    let refs = &patched(&relabelled, &allowed)["metadata"]["ownerReferences"];
    assert!(
        refs.as_array()
            .unwrap()
            .iter()
            .any(|r| r["kind"] == "Pod" && r["uid"] == "uid-2"),
        "{refs}"
    );
}

#[test]
fn an_update_that_keeps_the_references_is_judged_whatever_their_number() {
    // The storage version migrator's no-op patch of an object made before
    // the limit (or while the webhooks were away).
    let policy = Policy::default();
    let mut refs: Vec<Value> = (0..policy.max_pod_references + 4)
        .map(|i| pod_reference(&format!("co-{i}"), &format!("uid-co-{i}"), Some(false)))
        .collect();
    refs.push(pod_reference("w-1", "uid-1", Some(false)));
    let old = object(owner_labels("w-1", "uid-1"), Some(json!(refs)));
    let (_, review) = request("UPDATE", old.clone(), Some(old));
    let req = as_user(
        review,
        "system:serviceaccount:kube-system:storage-version-migrator-controller",
    );
    assert!(validate(&req, crate::decide::Lookups::default()).is_ok());
    // The collector's unblocking of a reference that had no value.
    let unset = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "uid-rs", "controller": true});
    let mut unblocked = unset.clone();
    unblocked["blockOwnerDeletion"] = json!(false);
    let old = object(
        owner_labels("w-1", "uid-1"),
        Some(json!([pod_reference("w-1", "uid-1", Some(false)), unset])),
    );
    let new = object(
        owner_labels("w-1", "uid-1"),
        Some(json!([
            pod_reference("w-1", "uid-1", Some(false)),
            unblocked
        ])),
    );
    let (_, review) = request("UPDATE", new, Some(old));
    assert!(
        plan(
            &as_user(review, CONTROLLER_MANAGER),
            WebhookKind::Validate,
            &policy
        )
        .unwrap()
        .is_none()
    );
}

#[test]
fn rule_16_the_endpoints_controller_takes_over_endpoints_a_worker_made() {
    // Endpoints `web` made by worker w-1 (its reference on them), then a
    // Service `web` labelled for another worker or not at all: the
    // controller relabels the Endpoints and keeps their references.
    let mut old = owned("w-1", "uid-1");
    old["kind"] = json!("Endpoints");
    for labels in [json!({}), owner_labels("w-2", "uid-2")] {
        let mut new = old.clone();
        new["metadata"]["labels"] = labels;
        let (_, mut review) = request("UPDATE", new, Some(old.clone()));
        review["kind"] = json!({"group": "", "version": "v1", "kind": "Endpoints"});
        let req = as_user(
            review.clone(),
            "system:serviceaccount:kube-system:endpoint-controller",
        );
        for webhook in [WebhookKind::Mutate, WebhookKind::Validate] {
            assert!(plan(&req, webhook, &Policy::default()).unwrap().is_none());
        }
        // Anyone else is judged as ever.
        assert!(
            mutate(
                &as_user(review, "alice"),
                running(&[("w-1", "uid-1"), ("w-2", "uid-2")])
            )
            .is_err()
        );
    }
}

#[test]
fn rule_16_a_copy_that_names_a_pod_is_judged_as_any_object() {
    let ghost = json!([{"apiVersion": "v1", "kind": "Pod", "name": "ghost", "uid": "uid-ghost", "blockOwnerDeletion": true}]);
    let mut object = object(owner_labels("w-1", "uid-1"), Some(ghost.clone()));
    object["kind"] = json!("Endpoints");
    let (_, mut review) = request("CREATE", object, None);
    review["kind"] = json!({"group": "", "version": "v1", "kind": "Endpoints"});
    let req = as_user(
        review,
        "system:serviceaccount:kube-system:endpoint-controller",
    );
    let err = mutate(
        &req,
        lookups(&[("w-1", Ok(Some(("uid-1", false)))), ("ghost", Ok(None))]),
    )
    .unwrap_err();
    assert!(matches!(err, Denial::OwnerNotFound { .. }), "{err:?}");
    // A "mirror pod" with a Pod reference beside its Node's is no mirror pod.
    let refs = json!([{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-n1", "controller": true}, ghost[0]]);
    let (_, mut review) = request(
        "CREATE",
        object_with(owner_labels("w-1", "uid-1"), refs),
        None,
    );
    review["kind"] = json!({"group": "", "version": "v1", "kind": "Pod"});
    review["object"]["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "hash"});
    let req = as_user(review, "system:node:n1");
    assert!(
        plan(&req, WebhookKind::Mutate, &Policy::default())
            .unwrap()
            .is_some()
    );
}

fn object_with(labels: Value, references: Value) -> Value {
    object(labels, Some(references))
}

#[test]
fn a_name_with_control_characters_is_shown_escaped_in_every_message() {
    let mut review = request("CREATE", object(owner_labels("w-1", "uid-1"), None), None).1;
    review["object"]["metadata"]["name"] = json!("x\u{1b}[2J\nownerguard: allowed\u{202e}");
    let err = mutate(&decoded(review).unwrap(), lookups(&[("w-1", Ok(None))])).unwrap_err();
    let message = err.to_string();
    assert!(
        !message
            .chars()
            .any(|c| c.is_control() || crate::decide::subject::moves_text(c)),
        "{message:?}"
    );
    assert!(message.contains("\\u{1b}[2J\\nownerguard"), "{message}");
}

/// A CREATE of `kind` in `group` by `user`, labelled `labels`.
fn create_as(
    group: &str,
    kind: &str,
    user: &str,
    labels: Value,
) -> (AdmissionRequest<'static>, Value) {
    let mut object = object(labels, None);
    object["kind"] = json!(kind);
    let (_, mut review) = request("CREATE", object.clone(), None);
    review["kind"] = json!({"group": group, "version": "v1", "kind": kind});
    review["userInfo"] = json!({"username": user});
    (decoded(review).unwrap(), object)
}

#[test]
fn rule_16_a_services_labels_copied_by_its_controllers_are_never_refused() {
    for (group, kind, user) in [
        (
            "",
            "Endpoints",
            "system:serviceaccount:kube-system:endpoint-controller",
        ),
        (
            "discovery.k8s.io",
            "EndpointSlice",
            "system:serviceaccount:kube-system:endpointslice-controller",
        ),
        (
            "discovery.k8s.io",
            "EndpointSlice",
            "system:serviceaccount:kube-system:endpointslicemirroring-controller",
        ),
        ("discovery.k8s.io", "EndpointSlice", CONTROLLER_MANAGER),
    ] {
        let (req, object) = create_as(group, kind, user, owner_labels("w-1", "uid-1"));
        // The worker there with that uid, running, being deleted or
        // finished: the copy gets its reference (the Service goes with
        // the worker, the copy with both).
        for pods in [
            running(&[("w-1", "uid-1")]),
            lookups(&[("w-1", Ok(Some(("uid-1", true))))]),
            finished("w-1", "uid-1", crate::owner::Finished::Succeeded),
        ] {
            let allowed = mutate(&req, pods).unwrap();
            let stored = patched(&object, &allowed);
            assert_eq!(
                stored["metadata"]["ownerReferences"],
                json!([{"apiVersion": "v1", "kind": "Pod", "name": "w-1", "uid": "uid-1", "controller": false, "blockOwnerDeletion": false}]),
                "{kind} by {user}"
            );
        }
        // Gone, replaced, or not checked: admitted unchanged.
        for pods in [
            lookups(&[("w-1", Ok(None))]),
            lookups(&[("w-1", Ok(Some(("uid-2", false))))]),
            failed_lookup(),
        ] {
            let allowed = mutate(&req, pods).unwrap();
            assert!(allowed.patch.is_empty(), "{kind} by {user}");
        }
        // /validate lets every copy be.
        assert!(
            validate(&req, crate::decide::Lookups::default())
                .unwrap()
                .patch
                .is_empty()
        );
        // Labels that name no pod (Self without its annotation, no uid).
        for labels in [
            json!({"ownerguard.io/owner-pod": "Self", "ownerguard.io/owner-uid": "uid-1"}),
            json!({"ownerguard.io/owner-pod": "w-1"}),
        ] {
            let (req, _) = create_as(group, kind, user, labels);
            assert!(
                mutate(&req, crate::decide::Lookups::default())
                    .unwrap()
                    .patch
                    .is_empty()
            );
        }
    }
    // Anyone else creating Endpoints is judged as ever.
    let (req, _) = create_as("", "Endpoints", "alice", owner_labels("w-1", "uid-1"));
    let err = mutate(&req, lookups(&[("w-1", Ok(None))])).unwrap_err();
    assert!(matches!(err, Denial::OwnerNotFound { .. }), "{err:?}");
}

#[test]
fn rule_16_a_service_labelled_self_is_refused_up_front() {
    let (_, review) = request(
        "CREATE",
        object(json!({"ownerguard.io/owner-pod": "Self"}), None),
        None,
    );
    let mut review = review;
    review["kind"] = json!({"group": "", "version": "v1", "kind": "Service"});
    let req = from_pod(review.clone(), "w-1", "uid-1");
    let err = mutate(&req, running(&[("w-1", "uid-1")])).unwrap_err();
    assert!(matches!(err, Denial::SelfOnCopiedLabels { .. }), "{err:?}");
    assert_eq!(err.code(), 400);
    assert!(
        err.to_string().contains("ownerguard.io/owner-pod: w-1"),
        "{err}"
    );
    // By name it is a Service like any object.
    review["object"]["metadata"]["labels"] = json!({"ownerguard.io/owner-pod": "w-1"});
    let req = from_pod(review, "w-1", "uid-1");
    assert!(
        !mutate(&req, running(&[("w-1", "uid-1")]))
            .unwrap()
            .patch
            .is_empty()
    );
}

#[test]
fn rule_16_a_mirror_pod_is_admitted_unchanged() {
    let (_, mut review) = request(
        "CREATE",
        object(
            owner_labels("w-1", "uid-1"),
            Some(
                json!([{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-n1", "controller": true}]),
            ),
        ),
        None,
    );
    review["kind"] = json!({"group": "", "version": "v1", "kind": "Pod"});
    review["object"]["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "hash"});
    let req = as_user(review.clone(), "system:node:n1");
    // Nothing looked up, nothing patched: NodeRestriction allows the
    // node's one reference and nothing else.
    for webhook in [WebhookKind::Mutate, WebhookKind::Validate] {
        assert!(plan(&req, webhook, &Policy::default()).unwrap().is_none());
    }
    // The annotation from anyone else is no mirror pod.
    let req = as_user(review, "alice");
    assert!(
        plan(&req, WebhookKind::Mutate, &Policy::default())
            .unwrap()
            .is_some()
    );
}

#[test]
fn rule_16_a_cronjob_whose_jobs_take_a_self_pod_template_s_labels_is_refused_up_front() {
    let cronjob = |job_labels: Value| {
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "namespace": NS,
            "labels": {"ownerguard.io/owner-pod": "w-1"}},
            "spec": {"schedule": "@daily", "jobTemplate": {"metadata": {"labels": job_labels},
                "spec": {"template": {"metadata": {"labels": {"ownerguard.io/owner-pod": "Self"}},
                    "spec": {"containers": [{"name": "a", "image": "a"}]}}}}}})
    };
    let review = |object: Value| {
        let (_, mut review) = request("CREATE", object, None);
        review["kind"] = json!({"group": "batch", "version": "v1", "kind": "CronJob"});
        from_pod(review, "w-1", "uid-1")
    };
    // No labels on the Job template: each Job takes the pod template's
    // (Self) without the name annotation.
    let err = mutate(&review(cronjob(json!({}))), running(&[("w-1", "uid-1")])).unwrap_err();
    assert!(
        matches!(err, Denial::SelfInDefaultedJobLabels { .. }),
        "{err:?}"
    );
    assert_eq!(err.code(), 400);
    // The Job template labelled by the name: it gets the annotation.
    let labelled = cronjob(json!({"ownerguard.io/owner-pod": "w-1"}));
    assert!(mutate(&review(labelled), running(&[("w-1", "uid-1")])).is_ok());
}

/// An update that leaves a Job template unlabelled as it was (its labels
/// empty before and absent after, or the reverse: the Jobs take the pod
/// template's either way) is no change of what the Jobs carry, as the
/// chart's update filter reads it; one that empties labelled ones is.
#[test]
fn rule_16_a_job_template_s_labels_emptied_or_dropped_alike_is_no_change() {
    let cronjob = |job_meta: Value| {
        json!({"apiVersion": "example.com/v1", "kind": "Nightly", "metadata": {"name": "nightly", "namespace": NS,
            "labels": {"ownerguard.io/owner-pod": "w-1", "ownerguard.io/owner-uid": "uid-1"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "w-1", "uid": "uid-1",
                "controller": false, "blockOwnerDeletion": false}]},
            "spec": {"jobTemplate": {"metadata": job_meta,
                "spec": {"template": {"metadata": {"labels": {"ownerguard.io/owner-pod": "Self"}},
                    "spec": {"containers": [{"name": "a", "image": "a"}]}}}}}})
    };
    let update = |new: Value, old: Value| {
        let (_, mut review) = request("UPDATE", new, Some(old));
        review["kind"] = json!({"group": "example.com", "version": "v1", "kind": "Nightly"});
        review["resource"] =
            json!({"group": "example.com", "version": "v1", "resource": "nightlies"});
        from_pod(review, "w-1", "uid-1")
    };
    let (empty, absent) = (json!({"labels": {}}), json!({}));
    for (new, old) in [(&absent, &empty), (&empty, &absent), (&empty, &empty)] {
        let req = update(cronjob(new.clone()), cronjob(old.clone()));
        assert!(
            mutate(&req, running(&[("w-1", "uid-1")])).is_ok(),
            "{new} after {old}"
        );
    }
    let labelled = json!({"labels": {"ownerguard.io/owner-pod": "w-1"}});
    let req = update(cronjob(empty), cronjob(labelled));
    let err = mutate(&req, running(&[("w-1", "uid-1")])).unwrap_err();
    assert!(
        matches!(err, Denial::SelfInDefaultedJobLabels { .. }),
        "{err:?}"
    );
}

#[test]
fn rule_16_under_the_shared_identity_only_the_collectors_shape_goes_unjudged() {
    // Without --use-service-account-credentials every controller is
    // system:kube-controller-manager. An update of the collector's shape
    // (references removed, nothing else) is never judged; any other is
    // judged as a person's: a running owner's reference swapped for
    // another pod's or a ReplicaSet's is refused by /validate and put back
    // by /mutate.
    let replica_set = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "uid-rs", "controller": true});
    let other_pod = pod_reference("w-2", "uid-2", Some(false));
    for swapped_in in [replica_set, other_pod] {
        let new = object(owner_labels("w-1", "uid-1"), Some(json!([swapped_in])));
        let (_, review) = request("UPDATE", new.clone(), Some(owned("w-1", "uid-1")));
        for user in ["alice", CONTROLLER_MANAGER] {
            let req = as_user(review.clone(), user);
            let pods = || running(&[("w-1", "uid-1"), ("w-2", "uid-2")]);
            let err = validate(&req, pods()).unwrap_err();
            assert!(
                matches!(err, Denial::OwnerReferenceRemoved { .. }),
                "{user}: {err:?}"
            );
            let allowed = mutate(&req, pods()).unwrap();
            let stored = patched(&new, &allowed);
            let refs = stored["metadata"]["ownerReferences"].as_array().unwrap();
            assert!(
                refs.iter().any(|r| r["uid"] == json!("uid-1")),
                "{user}: the owner's reference put back, {refs:?}"
            );
        }
    }
    // The collector's shape under the shared user: the owner is gone, its
    // reference removed, nothing looked up.
    let (_, review) = request(
        "UPDATE",
        object(owner_labels("w-1", "uid-1"), Some(json!([]))),
        Some(owned("w-1", "uid-1")),
    );
    let allowed = mutate(
        &as_user(review, CONTROLLER_MANAGER),
        crate::decide::Lookups::default(),
    )
    .unwrap();
    assert!(allowed.patch.is_empty() && allowed.warnings.is_empty());
}

/// An UPDATE of a labelled object whose worker is gone, adding the
/// worker's reference back (a controller writing from a cache older than
/// the collector's removal), written against resourceVersion `new` of an
/// object stored at `stored`, in API group `group`.
fn stale_update(new: &str, stored: &str, group: &str) -> AdmissionRequest<'static> {
    stale_update_in(new, stored, group, "v1")
}

fn stale_update_in(
    new: &str,
    stored: &str,
    group: &str,
    version: &str,
) -> AdmissionRequest<'static> {
    let mut old = object(owner_labels("w-1", "uid-1"), None);
    old["metadata"]["resourceVersion"] = json!(stored);
    let mut object = object(
        owner_labels("w-1", "uid-1"),
        Some(json!([pod_reference("w-1", "uid-1", Some(false))])),
    );
    object["metadata"]["resourceVersion"] = json!(new);
    let mut review = request("UPDATE", object, Some(old)).1;
    review["resource"]["group"] = json!(group);
    review["resource"]["version"] = json!(version);
    decoded(review).unwrap()
}

#[test]
fn a_stale_update_the_api_server_will_answer_with_a_conflict_is_not_judged() {
    let gone = || lookups(&[("w-1", Ok(None))]);
    // Written against the stored version: judged, and refused (the
    // worker is gone).
    assert!(mutate(&stale_update("10", "10", ""), gone()).is_err());
    // Against an older one: the API server answers 409 after the mutating
    // webhooks and stores nothing; nothing to judge, nothing to patch.
    let allowed = mutate(&stale_update("9", "10", ""), gone()).unwrap();
    assert!(allowed.patch.is_empty() && allowed.owner.is_none());
    let allowed = mutate(&stale_update("9", "10", "discovery.k8s.io"), gone()).unwrap();
    assert!(allowed.patch.is_empty());
    // What the API server does not answer with a conflict is judged:
    // `0` (an unconditional update), the same number written otherwise,
    // a version that is no number (refused by the API server itself), and
    // a group an aggregated API server may store as it likes.
    for (new, stored, group) in [
        ("0", "10", ""),
        ("00", "10", ""),
        ("010", "10", ""),
        ("+9", "10", ""),
        (" 9", "10", ""),
        ("", "10", ""),
        ("18446744073709551616", "10", ""),
        ("9", "", ""),
        ("9", "abc", ""),
        ("9", "10", "example.com"),
    ] {
        assert!(
            mutate(&stale_update(new, stored, group), gone()).is_err(),
            "{new} against {stored} in {group:?} was not judged"
        );
    }
    // An aggregated API server registered for another version of a
    // group's name (`v2.apps`) stores as it likes: judged.
    assert!(mutate(&stale_update_in("9", "10", "apps", "v2"), gone()).is_err());
    // The validating webhook sees only what passed the API server's
    // version check: the stored version, judged, the backstop of a
    // mutating webhook after ownerguard's that would change the version.
    assert!(validate(&stale_update("10", "10", "apps"), gone()).is_err());
}
