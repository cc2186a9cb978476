//! The workload: what the pods run (the effective command line and its
//! flags), whether the Service reaches the webhook port, and the
//! PodDisruptionBudget.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::owner::LookupBudget;

use super::webhooks::WebhookView;
use super::{Check, DEFAULT_KEY_PREFIX, DEFAULT_METRICS_PORT, DEFAULT_WEBHOOK_PORT, Verdict, line};
use super::{Installation, ServeFlags};

/// The server container and its flags, or why it does not run `serve`.
pub(super) struct ServerView<'a> {
    pub(super) container: &'a Container,
    pub(super) flags: ServeFlags,
    /// Why the server would refuse this command line at start, if it
    /// would: the flags are read all the same.
    pub(super) refused: Option<String>,
}

/// The Deployment's spec: optional in the API of Kubernetes 1.33 to 1.36,
/// required from 1.37 (k8s-openapi follows the version feature, and
/// ownerguard builds for the newest and the oldest minor it claims).
pub(super) fn deployment_spec(deployment: &Deployment) -> Option<&DeploymentSpec> {
    k8s_openapi::k8s_if_ge_1_37! {
        let spec = Some(&deployment.spec);
    }
    k8s_openapi::k8s_if_le_1_36! {
        let spec = deployment.spec.as_ref();
    }
    spec
}

pub(super) fn pod_spec(deployment: &Deployment) -> Option<&PodSpec> {
    deployment_spec(deployment)?.template.spec.as_ref()
}

pub(super) fn template_labels(deployment: &Deployment) -> BTreeMap<String, String> {
    deployment_spec(deployment)
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default()
}

/// What the container executes: `command` replaces the image's entrypoint
/// (the ownerguard binary) and `args` its default arguments.
pub(super) fn argv(container: &Container) -> Vec<String> {
    let mut argv = match container.command.as_deref() {
        Some(command) if !command.is_empty() => command.to_vec(),
        _ => vec!["ownerguard".to_string()],
    };
    argv.extend(container.args.iter().flatten().cloned());
    argv
}

pub(super) fn is_ownerguard_binary(path: &str) -> bool {
    path.rsplit('/').next() == Some("ownerguard")
}

