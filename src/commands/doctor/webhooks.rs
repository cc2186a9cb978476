//! The checks of each webhook: its role (from its configuration and its
//! name), path, rules, selectors, conditions, namespace exclusion,
//! failurePolicy and timeout; and no other installation judging the same
//! objects.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{RuleWithOperations, WebhookClientConfig};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::{Check, Verdict, conditions, line};
use super::{Installation, ServeFlags};
use crate::decide::Mode;

/// Another installation that judges the same objects: a webhook of the same
/// name (the API server allows it in another configuration), or one whose
/// objectSelector reads this installation's owner label. Then two servers
/// answer for the same objects, and neither the install check nor
/// `--probe` can tell which one answered.
pub(super) fn check_others(installation: &Installation, key_prefix: &str) -> Check {
    let subject = "other installations";
    let others = match &installation.others {
        Ok(others) => others,
        Err(why) => {
            return line(
                Verdict::Warn,
                subject,
                format!("{why}: another installation serving the same webhooks would go unnoticed"),
            );
        }
    };
    let ours: BTreeSet<String> = webhooks(installation)
        .iter()
        .map(|w| w.name.clone())
        .collect();
    let owner_key = format!("{key_prefix}/owner-pod");
    let clashes: Vec<String> = others
        .iter()
        .flat_map(|other| {
            other.webhooks.iter().filter_map(|(name, keys)| {
                let same_name = ours.contains(name);
                let same_label = keys.contains(&owner_key);
                (same_name || same_label).then(|| {
                    let why = if same_name {
                        "the same name"
                    } else {
                        "the owner label"
                    };
                    format!("{} {} webhook {name} ({why})", other.kind, other.name)
                })
            })
        })
        .collect();
    if clashes.is_empty() {
        line(
            Verdict::Ok,
            subject,
            format!("no other webhook configuration serves {owner_key}"),
        )
    } else {
        line(
            Verdict::Fail,
            subject,
            format!(
                "{}: two installations judge the same objects, the first one the API server calls decides, and neither the install check nor --probe can tell which answered; uninstall one, or give it another keyPrefix",
                clashes.join(", ")
            ),
        )
    }
}

/// Which configuration a webhook is in: what path it must call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Configuration {
    Mutating,
    Validating,
}

impl Configuration {
    pub(super) fn kind(self) -> &'static str {
        match self {
            Self::Mutating => "MutatingWebhookConfiguration",
            Self::Validating => "ValidatingWebhookConfiguration",
        }
    }

    pub(super) fn word(self) -> &'static str {
        match self {
            Self::Mutating => "mutating",
            Self::Validating => "validating",
        }
    }
}

/// How many webhooks the installation's configuration of that kind holds;
/// `None` when there is no such configuration.
pub(super) fn webhook_count(
    installation: &Installation,
    configuration: Configuration,
) -> Option<usize> {
    match configuration {
        Configuration::Mutating => installation
            .mutating
            .as_ref()
            .map(|c| c.webhooks.iter().flatten().count()),
        Configuration::Validating => installation
            .validating
            .as_ref()
            .map(|c| c.webhooks.iter().flatten().count()),
    }
}

/// One webhook of either configuration, as far as the checks read it.
pub(super) struct WebhookView<'a> {
    pub(super) configuration: Configuration,
    pub(super) name: String,
    pub(super) client_config: &'a WebhookClientConfig,
    pub(super) rules: &'a [RuleWithOperations],
    pub(super) object_selector: Option<&'a LabelSelector>,
    pub(super) namespace_selector: Option<&'a LabelSelector>,
    pub(super) failure_policy: &'a str,
    pub(super) side_effects: &'a str,
    pub(super) timeout_seconds: i32,
    pub(super) match_conditions: Vec<conditions::Condition>,
    /// The configuration's `helm.sh/chart` label: which chart wrote it.
    pub(super) chart: Option<String>,
}

impl WebhookView<'_> {
    pub(super) fn label(&self) -> String {
        format!("{} {}", self.configuration.word(), self.name)
    }

    /// The path of ownerguard the API server calls: the Service's, or
    /// that of the URL; without its query.
    pub(super) fn path(&self) -> String {
        let path = match (&self.client_config.service, &self.client_config.url) {
            (Some(service), _) => service.path.clone().unwrap_or_default(),
            (None, Some(url)) => url
                .strip_prefix("https://")
                .and_then(|rest| rest.find('/').map(|i| rest[i..].to_string()))
                .unwrap_or_default(),
            (None, None) => String::new(),
        };
        path.split('?').next().unwrap_or_default().to_string()
    }
}

