//! The real server on loopback, over TLS, as the API server talks to it.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode, Version};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use ownerguard::commands::certs::{self, Generated};
use ownerguard::observe::Metrics;
use ownerguard::owner::{Inventory, InventoryPod};
use ownerguard::owner::{Lookup, ObservedPod, OwnerLookup, PodQuery};
use ownerguard::serve::{ServeOptions, Server};
use ownerguard::webhook::Webhook;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::time::Instant;

const UID: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000001";

fn inventory() -> Inventory {
    Inventory::from_pods([InventoryPod {
        namespace: "agents".into(),
        name: "w-1".into(),
        pod: ObservedPod::running(UID),
    }])
}

/// An inventory that answers after `delay`: an API server that is slow.
struct Slow {
    delay: Duration,
    inner: Inventory,
}

impl OwnerLookup for Slow {
    fn lookup<'a>(&'a self, query: PodQuery<'a>) -> BoxFuture<'a, Lookup> {
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            self.inner.lookup(query).await
        })
    }
}

struct TestServer {
    https: SocketAddr,
    metrics: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    dir: tempfile::TempDir,
    ca: Generated,
}

impl TestServer {
    async fn start(
        lookup: Arc<dyn OwnerLookup>,
        client_ca: Option<&str>,
        shutdown_delay: Duration,
    ) -> Self {
        Self::start_limited(
            lookup,
            client_ca,
            shutdown_delay,
            Duration::from_secs(120),
            1000,
            &[],
        )
        .await
    }

    async fn start_limited(
        lookup: Arc<dyn OwnerLookup>,
        client_ca: Option<&str>,
        shutdown_delay: Duration,
        idle_timeout: Duration,
        max_connections: usize,
        client_names: &[&str],
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ca =
            certs::generate(&["localhost".into()], &["127.0.0.1".parse().unwrap()], 30).unwrap();
        ca.write(dir.path()).unwrap();
        let client_ca_path = client_ca.map(|pem| {
            let path = dir.path().join("client-ca.crt");
            std::fs::write(&path, pem).unwrap();
            path
        });
        let options = ServeOptions {
            addr: "127.0.0.1:0".parse().unwrap(),
            metrics_addr: "127.0.0.1:0".parse().unwrap(),
            tls_cert: dir.path().join("tls.crt"),
            tls_key: dir.path().join("tls.key"),
            client_ca: client_ca_path,
            client_names: client_names.iter().map(|n| n.to_string()).collect(),
            tls_reload_interval: Duration::from_millis(100),
            shutdown_delay,
            shutdown_timeout: Duration::from_secs(10),
            idle_timeout,
            max_connections,
            max_connections_per_source: max_connections,
        };
        let webhook = Webhook::new(Default::default(), lookup, Arc::new(Metrics::default()));
        let server = Server::bind(options, Arc::new(webhook)).await.unwrap();
        let (https, metrics) = (server.https_addr(), server.metrics_addr());
        let (shutdown, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async move {
            let _ = stopped.await;
        }));
        Self {
            https,
            metrics,
            shutdown: Some(shutdown),
            task,
            dir,
            ca,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.https.port())
    }

    async fn stop(mut self) {
        self.shutdown.take().unwrap().send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("drain hung")
            .unwrap()
            .unwrap();
    }
}

fn client_config(cas: &[&str], identity: Option<&Generated>) -> rustls::ClientConfig {
    common::process::client_tls(
        cas,
        identity.map(|id| (id.cert_pem.as_str(), id.key_pem.as_str())),
    )
}

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

fn client(ca: &str, version: Version, identity: Option<&Generated>) -> HttpsClient {
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(client_config(&[ca], identity))
        .https_only();
    if version == Version::HTTP_2 {
        Client::builder(TokioExecutor::new())
            .http2_only(true)
            .build(builder.enable_http2().build())
    } else {
        Client::builder(TokioExecutor::new()).build(builder.enable_http1().build())
    }
}

