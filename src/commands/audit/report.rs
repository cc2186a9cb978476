//! What `audit` prints: a table for people (one line per finding, the
//! counts by class, the `kubectl` command that would delete the leaked
//! objects, never run), or one JSON object per finding for scripts.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde_json::json;

use super::{Fixed, Line, Report, State};

/// The table, as `audit --output table` prints it.
pub fn print_table(report: &Report) -> String {
    let mut out = String::new();
    let header = [
        "STATE",
        "RESOURCE",
        "NAMESPACE",
        "NAME",
        "OWNER",
        "AGE",
        "FIX",
        "DETAIL",
    ];
    let rows: Vec<[String; 8]> = report
        .lines
        .iter()
        .map(|line| {
            [
                line.finding.state.as_str().to_string(),
                line.resource.clone(),
                line.namespace.clone(),
                line.name.clone(),
                line.finding.owner.clone(),
                line.finding.age.map(short_age).unwrap_or_default(),
                fixed_word(line),
                line.finding.detail.clone(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row.iter()).take(7) {
            *width = (*width).max(cell.chars().count());
        }
    }
    if !rows.is_empty() {
        let cells = header.map(str::to_string);
        write_row(&mut out, &cells, &widths);
        for row in &rows {
            write_row(&mut out, row, &widths);
        }
        out.push('\n');
    }
    for (resource, error) in &report.errors {
        let _ = writeln!(out, "not audited: {resource}: {error}");
    }
    let totals = report.totals();
    let counts: Vec<String> = State::ALL
        .iter()
        .map(|state| format!("{} {}", totals[state], state.as_str()))
        .collect();
    let _ = writeln!(out, "{}", counts.join(", "));
    let deletes = delete_commands(&report.lines);
    if !deletes.is_empty() {
        out.push_str(
            "\nthe leaked objects (no owner will ever take them) are deleted by, not run here:\n",
        );
        for command in deletes {
            let _ = writeln!(out, "  {command}");
        }
    }
    out
}

/// One JSON object per line, one line per finding.
pub fn print_json(report: &Report) -> String {
    let mut out = String::new();
    for line in &report.lines {
        let value = json!({
            "state": line.finding.state.as_str(),
            "resource": line.resource,
            "namespace": line.namespace,
            "name": line.name,
            "owner": line.finding.owner,
            "ageSeconds": line.finding.age.map(|age| age.as_secs()),
            "detail": line.finding.detail,
            "fix": line.fixed.as_ref().map(|_| fixed_word(line)),
        });
        let _ = writeln!(out, "{value}");
    }
    for (resource, error) in &report.errors {
        let _ = writeln!(
            out,
            "{}",
            json!({"state": "error", "resource": resource, "detail": error})
        );
    }
    out
}

fn write_row(out: &mut String, cells: &[String; 8], widths: &[usize; 8]) {
    for (i, cell) in cells.iter().enumerate() {
        if i == 7 {
            out.push_str(cell);
        } else {
            let _ = write!(out, "{cell:<width$}  ", width = widths[i]);
        }
    }
    out.push('\n');
}

fn fixed_word(line: &Line) -> String {
    match &line.fixed {
        None => String::new(),
        Some(Fixed::Patched) => "fixed".into(),
        Some(Fixed::Conflict) => "conflict".into(),
        Some(Fixed::Failed(why)) => format!("failed: {why}"),
    }
}

/// `3d4h`, `5h12m`, `42m`, `17s`.
fn short_age(age: Duration) -> String {
    let s = age.as_secs();
    let (d, h, m) = (s / 86_400, (s / 3_600) % 24, (s / 60) % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, m) => format!("{m}m"),
        (0, h, m) => format!("{h}h{m}m"),
        (d, h, _) => format!("{d}d{h}h"),
    }
}

/// `kubectl delete -n NS RESOURCE NAME...`, one per namespace and
/// resource, for the leaked objects.
fn delete_commands(lines: &[Line]) -> Vec<String> {
    let mut leaked: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
    for line in lines.iter().filter(|l| l.finding.state == State::Leaked) {
        leaked
            .entry((&line.namespace, &line.resource))
            .or_default()
            .push(&line.name);
    }
    leaked
        .into_iter()
        .map(|((namespace, resource), names)| {
            format!(
                "kubectl delete -n {namespace} {resource} {}",
                names.join(" ")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::audit::Finding;

    fn line(state: State, namespace: &str, resource: &str, name: &str) -> Line {
        Line {
            resource: resource.into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            uid: String::new(),
            namespace: namespace.into(),
            name: name.into(),
            finding: Finding {
                state,
                owner: "w-1".into(),
                age: Some(Duration::from_secs(90_061)),
                detail: "why".into(),
                patch: None,
            },
            fixed: None,
        }
    }

    #[test]
    fn the_table_counts_every_class_and_prints_the_deletes_it_does_not_run() {
        let mut report = Report {
            lines: vec![
                line(State::Leaked, "agents", "configmaps", "prompt-1"),
                line(State::Leaked, "agents", "configmaps", "prompt-2"),
                line(State::Leaked, "agents", "jobs.batch", "step-3"),
                line(State::MissingReference, "agents", "pods", "agent-1"),
            ],
            ..Report::default()
        };
        report
            .counts
            .insert(("configmaps".into(), State::Leaked), 2);
        report.counts.insert(("configmaps".into(), State::Ok), 5);
        report
            .counts
            .insert(("jobs.batch".into(), State::Leaked), 1);
        report
            .counts
            .insert(("pods".into(), State::MissingReference), 1);
        report
            .errors
            .push(("secrets".into(), "forbidden (403): no".into()));
        let table = print_table(&report);
        assert!(table.starts_with("STATE "), "{table}");
        assert!(table.contains("leaked "), "{table}");
        assert!(table.contains("1d1h"), "{table}");
        assert!(
            table.contains("5 ok, 3 leaked, 0 owner-finished, 1 missing-reference, 0 dangling, 0 blocking, 0 contradicting, 0 malformed"),
            "{table}"
        );
        assert!(
            table.contains("not audited: secrets: forbidden (403): no"),
            "{table}"
        );
        assert!(
            table.contains("  kubectl delete -n agents configmaps prompt-1 prompt-2\n"),
            "{table}"
        );
        assert!(
            table.contains("  kubectl delete -n agents jobs.batch step-3\n"),
            "{table}"
        );
        assert!(!table.contains("agent-1\n"), "{table}");
        let json = print_json(&report);
        assert_eq!(json.lines().count(), 5, "{json}");
        let first: serde_json::Value = serde_json::from_str(json.lines().next().unwrap()).unwrap();
        assert_eq!(first["state"], "leaked");
        assert_eq!(first["ageSeconds"], 90_061);
    }

    #[test]
    fn ages_read_short() {
        assert_eq!(short_age(Duration::from_secs(17)), "17s");
        assert_eq!(short_age(Duration::from_secs(42 * 60)), "42m");
        assert_eq!(short_age(Duration::from_secs(5 * 3600 + 12 * 60)), "5h12m");
        assert_eq!(
            short_age(Duration::from_secs(3 * 86_400 + 4 * 3600)),
            "3d4h"
        );
    }
}
