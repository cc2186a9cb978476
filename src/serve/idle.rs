//! The idle timeout of a connection: closed once nothing has been read or
//! written on it for `--idle-timeout`.
//!
//! hyper bounds the wait for a request's headers, but not the wait between
//! requests on a keep-alive connection: a client that sends one review and
//! then idles would hold its connection, its task and its TLS buffers for
//! ever. The API server's webhook client closes its own idle connections
//! after 90 s (client-go's transport takes `http.DefaultTransport`'s
//! `IdleConnTimeout`), so a server timeout longer than that never races a
//! connection the API server is about to reuse: it only ever closes
//! connections their client has abandoned.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::deadline::after;

/// A stream that fails with [`io::ErrorKind::TimedOut`] once it has been
/// idle (no byte read or written) for its timeout; the connection on it
/// then ends.
///
/// Activity only records the time: moving a timer in tokio's wheel at
/// every read and write (two a review, under the wheel's lock) cost more
/// than the rest of this type. The timer is set for the deadline as it was
/// when last set; when it fires, the deadline as it is now (the last
/// activity plus the timeout) decides: passed, the stream fails; not yet,
/// the timer is set again for it. The connection still ends within one
/// timer tick of its true deadline.
pub struct IdleTimeout<S> {
    inner: S,
    timeout: Duration,
    /// When a byte was last read or written (or the stream made).
    last_active: Instant,
    /// Fires at or before `last_active + timeout`.
    timer: Pin<Box<Sleep>>,
}

impl<S> IdleTimeout<S> {
    pub fn new(inner: S, timeout: Duration) -> Self {
        let now = Instant::now();
        Self {
            inner,
            timeout,
            last_active: now,
            timer: Box::pin(tokio::time::sleep_until(after(now, timeout))),
        }
    }

    fn active(&mut self) {
        self.last_active = Instant::now();
    }

    /// `Ready(error)` once the deadline has passed; registers the waker.
    fn expired(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            // The timer fired at its own deadline; the stream's is later
            // if a byte moved since the timer was set.
            let deadline = after(self.last_active, self.timeout);
            if self.timer.deadline() >= deadline {
                return Poll::Ready(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connection idle for {:?}", self.timeout),
                ));
            }
            self.timer.as_mut().reset(deadline);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for IdleTimeout<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    self.active();
                }
                Poll::Ready(result)
            }
            Poll::Pending => self.expired(cx).map(Err),
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for IdleTimeout<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Ready(Ok(written)) => {
                if written > 0 {
                    self.active();
                }
                Poll::Ready(Ok(written))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => self.expired(cx).map(Err),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(Ok(written)) => {
                if written > 0 {
                    self.active();
                }
                Poll::Ready(Ok(written))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => self.expired(cx).map(Err),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A read that never times out fails the test instead of hanging it.
    async fn bounded<T>(read: impl Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(1000), read)
            .await
            .expect("the idle timeout never fired")
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_of_centuries_never_panics_and_never_fires() {
        let huge = Duration::MAX;
        let (mut client, server) = tokio::io::duplex(64);
        let mut server = IdleTimeout::new(server, huge);
        client.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(server.read(&mut buf).await.unwrap(), 4);
        let waiting = tokio::time::timeout(Duration::from_secs(10_000), server.read(&mut buf));
        assert!(waiting.await.is_err(), "a timeout of centuries fired");
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_stream_times_out_and_activity_keeps_it_open() {
        let (client, server) = tokio::io::duplex(64);
        let mut server = IdleTimeout::new(server, Duration::from_secs(120));
        let mut client = client;
        let mut buf = [0u8; 8];
        // Bytes within the timeout, twice: each one makes it young again.
        for _ in 0..2 {
            tokio::time::sleep(Duration::from_secs(100)).await;
            client.write_all(b"ping").await.unwrap();
            assert_eq!(server.read(&mut buf).await.unwrap(), 4);
        }
        // Then nothing: the read fails once the timeout has passed.
        let started = Instant::now();
        let error = bounded(server.read(&mut buf)).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(120));
    }

    #[tokio::test(start_paused = true)]
    async fn activity_after_the_timer_was_set_moves_the_deadline() {
        let (mut client, server) = tokio::io::duplex(64);
        let mut server = IdleTimeout::new(server, Duration::from_secs(120));
        let mut buf = [0u8; 8];
        // A read that waits arms the timer for 120 s from the start.
        let read = tokio::spawn(async move {
            let first = server.read(&mut buf).await;
            (server, buf, first)
        });
        tokio::time::sleep(Duration::from_secs(50)).await;
        client.write_all(b"ping").await.unwrap();
        let (mut server, mut buf, first) = read.await.unwrap();
        assert_eq!(first.unwrap(), 4);
        // The timer still says 120 s; the deadline is now 170 s: at 120 s
        // it fires, finds the later deadline and waits on for it.
        let started = Instant::now();
        let error = bounded(server.read(&mut buf)).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(120));
        // Written bytes count as activity too.
        let (_client, server) = tokio::io::duplex(64);
        let mut server = IdleTimeout::new(server, Duration::from_secs(120));
        tokio::time::sleep(Duration::from_secs(100)).await;
        server.write_all(b"pong").await.unwrap();
        let started = Instant::now();
        let error = bounded(server.read(&mut buf)).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(120));
    }
}