fn review(uid: &str, owner: &str) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "agents",
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {
                "generateName": "agent-", "namespace": "agents",
                "labels": {"ownerguard.io/owner-pod": owner, "ownerguard.io/owner-uid": UID}}},
            "oldObject": null,
            "dryRun": false
        }
    })
}

async fn post(client: &HttpsClient, url: &str, body: Vec<u8>) -> (StatusCode, Version, Value) {
    let request = Request::post(url)
        .header("content-type", "application/json")
        .header("user-agent", "kube-apiserver-admission")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = client.request(request).await.expect("request failed");
    let (status, version) = (response.status(), response.version());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| json!({"raw": String::from_utf8_lossy(&bytes)}));
    (status, version, value)
}

/// The answer is what the API server accepts, and its patch ties the pod
/// to w-1.
fn assert_patched(sent: &Value, answer: &Value) {
    common::assert_apiserver_accepts(sent, answer, ownerguard::decide::WebhookKind::Mutate);
    let metadata = ownerguard::observe::fixture::patched_metadata(sent, answer)
        .unwrap()
        .expect("no patch");
    assert_eq!(metadata["ownerReferences"][0]["uid"], UID);
    assert_eq!(metadata["ownerReferences"][0]["blockOwnerDeletion"], false);
}

#[tokio::test]
async fn http1_and_http2_are_negotiated_by_alpn_and_answer_reviews() {
    let server = TestServer::start(Arc::new(inventory()), None, Duration::ZERO).await;
    for version in [Version::HTTP_11, Version::HTTP_2] {
        let client = client(&server.ca.ca_pem, version, None);
        let sent = review("uid-alpn", "w-1");
        let (status, negotiated, answer) = post(
            &client,
            &server.url("/mutate?timeout=10s"),
            serde_json::to_vec(&sent).unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(negotiated, version);
        assert_patched(&sent, &answer);
    }
    server.stop().await;
}

#[tokio::test]
async fn bad_inputs_get_json_errors_never_a_hang() {
    let server = TestServer::start(Arc::new(inventory()), None, Duration::ZERO).await;
    let client = client(&server.ca.ca_pem, Version::HTTP_11, None);
    let url = server.url("/mutate");
    let cases: Vec<(&str, Vec<u8>, StatusCode)> = vec![
        ("malformed JSON", b"{\"apiVersion\": ".to_vec(), StatusCode::BAD_REQUEST),
        ("not a review", br#"{"apiVersion":"v1","kind":"Pod","metadata":{}}"#.to_vec(), StatusCode::BAD_REQUEST),
        ("no request", br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(), StatusCode::BAD_REQUEST),
        ("wrong types", br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":5,"operation":"CREATE"}}"#.to_vec(), StatusCode::BAD_REQUEST),
        ("empty body", Vec::new(), StatusCode::BAD_REQUEST),
        ("over the largest review", vec![b' '; ownerguard::serve::MAX_BODY_BYTES + 1], StatusCode::PAYLOAD_TOO_LARGE),
    ];
    for (what, body, expected) in cases {
        let (status, _, answer) =
            tokio::time::timeout(Duration::from_secs(10), post(&client, &url, body))
                .await
                .expect(what);
        assert_eq!(status, expected, "{what}: {answer}");
        assert!(
            answer["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{what}: no JSON error: {answer}"
        );
        assert_eq!(answer["code"], expected.as_u16(), "{what}");
    }
    // A body just under the limit is read (and refused as not JSON).
    let (status, _, _) = post(
        &client,
        &url,
        vec![b' '; ownerguard::serve::MAX_BODY_BYTES - 1],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _, answer) = post(&client, &server.url("/nowhere"), b"{}".to_vec()).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    server.stop().await;
}

#[tokio::test]
async fn a_thousand_concurrent_reviews_are_all_answered_right() {
    let server = TestServer::start(Arc::new(inventory()), None, Duration::ZERO).await;
    for version in [Version::HTTP_2, Version::HTTP_11] {
        let client = client(&server.ca.ca_pem, version, None);
        let url = server.url("/mutate?timeout=10s");
        let requests = (0..1000).map(|i| {
            let (client, url) = (client.clone(), url.clone());
            // Every tenth names a missing owner: the denials must reach the
            // right requests too.
            let owner = if i % 10 == 0 { "w-9" } else { "w-1" };
            let sent = review(&format!("uid-{version:?}-{i}"), owner);
            async move {
                let (status, _, answer) =
                    post(&client, &url, serde_json::to_vec(&sent).unwrap()).await;
                (i, sent, status, answer)
            }
        });
        let answers =
            tokio::time::timeout(Duration::from_secs(60), futures::future::join_all(requests))
                .await
                .expect("hung");
        assert_eq!(answers.len(), 1000);
        for (i, sent, status, answer) in answers {
            assert_eq!(status, StatusCode::OK);
            if i % 10 == 0 {
                common::assert_apiserver_accepts(
                    &sent,
                    &answer,
                    ownerguard::decide::WebhookKind::Mutate,
                );
                assert_eq!(answer["response"]["allowed"], false);
                assert_eq!(answer["response"]["status"]["code"], 403);
            } else {
                assert_patched(&sent, &answer);
            }
        }
    }
    server.stop().await;
}

/// The leaf certificate the server presents on a new connection.
async fn presented_certificate(addr: SocketAddr, cas: &[&str]) -> Vec<u8> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(cas, None)));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

#[tokio::test]
async fn certificate_rotation_needs_no_restart_and_drops_no_request() {
    let server = TestServer::start(Arc::new(inventory()), None, Duration::ZERO).await;
    let first = server.ca.clone();
    let second =
        certs::generate(&["localhost".into()], &["127.0.0.1".parse().unwrap()], 60).unwrap();
    let cas = [first.ca_pem.as_str(), second.ca_pem.as_str()];
    let before = presented_certificate(server.https, &cas).await;

    // Requests keep flowing on a kept-alive connection and on new ones
    // while the files change under the server.
    let keep_alive = Client::builder(TokioExecutor::new()).build(
        hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(client_config(&cas, None))
            .https_only()
            .enable_http1()
            .build(),
    );
    let url = server.url("/mutate");
    let traffic = {
        let (client, url) = (keep_alive.clone(), url.clone());
        tokio::spawn(async move {
            let mut answered = 0;
            let until = Instant::now() + Duration::from_millis(1500);
            while Instant::now() < until {
                let sent = review(&format!("uid-rotate-{answered}"), "w-1");
                let (status, _, answer) =
                    post(&client, &url, serde_json::to_vec(&sent).unwrap()).await;
                assert_eq!(status, StatusCode::OK);
                assert_patched(&sent, &answer);
                answered += 1;
            }
            answered
        })
    };
    // A half-written file is refused; the old certificate stays.
    std::fs::write(
        server.dir.path().join("tls.crt"),
        "-----BEGIN CERTIFICATE-----\ntruncated",
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(presented_certificate(server.https, &cas).await, before);
    // Kubernetes swaps a mounted Secret by renaming: write aside, rename.
    write_atomically(&server.dir.path().join("tls.key"), &second.key_pem);
    write_atomically(&server.dir.path().join("tls.crt"), &second.cert_pem);

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = presented_certificate(server.https, &cas).await;
        if now != before {
            let expected = CertificateDer::from_pem_slice(second.cert_pem.as_bytes()).unwrap();
            assert_eq!(now, expected.to_vec());
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answered = traffic.await.expect("a request failed during rotation");
    assert!(answered > 0);
    // Only the new CA is needed from now on.
    let client = client(&second.ca_pem, Version::HTTP_11, None);
    let sent = review("uid-after", "w-1");
    let (status, _, answer) = post(&client, &url, serde_json::to_vec(&sent).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert_patched(&sent, &answer);
    server.stop().await;
}

fn write_atomically(path: &Path, contents: &str) {
    let aside = path.with_extension("new");
    std::fs::write(&aside, contents).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

#[tokio::test]
async fn client_ca_requires_an_api_server_client_certificate() {
    let client_identity = certs::generate_client("kube-apiserver", 30).unwrap();
    let server = TestServer::start(
        Arc::new(inventory()),
        Some(&client_identity.ca_pem),
        Duration::ZERO,
    )
    .await;
    let sent = review("uid-mtls", "w-1");

    let anonymous = client(&server.ca.ca_pem, Version::HTTP_11, None);
    let request = Request::post(server.url("/mutate"))
        .body(Full::new(Bytes::from(serde_json::to_vec(&sent).unwrap())))
        .unwrap();
    assert!(
        anonymous.request(request).await.is_err(),
        "served a client without certificate"
    );

    let stranger = certs::generate_client("intruder", 30).unwrap();
    let untrusted = client(&server.ca.ca_pem, Version::HTTP_11, Some(&stranger));
    let request = Request::post(server.url("/mutate"))
        .body(Full::new(Bytes::from(serde_json::to_vec(&sent).unwrap())))
        .unwrap();
    assert!(
        untrusted.request(request).await.is_err(),
        "served a client of another CA"
    );

    let apiserver = client(&server.ca.ca_pem, Version::HTTP_11, Some(&client_identity));
    let (status, _, answer) = post(
        &apiserver,
        &server.url("/mutate"),
        serde_json::to_vec(&sent).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_patched(&sent, &answer);
    server.stop().await;
}

/// Whether a fresh connection presenting `identity` gets an answer.
async fn served(server: &TestServer, identity: &Generated) -> bool {
    let client = client(&server.ca.ca_pem, Version::HTTP_11, Some(identity));
    let request = Request::post(server.url("/mutate"))
        .body(Full::new(Bytes::from(
            serde_json::to_vec(&review("uid-mtls", "w-1")).unwrap(),
        )))
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), client.request(request))
        .await
        .expect("no answer and no refusal within 10 s")
        .is_ok_and(|answer| answer.status() == StatusCode::OK)
}

#[tokio::test]
async fn client_ca_is_reread_when_it_changes() {
    let before = certs::generate_client("kube-apiserver", 30).unwrap();
    let after = certs::generate_client("kube-apiserver", 30).unwrap();
    let server =
        TestServer::start(Arc::new(inventory()), Some(&before.ca_pem), Duration::ZERO).await;
    assert!(
        served(&server, &before).await,
        "the first CA's client refused"
    );
    assert!(
        !served(&server, &after).await,
        "served a client of a CA not yet in use"
    );

    // The CA rotated as the kubelet swaps a mounted ConfigMap: the new one
    // is in use within a few reload ticks (100 ms here), with no restart.
    write_atomically(&server.dir.path().join("client-ca.crt"), &after.ca_pem);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !served(&server, &after).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new client CA not in use 10 s after the file changed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !served(&server, &before).await,
        "the old CA's client still served"
    );

    // A broken file keeps the CA in use and is counted as a failed reload.
    write_atomically(
        &server.dir.path().join("client-ca.crt"),
        "-----BEGIN CERTIFICATE-----\nMIIB",
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        served(&server, &after).await,
        "a broken CA file unset the CA in use"
    );
    let (_, metrics) = get(server.metrics, "/metrics").await;
    assert!(
        !metrics.contains("ownerguard_tls_reload_failures_total 0"),
        "reload failures not counted:\n{metrics}"
    );
    server.stop().await;
}

#[tokio::test]
async fn client_name_pins_the_certificate_not_only_its_ca() {
    // Two certificates a CA the server trusts signed: only the one named
    // as pinned is served.
    let apiserver = certs::generate_client("kube-apiserver", 30).unwrap();
    let other = certs::generate_client("system:node:worker-1", 30).unwrap();
    let both = format!("{}{}", apiserver.ca_pem, other.ca_pem);
    let server = TestServer::start_limited(
        Arc::new(inventory()),
        Some(&both),
        Duration::ZERO,
        Duration::from_secs(120),
        1000,
        &["kube-apiserver"],
    )
    .await;
    assert!(served(&server, &apiserver).await, "the pinned name refused");
    assert!(
        !served(&server, &other).await,
        "served a certificate of a trusted CA with another name"
    );
    server.stop().await;
}

#[tokio::test]
async fn api_server_timeout_bounds_a_slow_lookup() {
    let slow = Slow {
        delay: Duration::from_secs(30),
        inner: inventory(),
    };
    let server = TestServer::start(Arc::new(slow), None, Duration::ZERO).await;
    let client = client(&server.ca.ca_pem, Version::HTTP_11, None);
    let sent = review("uid-slow", "w-1");
    // The API server gives up after 1s: the answer must come before, and
    // deny with 503 rather than let the call fail.
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        post(
            &client,
            &server.url("/mutate?timeout=1s"),
            serde_json::to_vec(&sent).unwrap(),
        ),
    )
    .await
    .expect("answer not bounded by ?timeout=");
    assert_eq!(answer.0, StatusCode::OK);
    common::assert_apiserver_accepts(&sent, &answer.2, ownerguard::decide::WebhookKind::Mutate);
    assert_eq!(answer.2["response"]["allowed"], false);
    assert_eq!(answer.2["response"]["status"]["code"], 503);
    server.stop().await;
}

async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    common::http_get(&addr.to_string(), path).await
}

/// A TLS connection to the server, handshake done.
async fn tls_connection(
    server: &TestServer,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let connector =
        tokio_rustls::TlsConnector::from(Arc::new(client_config(&[&server.ca.ca_pem], None)));
    let tcp = tokio::net::TcpStream::connect(server.https).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    connector.connect(name, tcp).await.unwrap()
}

#[tokio::test]
async fn a_connection_idle_past_the_idle_timeout_is_closed() {
    use tokio::io::AsyncReadExt;
    let idle = Duration::from_millis(600);
    let server =
        TestServer::start_limited(Arc::new(inventory()), None, Duration::ZERO, idle, 1000, &[])
            .await;
    let mut connection = tls_connection(&server).await;
    let started = std::time::Instant::now();
    let mut buf = [0u8; 16];
    // The server closes it: the read ends (EOF or a reset), after the
    // timeout and not long after.
    let read = tokio::time::timeout(Duration::from_secs(10), connection.read(&mut buf))
        .await
        .expect("an idle connection held past its idle timeout");
    assert!(!matches!(read, Ok(n) if n > 0), "{read:?}");
    let took = started.elapsed();
    assert!(
        took >= idle,
        "closed after {took:?}, before the idle timeout"
    );
    // A client that keeps talking keeps its connection.
    let client = client(&server.ca.ca_pem, Version::HTTP_11, None);
    for uid in ["k-1", "k-2", "k-3"] {
        tokio::time::sleep(idle / 2).await;
        let (status, _, _) = post(
            &client,
            &server.url("/mutate"),
            serde_json::to_vec(&review(uid, "w-1")).unwrap(),
        )
        .await;
        assert_eq!(status, 200);
    }
    server.stop().await;
}

/// One HTTP/1.1 review written on `connection`, its status line read.
async fn review_on(
    connection: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    uid: &str,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = serde_json::to_vec(&review(uid, "w-1")).unwrap();
    let head = format!(
        "POST /mutate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    connection.write_all(head.as_bytes()).await.unwrap();
    connection.write_all(&body).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    // The answer is whole once its body ends with the review's closing brace.
    while !answer.ends_with(b"}}") && !answer.ends_with(b"}}\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), connection.read(&mut buf))
            .await
            .expect("no answer")
            .expect("the connection failed");
        assert!(
            n > 0,
            "the server closed the connection: {}",
            String::from_utf8_lossy(&answer)
        );
        answer.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn a_keep_alive_connection_stays_usable_until_the_idle_timeout() {
    // The API server keeps an idle connection 90 s and reuses it: no
    // shorter timeout of the server (hyper's header read timeout also
    // runs while a keep-alive connection is idle) may close it first. A
    // connection idle 10.5 s (past the 10 s header read timeout this once
    // had) still carries the next review.
    let server = TestServer::start_limited(
        Arc::new(inventory()),
        None,
        Duration::ZERO,
        Duration::from_secs(20),
        1000,
        &[],
    )
    .await;
    let mut connection = tls_connection(&server).await;
    assert_eq!(review_on(&mut connection, "a-1").await, "HTTP/1.1 200 OK");
    tokio::time::sleep(Duration::from_millis(10_500)).await;
    assert_eq!(review_on(&mut connection, "a-2").await, "HTTP/1.1 200 OK");
    server.stop().await;
}

/// An idle timeout longer than the clock holds (the flag stops at Go's
/// 292 years, a program that builds `ServeOptions` does not) is "never":
/// the connection serves, hyper's header timer included, without the
/// clock's arithmetic overflowing in a connection's task.
#[tokio::test]
async fn an_idle_timeout_of_centuries_still_serves() {
    let centuries = Duration::MAX;
    let server = TestServer::start_limited(
        Arc::new(inventory()),
        None,
        Duration::ZERO,
        centuries,
        1000,
        &[],
    )
    .await;
    let mut connection = tls_connection(&server).await;
    assert_eq!(review_on(&mut connection, "a-1").await, "HTTP/1.1 200 OK");
    assert_eq!(review_on(&mut connection, "a-2").await, "HTTP/1.1 200 OK");
    server.stop().await;
}

#[tokio::test]
async fn at_the_cap_a_connection_that_sent_no_review_makes_room() {
    use tokio::io::AsyncReadExt;
    let server = TestServer::start_limited(
        Arc::new(inventory()),
        None,
        Duration::ZERO,
        Duration::from_secs(120),
        2,
        &[],
    )
    .await;
    // Two connections that finish their handshake and say nothing (a
    // flood of them is what takes an API server's place).
    let mut quiet = [tls_connection(&server).await, tls_connection(&server).await];
    // A third comes in, and is served: the oldest quiet one made room.
    let mut third = tls_connection(&server).await;
    assert_eq!(review_on(&mut third, "c-1").await, "HTTP/1.1 200 OK");
    let mut buf = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), quiet[0].read(&mut buf))
        .await
        .expect("the oldest quiet connection was not shed");
    assert!(!matches!(read, Ok(n) if n > 0), "{read:?}");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), quiet[1].read(&mut buf))
            .await
            .is_err(),
        "the newer quiet connection went too"
    );
    server.stop().await;
}

