//! One test per rule of SPEC §3, named after it. Each runs `plan` and
//! `decide` with the lookups a scenario implies, and checks the exact
//! denial variant or the patched metadata.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::*;
use crate::admission::{AdmissionRequest, EXTRA_POD_NAME, EXTRA_POD_UID};
use crate::error::LookupError;
use crate::owner::ObservedPod;

const NS: &str = "agents";

fn request(operation: &str, object: Value, old: Option<Value>) -> (AdmissionRequest, Value) {
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
    (serde_json::from_value(review.clone()).unwrap(), review)
}

fn from_pod(mut review: Value, name: &str, uid: &str) -> AdmissionRequest {
    review["userInfo"] = json!({
        "username": format!("system:serviceaccount:{NS}:worker"),
        "extra": {EXTRA_POD_NAME: [name], EXTRA_POD_UID: [uid]},
    });
    serde_json::from_value(review).unwrap()
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

fn running(pods: &[(&str, &str)]) -> HashMap<String, Lookup> {
    pods.iter()
        .map(|(name, uid)| {
            let pod = ObservedPod {
                uid: uid.to_string(),
                terminating: false,
            };
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
    lookups: HashMap<String, Lookup>,
) -> Result<Allowed, Denial> {
    match plan(request, webhook, policy)? {
        None => Ok(Allowed::default()),
        Some(checks) => {
            for claim in &checks.claims {
                assert!(
                    lookups.contains_key(&claim.name) || lookups.is_empty(),
                    "unexpected lookup of {}",
                    claim.name
                );
            }
            decide(checks, &lookups, policy)
        }
    }
}

fn mutate(request: &AdmissionRequest, lookups: HashMap<String, Lookup>) -> Result<Allowed, Denial> {
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
    let allowed = mutate(&req, HashMap::new()).unwrap();
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
    let lookups = HashMap::from([(
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
    assert!(err.to_string().contains("owner pod 'w-1' has uid 'B', not 'A': pass the uid of the running pod (downward API metadata.uid)"));
}

#[test]
fn owner_being_deleted_is_owner_terminating() {
    let (req, _) = request("CREATE", object(owner_labels("w-1", "uid-1"), None), None);
    let pod = ObservedPod {
        uid: "uid-1".into(),
        terminating: true,
    };
    let lookups = HashMap::from([(
        "w-1".to_string(),
        Lookup {
            source: Source::Api,
            outcome: Ok(Some(pod)),
        },
    )]);
    let err = mutate(&req, lookups).unwrap_err();
    assert!(matches!(err, Denial::OwnerTerminating { .. }), "{err:?}");
}

fn failed_lookup() -> HashMap<String, Lookup> {
    let error = LookupError::TimedOut {
        after: std::time::Duration::from_secs(2),
    };
    HashMap::from([(
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
    let lookups = HashMap::from([(
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
    let err = mutate(&req, HashMap::new()).unwrap_err();
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
    let req: AdmissionRequest = serde_json::from_value(review).unwrap();
    let err = mutate(&req, HashMap::new()).unwrap_err();
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
        HashMap::from([(
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
    let err = mutate(&req, HashMap::new()).unwrap_err();
    assert!(matches!(err, Denial::OwnerLabelChanged { .. }), "{err:?}");
}

#[test]
fn update_may_not_add_the_owner_label() {
    let old = object(json!({}), None);
    let new = object(owner_labels("w-1", "uid-1"), None);
    let (req, _) = request("UPDATE", new, Some(old));
    let err = mutate(&req, HashMap::new()).unwrap_err();
    assert!(matches!(err, Denial::OwnerLabelChanged { .. }), "{err:?}");
}

#[test]
fn update_may_not_remove_the_owner_reference() {
    let old = object(
        owner_labels("w-1", "uid-1"),
        Some(json!([pod_reference("w-1", "uid-1", Some(false))])),
    );
    let new = object(owner_labels("w-1", "uid-1"), Some(json!([])));
    let (req, _) = request("UPDATE", new, Some(old));
    let err = mutate(&req, HashMap::new()).unwrap_err();
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
    let allowed = mutate(&req, HashMap::new()).unwrap();
    assert_eq!(
        patched(&new, &allowed)["metadata"]["ownerReferences"][0]["blockOwnerDeletion"],
        false
    );
    let (req, _) = request("UPDATE", new, Some(old));
    let err = run(
        &req,
        WebhookKind::Validate,
        &Policy::default(),
        HashMap::new(),
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
    let allowed = mutate(&req, HashMap::new()).unwrap();
    assert!(allowed.patch.is_empty());
    let allowed = run(
        &req,
        WebhookKind::Validate,
        &Policy::default(),
        HashMap::new(),
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
    let lookups = HashMap::from([(
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
    let checks = plan(&req, WebhookKind::Mutate, &Policy::default())
        .unwrap()
        .unwrap();
    assert!(checks.claims.is_empty());
}

#[test]
fn update_without_old_object_is_missing_old_object() {
    let (req, _) = request("UPDATE", object(owner_labels("w-1", "uid-1"), None), None);
    let err = mutate(&req, HashMap::new()).unwrap_err();
    assert!(matches!(err, Denial::MissingOldObject { .. }), "{err:?}");
}

#[test]
fn delete_and_connect_are_allowed_unchanged() {
    for operation in ["DELETE", "CONNECT"] {
        let (req, _) = request(operation, object(owner_labels("w-1", "uid-1"), None), None);
        assert_eq!(
            plan(&req, WebhookKind::Mutate, &Policy::default())
                .unwrap()
                .map(|c| c.claims),
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

/// Every denial names the object, the namespace, the owner and a fix.
#[test]
fn every_denial_names_object_namespace_owner_and_fix() {
    let object = ObjectName {
        kind: "Job".into(),
        name: "step-7".into(),
        generated: false,
    };
    let (ns, owner) = ("agents".to_string(), "w-1".to_string());
    let denials = vec![
        Denial::InvalidOwnerName {
            object: object.clone(),
            namespace: ns.clone(),
            key: "ownerguard.io/owner-pod".into(),
            value: "w-1".into(),
        },
        Denial::InvalidOwnerUid {
            object: object.clone(),
            namespace: ns.clone(),
            owner: owner.clone(),
            key: "k".into(),
            value: "".into(),
        },
        Denial::MissingOwnerUid {
            object: object.clone(),
            namespace: ns.clone(),
            owner: owner.clone(),
            key: "k".into(),
        },
        Denial::UidDisagreesWithRequester {
            object: object.clone(),
            namespace: ns.clone(),
            owner: owner.clone(),
            declared: "a".into(),
            requester_uid: "b".into(),
        },
        Denial::RequesterNotOwner {
            object: object.clone(),
            namespace: ns.clone(),
            owner: owner.clone(),
            requester: "agents/w-2".into(),
            requester_name: "w-2".into(),
            requester_namespace: "agents".into(),
            key: "k".into(),
        },
        Denial::OwnerNotFound {
            object: object.clone(),
            namespace: ns.clone(),
            owner: owner.clone(),
        },
        Denial::OwnerUidMismatch {
            object: object.clone(),
            namespace: ns.clone(),
            owner: owner.clone(),
            declared: "a".into(),
            actual: "b".into(),
        },
        Denial::OwnerTerminating {
            object: object.clone(),
            namespace: ns.clone(),
            owner: owner.clone(),
        },
        Denial::LookupFailed {
            object: object.clone(),
            namespace: ns.clone(),
            owner: owner.clone(),
            reason: "timed out".into(),
        },
        Denial::MalformedReference {
            object: object.clone(),
            namespace: ns.clone(),
            owner: owner.clone(),
            index: 0,
            field: "uid",
        },
        Denial::OwnerLabelChanged {
            object: object.clone(),
            namespace: ns.clone(),
            owner: owner.clone(),
            key: "k".into(),
            old: "'a'".into(),
            new: "'b'".into(),
        },
        Denial::OwnerReferenceRemoved {
            object: object.clone(),
            namespace: ns.clone(),
            owner: owner.clone(),
            uid: "u".into(),
        },
        Denial::MissingOldObject {
            object: object.clone(),
            namespace: ns.clone(),
            owner: owner.clone(),
        },
        Denial::ReferenceMissing {
            object: object.clone(),
            namespace: ns.clone(),
            owner: owner.clone(),
            uid: "u".into(),
        },
        Denial::BlockingReference {
            object: object.clone(),
            namespace: ns.clone(),
            owner: owner.clone(),
        },
    ];
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
        object,
        owner,
        what: "labels".into(),
    }
    .to_string();
    assert!(
        message.contains("has no namespace") && message.contains("w-1"),
        "{message}"
    );
}
