//! Who an object declares as its owner: the owner labels, the Pod
//! `ownerReferences` a client set itself, and the identity of the pod that
//! sends the request. Pure: no I/O.

use crate::admission::{EXTRA_POD_NAME, EXTRA_POD_UID, ObjectMeta, UserInfo};
use crate::error::{Denial, ObjectName};

/// The two owner label keys under `--key-prefix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerLabels {
    /// `<prefix>/owner-pod`: the name of the owner pod. Opts the object in.
    pub pod: String,
    /// `<prefix>/owner-uid`: the uid of that pod.
    pub uid: String,
}

impl OwnerLabels {
    pub fn new(prefix: &str) -> Self {
        Self {
            pod: format!("{prefix}/owner-pod"),
            uid: format!("{prefix}/owner-uid"),
        }
    }
}

impl Default for OwnerLabels {
    fn default() -> Self {
        Self::new("ownerguard.io")
    }
}

/// `--requester-check`: what to do when a pod-bound requester declares
/// another pod as owner.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum RequesterCheck {
    /// Deny the request.
    #[default]
    Enforce,
    /// Allow it with a warning.
    Warn,
    /// Do not compare the requester with the owner.
    Off,
}

/// The pod a request comes from, when its service-account token is bound
/// to a pod. The API server signs that token: the client cannot forge it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requester {
    /// From the username `system:serviceaccount:<namespace>:<name>`: a pod
    /// runs in the namespace of its service account.
    pub namespace: Option<String>,
    pub name: String,
    pub uid: String,
}

impl Requester {
    /// The requesting pod from `userInfo.extra`, or `None` for requests
    /// without pod identity (controllers, users, unbound tokens).
    pub fn from_user_info(user_info: &UserInfo) -> Option<Self> {
        let one = |key: &str| {
            user_info
                .extra
                .get(key)
                .and_then(|values| values.first())
                .filter(|value| !value.is_empty())
                .cloned()
        };
        let name = one(EXTRA_POD_NAME)?;
        let uid = one(EXTRA_POD_UID)?;
        let namespace = user_info
            .username
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
            .map(|(namespace, _)| namespace.to_string());
        Some(Self {
            namespace,
            name,
            uid,
        })
    }

    /// Whether the requester is pod `name` of `namespace`.
    pub fn is(&self, namespace: &str, name: &str) -> bool {
        self.name == name && self.namespace.as_deref().is_none_or(|ns| ns == namespace)
    }

