//! Serving: HTTPS for the webhooks, plain HTTP for metrics and probes,
//! certificate reload, and a drain on SIGTERM.
//!
//! The HTTPS side is a hand-written accept loop over tokio-rustls and
//! hyper-util rather than a wrapper crate, for three reasons measured or
//! required here: TCP_NODELAY on every connection (without it HTTP/2 showed
//! a 44 ms p99 from Nagle's algorithm), a bound on the TLS handshake and on
//! reading request headers (a slow client must not hold a connection), and
//! a graceful drain that lets in-flight reviews finish.

pub mod connections;
pub(crate) mod handlers;
pub(crate) mod idle;
pub(crate) mod tls;

pub use handlers::{MAX_BODY_BYTES, TransportError, router};
pub use tls::{ClientVerifier, ReloadingCertificate, TlsError};

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use idle::IdleTimeout;
use tracing::{debug, info, warn};

use crate::webhook::Webhook;

/// HTTP/2 streams in flight on one connection, at most: what HTTP/2
/// clients assume before the server's settings arrive (fewer, and a client
/// that opens them at once has some refused).
const MAX_CONCURRENT_STREAMS: u32 = 100;

/// A TLS handshake must complete within this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where and how to serve.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    pub tls_cert: PathBuf,
    pub tls_key: PathBuf,
    /// Require client certificates signed by this CA, followed like the
    /// serving certificate.
    pub client_ca: Option<PathBuf>,
    /// With `client_ca`: the names (subject common name or DNS name) a
    /// client certificate must carry; empty accepts any the CA signed.
    pub client_names: Vec<String>,
    /// How often the certificate files are checked for a change.
    pub tls_reload_interval: Duration,
    /// After SIGTERM, how long to keep serving while not ready, so that
    /// endpoints stop sending traffic here before the listener closes.
    pub shutdown_delay: Duration,
    /// After the listener closes, how long in-flight requests may take.
    pub shutdown_timeout: Duration,
    /// A connection with nothing read or written for this long is closed
    /// ([`idle`]).
    pub idle_timeout: Duration,
    /// Connections open at once, at most. At the cap a new connection
    /// takes the place of the least valuable one ([`connections`]), or is
    /// closed at accept when every one is serving reviews.
    pub max_connections: usize,
    /// Connections one source address may hold at once; past it, its own
    /// least valuable one makes room.
    pub max_connections_per_source: usize,
}

/// `--max-connections`'s default. A Kubernetes API server keeps up to 25
/// idle connections to one webhook (client-go's `idleConnsPerHost`), so a
/// thousand leaves room for forty API servers and a burst, while bounding
/// what connections can hold (about 40 KiB each once idle: 40 MiB).
pub const DEFAULT_MAX_CONNECTIONS: usize = 1000;

/// What `/healthz` and `/readyz` report.
pub struct Health {
    certificate: Arc<ReloadingCertificate>,
    webhook: Arc<Webhook>,
    shutting_down: AtomicBool,
}

impl Health {
    /// Ready: a certificate is loaded, the owner source can answer (the
    /// cache has listed the pods once), and no shutdown has begun.
    pub fn is_ready(&self) -> bool {
        self.certificate.not_after() > 0
            && self.webhook.owner_source().is_ready()
            && !self.shutting_down.load(Ordering::SeqCst)
    }
}

/// A bound, not yet serving, server.
pub struct Server {
    options: ServeOptions,
    https: TcpListener,
    metrics: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    certificate: Arc<ReloadingCertificate>,
    client: Option<Arc<ClientVerifier>>,
    webhook: Arc<Webhook>,
}

impl Server {
    /// Load the certificate and bind both listeners.
    ///
    /// # Errors
    ///
    /// When the certificate, key or client CA cannot be used, or an address
    /// cannot be bound.
    pub async fn bind(options: ServeOptions, webhook: Arc<Webhook>) -> anyhow::Result<Self> {
        let certificate = Arc::new(ReloadingCertificate::load(
            &options.tls_cert,
            &options.tls_key,
        )?);
        let client = match &options.client_ca {
            Some(ca) => Some(Arc::new(ClientVerifier::load(
                ca,
                options.client_names.clone(),
            )?)),
            None if !options.client_names.is_empty() => {
                anyhow::bail!("a client name to pin needs the client CA (--client-ca)")
            }
            None => None,
        };
        let tls = Arc::new(tls::server_config(certificate.clone(), client.clone())?);
        let https = TcpListener::bind(options.addr)
            .await
            .with_context(|| format!("cannot listen on {}", options.addr))?;
        let metrics = TcpListener::bind(options.metrics_addr)
            .await
            .with_context(|| format!("cannot listen on {}", options.metrics_addr))?;
        Ok(Self {
            options,
            https,
            metrics,
            tls,
            certificate,
            client,
            webhook,
        })
    }

