//! Facts the docs state beside the code that makes them true: checked to
//! agree, so that a flag added, renamed or retyped cannot leave a page
//! saying otherwise.

use std::collections::BTreeSet;
use std::path::Path;

use clap::CommandFactory;
use serde_json::Value;

use ownerguard::commands::cli::Cli;

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
