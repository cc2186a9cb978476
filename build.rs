//! Build information for `ownerguard --version`: the commit the binary
//! was built from and that commit's date (not the build's time, so that
//! two builds of one commit are the same binary).
//!
//! Read from git when the sources are a checkout; an image build copies
//! no `.git` and passes `OWNERGUARD_COMMIT` and `SOURCE_DATE_EPOCH`
//! instead (see the Dockerfile). Neither: `unknown`.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=OWNERGUARD_COMMIT");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    // Rebuilt when HEAD moves: HEAD's reflog grows with every commit,
    // checkout and reset, and HEAD itself names the branch. Only files
    // that exist: a missing one would make cargo run this on every build.
    for file in [".git/HEAD", ".git/logs/HEAD"] {
        if Path::new(file).exists() {
            println!("cargo:rerun-if-changed={file}");
        }
    }
    // Only this checkout's git: sources unpacked inside another repository
    // (a vendored copy, a monorepo) must not take that repository's commit.
    let checkout = Path::new(".git").exists();
    let from_git = |args: &[&str]| if checkout { git(args) } else { None };
    let commit = std::env::var("OWNERGUARD_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| from_git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_string());
    let date = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|epoch| epoch.trim().parse::<i64>().ok())
        .map(utc_date)
        .or_else(|| from_git(&["log", "-1", "--format=%cd", "--date=format-local:%Y-%m-%d"]))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=OWNERGUARD_COMMIT={commit}");
    println!("cargo:rustc-env=OWNERGUARD_COMMIT_DATE={date}");
}

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .env("TZ", "UTC")
        .output()
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    (output.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}

/// The UTC calendar date of a Unix time (days since 1970 to a civil date).
fn utc_date(seconds: i64) -> String {
    let days = seconds.div_euclid(86_400);
    // Howard Hinnant's days_from_civil, inverted.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}