#[tokio::test]
async fn at_the_cap_with_every_connection_serving_a_new_one_is_refused_until_one_idles() {
    use tokio::io::AsyncReadExt;
    let server = TestServer::start_limited(
        Arc::new(inventory()),
        None,
        Duration::ZERO,
        Duration::from_secs(120),
        2,
        &[],
    )
    .await;
    let mut serving = [tls_connection(&server).await, tls_connection(&server).await];
    for (i, connection) in serving.iter_mut().enumerate() {
        assert_eq!(
            review_on(connection, &format!("s-{i}")).await,
            "HTTP/1.1 200 OK"
        );
    }
    // Both answered a moment ago: the next connection is closed at accept.
    let mut refused = tokio::net::TcpStream::connect(server.https).await.unwrap();
    let mut buf = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), refused.read(&mut buf))
        .await
        .expect("held");
    assert!(!matches!(read, Ok(n) if n > 0), "{read:?}");
    let (_, metrics) = get(server.metrics, "/metrics").await;
    assert!(
        metrics.contains("ownerguard_connections_refused_total{reason=\"cap\"} 1"),
        "{metrics}"
    );
    // Once one has been idle a second, it makes room for a new one.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let mut next = tls_connection(&server).await;
    assert_eq!(review_on(&mut next, "s-2").await, "HTTP/1.1 200 OK");
    server.stop().await;
}

