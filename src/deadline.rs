//! A future bounded by a deadline, polled once before any timer exists.
//!
//! Most of what a review waits on is ready at once: its body arrives with
//! its headers, its owner is in memory, its decision needs no wait. A
//! tokio timer made and dropped unused still costs, every review, a clock
//! read, a handle on the runtime, its wheel entry and its drop, and
//! `tokio::time::timeout` moves the future it bounds into itself. So the
//! future is polled first where it stands (pinned by the caller), and a
//! timer is made only for one that waits.

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use futures::poll;
use tokio::time::Instant;

/// `future`'s output, or `None` if it has not finished by `deadline`.
///
/// A future finished on its first poll is answered even past the
/// deadline, as `tokio::time::timeout_at` answers it.
pub async fn within_at<F: Future + Unpin>(deadline: Instant, mut future: F) -> Option<F::Output> {
    if let Poll::Ready(output) = poll!(&mut future) {
        return Some(output);
    }
    tokio::time::timeout_at(deadline, future).await.ok()
}

/// [`within_at`], the deadline `limit` from now.
pub async fn within<F: Future + Unpin>(limit: Duration, future: F) -> Option<F::Output> {
    within_at(after(Instant::now(), limit), future).await
}

/// `duration` after `instant`; past what an `Instant` can hold (a
/// `Duration` built in code, or a server's Retry-After), thirty years after it, as tokio
/// reckons "never": a limit never panics, nor ends early.
pub fn after(instant: Instant, duration: Duration) -> Instant {
    instant
        .checked_add(duration)
        .unwrap_or_else(|| instant + NEVER)
}

/// [`after`] now.
pub fn after_now(duration: Duration) -> Instant {
    after(Instant::now(), duration)
}

/// Thirty years: tokio's own far future, and the longest bound worth
/// keeping (a longer one given is held to it).
pub const NEVER: Duration = Duration::from_secs(30 * 365 * 24 * 60 * 60);

#[cfg(test)]
mod tests {
    use std::pin::pin;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_future_is_bounded_from_when_it_is_first_polled() {
        let limit = Duration::from_secs(10);
        // Finished on its first poll: its output.
        assert_eq!(within(limit, pin!(async { 7 })).await, Some(7));
        // Finished before the limit, after waiting: its output.
        let started = Instant::now();
        let late = pin!(async {
            tokio::time::sleep(Duration::from_secs(9)).await;
            8
        });
        assert_eq!(within(limit, late).await, Some(8));
        assert_eq!(started.elapsed(), Duration::from_secs(9));
        // Never finished: none, at the limit.
        let started = Instant::now();
        let never = pin!(std::future::pending::<u8>());
        assert_eq!(within(limit, never).await, None);
        assert_eq!(started.elapsed(), limit);
        // Past the limit by a wait: none, at the limit.
        let started = Instant::now();
        let too_late = pin!(async {
            tokio::time::sleep(Duration::from_secs(11)).await;
            9
        });
        assert_eq!(within(limit, too_late).await, None);
        assert_eq!(started.elapsed(), limit);
    }

    #[tokio::test(start_paused = true)]
    async fn a_limit_past_what_an_instant_holds_is_never_and_no_panic() {
        let now = Instant::now();
        assert_eq!(after(now, Duration::MAX), now + NEVER);
        assert_eq!(
            after(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
        let never = tokio::spawn(within(
            Duration::MAX,
            Box::pin(std::future::pending::<u8>()),
        ));
        tokio::time::sleep(Duration::from_secs(365 * 24 * 60 * 60)).await;
        assert!(
            !never.is_finished(),
            "a year in, the limit of centuries ended"
        );
        never.abort();
        assert_eq!(within(Duration::MAX, pin!(async { 3 })).await, Some(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_already_passed_still_answers_a_ready_future() {
        let past = Instant::now();
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(within_at(past, pin!(async { 1 })).await, Some(1));
        assert_eq!(
            within_at(past, pin!(std::future::pending::<u8>())).await,
            None
        );
    }
}
