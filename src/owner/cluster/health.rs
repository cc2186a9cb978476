//! Whether a watch's cache hits can be trusted: listed, not failed since
//! it last spoke, and heard from (an event or a bookmark) within
//! `--watch-silence-limit`; and the gauge and log lines that say so.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use super::ClusterMetrics;
use super::index::Scope;

/// What is known of one watch's health: whether its cache hits can be
/// trusted.
pub struct WatchHealth {
    /// Listed once: the index can answer at all.
    pub(super) synced: AtomicBool,
    /// Failed since it last showed life: hits are checked live.
    pub(super) failing: AtomicBool,
    /// When it last showed life (an event, a bookmark, a completed list),
    /// in milliseconds since `epoch`.
    pub(super) last_heard_ms: AtomicU64,
    pub(super) epoch: Instant,
}

impl WatchHealth {
    pub(super) fn new() -> Self {
        Self {
            synced: AtomicBool::new(false),
            failing: AtomicBool::new(false),
            last_heard_ms: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    pub(super) fn heard(&self) {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_heard_ms.store(now, Ordering::SeqCst);
        self.failing.store(false, Ordering::SeqCst);
    }

    /// How long since the watch last showed life.
    pub fn silence(&self) -> Duration {
        let heard = Duration::from_millis(self.last_heard_ms.load(Ordering::SeqCst));
        self.epoch.elapsed().saturating_sub(heard)
    }

    /// Whether a cache hit of this watch may answer alone: it has listed,
    /// has not failed since, and spoke within `silence_limit`.
    pub fn trusted(&self, silence_limit: Duration) -> bool {
        self.synced.load(Ordering::SeqCst)
            && !self.failing.load(Ordering::SeqCst)
            && self.silence() <= silence_limit
    }
}

/// The watches of one scope: every pod, then the finished pods of each
/// phase. A hit is trusted only while all of them are.
#[derive(Clone)]
pub(super) struct ScopeHealth {
    pub(super) watches: Vec<(&'static str, Arc<WatchHealth>)>,
}

impl ScopeHealth {
    pub(super) fn synced(&self) -> bool {
        self.watches
            .iter()
            .all(|(_, health)| health.synced.load(Ordering::SeqCst))
    }

    pub(super) fn trusted(&self, silence_limit: Duration) -> bool {
        self.watches
            .iter()
            .all(|(_, health)| health.trusted(silence_limit))
    }

    /// Listed, and every watch spoke within the limit, failed or not.
    pub(super) fn recent(&self, silence_limit: Duration) -> bool {
        self.synced()
            && self
                .watches
                .iter()
                .all(|(_, health)| health.silence() <= silence_limit)
    }

    /// The watches not trusted now, for the log.
    pub(super) fn untrusted(&self, silence_limit: Duration) -> Vec<&'static str> {
        self.watches
            .iter()
            .filter(|(_, health)| !health.trusted(silence_limit))
            .map(|(name, _)| *name)
            .collect()
    }

    /// The longest silence of its watches.
    pub(super) fn silence(&self) -> Duration {
        self.watches
            .iter()
            .map(|(_, health)| health.silence())
            .max()
            .unwrap_or_default()
    }
}

/// Every few seconds, the health of each scope's watches as a lookup would
/// judge it now: the gauge `ownerguard_owner_watch_healthy`, and a log line
/// when it changes (silence is a change that no event announces).
pub(super) async fn report_health(
    scopes: Vec<(Scope, ScopeHealth)>,
    silence_limit: Duration,
    metrics: Arc<dyn ClusterMetrics>,
) {
    let mut trusted: Vec<Option<bool>> = vec![None; scopes.len()];
    let mut tick = tokio::time::interval(HEALTH_REPORT_INTERVAL);
    loop {
        tick.tick().await;
        for ((scope, health), was) in scopes.iter().zip(trusted.iter_mut()) {
            let now = health.trusted(silence_limit);
            metrics.set_watch_healthy(scope.label(), now);
            if health.synced() && *was != Some(now) {
                if now {
                    info!(?scope, "pod watches healthy: cache hits answer alone");
                } else {
                    let watches = health.untrusted(silence_limit).join(", ");
                    warn!(?scope, %watches, silent_for = ?health.silence(), "pod watch failing or silent: cache hits are checked live");
                }
                *was = Some(now);
            }
        }
    }
}

/// How often the watch-health gauge is set.
pub(super) const HEALTH_REPORT_INTERVAL: Duration = Duration::from_secs(1);
