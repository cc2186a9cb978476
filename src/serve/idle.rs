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

/// A stream that fails with [`io::ErrorKind::TimedOut`] once it has been
/// idle (no byte read or written) for its timeout; the connection on it
/// then ends.
pub struct IdleTimeout<S> {
    inner: S,
    timeout: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl<S> IdleTimeout<S> {
    pub fn new(inner: S, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            deadline: Box::pin(tokio::time::sleep(timeout)),
        }
    }

    fn active(&mut self) {
        self.deadline.as_mut().reset(Instant::now() + self.timeout);
    }

    /// `Ready(error)` once the deadline has passed; registers the waker.
    fn expired(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("connection idle for {}s", self.timeout.as_secs()),
            )),
            Poll::Pending => Poll::Pending,
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
        let error = server.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(120));
    }
}
