//! The requester: the pod a request comes from (SPEC §3 rule 8), the
//! service accounts that may declare other pods (delegates), and what
//! the requester check does.

use crate::admission::{EXTRA_POD_NAME, EXTRA_POD_UID, Text, UserInfo};
use crate::k8s::names::is_pod_name;

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

/// A service account allowed to declare any pod of its own namespace as
/// owner (`--delegate NAMESPACE/NAME`): a broker that creates agents on
/// behalf of the workers of its namespace. The owner is still looked up.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Delegate {
    pub namespace: String,
    pub service_account: String,
}

impl std::str::FromStr for Delegate {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.split_once('/') {
            Some((namespace, service_account))
                if crate::k8s::names::is_namespace(namespace) && is_pod_name(service_account) =>
            {
                Ok(Self {
                    namespace: namespace.to_string(),
                    service_account: service_account.to_string(),
                })
            }
            _ => Err(format!(
                "'{text}' is not NAMESPACE/SERVICEACCOUNT (for instance workflows/broker)"
            )),
        }
    }
}

/// The pod a request comes from. Only a service account of the object's
/// namespace whose token is bound to a pod has one (SPEC §3 rule 8): the
/// API server signs that token, so the client cannot forge it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requester<'r> {
    pub namespace: &'r str,
    pub service_account: &'r str,
    pub name: &'r str,
    pub uid: &'r str,
}

impl<'r> Requester<'r> {
    /// The requesting pod, judged for an object of `namespace`.
    ///
    /// `Ok(None)`: no pod identity (no extras, or a user that is not a
    /// service account of `namespace`: nodes, people, controllers).
    ///
    /// # Errors
    ///
    /// The problem, when the pod extras are present but malformed: one
    /// without the other, not exactly one value, an empty value, or a pod
    /// name that is not one. The API server never sends such a request.
    pub fn from_user_info(
        user_info: &'r UserInfo,
        namespace: &str,
    ) -> Result<Option<Self>, &'static str> {
        let (name, uid) = match (
            user_info.extra.get(EXTRA_POD_NAME),
            user_info.extra.get(EXTRA_POD_UID),
        ) {
            (None, None) => return Ok(None),
            (Some(name), Some(uid)) => (only(name)?, only(uid)?),
            _ => return Err("one of pod-name and pod-uid without the other"),
        };
        if !is_pod_name(name) {
            return Err("the pod name is not a pod name");
        }
        let account = user_info
            .username
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'));
        Ok(match account {
            Some((ns, service_account)) if ns == namespace && !service_account.is_empty() => {
                Some(Self {
                    namespace: ns,
                    service_account,
                    name,
                    uid,
                })
            }
            _ => None,
        })
    }

    /// Whether the requester's service account is on the delegate list.
    pub fn is_delegate(&self, delegates: &[Delegate]) -> bool {
        delegates
            .iter()
            .any(|d| d.namespace == self.namespace && d.service_account == self.service_account)
    }
}

fn only<'v>(values: &'v [Text<'_>]) -> Result<&'v str, &'static str> {
    match values {
        [value] if !value.is_empty() => Ok(value),
        [_] => Err("an empty value"),
        [] => Err("no value"),
        _ => Err("more than one value"),
    }
}