#[tokio::test]
async fn a_client_that_declares_large_bodies_and_trickles_them_takes_no_room_from_others() {
    use tokio::io::AsyncWriteExt;
    let server = TestServer::start(Arc::new(inventory()), None, Duration::ZERO).await;
    // From two other addresses: requests that each declare the largest
    // body and then send nothing more, holding their room (the first) or
    // waiting for it (the second) for as long as the server lets them.
    let mut attackers = Vec::new();
    for address in ["127.0.0.2:0", "127.0.0.3:0", "127.0.0.2:0"] {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(address.parse().unwrap()).unwrap();
        let tcp = socket.connect(server.https).await.unwrap();
        let connector =
            tokio_rustls::TlsConnector::from(Arc::new(client_config(&[&server.ca.ca_pem], None)));
        let mut tls = connector
            .connect(
                rustls::pki_types::ServerName::try_from("localhost").unwrap(),
                tcp,
            )
            .await
            .unwrap();
        let head = format!(
            "POST /mutate?timeout=1000h HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{{",
            ownerguard::serve::MAX_BODY_BYTES
        );
        tls.write_all(head.as_bytes()).await.unwrap();
        attackers.push(tls);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Reviews from here are answered at once, as ever.
    let client = client(&server.ca.ca_pem, Version::HTTP_11, None);
    for i in 0..5 {
        let started = Instant::now();
        let (status, _, answer) = post(
            &client,
            &server.url("/mutate?timeout=10s"),
            serde_json::to_vec(&review(&format!("t-{i}"), "w-1")).unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "waited {:?}",
            started.elapsed()
        );
    }
    drop(attackers);
    server.stop().await;
}

#[tokio::test]
async fn probes_and_metrics_are_served_over_plain_http() {
    let server = TestServer::start(Arc::new(inventory()), None, Duration::ZERO).await;
    assert_eq!(get(server.metrics, "/healthz").await.0, 200);
    assert_eq!(get(server.metrics, "/readyz").await.0, 200);
    let client = client(&server.ca.ca_pem, Version::HTTP_11, None);
    post(
        &client,
        &server.url("/mutate"),
        serde_json::to_vec(&review("uid-m", "w-1")).unwrap(),
    )
    .await;
    post(
        &client,
        &server.url("/mutate"),
        serde_json::to_vec(&review("uid-d", "w-9")).unwrap(),
    )
    .await;
    // /validate denies the missing reference before any lookup.
    post(
        &client,
        &server.url("/validate"),
        serde_json::to_vec(&review("uid-v", "w-1")).unwrap(),
    )
    .await;
    let (status, metrics) = get(server.metrics, "/metrics").await;
    assert_eq!(status, 200);
    for expected in [
        r#"ownerguard_admission_requests_total{webhook="mutate",operation="CREATE",resource="pods",result="patched"} 1"#,
        r#"ownerguard_admission_requests_total{webhook="mutate",operation="CREATE",resource="pods",result="denied"} 1"#,
        r#"ownerguard_admission_requests_total{webhook="validate",operation="CREATE",resource="pods",result="denied"} 1"#,
        r#"ownerguard_admission_duration_seconds_count{webhook="mutate"} 2"#,
        r#"ownerguard_owner_lookups_total{source="inventory",result="found"} 1"#,
        r#"ownerguard_owner_lookups_total{source="inventory",result="not_found"} 1"#,
    ] {
        assert!(
            metrics.contains(expected),
            "missing {expected} in\n{metrics}"
        );
    }
    let expiry = metrics
        .lines()
        .find_map(|l| l.strip_prefix("ownerguard_tls_certificate_expiry_timestamp_seconds "))
        .and_then(|v| v.parse::<i64>().ok())
        .expect("no certificate expiry");
    let days = (expiry - time::OffsetDateTime::now_utc().unix_timestamp()) / 86_400;
    assert!((29..=30).contains(&days), "{days} days");
    server.stop().await;
}

/// Every metric the chart's alerts and dashboard read is one /metrics
/// serves (tests/chart/alerts/metrics.txt, which .ci/alerts checks the
/// rules and the dashboard against): read from the TYPE lines of the
/// registry /metrics encodes, once every family has a series (the watch,
/// audit and reaper families have none until a cluster, an audit or a
/// reaping gives them one), as the sample names a selector reads.
#[test]
fn every_metric_the_alerts_and_the_dashboard_read_is_exported() {
    let registry = ownerguard::observe::Metrics::default();
    registry.observe_request("mutate", "CREATE", "pods", "patched", 0.001);
    registry.observe_lookup("cache", "found");
    registry.set_watch_healthy("all", true);
    registry.count_watch_failure("all");
    registry.set_audit_objects(["configmaps"], |_, _| 1, &["leaked"]);
    registry.count_reaped("configmaps", 1);
    registry.count_reap_failure("configmaps");
    registry.observe_warned("validate", "warn", "agents", "owner-finished");
    let metrics = registry.encode();
    let mut exported = std::collections::BTreeSet::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').unwrap();
        match kind {
            "counter" => drop(exported.insert(format!("{name}_total"))),
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    exported.insert(format!("{name}{suffix}"));
                }
            }
            _ => drop(exported.insert(name.to_string())),
        }
    }
    let listed = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/chart/alerts/metrics.txt"),
    )
    .unwrap();
    let listed: Vec<&str> = listed
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert!(listed.len() >= 16, "{listed:?}");
    for name in listed {
        assert!(
            exported.contains(name),
            "{name} is not exported: {exported:#?}"
        );
    }
}

