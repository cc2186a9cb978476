use std::collections::BTreeMap;

use super::*;
use crate::admission::{EXTRA_POD_NAME, EXTRA_POD_UID, UserInfo};
use crate::decide::subject::ObjectName;

fn at() -> Subject {
    Subject {
        object: ObjectName {
            kind: "Pod".into(),
            name: "agent-1".into(),
            generated: false,
        },
        namespace: "agents".into(),
        owner: None,
    }
}

fn meta(labels: &[(&str, &str)]) -> ObjectMeta<'static> {
    ObjectMeta {
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string().into(), v.to_string().into()))
                .collect(),
        ),
        ..Default::default()
    }
}

fn requester<'r>(name: &'r str, uid: &'r str) -> Requester<'r> {
    Requester {
        namespace: "agents",
        service_account: "worker",
        name,
        uid,
    }
}

fn policy(labels: &OwnerLabels) -> RequesterPolicy<'_> {
    RequesterPolicy {
        mode: RequesterCheck::Enforce,
        delegates: &[],
        labels,
    }
}

fn user(username: &str, extra: &[(&str, &[&str])]) -> UserInfo<'static> {
    UserInfo {
        username: username.to_string().into(),
        extra: extra
            .iter()
            .map(|(k, v)| {
                // The decoder keeps the identity's two keys only.
                let key = [EXTRA_POD_NAME, EXTRA_POD_UID]
                    .into_iter()
                    .find(|known| known == k)
                    .expect("a key of the pod identity");
                (key, v.iter().map(|s| s.to_string().into()).collect())
            })
            .collect::<BTreeMap<_, _>>(),
    }
}

#[test]
fn requester_comes_from_a_pod_bound_token_of_the_namespace() {
    let info = user(
        "system:serviceaccount:agents:worker",
        &[(EXTRA_POD_NAME, &["w-1"]), (EXTRA_POD_UID, &["uid-1"])],
    );
    assert_eq!(
        Requester::from_user_info(&info, "agents"),
        Ok(Some(requester("w-1", "uid-1")))
    );
    assert_eq!(Requester::from_user_info(&info, "elsewhere"), Ok(None));
}

#[test]
fn requester_needs_both_extras_each_with_one_value() {
    let sa = "system:serviceaccount:agents:worker";
    assert!(Requester::from_user_info(&user(sa, &[(EXTRA_POD_NAME, &["w-1"])]), "agents").is_err());
    assert!(
        Requester::from_user_info(
            &user(
                sa,
                &[(EXTRA_POD_NAME, &["w-1", "w-2"]), (EXTRA_POD_UID, &["u"])]
            ),
            "agents"
        )
        .is_err()
    );
    assert_eq!(
        Requester::from_user_info(&user(sa, &[]), "agents"),
        Ok(None)
    );
}

#[test]
fn no_owner_label_declares_no_owner() {
    let labels = OwnerLabels::default();
    let claim = label_owner(&meta(&[]), &at(), None, policy(&labels));
    assert_eq!(claim, Ok(None));
}

#[test]
fn empty_or_uppercase_owner_label_is_invalid_owner_name() {
    let labels = OwnerLabels::default();
    for value in ["", "Worker", "w_1"] {
        let m = meta(&[
            ("ownerguard.io/owner-pod", value),
            ("ownerguard.io/owner-uid", "u"),
        ]);
        let err = label_owner(&m, &at(), None, policy(&labels)).unwrap_err();
        assert!(
            matches!(err, Denial::InvalidOwnerName { .. }),
            "{value}: {err:?}"
        );
        assert_eq!(err.code(), 400);
    }
}

#[test]
fn empty_uid_label_is_invalid_owner_uid() {
    let labels = OwnerLabels::default();
    let m = meta(&[
        ("ownerguard.io/owner-pod", "w-1"),
        ("ownerguard.io/owner-uid", ""),
    ]);
    let err = label_owner(&m, &at(), None, policy(&labels)).unwrap_err();
    assert!(matches!(err, Denial::InvalidOwnerUid { .. }), "{err:?}");
}