pub(super) fn webhooks(installation: &Installation) -> Vec<WebhookView<'_>> {
    // MutatingWebhook and ValidatingWebhook are two types with the same
    // fields: one view of either.
    macro_rules! view {
        ($configuration:expr, $chart:expr, $webhook:expr) => {{
            let webhook = $webhook;
            WebhookView {
                configuration: $configuration,
                name: webhook.name.clone(),
                client_config: &webhook.client_config,
                rules: webhook.rules.as_deref().unwrap_or_default(),
                object_selector: webhook.object_selector.as_ref(),
                namespace_selector: webhook.namespace_selector.as_ref(),
                failure_policy: webhook.failure_policy.as_deref().unwrap_or("Fail"),
                side_effects: webhook.side_effects.as_str(),
                timeout_seconds: webhook.timeout_seconds.unwrap_or(10),
                match_conditions: webhook
                    .match_conditions
                    .iter()
                    .flatten()
                    .map(|c| (c.name.clone(), c.expression.clone()))
                    .collect(),
                chart: $chart,
            }
        }};
    }
    let chart = |labels: &Option<std::collections::BTreeMap<String, String>>| {
        labels
            .as_ref()
            .and_then(|l| l.get("helm.sh/chart"))
            .cloned()
    };
    let mutating = installation.mutating.iter().flat_map(|c| {
        let written_by = chart(&c.metadata.labels);
        c.webhooks
            .iter()
            .flatten()
            .map(move |webhook| view!(Configuration::Mutating, written_by.clone(), webhook))
    });
    let validating = installation
        .validating
        .iter()
        .chain(&installation.cluster_wide)
        .chain(&installation.observe)
        .flat_map(|c| {
            let written_by = chart(&c.metadata.labels);
            c.webhooks
                .iter()
                .flatten()
                .map(move |webhook| view!(Configuration::Validating, written_by.clone(), webhook))
        });
    mutating.chain(validating).collect()
}

pub(super) fn check_path(webhook: &WebhookView<'_>, role: Role, mode: Mode) -> Check {
    let subject = format!("path of {}", webhook.label());
    let path = webhook.path();
    // The cluster-wide switch calls /validate-all, which fails open on a
    // lookup failure as its webhook does; /validate there works too, but
    // denies a lookup failure with 503 under failurePolicy Ignore.
    let expected = role.path_in(mode);
    if path == expected {
        return line(Verdict::Ok, subject, format!("calls {path}"));
    }
    if role == Role::ValidateAll && path == "/validate" {
        return line(
            Verdict::Warn,
            subject,
            "calls /validate: a failed owner lookup is denied (503) though the webhook fails open; /validate-all allows it".to_string(),
        );
    }
    let shown = if path.is_empty() { "/" } else { path.as_str() };
    let effect = match (webhook.configuration, shown) {
        _ if shown.split('/').nth(1) == expected.split('/').nth(1) => {
            "the namespaces this webhook selects are decided in another mode than its name says"
        }
        (Configuration::Mutating, "/validate") => {
            "the validation runs before the reference is injected, so every labelled create is denied"
        }
        (Configuration::Validating, "/mutate") => {
            "a validating webhook cannot patch, so what it would complete is denied or let through unchecked"
        }
        _ => {
            "ownerguard answers 404 there, a failed call: with failurePolicy Fail every labelled create is refused"
        }
    };
    line(
        Verdict::Fail,
        subject,
        format!(
            "calls {shown}, but a {} webhook must call {expected}: {effect}",
            webhook.configuration.word()
        ),
    )
}

/// What a webhook is for, read from its configuration and its name as the
/// chart writes them, never from its selector or its conditions: those are
/// what the checks judge against the role (an inverted selector read as
/// the role would pass itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// `mutate.<keyPrefix>`, mutating: completes labelled objects.
    Mutate,
    /// `validate.<keyPrefix>`, validating: guarantees labelled objects.
    Validate,
    /// `validate-all.<keyPrefix>`, validating: the opt-in
    /// validation.allPodOwnerReferences, for every other object.
    ValidateAll,
}

impl Role {
    const ALL: [Self; 3] = [Self::Mutate, Self::Validate, Self::ValidateAll];

    /// The role of `webhook`, when its configuration and name are one the
    /// chart writes for `key_prefix` (in any mode).
    pub(super) fn of(webhook: &WebhookView<'_>, key_prefix: &str) -> Option<Self> {
        Self::of_in_mode(webhook, key_prefix).map(|(role, _)| role)
    }

