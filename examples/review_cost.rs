//! What one review costs ownerguard without its TLS and HTTP stack: the
//! body of bench/review-create-3k.json answered N times by the webhook the
//! server runs (decode, plan, the inventory's lookup, decide, the answer
//! written, the observers told), on one thread. Run under callgrind twice
//! with different N and the difference over the difference of N is the
//! instructions a review costs (by hand; docs/performance.md has the figures):
//!
//!   review_cost [--reviews N] [--body FILE] [--part all|decode|skip]
//!               [--log json|text]
//!
//! `--part decode` decodes only (Review::from_json), to tell the decoder's
//! share from the rest; `--part skip` passes over the whole body checking
//! it and building nothing, what the bytes the decision does not read
//! cost at most. Without `--log` no log subscriber is installed; with it
//! the decision log is written as `serve` writes it, through the real
//! writer thread (send standard error to /dev/null).

use std::sync::Arc;

use ownerguard::admission::Review;
use ownerguard::decide::{Policy, WebhookKind};
use ownerguard::observe::Metrics;
use ownerguard::observe::telemetry::{self, LogFormat};
use ownerguard::owner::{Inventory, InventoryPod, ObservedPod};
use ownerguard::webhook::Webhook;

fn main() -> anyhow::Result<()> {
    let mut reviews = 1000usize;
    let mut body_path = String::from("bench/review-create-3k.json");
    let mut part = String::from("all");
    let mut log = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| anyhow::anyhow!("{arg} needs a value"))
        };
        match arg.as_str() {
            "--reviews" => reviews = value()?.parse()?,
            "--body" => body_path = value()?,
            "--part" => part = value()?,
            "--log" => log = Some(value()?),
            other => anyhow::bail!("unknown argument {other}"),
        }
    }
    // `--log json|text`: the decision log as `serve` writes it, to
    // standard error (send it to /dev/null), writer thread included.
    let _log = match log.as_deref() {
        None => None,
        Some("json") => Some(telemetry::init(LogFormat::Json, "info")),
        Some("text") => Some(telemetry::init(LogFormat::Text, "info")),
        Some(other) => anyhow::bail!("--log takes json or text, not {other}"),
    };
    let body = std::fs::read(&body_path)?;
    let inventory = Inventory::from_pods([InventoryPod {
        namespace: "agents".into(),
        name: "worker-0".into(),
        pod: ObservedPod::running("3c5b1f4e-8a0d-4f6e-9b1a-2d7c0e4f5a61"),
    }]);
    let webhook = Webhook::new(
        Policy::default(),
        Arc::new(inventory),
        Arc::new(Metrics::default()),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    let mut patched = 0usize;
    runtime.block_on(async {
        for _ in 0..reviews {
            match part.as_str() {
                "decode" => {
                    let review = Review::from_json(std::hint::black_box(&body))?;
                    std::hint::black_box(&review);
                }
                "skip" => {
                    ownerguard::admission::json::from_bytes::<serde::de::IgnoredAny>(
                        std::hint::black_box(&body),
                    )?;
                }
                _ => {
                    let answer = webhook.answer(WebhookKind::Mutate, &body, None).await?;
                    patched += usize::from(answer.response.patch.is_some());
                    std::hint::black_box(&answer);
                }
            }
        }
        anyhow::Ok(())
    })?;
    println!("{{\"reviews\":{reviews},\"patched\":{patched}}}");
    Ok(())
}