/// The server container of the Deployment: the one named ownerguard, else
/// the first; its effective command line must be `ownerguard … serve …`.
pub(super) fn server_view(deployment: &Deployment) -> Result<ServerView<'_>, String> {
    let spec = pod_spec(deployment).ok_or("the Deployment has no pod template")?;
    let container = spec
        .containers
        .iter()
        .find(|c| c.name == "ownerguard")
        .or(spec.containers.first())
        .ok_or("the pod template has no container")?;
    let argv = argv(container);
    let shown = argv.join(" ");
    if !is_ownerguard_binary(&argv[0]) {
        return Err(format!(
            "container {} runs `{shown}`: its command replaces the image's entrypoint (the ownerguard binary), so it does not run ownerguard serve; give the flags as args",
            container.name
        ));
    }
    let Some(serve) = argv.iter().position(|a| a == "serve") else {
        return Err(format!(
            "container {} runs `{shown}`, not ownerguard serve",
            container.name
        ));
    };
    let mut flags = ServeFlags {
        webhook_port: DEFAULT_WEBHOOK_PORT,
        metrics_port: DEFAULT_METRICS_PORT,
        tls_cert: None,
        client_ca: None,
        fail_open: false,
        lookup_budget: LookupBudget::default(),
        key_prefix: DEFAULT_KEY_PREFIX.to_string(),
    };
    // A command line the server refuses stops it at start: the server
    // check says so, and the rest is still read (the key prefix above all),
    // so that the other checks judge what the pods were given.
    let mut refused: Option<String> = None;
    let mut refuse = |problem: String| {
        refused.get_or_insert_with(|| {
            format!(
                "container {} runs `{shown}`: {problem}, so the server refuses to start",
                container.name
            )
        });
    };
    const VALUED: [&str; 7] = [
        "addr",
        "metrics-addr",
        "tls-cert",
        "client-ca",
        "lookup-timeout",
        "key-prefix",
        "tls-key",
    ];
    fn flag_of(token: &str) -> Option<(&str, Option<&str>)> {
        let t = token.strip_prefix("--")?;
        let (flag, inline) = t.split_once('=').map_or((t, None), |(f, v)| (f, Some(v)));
        (VALUED.contains(&flag) || flag == "fail-open").then_some((flag, inline))
    }
    // Only --log-format is taken before `serve`; serve's own flags there
    // are unexpected arguments to the server.
    if let Some((flag, _)) = argv[1..serve].iter().find_map(|t| flag_of(t)) {
        refuse(format!("--{flag} is given before serve"));
    }
    let mut tokens = argv[serve + 1..].iter().map(String::as_str);
    while let Some(token) = tokens.next() {
        if token == "--" {
            // What follows is positional, and serve takes none.
            if tokens.next().is_some() {
                refuse("serve takes no argument after --".to_string());
            }
            break;
        }
        let Some((flag, inline)) = flag_of(token) else {
            continue;
        };
        if flag == "fail-open" {
            match inline {
                Some(value) => refuse(format!("--fail-open takes no value ('{value}')")),
                None => flags.fail_open = true,
            }
            continue;
        }
        // A next token that starts with `-` is another flag to the
        // server's parser, not this one's value; `-` alone is a value.
        let value = match inline {
            Some(value) => value,
            None => match tokens.clone().next() {
                Some(next) if next == "-" || !next.starts_with('-') => {
                    tokens.next();
                    next
                }
                _ => {
                    refuse(format!("--{flag} has no value"));
                    continue;
                }
            },
        };
        // `$(VAR)` is replaced by the kubelet from the container's
        // environment, which doctor does not see: such a value is read
        // where it can be (an address's port) and never judged refused.
        let expanded_later = value.contains("$(");
        match flag {
            "addr" | "metrics-addr" => {
                let port = match value.parse::<SocketAddr>() {
                    Ok(address) => Some(address.port()),
                    Err(_) if expanded_later => value
                        .rsplit_once(':')
                        .and_then(|(_, port)| port.parse::<u16>().ok()),
                    Err(_) => {
                        refuse(format!(
                            "--{flag} '{value}' is not an address such as 0.0.0.0:8443"
                        ));
                        None
                    }
                };
                let slot = if flag == "addr" {
                    &mut flags.webhook_port
                } else {
                    &mut flags.metrics_port
                };
                *slot = port.unwrap_or(*slot);
            }
            "tls-cert" => flags.tls_cert = Some(value.to_string()),
            "client-ca" => flags.client_ca = Some(value.to_string()),
            "lookup-timeout" => match LookupBudget::parse_timeout(value) {
                Ok(budget) => flags.lookup_budget = LookupBudget::new(budget),
                Err(_) if expanded_later => {}
                Err(problem) => refuse(format!("--lookup-timeout {problem}")),
            },
            "key-prefix" => flags.key_prefix = value.to_string(),
            _ => {}
        }
    }
    Ok(ServerView {
        container,
        flags,
        refused,
    })
}

