//! The observe-only webhook of the creates without the owner label
//! (`observe.unlabelled`): it must never refuse, and it should be sent
//! only what it counts.

use super::webhooks::{Configuration, WebhookView};
use super::{Check, Verdict, line};

/// Whether `webhook` is the observe webhook the chart writes for
/// `key_prefix`.
pub(super) fn is_observe(webhook: &WebhookView<'_>, key_prefix: &str) -> bool {
    webhook.configuration == Configuration::Validating
        && webhook.name == format!("observe.{key_prefix}")
}

/// What the observe webhook must be: fail open, call `/observe`; and what
/// it should be: sent only unlabelled CREATEs made with a pod's token.
pub(super) fn check_observe(webhook: &WebhookView<'_>, key_prefix: &str) -> Vec<Check> {
    let subject = |what: &str| format!("{what} of {}", webhook.label());
    let mut checks = Vec::new();
    let path = webhook.path();
    checks.push(if path == "/observe" {
        line(Verdict::Ok, subject("path"), "calls /observe")
    } else {
        line(
            Verdict::Fail,
            subject("path"),
            format!(
                "calls {}, but the observe webhook must call /observe: another path decides, and may refuse, what was only to be counted",
                if path.is_empty() { "/" } else { &path }
            ),
        )
    });
    checks.push(if webhook.failure_policy == "Ignore" {
        line(
            Verdict::Ok,
            subject("failurePolicy"),
            "Ignore: an outage of ownerguard never refuses what it only counts",
        )
    } else {
        line(
            Verdict::Fail,
            subject("failurePolicy"),
            format!(
                "{}: an outage of ownerguard refuses every create it was only to count; the chart writes Ignore",
                webhook.failure_policy
            ),
        )
    });
    // A webhook with side effects is not called for a dry run: the API
    // server refuses the dry-run request instead.
    checks.push(if matches!(webhook.side_effects, "None" | "NoneOnDryRun") {
        line(
            Verdict::Ok,
            subject("sideEffects"),
            format!("{}: dry runs are let through", webhook.side_effects),
        )
    } else {
        line(
            Verdict::Fail,
            subject("sideEffects"),
            format!(
                "{}: the API server refuses every dry-run create the webhook is sent; the chart writes None",
                webhook.side_effects
            ),
        )
    });
    let owner_key = format!("{key_prefix}/owner-pod");
    let unlabelled_only = webhook
        .object_selector
        .and_then(|s| s.match_expressions.as_ref())
        .is_some_and(|expressions| {
            expressions
                .iter()
                .any(|e| e.key == owner_key && e.operator == "DoesNotExist")
        });
    let creates_only = !webhook.rules.is_empty()
        && webhook
            .rules
            .iter()
            .all(|r| r.operations.iter().flatten().all(|o| o == "CREATE"));
    let pods_only = webhook
        .match_conditions
        .iter()
        .any(|(_, expression)| expression.contains("authentication.kubernetes.io/pod-name"));
    let mut sent_for_nothing = Vec::new();
    if !unlabelled_only {
        sent_for_nothing.push(format!(
            "objects labelled {owner_key} (no objectSelector with DoesNotExist)"
        ));
    }
    if !creates_only {
        sent_for_nothing.push("operations other than CREATE".to_string());
    }
    if !pods_only {
        sent_for_nothing.push(
            "creates by people and controllers (no matchCondition on the pod-name extra)"
                .to_string(),
        );
    }
    checks.push(if sent_for_nothing.is_empty() {
        line(
            Verdict::Ok,
            subject("selection"),
            "sent only the CREATEs a pod makes of objects without the owner label",
        )
    } else {
        line(
            Verdict::Warn,
            subject("selection"),
            format!(
                "also sent {}: a webhook call each, counted nothing",
                sent_for_nothing.join(", ")
            ),
        )
    });
    checks
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::admissionregistration::v1::{
        RuleWithOperations, ServiceReference, WebhookClientConfig,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

    use super::*;

    struct Parts {
        client: WebhookClientConfig,
        rules: Vec<RuleWithOperations>,
        selector: LabelSelector,
    }

    fn parts(path: &str, operations: &[&str], operator: &str) -> Parts {
        Parts {
            client: WebhookClientConfig {
                service: Some(ServiceReference {
                    name: "ownerguard".into(),
                    namespace: "ownerguard".into(),
                    path: Some(path.into()),
                    port: Some(443),
                }),
                ..WebhookClientConfig::default()
            },
            rules: vec![RuleWithOperations {
                operations: Some(operations.iter().map(|o| o.to_string()).collect()),
                ..RuleWithOperations::default()
            }],
            selector: LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "ownerguard.io/owner-pod".into(),
                    operator: operator.into(),
                    values: None,
                }]),
                ..LabelSelector::default()
            },
        }
    }

    fn view<'a>(parts: &'a Parts, policy: &'a str, condition: &str) -> WebhookView<'a> {
        WebhookView {
            configuration: Configuration::Validating,
            name: "observe.ownerguard.io".into(),
            client_config: &parts.client,
            rules: &parts.rules,
            object_selector: Some(&parts.selector),
            namespace_selector: None,
            failure_policy: policy,
            side_effects: "None",
            timeout_seconds: 2,
            match_conditions: vec![("created-by-a-pod".into(), condition.into())],
            chart: None,
        }
    }

    const POD_CONDITION: &str = "has(request.userInfo.extra) && 'authentication.kubernetes.io/pod-name' in request.userInfo.extra";

    fn verdicts(checks: &[Check]) -> Vec<Verdict> {
        checks.iter().map(|c| c.verdict).collect()
    }

    #[test]
    fn the_chart_s_observe_webhook_passes() {
        let parts = parts("/observe", &["CREATE"], "DoesNotExist");
        let webhook = view(&parts, "Ignore", POD_CONDITION);
        assert!(is_observe(&webhook, "ownerguard.io"));
        assert!(!is_observe(&webhook, "example.com"));
        let checks = check_observe(&webhook, "ownerguard.io");
        assert_eq!(verdicts(&checks), [Verdict::Ok; 4], "{checks:#?}");
    }

    #[test]
    fn one_that_may_refuse_fails_and_one_sent_too_much_warns() {
        // Fail: an outage refuses what was only to be counted.
        let good = parts("/observe", &["CREATE"], "DoesNotExist");
        let checks = check_observe(&view(&good, "Fail", POD_CONDITION), "ownerguard.io");
        assert_eq!(
            verdicts(&checks),
            [Verdict::Ok, Verdict::Fail, Verdict::Ok, Verdict::Ok],
            "{checks:#?}"
        );
        // Another path decides (and may refuse).
        let deciding = parts("/validate-all", &["CREATE"], "DoesNotExist");
        let checks = check_observe(&view(&deciding, "Ignore", POD_CONDITION), "ownerguard.io");
        assert_eq!(checks[0].verdict, Verdict::Fail, "{checks:#?}");
        // Labelled objects, UPDATEs and everyone's creates: calls for
        // nothing, each named.
        let wide = parts("/observe", &["CREATE", "UPDATE"], "Exists");
        let checks = check_observe(&view(&wide, "Ignore", "true"), "ownerguard.io");
        assert_eq!(checks[3].verdict, Verdict::Warn, "{checks:#?}");
        for named in [
            "ownerguard.io/owner-pod",
            "other than CREATE",
            "people and controllers",
        ] {
            assert!(checks[3].detail.contains(named), "{named}: {checks:#?}");
        }
        // Side effects: dry runs refused.
        let mut some = view(&good, "Ignore", POD_CONDITION);
        some.side_effects = "Some";
        let checks = check_observe(&some, "ownerguard.io");
        assert_eq!(checks[2].verdict, Verdict::Fail, "{checks:#?}");
    }
}
