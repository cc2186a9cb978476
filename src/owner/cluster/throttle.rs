//! The bound on live lookups across all reviews (SPEC §3 rule 10): at most
//! so many GETs in flight, at most so many started per second. Anyone who
//! may create a labelled object can make ownerguard look pods up; this is
//! what keeps that from becoming load on the API server.
//!
//! A lookup waits for room only while its deadline allows; past that it
//! fails at once with [`LookupError::Throttled`] (503, or allowed under
//! `--fail-open`), so a review is never held beyond the API server's
//! timeout by the throttle.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

use crate::owner::LookupError;

/// A token bucket for the rate and a semaphore for the concurrency.
pub struct Throttle {
    in_flight: Semaphore,
    bucket: Mutex<Bucket>,
    /// Tokens added per second, and the bucket's size (the burst).
    rate_per_second: f64,
}

struct Bucket {
    /// May go negative: a lookup that reserved a token ahead of time waits
    /// until the bucket would have had it.
    tokens: f64,
    updated: Instant,
}

impl Throttle {
    pub fn new(concurrency: usize, rate_per_second: u32) -> Self {
        let rate = f64::from(rate_per_second.max(1));
        Self {
            in_flight: Semaphore::new(concurrency.max(1)),
            bucket: Mutex::new(Bucket {
                tokens: rate,
                updated: Instant::now(),
            }),
            rate_per_second: rate,
        }
    }

    /// Room for one live GET, before `deadline`: hold the permit for the
    /// length of the call.
    ///
    /// # Errors
    ///
    /// [`LookupError::Throttled`] when the rate or the concurrency leaves no
    /// room before `deadline`.
    pub async fn admit(&self, deadline: Instant) -> Result<SemaphorePermit<'_>, LookupError> {
        let wait = self.reserve(deadline)?;
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        match tokio::time::timeout_at(deadline, self.in_flight.acquire()).await {
            Ok(Ok(permit)) => Ok(permit),
            // The semaphore is never closed; a time-out is the only failure.
            _ => Err(LookupError::Throttled {
                limit: "too many lookups in flight",
            }),
        }
    }

    /// Take a token, now or ahead; how long to wait until it is due.
    fn reserve(&self, deadline: Instant) -> Result<Duration, LookupError> {
        let now = Instant::now();
        // A poisoned lock only means another lookup panicked mid-update;
        // the bucket's numbers are still numbers.
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let refill = now.duration_since(bucket.updated).as_secs_f64() * self.rate_per_second;
        bucket.tokens = (bucket.tokens + refill).min(self.rate_per_second);
        bucket.updated = now;
        let wait = if bucket.tokens >= 1.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - bucket.tokens) / self.rate_per_second)
        };
        if now + wait >= deadline {
            return Err(LookupError::Throttled {
                limit: "lookup rate exceeded",
            });
        }
        bucket.tokens -= 1.0;
        Ok(wait)
    }

    /// Live GETs in flight now.
    pub fn in_flight(&self, concurrency: usize) -> usize {
        concurrency.saturating_sub(self.in_flight.available_permits())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_burst_passes_then_the_rate_paces() {
        let throttle = Throttle::new(100, 10);
        let deadline = Instant::now() + Duration::from_secs(60);
        let start = Instant::now();
        for _ in 0..10 {
            drop(throttle.admit(deadline).await.unwrap());
        }
        assert_eq!(Instant::now(), start, "the first ten are the burst");
        for _ in 0..10 {
            drop(throttle.admit(deadline).await.unwrap());
        }
        let paced = Instant::now() - start;
        assert!(
            paced >= Duration::from_millis(990) && paced <= Duration::from_millis(1010),
            "{paced:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_token_before_the_deadline_fails_at_once_and_keeps_the_token() {
        let throttle = Throttle::new(100, 2);
        let soon = Instant::now() + Duration::from_millis(100);
        drop(throttle.admit(soon).await.unwrap());
        drop(throttle.admit(soon).await.unwrap());
        let before = Instant::now();
        let error = throttle.admit(soon).await.unwrap_err();
        assert!(matches!(error, LookupError::Throttled { .. }), "{error:?}");
        assert_eq!(Instant::now(), before, "refused without waiting");
        // The refused lookup took nothing: the next token is due at 500 ms.
        tokio::time::advance(Duration::from_millis(500)).await;
        let later = Instant::now() + Duration::from_millis(10);
        assert!(throttle.admit(later).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn concurrency_is_capped_until_the_deadline() {
        let throttle = Throttle::new(2, 1000);
        let deadline = Instant::now() + Duration::from_millis(50);
        let first = throttle.admit(deadline).await.unwrap();
        let _second = throttle.admit(deadline).await.unwrap();
        assert_eq!(throttle.in_flight(2), 2);
        let error = throttle.admit(deadline).await.unwrap_err();
        assert!(matches!(error, LookupError::Throttled { .. }));
        drop(first);
        let deadline = Instant::now() + Duration::from_millis(50);
        assert!(throttle.admit(deadline).await.is_ok());
    }
}
