//! Each namespace's mode (SPEC §3 rule 17), as the API server will route
//! it: which of the mutating webhooks (`mutate.<keyPrefix>`,
//! `mutate-warn.<keyPrefix>`, `mutate-audit.<keyPrefix>`) selects it, read
//! by evaluating their namespaceSelectors against the namespace's labels,
//! never from the label alone. A namespace two of them select is decided
//! twice; one labelled with a value that is no mode gets the default.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::webhooks::{Role, WebhookView};
use super::workload;
use super::{Check, Verdict, line};
use crate::decide::Mode;

/// A namespace as the check reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceView {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// Whether a webhook's namespaceSelector selects a namespace with
/// `labels`: none selects every namespace; one is read as
/// [`workload::selects`] reads a PodDisruptionBudget's, as apimachinery's
/// `LabelSelectorAsSelector` does.
pub fn selects(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    selector.is_none_or(|selector| workload::selects(selector, labels))
}

/// One line: how many namespaces are in each mode (naming those in warn
/// and audit), failing when a namespace is selected by two mutating
/// webhooks, or two validating ones, or is decided in one mode by the
/// mutating webhooks and in another by the validating ones (a selector
/// edited by hand: the validating webhook in enforce refuses what the
/// mutating one only warned of); warning when one carries a mode label
/// that is no mode.
pub fn check_modes(
    webhooks: &[WebhookView<'_>],
    namespaces: &Result<Vec<NamespaceView>, String>,
    key_prefix: &str,
) -> Check {
    let subject = "namespace modes";
    let namespaces = match namespaces {
        Ok(namespaces) => namespaces,
        Err(why) => {
            return line(
                Verdict::Warn,
                subject,
                format!("{why}: each namespace's mode cannot be told"),
            );
        }
    };
    let of_role = |wanted: Role| -> Vec<(Mode, &WebhookView<'_>)> {
        webhooks
            .iter()
            .filter_map(|w| match Role::of_in_mode(w, key_prefix) {
                Some((role, mode)) if role == wanted => Some((mode, w)),
                _ => None,
            })
            .collect()
    };
    let (mutating, validating) = (of_role(Role::Mutate), of_role(Role::Validate));
    let modes_of =
        |of: &[(Mode, &WebhookView<'_>)], labels: &BTreeMap<String, String>| -> Vec<Mode> {
            of.iter()
                .filter(|(_, w)| selects(w.namespace_selector, labels))
                .map(|(mode, _)| *mode)
                .collect()
        };
    let key = format!("{key_prefix}/mode");
    let mut by_mode: BTreeMap<&'static str, Vec<&str>> = BTreeMap::new();
    let (mut twice, mut unknown, mut elsewhere) = (Vec::new(), Vec::new(), Vec::new());
    let mut split = Vec::new();
    let mut excluded = 0;
    let shown = |modes: &[Mode]| {
        modes
            .iter()
            .map(|m| m.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    for namespace in namespaces {
        let modes = modes_of(&mutating, &namespace.labels);
        let validated = modes_of(&validating, &namespace.labels);
        if validated.len() > 1 {
            twice.push(format!(
                "{} (validating: {})",
                namespace.name,
                shown(&validated)
            ));
        } else if !validating.is_empty() && modes.len() <= 1 && validated != modes {
            split.push(format!(
                "{} (mutating: {}; validating: {})",
                namespace.name,
                if modes.is_empty() {
                    "none".to_string()
                } else {
                    shown(&modes)
                },
                if validated.is_empty() {
                    "none".to_string()
                } else {
                    shown(&validated)
                },
            ));
        }
        let labelled = namespace
            .labels
            .get(&key)
            .and_then(|v| Mode::from_path_suffix(v));
        match modes.as_slice() {
            // kube-system, the release's namespace, webhook.excludeNamespaces.
            [] => excluded += 1,
            [mode] => {
                by_mode
                    .entry(mode.as_str())
                    .or_default()
                    .push(&namespace.name);
                if let Some(labelled) = labelled.filter(|l| l != mode) {
                    elsewhere.push(format!(
                        "{} (labelled {}, decided in {})",
                        namespace.name,
                        labelled.as_str(),
                        mode.as_str()
                    ));
                }
            }
            _ => twice.push(format!("{} ({})", namespace.name, shown(&modes))),
        }
        if let Some(value) = namespace.labels.get(&key)
            && Mode::from_path_suffix(value).is_none()
        {
            unknown.push(format!("{}={value}", namespace.name));
        }
    }
    let summary = Mode::ALL
        .iter()
        .map(|mode| {
            let names = by_mode
                .get(mode.as_str())
                .map(Vec::as_slice)
                .unwrap_or_default();
            match mode {
                Mode::Enforce => format!("{} in enforce", names.len()),
                _ if names.is_empty() => format!("none in {}", mode.as_str()),
                _ => format!(
                    "{} in {} ({})",
                    names.len(),
                    mode.as_str(),
                    names.join(", ")
                ),
            }
        })
        .collect::<Vec<_>>()
        .join("; ");
    let summary = format!("{summary}; {excluded} excluded from every webhook");
    if !twice.is_empty() {
        return line(
            Verdict::Fail,
            subject,
            format!(
                "{}: selected by two webhooks of one kind, so each of their objects is decided in two modes and the strictest refuses; give each mode's webhook the chart's namespaceSelector ({summary})",
                twice.join(", ")
            ),
        );
    }
    if !split.is_empty() {
        return line(
            Verdict::Fail,
            subject,
            format!(
                "{}: the mutating and the validating webhooks select it in different modes, so one refuses what the other lets through; give each mode's validating webhook the namespaceSelector of the mutating one, as the chart writes them ({summary})",
                split.join(", ")
            ),
        );
    }
    if !elsewhere.is_empty() {
        return line(
            Verdict::Warn,
            subject,
            format!(
                "{}: no webhook of the mode the label names selects the namespace (the chart installed has no webhook for that mode, or one was removed), so its label does nothing; upgrade the chart ({summary})",
                elsewhere.join(", ")
            ),
        );
    }
    if !unknown.is_empty() {
        return line(
            Verdict::Warn,
            subject,
            format!(
                "{}: {key} is none of enforce, warn, audit, so the namespace has the default mode ({summary})",
                unknown.join(", ")
            ),
        );
    }
    line(Verdict::Ok, subject, summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn selectors_read_as_the_api_server_reads_them() {
        let not_in = LabelSelector {
            match_expressions: Some(vec![expression("m", "NotIn", &["warn", "audit"])]),
            ..LabelSelector::default()
        };
        assert!(selects(Some(&not_in), &labels(&[])));
        assert!(selects(Some(&not_in), &labels(&[("m", "enforce")])));
        assert!(selects(Some(&not_in), &labels(&[("m", "typo")])));
        assert!(!selects(Some(&not_in), &labels(&[("m", "warn")])));
        let is_in = LabelSelector {
            match_expressions: Some(vec![expression("m", "In", &["warn"])]),
            match_labels: Some(labels(&[("team", "a")]).into_iter().collect()),
        };
        assert!(selects(
            Some(&is_in),
            &labels(&[("m", "warn"), ("team", "a")])
        ));
        assert!(!selects(Some(&is_in), &labels(&[("m", "warn")])));
        assert!(!selects(Some(&is_in), &labels(&[("team", "a")])));
        assert!(selects(None, &labels(&[])));
        let odd = LabelSelector {
            match_expressions: Some(vec![expression("m", "Gt", &["1"])]),
            ..LabelSelector::default()
        };
        assert!(!selects(Some(&odd), &labels(&[("m", "2")])));
    }
}