#[tokio::test]
async fn shutdown_turns_readiness_off_and_lets_in_flight_reviews_finish() {
    let slow = Slow {
        delay: Duration::from_millis(800),
        inner: inventory(),
    };
    let server = TestServer::start(Arc::new(slow), None, Duration::from_millis(500)).await;
    let client = client(&server.ca.ca_pem, Version::HTTP_11, None);
    let sent = review("uid-drain", "w-1");
    let in_flight = {
        let (client, url, body) = (
            client.clone(),
            server.url("/mutate"),
            serde_json::to_vec(&sent).unwrap(),
        );
        tokio::spawn(async move { post(&client, &url, body).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let metrics = server.metrics;
    let TestServer {
        shutdown,
        task,
        dir: _dir,
        ..
    } = server;
    shutdown.unwrap().send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        get(metrics, "/readyz").await.0,
        503,
        "still ready while shutting down"
    );
    assert_eq!(get(metrics, "/healthz").await.0, 200);
    let (status, _, answer) = in_flight.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_patched(&sent, &answer);
    tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .expect("drain hung")
        .unwrap()
        .unwrap();
}

/// A client that sends its headers, then trickles its body, is cut off at
/// the API server's timeout with a 408; the server keeps serving.
#[tokio::test]
async fn a_trickled_body_is_cut_off_at_the_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = TestServer::start(Arc::new(inventory()), None, Duration::ZERO).await;
    let connector =
        tokio_rustls::TlsConnector::from(Arc::new(client_config(&[&server.ca.ca_pem], None)));
    let tcp = tokio::net::TcpStream::connect(server.https).await.unwrap();
    let mut tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    tls.write_all(b"POST /mutate?timeout=1s HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"apiVersion\"")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buffer = [0u8; 4096];
        loop {
            let n = tls.read(&mut buffer).await.unwrap_or(0);
            answer.extend_from_slice(&buffer[..n]);
            if n == 0 || answer.windows(4).any(|w| w == b"\r\n\r\n") && answer.ends_with(b"}") {
                break;
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the server held the connection");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("\"code\":408"), "{text}");
    // Still serving.
    let client = client(&server.ca.ca_pem, Version::HTTP_11, None);
    let sent = review("uid-after-trickle", "w-1");
    let (status, _, answer) = post(
        &client,
        &server.url("/mutate"),
        serde_json::to_vec(&sent).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_patched(&sent, &answer);
    server.stop().await;
}