    pub fn https_addr(&self) -> SocketAddr {
        self.https.local_addr().unwrap_or(self.options.addr)
    }

    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics
            .local_addr()
            .unwrap_or(self.options.metrics_addr)
    }

    /// Serve until `shutdown` completes, then drain: readiness goes false,
    /// the listener stays open for `shutdown_delay`, then closes, and
    /// in-flight requests get `shutdown_timeout` to finish.
    ///
    /// # Errors
    ///
    /// Only when the metrics listener fails; connection errors are logged.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let metrics_addr = self.metrics_addr();
        let Self {
            options,
            https,
            metrics,
            tls,
            certificate,
            client,
            webhook,
        } = self;
        let health = Arc::new(Health {
            certificate: certificate.clone(),
            webhook: webhook.clone(),
            shutting_down: AtomicBool::new(false),
        });

        let mut followed: Vec<Arc<dyn tls::Reloads>> = vec![certificate.clone()];
        if let Some(client) = client {
            followed.push(client);
        }
        let reload = tokio::spawn(tls::follow(
            followed,
            options.tls_reload_interval,
            webhook.metrics().tls_reload_failures(),
        ));

        let (stop_metrics, metrics_stopped) = watch::channel(false);
        let metrics_app = metrics_router(health.clone());
        let metrics_server = tokio::spawn(async move {
            let mut stopped_rx = metrics_stopped;
            axum::serve(metrics, metrics_app)
                .with_graceful_shutdown(async move { stopped(&mut stopped_rx).await })
                .await
        });

        // SIGTERM: not ready at once; stop accepting after the delay.
        let (stop_accepting, mut accepting_stopped) = watch::channel(false);
        let drain_health = health.clone();
        let delay = options.shutdown_delay;
        tokio::spawn(async move {
            shutdown.await;
            drain_health.shutting_down.store(true, Ordering::SeqCst);
            info!(
                delay_ms = delay.as_millis() as u64,
                "shutdown requested: readiness is false"
            );
            tokio::time::sleep(delay).await;
            let _ = stop_accepting.send(true);
        });

        info!(addr = %https.local_addr()?, %metrics_addr, "serving");
        let acceptor = TlsAcceptor::from(tls);
        let metrics = webhook.metrics().clone();
        let app = handlers::router(webhook);
        let graceful = GracefulShutdown::new();
        let table = connections::Connections::new(
            options.max_connections,
            options.max_connections_per_source,
        );
        // A timeout of centuries is "never", held to what the clock adds
        // without overflow: hyper's header timer adds it to the clock as
        // it is, and would panic in the connection's task. The flag stops
        // at Go's 292 years; `ServeOptions` built in code has no bound.
        let idle_timeout = options.idle_timeout.min(crate::deadline::NEVER);
        loop {
            tokio::select! {
                accepted = https.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(accepted) => accepted,
                        Err(error) => {
                            // Out of descriptors or similar: back off, keep serving.
                            warn!(%error, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    // At the cap, the least valuable connection makes room
                    // (a handshake that never ends, a connection that never
                    // sent a review); when every one serves reviews, the new
                    // one is closed at once: it waits for nothing, and holds
                    // nothing.
                    let slot = match table.admit(peer.ip()) {
                        Ok((slot, made_room)) => {
                            if let Some(why) = made_room {
                                metrics.count_connection_shed(why.reason());
                            }
                            slot
                        }
                        Err(why) => {
                            metrics.count_connection_refused(why.reason());
                            debug!(%peer, reason = why.reason(), "connection refused: --max-connections (or its source's share) reached, every connection serving");
                            drop(stream);
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    let acceptor = acceptor.clone();
                    let open = metrics.clone();
                    let watcher = graceful.watcher();
                    let handshake_timeout = if table.under_pressure() {
                        connections::HANDSHAKE_TIMEOUT_UNDER_PRESSURE
                    } else {
                        HANDSHAKE_TIMEOUT
                    };
                    let app = app.clone();
                    tokio::spawn(async move {
                        open.connection_opened();
                        let slot = Arc::new(slot);
                        let _closed = Closed { metrics: open, _slot: slot.clone() };
                        let stream = IdleTimeout::new(stream, idle_timeout);
                        let handshake = tokio::time::timeout(handshake_timeout, acceptor.accept(stream));
                        let tls = tokio::select! {
                            done = handshake => match done {
                                Ok(Ok(tls)) => tls,
                                Ok(Err(error)) => return debug!(%peer, %error, "TLS handshake failed"),
                                Err(_) => return debug!(%peer, "TLS handshake timed out"),
                            },
                            () = slot.shed() => return debug!(%peer, "connection shed in its handshake to make room"),
                        };
                        slot.handshaken();
                        // Every review marks its connection busy while it is
                        // decided, so that it is never shed mid-review.
                        let reviewing = slot.clone();
                        let service = hyper::service::service_fn(move |request: axum::http::Request<hyper::body::Incoming>| {
                            // Busy until answered or dropped (an HTTP/2 stream
                            // reset drops its handler half way).
                            let busy = connections::Busy::new(reviewing.clone());
                            let review = request.method() == axum::http::Method::POST;
                            let app = app.clone();
                            // The source's share of the body budget (handlers).
                            let mut request = request.map(axum::body::Body::new);
                            request.extensions_mut().insert(handlers::Source(peer.ip()));
                            async move {
                                let response = tower::ServiceExt::oneshot(app, request).await;
                                // Only a review decided makes the source known.
                                if review && response.as_ref().is_ok_and(|r| r.status() == StatusCode::OK) {
                                    busy.reviewed();
                                }
                                response
                            }
                        });
                        let mut builder = auto::Builder::new(TokioExecutor::new());
                        // hyper (since 1.6) times the header read from when a
                        // keep-alive connection goes idle, not from its first
                        // byte: it is an idle timeout too, and it must not be
                        // shorter than --idle-timeout, or idle connections the
                        // API server means to reuse (it keeps them 90 s) are
                        // closed under it, and a reuse racing the close fails
                        // the call. A slow header is still cut at that bound.
                        builder.http1().timer(TokioTimer::new()).header_read_timeout(idle_timeout).keep_alive(true);
                        // Bounded streams at once: an API server never
                        // multiplexes (it pins http/1.1), and each stream in
                        // flight keeps its connection from being shed.
                        builder.http2().timer(TokioTimer::new()).max_concurrent_streams(MAX_CONCURRENT_STREAMS);
                        let connection = builder.serve_connection(TokioIo::new(tls), service);
                        tokio::select! {
                            result = watcher.watch(connection) => if let Err(error) = result {
                                debug!(%peer, %error, "connection ended with an error");
                            },
                            () = slot.shed() => debug!(%peer, "idle connection shed to make room"),
                        }
                    });
                }
                () = stopped(&mut accepting_stopped) => break,
            }
        }
        drop(https);
        info!(connections = graceful.count(), "listener closed, draining");
        if tokio::time::timeout(options.shutdown_timeout, graceful.shutdown())
            .await
            .is_err()
        {
            warn!("in-flight requests still running after the shutdown timeout");
        }
        reload.abort();
        let _ = stop_metrics.send(true);
        metrics_server
            .await
            .context("metrics server")?
            .context("metrics server")?;
        info!("stopped");
        Ok(())
    }
}

/// A connection's slot and gauge, given back when its task ends, however
/// it ends.
struct Closed {
    metrics: Arc<crate::observe::Metrics>,
    _slot: Arc<connections::Slot>,
}

impl Drop for Closed {
    fn drop(&mut self) {
        self.metrics.connection_closed();
    }
}

/// Completes once `flag` is true (or its sender is gone). The guard that
/// `wait_for` returns is dropped here, before the caller's next await: it
/// is not `Send`.
async fn stopped(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|stop| *stop).await.map(|_| ());
}

/// `/metrics`, `/healthz` and `/readyz`.
pub fn metrics_router(health: Arc<Health>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(health)
}

async fn metrics(State(health): State<Arc<Health>>) -> Response {
    let metrics = health.webhook.metrics();
    // Read at each scrape: always the certificate in use, reloaded or not.
    metrics.set_certificate_expiry(health.certificate.not_after());
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.encode(),
    )
        .into_response()
}

async fn readyz(State(health): State<Arc<Health>>) -> Response {
    if health.is_ready() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response()
    }
}

/// Completes on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}