    /// `namespace/name`, for messages.
    pub fn display(&self) -> String {
        match &self.namespace {
            Some(namespace) => format!("{namespace}/{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// Where an owner was declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The owner label.
    Label,
    /// The Pod `ownerReference` at this index.
    Reference(usize),
}

/// A declared owner: a pod name and the uid it must have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub name: String,
    pub uid: String,
    pub origin: Origin,
}

/// The owner the labels declare, with its uid resolved; `None` when the
/// object has no owner label.
///
/// The uid comes from the uid label, or else from the requester when the
/// requester is the owner pod itself.
///
/// # Errors
///
/// [`Denial::InvalidOwnerName`], [`Denial::InvalidOwnerUid`],
/// [`Denial::MissingOwnerUid`] or [`Denial::UidDisagreesWithRequester`].
pub fn label_owner(
    meta: &ObjectMeta,
    object: &ObjectName,
    namespace: &str,
    labels: &OwnerLabels,
    requester: Option<&Requester>,
) -> Result<Option<Claim>, Denial> {
    let Some(name) = label(meta, &labels.pod) else {
        return Ok(None);
    };
    if !is_pod_name(name) {
        return Err(Denial::InvalidOwnerName {
            object: object.clone(),
            namespace: namespace.to_string(),
            key: labels.pod.clone(),
            value: name.to_string(),
        });
    }
    let from_owner = requester.filter(|requester| requester.is(namespace, name));
    let uid = match (label(meta, &labels.uid), from_owner) {
        (Some(uid), _) if !is_uid(uid) => {
            return Err(Denial::InvalidOwnerUid {
                object: object.clone(),
                namespace: namespace.to_string(),
                owner: name.to_string(),
                key: labels.uid.clone(),
                value: uid.to_string(),
            });
        }
        (Some(uid), Some(requester)) if uid != requester.uid => {
            return Err(Denial::UidDisagreesWithRequester {
                object: object.clone(),
                namespace: namespace.to_string(),
                owner: name.to_string(),
                declared: uid.to_string(),
                requester_uid: requester.uid.clone(),
            });
        }
        (Some(uid), _) => uid.to_string(),
        (None, Some(requester)) => requester.uid.clone(),
        (None, None) => {
            return Err(Denial::MissingOwnerUid {
                object: object.clone(),
                namespace: namespace.to_string(),
                owner: name.to_string(),
                key: labels.uid.clone(),
            });
        }
    };
    Ok(Some(Claim {
        name: name.to_string(),
        uid,
        origin: Origin::Label,
    }))
}

/// The owners the Pod `ownerReferences` declare, in order, skipping those
/// at `skip` (references an UPDATE already had).
///
/// # Errors
///
/// [`Denial::MalformedReference`] for a Pod reference without name or uid.
pub fn reference_owners(
    meta: &ObjectMeta,
    object: &ObjectName,
    namespace: &str,
    skip: impl Fn(&str) -> bool,
) -> Result<Vec<Claim>, Denial> {
    let mut claims = Vec::new();
    for (index, reference) in meta.owner_references.iter().flatten().enumerate() {
        if !reference.is_pod() || skip(&reference.uid) {
            continue;
        }
        let field = if reference.name.is_empty() {
            Some("name")
        } else if reference.uid.is_empty() {
            Some("uid")
        } else {
            None
        };
        if let Some(field) = field {
            return Err(Denial::MalformedReference {
                object: object.clone(),
                namespace: namespace.to_string(),
                owner: reference.name.clone(),
                index,
                field,
            });
        }
        claims.push(Claim {
            name: reference.name.clone(),
            uid: reference.uid.clone(),
            origin: Origin::Reference(index),
        });
    }
    Ok(claims)
}

/// Compare a pod-bound requester with a declared owner.
///
/// Returns the warning to give under `--requester-check warn`.
///
/// # Errors
///
/// [`Denial::RequesterNotOwner`] under `enforce`.
pub fn check_requester(
    claim: &Claim,
    object: &ObjectName,
    namespace: &str,
    labels: &OwnerLabels,
    requester: Option<&Requester>,
    mode: RequesterCheck,
) -> Result<Option<String>, Denial> {
    let Some(requester) = requester else {
        return Ok(None);
    };
    if mode == RequesterCheck::Off || requester.is(namespace, &claim.name) {
        return Ok(None);
    }
    match mode {
        RequesterCheck::Warn => Ok(Some(format!(
            "request from pod '{}' declares pod '{}' as owner",
            requester.display(),
            claim.name
        ))),
        _ => Err(Denial::RequesterNotOwner {
            object: object.clone(),
            namespace: namespace.to_string(),
            owner: claim.name.clone(),
            requester: requester.display(),
            requester_name: requester.name.clone(),
            requester_namespace: requester
                .namespace
                .clone()
                .unwrap_or_else(|| namespace.to_string()),
            key: labels.pod.clone(),
        }),
    }
}

/// The value of label `key`, if set.
pub fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

/// Whether `name` is a valid pod name: an RFC 1123 subdomain (lowercase
/// alphanumerics, `-` and `.`, starting and ending alphanumeric, at most
/// 253 characters).
pub fn is_pod_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= 253
        && bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
        && bytes.iter().all(|b| alnum(b) || *b == b'-' || *b == b'.')
}

/// Whether `uid` can be a pod uid written in a label: non-empty, at most 63
/// characters of `[A-Za-z0-9._-]` (a label value; Kubernetes uids are
/// UUIDs, which fit).
pub fn is_uid(uid: &str) -> bool {
    !uid.is_empty()
        && uid.len() <= 63
        && uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn object() -> ObjectName {
        ObjectName {
            kind: "Pod".into(),
            name: "agent-1".into(),
            generated: false,
        }
    }

    fn meta(labels: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn requester(name: &str, uid: &str) -> Requester {
        Requester {
            namespace: Some("agents".into()),
            name: name.into(),
            uid: uid.into(),
        }
    }

    #[test]
    fn requester_comes_from_pod_bound_token_extras() {
        let user_info = UserInfo {
            username: "system:serviceaccount:agents:worker".into(),
            extra: BTreeMap::from([
                (EXTRA_POD_NAME.to_string(), vec!["w-1".to_string()]),
                (EXTRA_POD_UID.to_string(), vec!["uid-1".to_string()]),
            ]),
        };
        assert_eq!(
            Requester::from_user_info(&user_info),
            Some(requester("w-1", "uid-1"))
        );
    }

    #[test]
    fn requester_needs_both_pod_name_and_uid() {
        let user_info = UserInfo {
            username: "system:serviceaccount:agents:worker".into(),
            extra: BTreeMap::from([(EXTRA_POD_NAME.to_string(), vec!["w-1".to_string()])]),
        };
        assert_eq!(Requester::from_user_info(&user_info), None);
    }

    #[test]
    fn requester_of_another_namespace_is_not_the_owner() {
        let mut other = requester("w-1", "uid-1");
        other.namespace = Some("elsewhere".into());
        assert!(!other.is("agents", "w-1"));
        assert!(requester("w-1", "uid-1").is("agents", "w-1"));
    }

    #[test]
    fn no_owner_label_declares_no_owner() {
        let claim = label_owner(
            &meta(&[]),
            &object(),
            "agents",
            &OwnerLabels::default(),
            None,
        );
        assert_eq!(claim, Ok(None));
    }

    #[test]
    fn empty_owner_label_is_invalid_owner_name() {
        let m = meta(&[
            ("ownerguard.io/owner-pod", ""),
            ("ownerguard.io/owner-uid", "u"),
        ]);
        let err = label_owner(&m, &object(), "agents", &OwnerLabels::default(), None).unwrap_err();
        assert!(matches!(err, Denial::InvalidOwnerName { .. }), "{err:?}");
        assert_eq!(err.code(), 400);
    }

    #[test]
    fn uppercase_owner_label_is_invalid_owner_name() {
        let m = meta(&[
            ("ownerguard.io/owner-pod", "Worker"),
            ("ownerguard.io/owner-uid", "u"),
        ]);
        let err = label_owner(&m, &object(), "agents", &OwnerLabels::default(), None).unwrap_err();
        assert!(matches!(err, Denial::InvalidOwnerName { .. }), "{err:?}");
    }

    #[test]
    fn empty_uid_label_is_invalid_owner_uid() {
        let m = meta(&[
            ("ownerguard.io/owner-pod", "w-1"),
            ("ownerguard.io/owner-uid", ""),
        ]);
        let err = label_owner(&m, &object(), "agents", &OwnerLabels::default(), None).unwrap_err();
        assert!(matches!(err, Denial::InvalidOwnerUid { .. }), "{err:?}");
        assert_eq!(err.code(), 400);
    }

    #[test]
    fn uid_label_gives_the_uid() {
        let m = meta(&[
            ("ownerguard.io/owner-pod", "w-1"),
            ("ownerguard.io/owner-uid", "uid-1"),
        ]);
        let claim = label_owner(&m, &object(), "agents", &OwnerLabels::default(), None).unwrap();
        assert_eq!(
            claim,
            Some(Claim {
                name: "w-1".into(),
                uid: "uid-1".into(),
                origin: Origin::Label
            })
        );
    }

    #[test]
    fn missing_uid_label_is_taken_from_the_requesting_owner() {
        let m = meta(&[("ownerguard.io/owner-pod", "w-1")]);
        let r = requester("w-1", "uid-r");
        let claim =
            label_owner(&m, &object(), "agents", &OwnerLabels::default(), Some(&r)).unwrap();
        assert_eq!(claim.map(|c| c.uid), Some("uid-r".to_string()));
    }

    #[test]
    fn missing_uid_label_without_the_owner_requesting_is_missing_owner_uid() {
        let m = meta(&[("ownerguard.io/owner-pod", "w-1")]);
        let r = requester("w-2", "uid-2");
        let err =
            label_owner(&m, &object(), "agents", &OwnerLabels::default(), Some(&r)).unwrap_err();
        assert!(matches!(err, Denial::MissingOwnerUid { .. }), "{err:?}");
    }

    #[test]
    fn uid_label_and_requesting_owner_must_agree() {
        let m = meta(&[
            ("ownerguard.io/owner-pod", "w-1"),
            ("ownerguard.io/owner-uid", "uid-old"),
        ]);
        let r = requester("w-1", "uid-new");
        let err =
            label_owner(&m, &object(), "agents", &OwnerLabels::default(), Some(&r)).unwrap_err();
        assert!(
            matches!(err, Denial::UidDisagreesWithRequester { .. }),
            "{err:?}"
        );
        assert_eq!(err.code(), 403);
    }

    #[test]
    fn key_prefix_changes_the_label_keys() {
        let labels = OwnerLabels::new("example.com");
        let m = meta(&[
            ("example.com/owner-pod", "w-1"),
            ("example.com/owner-uid", "u-1"),
        ]);
        let claim = label_owner(&m, &object(), "agents", &labels, None).unwrap();
        assert_eq!(claim.map(|c| c.name), Some("w-1".to_string()));
    }

    #[test]
    fn requester_declaring_another_pod_is_requester_not_owner_under_enforce() {
        let claim = Claim {
            name: "w-2".into(),
            uid: "u".into(),
            origin: Origin::Label,
        };
        let r = requester("w-1", "uid-1");
        let labels = OwnerLabels::default();
        let err = check_requester(
            &claim,
            &object(),
            "agents",
            &labels,
            Some(&r),
            RequesterCheck::Enforce,
        )
        .unwrap_err();
        assert!(matches!(err, Denial::RequesterNotOwner { .. }), "{err:?}");
        let warning = check_requester(
            &claim,
            &object(),
            "agents",
            &labels,
            Some(&r),
            RequesterCheck::Warn,
        )
        .unwrap();
        assert!(warning.is_some());
        let off = check_requester(
            &claim,
            &object(),
            "agents",
            &labels,
            Some(&r),
            RequesterCheck::Off,
        );
        assert_eq!(off, Ok(None));
    }

    #[test]
    fn requests_without_pod_identity_are_not_requester_checked() {
        let claim = Claim {
            name: "w-2".into(),
            uid: "u".into(),
            origin: Origin::Label,
        };
        let labels = OwnerLabels::default();
        let result = check_requester(
            &claim,
            &object(),
            "agents",
            &labels,
            None,
            RequesterCheck::Enforce,
        );
        assert_eq!(result, Ok(None));
    }

    #[test]
    fn pod_names_follow_rfc_1123_subdomains() {
        for good in ["w", "w-1", "worker.abc-1", "0w"] {
            assert!(is_pod_name(good), "{good}");
        }
        let too_long = "a".repeat(254);
        for bad in ["", "-w", "w-", "W", "w_1", "w/1", too_long.as_str()] {
            assert!(!is_pod_name(bad), "{bad}");
        }
    }
}