/// The Service the webhook names must exist in the server's namespace,
/// select the server's pods, and carry the webhook's port to the port the
/// server serves HTTPS on.
pub(super) fn check_service(
    webhook: &WebhookView<'_>,
    installation: &Installation,
    server: &ServerView<'_>,
    namespace: &str,
    pod_labels: BTreeMap<String, String>,
) -> Check {
    let subject = format!("service of {}", webhook.label());
    let Some(reference) = &webhook.client_config.service else {
        return line(
            Verdict::Warn,
            subject,
            format!(
                "calls the url {} directly, not a Service: not checked",
                webhook.client_config.url.as_deref().unwrap_or("(none)")
            ),
        );
    };
    let at = format!("{}/{}", reference.namespace, reference.name);
    if reference.namespace != namespace {
        return line(
            Verdict::Fail,
            subject,
            format!("calls Service {at}, outside ownerguard's namespace {namespace}"),
        );
    }
    let Some(service) = installation.services.iter().find(|s| {
        s.metadata.name.as_deref() == Some(&reference.name)
            && s.metadata
                .namespace
                .as_deref()
                .is_none_or(|n| n == reference.namespace)
    }) else {
        return line(
            Verdict::Fail,
            subject,
            format!("Service {at} not found: every call fails"),
        );
    };
    let spec = service.spec.clone().unwrap_or_default();
    let selector = spec.selector.clone().unwrap_or_default();
    if selector.is_empty() || !selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)) {
        return line(
            Verdict::Fail,
            subject,
            format!(
                "Service {at} selects {selector:?}, not the Deployment's pods: it has no ownerguard endpoint"
            ),
        );
    }
    let port = reference.port.unwrap_or(443);
    let Some(service_port) = spec.ports.iter().flatten().find(|p| p.port == port) else {
        return line(
            Verdict::Fail,
            subject,
            format!("Service {at} has no port {port}: every call fails"),
        );
    };
    let container_ports = server.container.ports.iter().flatten();
    let (target, shown) = match &service_port.target_port {
        None => (Some(port), port.to_string()),
        Some(IntOrString::Int(n)) => (Some(*n), n.to_string()),
        Some(IntOrString::String(name)) => (
            container_ports
                .clone()
                .find(|p| p.name.as_deref() == Some(name))
                .map(|p| p.container_port),
            name.clone(),
        ),
    };
    let Some(target) = target else {
        return line(
            Verdict::Fail,
            subject,
            format!(
                "Service {at} port {port} targets the port named {shown}, which container {} does not declare",
                server.container.name
            ),
        );
    };
    if server.refused.is_some() {
        return line(
            Verdict::Warn,
            subject,
            format!(
                "Service {at} port {port} reaches container port {target}; not judged against the server's ports: the server refuses its command line (see server)"
            ),
        );
    }
    let flags = &server.flags;
    if target == i32::from(flags.webhook_port) {
        line(
            Verdict::Ok,
            subject,
            format!(
                "Service {at} port {port} reaches container port {target} ({shown}), where ownerguard serves HTTPS"
            ),
        )
    } else if target == i32::from(flags.metrics_port) {
        line(
            Verdict::Fail,
            subject,
            format!(
                "Service {at} port {port} reaches container port {target}, the plain-HTTP metrics port, not the webhook's HTTPS port {}: every call fails",
                flags.webhook_port
            ),
        )
    } else {
        line(
            Verdict::Fail,
            subject,
            format!(
                "Service {at} port {port} reaches container port {target}, but ownerguard serves HTTPS on {} (--addr): every call fails",
                flags.webhook_port
            ),
        )
    }
}

/// Whether `selector` selects a pod with `labels` (policy/v1: an empty
/// selector selects every pod of the namespace).
pub(super) fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_label = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expression = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.clone().unwrap_or_default();
        match e.operator.as_str() {
            "In" => labels.get(&e.key).is_some_and(|v| values.contains(v)),
            "NotIn" => labels.get(&e.key).is_none_or(|v| !values.contains(v)),
            "Exists" => labels.contains_key(&e.key),
            "DoesNotExist" => !labels.contains_key(&e.key),
            _ => false,
        }
    });
    by_label && by_expression
}

/// `value` of `total` pods, percentages rounded up, as the disruption
/// controller counts them.
pub(super) fn scaled(value: &IntOrString, total: i32) -> Option<i32> {
    match value {
        IntOrString::Int(n) => Some(*n),
        IntOrString::String(text) => {
            let percent: i64 = text.strip_suffix('%')?.parse().ok()?;
            i32::try_from((percent * i64::from(total) + 99).div_euclid(100)).ok()
        }
    }
}