#[test]
fn the_uid_comes_from_the_label_or_the_requesting_owner() {
    let labels = OwnerLabels::default();
    let m = meta(&[
        ("ownerguard.io/owner-pod", "w-1"),
        ("ownerguard.io/owner-uid", "uid-1"),
    ]);
    let owner = label_owner(&m, &at(), None, policy(&labels))
        .unwrap()
        .unwrap();
    assert_eq!(
        (owner.claim.name.as_str(), owner.claim.uid.as_str()),
        ("w-1", "uid-1")
    );
    let m = meta(&[("ownerguard.io/owner-pod", "w-1")]);
    let r = requester("w-1", "uid-r");
    let owner = label_owner(&m, &at(), Some(&r), policy(&labels))
        .unwrap()
        .unwrap();
    assert_eq!(owner.claim.uid, "uid-r");
}

#[test]
fn uid_label_and_requesting_owner_must_agree() {
    let labels = OwnerLabels::default();
    let m = meta(&[
        ("ownerguard.io/owner-pod", "w-1"),
        ("ownerguard.io/owner-uid", "uid-old"),
    ]);
    let r = requester("w-1", "uid-new");
    let err = label_owner(&m, &at(), Some(&r), policy(&labels)).unwrap_err();
    assert!(
        matches!(err, Denial::UidDisagreesWithRequester { .. }),
        "{err:?}"
    );
    assert_eq!(err.code(), 403);
    assert!(!err.to_string().contains("uid-new"), "{err}");
}

#[test]
fn key_prefix_changes_the_keys() {
    let labels = OwnerLabels::new("example.com");
    assert_eq!(labels.pod_name, "example.com/owner-pod-name");
    let m = meta(&[
        ("example.com/owner-pod", "w-1"),
        ("example.com/owner-uid", "u-1"),
    ]);
    let owner = label_owner(&m, &at(), None, policy(&labels))
        .unwrap()
        .unwrap();
    assert_eq!(owner.claim.name, "w-1");
}

#[test]
fn the_name_annotation_beside_a_name_may_only_restate_it() {
    let labels = OwnerLabels::default();
    let mut m = meta(&[
        ("ownerguard.io/owner-pod", "w-1"),
        ("ownerguard.io/owner-uid", "u"),
    ]);
    m.annotations = Some(BTreeMap::from([(
        labels.pod_name.clone().into(),
        "w-2".into(),
    )]));
    let err = label_owner(&m, &at(), None, policy(&labels)).unwrap_err();
    assert!(
        matches!(err, Denial::StrayOwnerAnnotation { .. }),
        "{err:?}"
    );
    // The same pod twice is one owner: a ReplicaSet made from a `Self`
    // Deployment's annotations and a template labelled by the name.
    m.annotations = Some(BTreeMap::from([(
        labels.pod_name.clone().into(),
        "w-1".into(),
    )]));
    let owner = label_owner(&m, &at(), None, policy(&labels))
        .unwrap()
        .unwrap();
    assert_eq!(owner.claim.name, "w-1");
    assert!(!owner.by_self);
}

#[test]
fn requester_check_modes_and_delegates() {
    let labels = OwnerLabels::default();
    let owner = "w-2";
    let r = requester("w-1", "uid-1");
    let err = check_requester(owner, &at(), Some(&r), policy(&labels)).unwrap_err();
    assert!(matches!(err, Denial::RequesterNotOwner { .. }), "{err:?}");
    let warn = RequesterPolicy {
        mode: RequesterCheck::Warn,
        ..policy(&labels)
    };
    assert!(
        check_requester(owner, &at(), Some(&r), warn)
            .unwrap()
            .is_some()
    );
    let off = RequesterPolicy {
        mode: RequesterCheck::Off,
        ..policy(&labels)
    };
    assert_eq!(check_requester(owner, &at(), Some(&r), off), Ok(None));
    let delegates = ["agents/worker".parse::<Delegate>().unwrap()];
    let delegated = RequesterPolicy {
        delegates: &delegates,
        ..policy(&labels)
    };
    assert_eq!(check_requester(owner, &at(), Some(&r), delegated), Ok(None));
    assert_eq!(
        check_requester(owner, &at(), None, policy(&labels)),
        Ok(None)
    );
}

#[test]
fn delegates_parse_as_namespace_slash_name() {
    assert!("agents/broker".parse::<Delegate>().is_ok());
    for bad in ["agents", "/broker", "agents/", "a/b/c", "Agents/broker"] {
        assert!(bad.parse::<Delegate>().is_err(), "{bad}");
    }
}
