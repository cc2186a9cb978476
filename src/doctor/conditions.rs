//! The webhooks' `matchConditions`, as this version's chart writes them
//! (`charts/ownerguard/templates/_matchconditions.tpl`).
//!
//! A matchCondition decides, before any call, which requests a webhook
//! sees: one edited by hand, or left from another version, may skip
//! objects ownerguard must judge, and no probe notices (the probe's
//! ConfigMap is the one object every condition lets through). So doctor
//! compares them with the chart's, expression for expression. The text
//! here mirrors the template; `.ci/chart-check` renders every CI values
//! file with real Helm and fails if doctor does not pass on the result, so
//! the two cannot drift apart unnoticed.

/// One condition: its name and CEL expression.
pub(super) type Condition = (String, String);

/// The labelled webhooks' condition: every CREATE, and an UPDATE only when
/// it touches what ownerguard owns.
pub(super) fn labelled(key_prefix: &str) -> Vec<Condition> {
    let keys = [
        format!("{key_prefix}/owner-pod"),
        format!("{key_prefix}/owner-uid"),
    ];
    let name_key = format!("{key_prefix}/owner-pod-name");
    let changed = |path: &str| format!("object{path} != oldObject{path}");

    let mut terms = vec![
        "request.operation != 'UPDATE'".to_string(),
        changed(".metadata.?ownerReferences"),
    ];
    terms.extend(
        keys.iter()
            .map(|key| changed(&format!(".metadata.?labels[?'{key}']"))),
    );
    terms.push(changed(&format!(".metadata.?annotations[?'{name_key}']")));

    let mut templates = vec!["false".to_string()];
    for template in [
        ".?spec.?template",
        ".?spec.?jobTemplate",
        ".?spec.?jobTemplate.?spec.?template",
    ] {
        templates.extend(
            keys.iter()
                .map(|key| changed(&format!("{template}.?metadata.?labels[?'{key}']"))),
        );
        templates.push(changed(&format!(
            "{template}.?metadata.?annotations[?'{name_key}']"
        )));
    }
    terms.push(format!(
        "(request.kind.group in ['', 'apps', 'batch'] && ({} ))",
        templates.join(" || ")
    ));
    vec![("create-or-ownership-update".to_string(), terms.join(" || "))]
}

/// validation.allPodOwnerReferences: only objects with a reference whose
/// kind is a pod's in any spelling.
pub(super) fn pod_references() -> Vec<Condition> {
    vec![(
        "has-pod-owner-reference".to_string(),
        "object.metadata.?ownerReferences.orValue([]).exists(r, \
         type(r) == map && type(r.?kind.orValue(null)) == string \
         && r.kind.matches('(?i)^[^a-z0-9]*p[^a-z0-9]*o[^a-z0-9]*d[^a-z0-9]*(s[^a-z0-9]*)?$'))"
            .to_string(),
    )]
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
        let expected = pod_references();
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
        assert!(expression.contains("annotations[?'example.com/owner-pod-name']"));
        assert!(!expression.contains("ownerguard.io"));
    }
}
