//! Logs through `tracing`, to standard error (standard output is the
//! `review` command's answer), as text or JSON. `OWNERGUARD_LOG` (or
//! `RUST_LOG`) overrides the level, with `tracing-subscriber`'s syntax.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::commands::cli::LogFormat;

pub fn init(format: LogFormat, default_level: &str) {
    let filter = EnvFilter::try_from_env("OWNERGUARD_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new(default_level));
    // Colours only for a person at a terminal, never into a log collector.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
    // Already set (a second init in tests): keep the first.
    drop(result);
}