/// Exactly one PodDisruptionBudget covers the pods, and it lets a drain
/// take one of them at a time: none blocks every drain, all of them at
/// once is an outage.
pub(super) fn check_disruption_budget(installation: &Installation, namespace: &str) -> Check {
    let subject = "PodDisruptionBudget";
    let Some(deployment) = &installation.deployment else {
        return line(
            Verdict::Fail,
            subject,
            "no Deployment whose pods it would cover",
        );
    };
    let labels = template_labels(deployment);
    let covering: Vec<&PodDisruptionBudget> = installation
        .disruption_budgets
        .iter()
        .filter(|pdb| {
            pdb.spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .is_some_and(|s| selects(s, &labels))
        })
        .collect();
    let pdb = match covering.as_slice() {
        [] => {
            return line(
                Verdict::Fail,
                subject,
                format!(
                    "none in {namespace} covers the webhook's pods: a drain may evict every replica at once"
                ),
            );
        }
        [pdb] => *pdb,
        many => {
            let names: Vec<&str> = many.iter().map(|p| meta_name(&p.metadata)).collect();
            return line(
                Verdict::Fail,
                subject,
                format!(
                    "{} cover the webhook's pods: the eviction API refuses to evict a pod under more than one, so every drain blocks",
                    names.join(", ")
                ),
            );
        }
    };
    let name = meta_name(&pdb.metadata);
    let desired = deployment_spec(deployment)
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let spec = pdb.spec.clone().unwrap_or_default();
    let (allowed, given) = match (&spec.max_unavailable, &spec.min_available) {
        (Some(max), _) => (
            scaled(max, desired),
            format!("maxUnavailable {}", shown(max)),
        ),
        (None, Some(min)) => (
            scaled(min, desired).map(|min| desired - min),
            format!("minAvailable {}", shown(min)),
        ),
        (None, None) => (None, "neither maxUnavailable nor minAvailable".to_string()),
    };
    let Some(allowed) = allowed else {
        return line(
            Verdict::Fail,
            subject,
            format!("{name} sets {given}: cannot tell what a drain may take"),
        );
    };
    let allowed = allowed.min(desired);
    if allowed <= 0 {
        line(
            Verdict::Fail,
            subject,
            format!(
                "{name} ({given}) lets no pod of {desired} be evicted: every node drain blocks on it; use maxUnavailable 1"
            ),
        )
    } else if allowed >= desired && desired > 1 {
        line(
            Verdict::Fail,
            subject,
            format!(
                "{name} ({given}) lets a drain evict all {desired} pods at once: the webhook is then down; use maxUnavailable 1"
            ),
        )
    } else if allowed > 1 {
        line(
            Verdict::Warn,
            subject,
            format!("{name} ({given}) lets a drain take {allowed} of {desired} pods at once"),
        )
    } else {
        line(
            Verdict::Ok,
            subject,
            format!("{name} ({given}) lets a drain take one of {desired} pods at a time"),
        )
    }
}

pub(super) fn meta_name(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or("?")
}

