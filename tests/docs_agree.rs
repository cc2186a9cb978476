//! Facts the docs state beside the code that makes them true: checked to
//! agree, so that a flag added, renamed or retyped cannot leave a page
//! saying otherwise.

use std::collections::BTreeSet;
use std::path::Path;

use clap::CommandFactory;
use serde_json::Value;

use ownerguard::commands::cli::Cli;

mod common;

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The `--flags` written in backticks in one section of a Markdown page,
/// from its `## heading` to the next.
fn flags_in_section(page: &str, heading: &str) -> BTreeSet<String> {
    let start = page
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("no section {heading}"));
    let section = &page[start + 1..];
    let end = section[3..].find("\n## ").map_or(section.len(), |i| i + 3);
    let mut flags = BTreeSet::new();
    for code in section[..end].split('`').skip(1).step_by(2) {
        for word in code.split([' ', ',', '=']) {
            if let Some(flag) = word.strip_prefix("--")
                && !flag.is_empty()
                && flag.chars().all(|c| c.is_ascii_lowercase() || c == '-')
            {
                flags.insert(flag.to_string());
            }
        }
    }
    flags
}

#[test]
fn the_command_reference_names_every_flag_and_no_other() {
    let page = read("docs/reference/cli.md");
    let cli = Cli::command();
    // Flags every command takes, described once at the top of the page.
    let common: BTreeSet<&str> = ["help", "version", "log-format"].into();
    let mut commands: Vec<_> = cli
        .get_subcommands()
        .filter(|c| c.get_name() != "help")
        .collect();
    commands.sort_by_key(|c| c.get_name());
    assert_eq!(
        page.matches("\n## `ownerguard ").count(),
        commands.len(),
        "one section per command"
    );
    for command in commands {
        let name = command.get_name();
        let heading = format!("`ownerguard {name}`");
        let written = flags_in_section(&page, &heading);
        let flags: BTreeSet<String> = command
            .get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long())
            .filter(|long| !common.contains(long))
            .map(str::to_string)
            .collect();
        let missing: Vec<_> = flags.difference(&written).collect();
        assert!(missing.is_empty(), "{heading}: not described: {missing:?}");
        // A flag the page names must exist: on this command, or as one of
        // another command it refers to ("as for `serve`").
        let every_flag: BTreeSet<String> = cli
            .get_subcommands()
            .flat_map(|c| c.get_arguments().filter_map(|a| a.get_long()))
            .map(str::to_string)
            .collect();
        let unknown: Vec<_> = written
            .iter()
            .filter(|f| !every_flag.contains(*f) && !common.contains(f.as_str()))
            .collect();
        assert!(unknown.is_empty(), "{heading}: no such flag: {unknown:?}");
    }
}

/// The schema node of a dotted values key.
fn schema_at<'a>(schema: &'a Value, key: &str) -> Option<&'a Value> {
    key.split('.')
        .try_fold(schema, |node, part| node.get("properties")?.get(part))
}

#[test]
fn the_chart_readme_types_every_value_as_the_schema_does() {
    let readme = read("charts/ownerguard/README.md");
    let schema: Value =
        serde_json::from_str(&read("charts/ownerguard/values.schema.json")).unwrap();
    let mut rows = 0;
    for line in readme.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // | key | type | default | description |
        let [_, key, written, default, ..] = cells[..] else {
            continue;
        };
        if key == "Key" || key.starts_with('-') || written.is_empty() {
            continue;
        }
        rows += 1;
        let node = schema_at(&schema, key).unwrap_or_else(|| panic!("{key}: not in the schema"));
        let types: BTreeSet<&str> = match &node["type"] {
            Value::String(t) => [t.as_str()].into(),
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            // A value whose shape the schema leaves open (anyOf...).
            _ => continue,
        };
        let expected = match written {
            "int" => "integer",
            "float" => "number",
            "bool" => "boolean",
            "list" => "array",
            other => other,
        };
        assert!(
            types.contains(expected)
                || (expected == "integer" && types.contains("number"))
                || (expected == "number" && types.contains("integer")),
            "{key}: the README says {written}, the schema {types:?}"
        );
        if default == "`nil`" {
            assert!(
                types.contains("null"),
                "{key}: default nil, but the schema refuses null"
            );
        }
    }
    assert!(rows > 50, "{rows} rows read: the table's shape changed");
}