    /// The role and the mode of `webhook`, read from its configuration and
    /// its name (`mutate-warn.<keyPrefix>`: mutate, in warn).
    pub(super) fn of_in_mode(webhook: &WebhookView<'_>, key_prefix: &str) -> Option<(Self, Mode)> {
        Self::ALL
            .into_iter()
            .flat_map(|role| role.modes().iter().map(move |&mode| (role, mode)))
            .find(|(role, mode)| {
                role.configuration() == webhook.configuration
                    && webhook.name == role.name_in(*mode, key_prefix)
            })
    }

    /// The modes the chart writes a webhook of this role for:
    /// `/validate-all` has none (nothing it refuses may be softened).
    fn modes(self) -> &'static [Mode] {
        match self {
            Self::ValidateAll => &[Mode::Enforce],
            _ => &Mode::ALL,
        }
    }

    /// Its name in `mode`: `mutate.<keyPrefix>` in enforce,
    /// `mutate-warn.<keyPrefix>` in warn.
    pub(super) fn name_in(self, mode: Mode, key_prefix: &str) -> String {
        match mode {
            Mode::Enforce => self.name(key_prefix),
            mode => self
                .name(key_prefix)
                .replacen('.', &format!("-{}.", mode.as_str()), 1),
        }
    }

    /// The path it calls in `mode`: `/mutate`, `/mutate/warn`.
    pub(super) fn path_in(self, mode: Mode) -> String {
        match mode {
            Mode::Enforce => self.path().to_string(),
            mode => format!("{}/{}", self.path(), mode.as_str()),
        }
    }

    pub(super) fn name(self, key_prefix: &str) -> String {
        let word = match self {
            Self::Mutate => "mutate",
            Self::Validate => "validate",
            Self::ValidateAll => "validate-all",
        };
        format!("{word}.{key_prefix}")
    }

    pub(super) fn configuration(self) -> Configuration {
        match self {
            Self::Mutate => Configuration::Mutating,
            Self::Validate | Self::ValidateAll => Configuration::Validating,
        }
    }

    /// The path of ownerguard this role calls.
    pub(super) fn path(self) -> &'static str {
        match self {
            Self::Mutate => "/mutate",
            Self::Validate => "/validate",
            Self::ValidateAll => "/validate-all",
        }
    }

    /// Whether it judges the objects carrying the owner-pod label.
    pub(super) fn labelled(self) -> bool {
        self != Self::ValidateAll
    }

    /// What goes wrong when this webhook is missing.
    pub(super) fn missing(self) -> &'static str {
        match self {
            Self::Mutate => {
                "labelled objects are never completed, so /validate refuses every labelled create"
            }
            Self::Validate => {
                "nothing guarantees the final object after the other mutating webhooks ran"
            }
            Self::ValidateAll => "",
        }
    }
}

