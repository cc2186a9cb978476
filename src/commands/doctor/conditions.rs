//! The webhooks' `matchConditions`, as this version's chart writes them.
//!
//! A matchCondition decides, before any call, which requests a webhook
//! sees: one edited by hand, or left from another version, may skip
//! objects ownerguard must judge, and no probe notices (the probe's
//! ConfigMap is a create, which every condition lets through). So doctor
//! compares them with the chart's, expression for expression.
//!
//! The chart's are `match-conditions.json`: the render of
//! `charts/ownerguard/templates/_matchconditions.tpl` with the default key
//! prefix, by real Helm. `.ci/chart-check` fails when the file is not what
//! the chart renders (`UPDATE_GOLDEN=1 bash .ci/chart-check` rewrites it),
//! and when doctor does not pass on the render of any CI values file
//! (custom key prefixes included): the template is the one source.

use serde::Deserialize;

/// One condition: its name and CEL expression.
pub(super) type Condition = (String, String);

/// The render, per role.
const RENDERED: &str = include_str!("match-conditions.json");
/// The key prefix the render was made with.
const RENDERED_KEY_PREFIX: &str = "ownerguard.io";
/// The chart the render is of: its `version` says which configurations
/// this doctor can judge expression for expression.
const CHART_YAML: &str = include_str!("../../../charts/ownerguard/Chart.yaml");

/// The `helm.sh/chart` label this version's chart writes on the webhook
/// configurations (`ownerguard-0.3.0`).
pub(super) fn chart_label() -> String {
    let version = CHART_YAML
        .lines()
        .find_map(|line| line.strip_prefix("version:"))
        .map(|v| v.trim().trim_matches('"'))
        .unwrap_or_default();
    format!("ownerguard-{}", version.replace('+', "_"))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Rendered {
    labelled: Vec<MatchCondition>,
    pod_references: Vec<MatchCondition>,
}

#[derive(Deserialize)]
struct MatchCondition {
    name: String,
    expression: String,
}

fn rendered(key_prefix: &str, role: impl Fn(Rendered) -> Vec<MatchCondition>) -> Vec<Condition> {
    let all: Rendered =
        serde_json::from_str(RENDERED).expect("match-conditions.json is checked by its test");
    // The keys are CEL string literals: 'ownerguard.io/owner-pod' and the
    // like, nothing else holds the prefix.
    let (from, to) = (
        format!("'{RENDERED_KEY_PREFIX}/"),
        format!("'{key_prefix}/"),
    );
    role(all)
        .into_iter()
        .map(|c| (c.name, c.expression.replace(&from, &to)))
        .collect()
}

/// The labelled webhooks': every CREATE, and an UPDATE only when it
/// touches what ownerguard judges.
pub(super) fn labelled(key_prefix: &str) -> Vec<Condition> {
    rendered(key_prefix, |r| r.labelled)
}

/// validation.allPodOwnerReferences': only objects with a pod-like
/// reference.
pub(super) fn pod_references(key_prefix: &str) -> Vec<Condition> {
    rendered(key_prefix, |r| r.pod_references)
}

/// An expression as the comparison reads it: runs of white space are one
/// space (the chart writes YAML block scalars; the API server keeps them
/// as written, line breaks and indentation included).
pub(super) fn normalized(expression: &str) -> String {
    expression.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// How `found` differs from `expected`, or `None` when it is the same set
/// (order aside: the API server evaluates every condition, any order).
pub(super) fn difference(expected: &[Condition], found: &[Condition]) -> Option<String> {
    let key = |(name, expression): &Condition| (name.clone(), normalized(expression));
    let mut expected: Vec<_> = expected.iter().map(key).collect();
    let mut found: Vec<_> = found.iter().map(key).collect();
    expected.sort();
    found.sort();
    if expected == found {
        return None;
    }
    let names = |conditions: &[(String, String)]| {
        conditions
            .iter()
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if names(&expected) != names(&found) {
        return Some(format!(
            "conditions [{}], the chart's are [{}]",
            names(&found),
            names(&expected)
        ));
    }
    let changed: Vec<&str> = found
        .iter()
        .zip(&expected)
        .filter(|(found, expected)| found.1 != expected.1)
        .map(|(found, _)| found.0.as_str())
        .collect();
    Some(format!(
        "the expression of {} differs from the chart's",
        changed.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_render_holds_one_condition_per_role() {
        assert_eq!(labelled(RENDERED_KEY_PREFIX).len(), 1);
        assert_eq!(pod_references(RENDERED_KEY_PREFIX).len(), 1);
    }

    #[test]
    fn white_space_and_order_are_not_differences() {
        let expected = vec![
            ("a".to_string(), "x != y\n|| z".to_string()),
            ("b".to_string(), "true".to_string()),
        ];
        let found = vec![
            ("b".to_string(), "true".to_string()),
            ("a".to_string(), "x  !=  y || z".to_string()),
        ];
        assert_eq!(difference(&expected, &found), None);
    }

    #[test]
    fn a_changed_expression_is_named() {
        let expected = labelled("ownerguard.io");
        let mut found = expected.clone();
        found[0].1 = "request.operation != 'UPDATE'".to_string();
        assert_eq!(
            difference(&expected, &found).unwrap(),
            "the expression of create-or-ownership-update differs from the chart's"
        );
    }

    #[test]
    fn a_missing_or_extra_condition_is_named() {
        let expected = pod_references("ownerguard.io");
        let mut found = expected.clone();
        found.push(("skip-agents".to_string(), "false".to_string()));
        assert_eq!(
            difference(&expected, &found).unwrap(),
            "conditions [has-pod-owner-reference, skip-agents], the chart's are [has-pod-owner-reference]"
        );
    }

    #[test]
    fn the_key_prefix_is_in_every_label_read() {
        let (_, expression) = &labelled("example.com")[0];
        assert!(expression.contains("labels[?'example.com/owner-pod']"));
        assert!(expression.contains("[?'example.com/owner-pod-name']"));
        assert!(!expression.contains("ownerguard.io"));
    }
}

#[cfg(test)]
mod chart_tests {
    #[test]
    fn the_chart_label_is_the_charts_name_and_version() {
        let label = super::chart_label();
        let version = label.strip_prefix("ownerguard-").unwrap();
        assert!(
            version.split('.').count() == 3 && version.split('.').all(|n| n.parse::<u32>().is_ok()),
            "{label}"
        );
    }
}