pub(super) fn shown(value: &IntOrString) -> String {
    match value {
        IntOrString::Int(n) => n.to_string(),
        IntOrString::String(s) => s.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn container(command: Option<&[&str]>, args: &[&str]) -> Container {
        Container {
            name: "ownerguard".into(),
            command: command.map(|c| c.iter().map(ToString::to_string).collect()),
            args: Some(args.iter().map(ToString::to_string).collect()),
            ..Container::default()
        }
    }

    fn deployment(container: Container) -> Deployment {
        serde_json::from_value(serde_json::json!({
            "spec": {"selector": {}, "template": {"spec": {"containers": [container]}}}
        }))
        .unwrap()
    }

    #[test]
    fn flags_are_read_from_the_effective_command_line_last_one_winning() {
        let d = deployment(container(
            None,
            &[
                "--log-format=json",
                "serve",
                "--addr=0.0.0.0:8443",
                "--lookup-timeout",
                "1s",
                "--addr",
                "[::]:10443",
                "--fail-open",
                "--key-prefix=example.com",
            ],
        ));
        let flags = server_view(&d).map(|v| v.flags).unwrap();
        assert_eq!(flags.webhook_port, 10443);
        assert_eq!(flags.metrics_port, DEFAULT_METRICS_PORT);
        assert_eq!(
            flags.lookup_budget,
            LookupBudget::new(Duration::from_secs(1))
        );
        assert!(flags.fail_open);
        assert_eq!(flags.key_prefix, "example.com");
    }

    #[test]
    fn a_command_that_keeps_the_binary_is_read_and_one_that_drops_it_fails() {
        let kept = deployment(container(
            Some(&["/usr/local/bin/ownerguard", "serve", "--fail-open"]),
            &[],
        ));
        assert!(server_view(&kept).unwrap().flags.fail_open);
        let dropped = deployment(container(Some(&["serve", "--fail-open"]), &[]));
        let Err(problem) = server_view(&dropped).map(|_| ()) else {
            panic!("a command without the binary runs something else")
        };
        assert!(
            problem.contains("replaces the image's entrypoint"),
            "{problem}"
        );
        let not_serve = deployment(container(None, &["doctor"]));
        assert!(server_view(&not_serve).is_err());
    }

    #[test]
    fn a_command_line_the_server_refuses_is_named_and_the_rest_still_read() {
        for (args, problem) in [
            (
                &["serve", "--lookup-timeout=2 s"][..],
                "--lookup-timeout '2 s' is not a duration",
            ),
            (
                &["serve", "--lookup-timeout", "9999999999s"][..],
                "--lookup-timeout '9999999999s' is longer",
            ),
            (
                &["serve", "--lookup-timeout=0s"][..],
                "--lookup-timeout '0s' is under a millisecond",
            ),
            (
                &["serve", "--addr=ownerguard:8443"][..],
                "--addr 'ownerguard:8443' is not an address",
            ),
            (
                &["serve", "--metrics-addr", ":9090"][..],
                "--metrics-addr ':9090' is not an address",
            ),
            // A value that starts with `-` is another flag to clap.
            (
                &["serve", "--lookup-timeout", "-0s"][..],
                "--lookup-timeout has no value",
            ),
            (
                &["serve", "--addr", "--metrics-addr=0.0.0.0:9091"][..],
                "--addr has no value",
            ),
            (
                &["serve", "--lookup-timeout"][..],
                "--lookup-timeout has no value",
            ),
            (
                &["--addr=0.0.0.0:10443", "serve"][..],
                "--addr is given before serve",
            ),
            (
                &["serve", "--", "--addr=0.0.0.0:10443"][..],
                "no argument after --",
            ),
            (
                &["serve", "--fail-open=false"][..],
                "--fail-open takes no value",
            ),
        ] {
            let mut args = args.to_vec();
            args.push("--key-prefix=example.com");
            let d = deployment(container(None, &args));
            let view = server_view(&d).unwrap();
            let Some(refused) = view.refused else {
                panic!("{args:?}: the server refuses this command line at start")
            };
            assert!(refused.contains(problem), "{args:?}: {refused}");
            assert!(
                refused.ends_with("so the server refuses to start"),
                "{refused}"
            );
            // The other checks judge the pods' own key prefix, not the
            // default, wherever the flag stands after the refusal.
            if !args.contains(&"--") {
                assert_eq!(view.flags.key_prefix, "example.com", "{args:?}");
            }
        }
        // What the server takes, doctor reads.
        let d = deployment(container(
            None,
            &[
                "serve",
                "--addr=[::1]:10443",
                "--lookup-timeout=1500ms",
                "--client-ca",
                "-",
                "--",
            ],
        ));
        let view = server_view(&d).unwrap();
        assert_eq!(view.refused, None);
        assert_eq!(view.flags.webhook_port, 10443);
        assert_eq!(
            view.flags.lookup_budget,
            LookupBudget::new(Duration::from_millis(1500))
        );
        // clap takes `-` alone as a value (a file of that name).
        assert_eq!(view.flags.client_ca.as_deref(), Some("-"));
    }

    #[test]
    fn a_value_the_kubelet_expands_is_read_where_it_can_be_and_never_refused() {
        // $(POD_IP) is the pod's address by the time the server reads it.
        let d = deployment(container(
            None,
            &[
                "serve",
                "--addr=$(POD_IP):10443",
                "--metrics-addr",
                "$(POD_IP):9091",
                "--lookup-timeout=$(LOOKUP)",
            ],
        ));
        let view = server_view(&d).unwrap();
        assert_eq!(view.refused, None);
        assert_eq!(view.flags.webhook_port, 10443);
        assert_eq!(view.flags.metrics_port, 9091);
        assert_eq!(view.flags.lookup_budget, LookupBudget::default());
    }

    #[test]
    fn percentages_round_up_as_the_disruption_controller_does() {
        assert_eq!(scaled(&IntOrString::String("50%".into()), 3), Some(2));
        assert_eq!(scaled(&IntOrString::String("100%".into()), 2), Some(2));
        assert_eq!(scaled(&IntOrString::String("1%".into()), 2), Some(1));
        assert_eq!(scaled(&IntOrString::Int(1), 2), Some(1));
        assert_eq!(scaled(&IntOrString::String("half".into()), 2), None);
    }

    #[test]
    fn label_selectors_match_as_the_api_server_does() {
        let labels = BTreeMap::from([("app".to_string(), "og".to_string())]);
        let selector =
            |v: serde_json::Value| -> LabelSelector { serde_json::from_value(v).unwrap() };
        assert!(selects(&selector(serde_json::json!({})), &labels));
        assert!(selects(
            &selector(serde_json::json!({"matchLabels": {"app": "og"}})),
            &labels
        ));
        assert!(!selects(
            &selector(serde_json::json!({"matchLabels": {"app": "x"}})),
            &labels
        ));
        assert!(selects(
            &selector(
                serde_json::json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["og"]}]})
            ),
            &labels
        ));
        assert!(!selects(
            &selector(
                serde_json::json!({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]})
            ),
            &labels
        ));
    }
}