/// Every webhook has a role, and the two that every install needs are
/// there: roles come from names, so a webhook of an unknown name, or one
/// in the other configuration (the two configurations' webhooks
/// swapped), fails here rather than being judged as what its selector
/// looks like.
pub(super) fn check_roles(
    webhooks: &[WebhookView<'_>],
    installation: &Installation,
    key_prefix: &str,
) -> Vec<Check> {
    let mut checks = Vec::new();
    for webhook in webhooks {
        if Role::of(webhook, key_prefix).is_some()
            || super::observe::is_observe(webhook, key_prefix)
        {
            continue;
        }
        let misplaced = Role::ALL.into_iter().find(|role| {
            role.modes()
                .iter()
                .any(|&mode| webhook.name == role.name_in(mode, key_prefix))
        });
        let detail = match misplaced {
            Some(role) => format!(
                "{} belongs in the {} configuration: a {} webhook cannot do its work",
                webhook.name,
                role.configuration().word(),
                webhook.configuration.word()
            ),
            None => format!(
                "not a webhook this chart writes for keyPrefix {key_prefix} (mutating: {}, and its -warn and -audit modes; validating: {}, its modes, {}): its role, so what it must call and select, cannot be told",
                Role::Mutate.name(key_prefix),
                Role::Validate.name(key_prefix),
                Role::ValidateAll.name(key_prefix)
            ),
        };
        checks.push(line(
            Verdict::Fail,
            format!("role of {}", webhook.label()),
            detail,
        ));
    }
    for role in [Role::Mutate, Role::Validate] {
        // A configuration missing or empty is failed on its own line.
        if webhook_count(installation, role.configuration()).unwrap_or(0) == 0
            // Its enforce webhook, by name: those of warn and audit
            // select other namespaces and stand in for none of it.
            || webhooks
                .iter()
                .any(|w| Role::of_in_mode(w, key_prefix) == Some((role, Mode::Enforce)))
        {
            continue;
        }
        checks.push(line(
            Verdict::Fail,
            format!("webhook {}", role.name(key_prefix)),
            format!(
                "not in the {} configuration: {}",
                role.configuration().word(),
                role.missing()
            ),
        ));
    }
    checks
}

pub(super) fn check_rules(webhook: &WebhookView<'_>, role: Role) -> Check {
    let subject = format!("rules of {}", webhook.label());
    let namespaced: Vec<&RuleWithOperations> = webhook
        .rules
        .iter()
        .filter(|r| {
            r.scope
                .as_deref()
                .is_none_or(|s| s == "*" || s == "Namespaced")
        })
        .collect();
    let has = |rule: &RuleWithOperations, operation: &str| {
        rule.operations
            .iter()
            .flatten()
            .any(|o| o == operation || o == "*")
    };
    let creates: Vec<&&RuleWithOperations> =
        namespaced.iter().filter(|r| has(r, "CREATE")).collect();
    if creates.is_empty() {
        return line(
            Verdict::Fail,
            subject,
            "no rule covers CREATE of namespaced objects: the webhook is never called when an object is made",
        );
    }
    if role.labelled() && !namespaced.iter().any(|r| has(r, "UPDATE")) {
        return line(
            Verdict::Fail,
            subject,
            "no rule covers UPDATE: the owner of a labelled object could be changed after its creation unchecked",
        );
    }
    let star = |list: &Option<Vec<String>>| list.iter().flatten().any(|v| v == "*");
    let everything = creates.iter().any(|r| {
        star(&r.api_groups)
            && star(&r.api_versions)
            && r.resources.iter().flatten().any(|v| v == "*" || v == "*/*")
    });
    if everything {
        return line(
            Verdict::Ok,
            subject,
            "CREATE covers every namespaced resource",
        );
    }
    let covered: Vec<String> = creates
        .iter()
        .flat_map(|r| r.resources.iter().flatten().cloned())
        .collect();
    let verdict = if role.labelled() {
        Verdict::Warn
    } else {
        Verdict::Ok
    };
    line(
        verdict,
        subject,
        format!(
            "CREATE covers only {}: the pod templates of other labelled kinds (a Deployment, a CronJob) are not completed",
            covered.join(", ")
        ),
    )
}

pub(super) fn check_object_selector(
    webhook: &WebhookView<'_>,
    role: Role,
    key_prefix: &str,
) -> Check {
    let subject = format!("objectSelector of {}", webhook.label());
    let key = format!("{key_prefix}/owner-pod");
    let (operator, meaning) = if role.labelled() {
        ("Exists", "every labelled object")
    } else {
        ("DoesNotExist", "every object without the owner label")
    };
    let selector = webhook.object_selector.cloned().unwrap_or_default();
    let labels = selector.match_labels.clone().unwrap_or_default();
    let expressions = selector.match_expressions.clone().unwrap_or_default();
    let exact = labels.is_empty()
        && expressions.len() == 1
        && expressions[0].key == key
        && expressions[0].operator == operator;
    if exact {
        return line(Verdict::Ok, subject, format!("{key} {operator}: {meaning}"));
    }
    let shown = serde_json::to_string(&selector).unwrap_or_default();
    line(
        Verdict::Fail,
        subject,
        format!(
            "{shown}: must be exactly {key} {operator} (the server's --key-prefix), or {meaning} is not sent"
        ),
    )
}

/// The matchConditions are this version's chart's: one that differs may
/// skip objects ownerguard must judge, and nothing else would tell.
pub(super) fn check_match_conditions(
    webhook: &WebhookView<'_>,
    role: Role,
    key_prefix: &str,
) -> Check {
    let subject = format!("matchConditions of {}", webhook.label());
    let expected = if role.labelled() {
        conditions::labelled(key_prefix)
    } else {
        conditions::pod_references(key_prefix)
    };
    if webhook.match_conditions.is_empty() {
        return line(
            Verdict::Warn,
            subject,
            "none: every request the rules and selectors let through is sent \
             (nothing is skipped, but an outage also blocks updates that do not touch ownership)",
        );
    }
    let ours = conditions::chart_label();
    match conditions::difference(&expected, &webhook.match_conditions) {
        None => line(
            Verdict::Ok,
            subject,
            format!(
                "{}, as this version's chart writes it",
                expected
                    .iter()
                    .map(|(name, _)| name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        // Written by this version's chart, then changed: nothing but an
        // edit explains it.
        Some(difference) if webhook.chart.as_deref() == Some(ours.as_str()) => line(
            Verdict::Fail,
            subject,
            format!(
                "{difference}: a condition that differs may skip requests ownerguard must judge; \
                 install the chart of this version (keyPrefix {key_prefix}) rather than editing them"
            ),
        ),
        // Another chart version writes other conditions: not this
        // doctor's to judge, and no failure.
        Some(difference) => line(
            Verdict::Warn,
            subject,
            format!(
                "{difference}: written by {}, while this doctor knows the conditions of {ours}; \
                 run the doctor of the installed version to judge them",
                webhook.chart.as_deref().map_or_else(
                    || "no chart (no helm.sh/chart label)".to_string(),
                    |c| format!("chart {c}")
                )
            ),
        ),
    }
}

pub(super) fn check_exclusion(webhook: &WebhookView<'_>, namespace: &str) -> Check {
    let subject = format!("namespaceSelector of {}", webhook.label());
    let excluded: Vec<&str> = webhook
        .namespace_selector
        .and_then(|s| s.match_expressions.as_ref())
        .into_iter()
        .flatten()
        .filter(|e| e.key == "kubernetes.io/metadata.name" && e.operator == "NotIn")
        .flat_map(|e| e.values.iter().flatten().map(String::as_str))
        .collect();
    let missing: Vec<&str> = ["kube-system", namespace]
        .into_iter()
        .filter(|ns| !excluded.contains(ns))
        .collect();
    if missing.is_empty() {
        line(
            Verdict::Ok,
            subject,
            format!("excludes kube-system and {namespace}"),
        )
    } else {
        line(
            Verdict::Fail,
            subject,
            format!(
                "does not exclude {}: the webhook can block its own pods or the control plane",
                missing.join(" and ")
            ),
        )
    }
}

pub(super) fn check_policy(
    webhook: &WebhookView<'_>,
    role: Role,
    mode: Mode,
    flags: &ServeFlags,
) -> Check {
    let subject = format!("failurePolicy of {}", webhook.label());
    let ignore = webhook.failure_policy == "Ignore";
    if mode.softens() {
        // Warn and audit never refuse: neither may an outage.
        return if ignore {
            line(
                Verdict::Ok,
                subject,
                format!(
                    "Ignore: a namespace in {} is never refused, ownerguard down included",
                    mode.as_str()
                ),
            )
        } else {
            line(
                Verdict::Warn,
                subject,
                format!(
                    "{}: an outage of ownerguard refuses creates in namespaces in {}, which only asked to be told; the chart writes Ignore",
                    webhook.failure_policy,
                    mode.as_str()
                ),
            )
        };
    }
    if role == Role::ValidateAll {
        // The cluster-wide switch has its own policy on purpose.
        return if ignore {
            line(
                Verdict::Ok,
                subject,
                "Ignore: an outage of ownerguard lets unlabelled objects that name a pod as owner through unchecked, and never stops pod creation",
            )
        } else {
            line(
                Verdict::Warn,
                subject,
                format!(
                    "{}: an outage of ownerguard stops the creation of every object that names a pod as owner, in every namespace not excluded (CNI and DNS add-ons included)",
                    webhook.failure_policy
                ),
            )
        };
    }
    match (ignore, flags.fail_open) {
        (true, false) => line(
            Verdict::Fail,
            subject,
            "Ignore, but the server runs without --fail-open: a lookup failure denies what an outage lets through",
        ),
        (false, true) => line(
            Verdict::Fail,
            subject,
            format!(
                "{}, but the server runs with --fail-open: a lookup failure lets through what an outage denies",
                webhook.failure_policy
            ),
        ),
        _ => line(
            Verdict::Ok,
            subject,
            format!(
                "{} matches --fail-open={}",
                webhook.failure_policy, flags.fail_open
            ),
        ),
    }
}

pub(super) fn check_timeout(webhook: &WebhookView<'_>, flags: &ServeFlags) -> Check {
    let subject = format!("timeoutSeconds of {}", webhook.label());
    let timeout = Duration::from_secs(u64::try_from(webhook.timeout_seconds).unwrap_or(0));
    if flags.lookup_budget.fits(timeout) {
        line(
            Verdict::Ok,
            subject,
            format!(
                "{}s leaves room for --lookup-timeout={}ms",
                webhook.timeout_seconds,
                flags.lookup_budget.timeout().as_millis()
            ),
        )
    } else {
        line(
            Verdict::Fail,
            subject,
            format!(
                "{}s, but --lookup-timeout={}ms: the API server gives up before a slow lookup ends; raise timeoutSeconds or lower --lookup-timeout",
                webhook.timeout_seconds,
                flags.lookup_budget.timeout().as_millis()
            ),
        )
    }
}