/// The denials the README's troubleshooting table quotes, each with a
/// request that gets it: (the quoted text, the code, `review` arguments,
/// the manifest).
fn readme_denials() -> Vec<(&'static str, &'static str, Vec<&'static str>, String)> {
    let configmap = |labels: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: prompt-1\n  labels:\n{labels}\ndata:\n  a: b\n"
        )
    };
    vec![
        (
            "the request comes from pod 'w-0-x7k2p' but declares pod 'w-0' as owner",
            "403",
            vec!["--as-pod", "w-0-x7k2p/uid-x7k2p"],
            configmap("    ownerguard.io/owner-pod: w-0"),
        ),
        (
            "owner pod 'w-1' not found in namespace 'agents'",
            "403",
            vec![],
            configmap("    ownerguard.io/owner-pod: w-1\n    ownerguard.io/owner-uid: uid-1"),
        ),
        (
            "the uid of owner pod 'w-1' is unknown",
            "400",
            vec![],
            configmap("    ownerguard.io/owner-pod: w-1"),
        ),
        (
            "owner pod 'w-1' does not have uid '…'",
            "403",
            vec!["--pods", "PODS"],
            configmap("    ownerguard.io/owner-pod: w-1\n    ownerguard.io/owner-uid: uid-stale"),
        ),
        (
            "owner pod 'w-1' has finished (phase Failed)",
            "403",
            vec!["--pods", "FINISHED"],
            configmap("    ownerguard.io/owner-pod: w-1\n    ownerguard.io/owner-uid: uid-1"),
        ),
    ]
}

#[test]
fn the_readme_quotes_each_denial_as_ownerguard_writes_it() {
    let readme = read("README.md");
    let dir = tempfile::tempdir().unwrap();
    let pods = |phase: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: w-1\n  namespace: agents\n  uid: uid-1\nstatus:\n  phase: {phase}\n"
        )
    };
    let (running, finished) = (
        dir.path().join("running.yaml"),
        dir.path().join("finished.yaml"),
    );
    std::fs::write(&running, pods("Running")).unwrap();
    std::fs::write(&finished, pods("Failed")).unwrap();
    for (quoted, code, args, manifest) in readme_denials() {
        let row = format!("| `{quoted}` ({code}) |");
        assert!(readme.contains(&row), "the README has no row {row}");
        let (running, finished) = (running.to_str().unwrap(), finished.to_str().unwrap());
        let args: Vec<&str> = ["--namespace", "agents"]
            .into_iter()
            .chain(args.into_iter().map(|a| match a {
                "PODS" => running,
                "FINISHED" => finished,
                a => a,
            }))
            .collect();
        let (_, answer, stderr) = common::review_stdin(&args, &manifest);
        assert!(answer.is_object(), "{quoted}: {stderr}");
        let status = &answer["response"]["status"];
        assert_eq!(status["code"].to_string(), code, "{quoted}: {answer}");
        let message = status["message"].as_str().unwrap();
        // `…` stands for what the README leaves out.
        let mut rest = message;
        for part in quoted.split('…') {
            let at = rest.find(part).unwrap_or_else(|| {
                panic!("the README quotes `{quoted}`; ownerguard says: {message}")
            });
            rest = &rest[at + part.len()..];
        }
    }
}

#[tokio::test]
async fn every_path_the_command_reference_gives_serve_answers_a_review() {
    let page = read("docs/reference/cli.md");
    let start = page.find("\n## `ownerguard serve`\n").unwrap();
    let intro = &page[start..start + page[start..].find("```").unwrap()];
    let paths: BTreeSet<&str> = intro
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|code| code.starts_with('/'))
        .collect();
    let plain_http = ["/metrics", "/healthz", "/readyz"];
    for path in &plain_http {
        assert!(paths.contains(path), "{path} not named: {paths:?}");
    }
    let review_paths: Vec<&str> = paths
        .iter()
        .copied()
        .filter(|p| !plain_http.contains(p))
        .collect();
    assert!(review_paths.len() >= 8, "{review_paths:?}");
    let webhook = std::sync::Arc::new(ownerguard::webhook::Webhook::new(
        ownerguard::decide::Policy::default(),
        std::sync::Arc::new(ownerguard::owner::Inventory::default()),
        std::sync::Arc::new(ownerguard::observe::Metrics::default()),
    ));
    let review = serde_json::to_vec(&serde_json::json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u-1", "operation": "CREATE",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "namespace": "agents", "userInfo": {"username": "alice"},
            "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}}
    }))
    .unwrap();
    for path in review_paths {
        let (status, answer) = common::send_to(
            webhook.clone(),
            path.trim_start_matches('/'),
            review.clone(),
        )
        .await;
        assert_eq!(status, axum::http::StatusCode::OK, "{path}: {answer}");
        assert_eq!(answer["response"]["uid"], "u-1", "{path}: {answer}");
    }
}
