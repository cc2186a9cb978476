//! Owner lookup in a cluster: the real kube client, the real watch and
//! index, against the loopback API server of `tests/apiserver`. Each
//! scenario asserts the decision and the API calls it took.

mod apiserver;
mod common;

use std::sync::Arc;
use std::time::Duration;

use apiserver::{FakeApi, Faults, Running, eventually};
use ownerguard::decide::{Policy, WebhookKind};
use ownerguard::observe::Metrics;
use ownerguard::owner::{ClusterLookup, LookupLimits};
use ownerguard::owner::{Finished, OwnerLookup};
use ownerguard::owner::{FinishedChange, WatchSettings, Watches};
use ownerguard::webhook::Webhook;
use serde_json::{Value, json};
use tokio::time::Instant;

const NS: &str = "agents";
/// Every pod, and the finished pods of each phase (SPEC §3 rule 11).
const WATCHES_PER_SCOPE: usize = 3;
const U1: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000001";
const U2: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000002";

struct Cluster {
    server: Running,
    watches: Arc<Watches>,
    webhook: Webhook,
    metrics: Arc<Metrics>,
}

impl Cluster {
    /// The API server with `setup` done, then ownerguard watching it.
    async fn start(settings: WatchSettings, setup: impl FnOnce(&FakeApi)) -> Self {
        Self::start_with(settings, LookupLimits::default(), setup).await
    }

    async fn start_with(
        settings: WatchSettings,
        limits: LookupLimits,
        setup: impl FnOnce(&FakeApi),
    ) -> Self {
        let server = FakeApi::start().await;
        setup(&server.api);
        let client = server.serve_client();
        let metrics = Arc::new(Metrics::default());
        let watches = Arc::new(Watches::spawn(client.clone(), &settings, metrics.clone()));
        let lookup = Arc::new(ClusterLookup::new(
            client,
            watches.clone(),
            limits,
            metrics.clone(),
        ));
        let webhook = Webhook::new(Policy::default(), lookup, metrics.clone());
        Self {
            server,
            watches,
            webhook,
            metrics,
        }
    }

    fn api(&self) -> &FakeApi {
        &self.server.api
    }

    async fn synced(&self) {
        eventually("the cache to sync", || self.watches.is_synced()).await;
        assert!(self.webhook.owner_source().is_ready());
    }

    /// Review a pod CREATE declaring owner `name` with `uid`.
    async fn review(&self, name: &str, uid: &str, api_timeout: Option<Duration>) -> Value {
        let metadata = json!({"generateName": "agent-", "namespace": NS,
            "labels": {"ownerguard.io/owner-pod": name, "ownerguard.io/owner-uid": uid}});
        self.review_metadata(NS, metadata, api_timeout).await
    }

    /// Review a pod CREATE in `namespace` whose metadata is `metadata`.
    async fn review_metadata(
        &self,
        namespace: &str,
        metadata: Value,
        api_timeout: Option<Duration>,
    ) -> Value {
        let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "r-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace, "operation": "CREATE", "userInfo": {"username": "alice"},
            "object": {"apiVersion": "v1", "kind": "Pod", "metadata": metadata}}});
        let answer = self
            .webhook
            .answer(
                WebhookKind::Mutate,
                &serde_json::to_vec(&review).unwrap(),
                api_timeout,
            )
            .await
            .unwrap();
        let answer: Value = serde_json::from_slice(&answer.body).unwrap();
        common::assert_apiserver_accepts(&review, &answer, WebhookKind::Mutate);
        answer["response"].clone()
    }

    fn gets(&self) -> Vec<String> {
        self.api()
            .calls_matching("GET /api/v1/namespaces/agents/pods/")
    }
}

fn running_workers(api: &FakeApi) {
    api.put_pod(NS, "w-1", U1);
    api.put_pod(NS, "w-2", U2);
}

#[tokio::test]
async fn readiness_waits_for_the_first_list() {
    let server = FakeApi::start().await;
    server.api.set_faults(Faults {
        down: true,
        ..Faults::default()
    });
    let client = server.serve_client();
    let watches = Arc::new(Watches::spawn(
        client.clone(),
        &WatchSettings::default(),
        Arc::new(Metrics::default()),
    ));
    let lookup = ClusterLookup::new(
        client,
        watches.clone(),
        LookupLimits::default(),
        Arc::new(Metrics::default()),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!lookup.is_ready(), "ready before any list succeeded");
    server.api.set_faults(Faults::default());
    eventually("readiness after the API comes back", || lookup.is_ready()).await;
}

#[tokio::test]
async fn owner_seen_by_the_watch_is_answered_from_the_cache_without_a_get() {
    let cluster = Cluster::start(WatchSettings::default(), running_workers).await;
    cluster.synced().await;
    // The list is metadata-only, over every namespace.
    let lists = cluster.api().calls_matching("GET /api/v1/pods?");
    assert!(!lists.is_empty(), "{:?}", cluster.api().calls());
    let response = cluster.review("w-1", U1, None).await;
    assert_eq!(response["allowed"], true);
    assert_eq!(response["auditAnnotations"]["owner-source"], "cache");
    assert!(
        cluster.gets().is_empty(),
        "GET made for a cached owner: {:?}",
        cluster.gets()
    );
    assert!(
        cluster
            .metrics
            .encode()
            .contains("ownerguard_owner_cache_pods 2")
    );
    assert!(
        cluster
            .metrics
            .encode()
            .contains(r#"ownerguard_owner_lookups_total{source="cache",result="found"} 1"#)
    );
}

/// The cache answers at once only where its lookup would not ask the API
/// server: a young entry of a trusted watch with the declared uid. A fresh
/// query (a reference about to be put back), another uid, a pod the cache
/// has not seen or an entry grown old goes live.
#[tokio::test]
async fn the_cache_answers_at_once_only_what_needs_no_get() {
    let server = FakeApi::start().await;
    running_workers(&server.api);
    let client = server.serve_client();
    let metrics = Arc::new(Metrics::default());
    let settings = WatchSettings {
        max_age: Duration::from_secs(2),
        ..WatchSettings::default()
    };
    let watches = Arc::new(Watches::spawn(client.clone(), &settings, metrics.clone()));
    let lookup = ClusterLookup::new(client, watches.clone(), LookupLimits::default(), metrics);
    eventually("the cache to sync", || watches.is_synced()).await;
    let synced = Instant::now();
    let query = |name, uid, fresh| ownerguard::owner::PodQuery {
        namespace: NS,
        name,
        expected_uid: uid,
        fresh,
        deadline: Instant::now() + Duration::from_secs(5),
    };
    let gets = || {
        server
            .api
            .calls_matching("GET /api/v1/namespaces/agents/pods/")
            .len()
    };
    let now = lookup
        .lookup_now(&query("w-1", U1, false))
        .expect("a young entry");
    assert_eq!(now.source.as_str(), "cache");
    let pod = now.outcome.unwrap().expect("the pod");
    assert_eq!(pod.uid, U1);
    assert!(
        synced.elapsed() < Duration::from_secs(2),
        "too slow to test"
    );
    // Fresh: never from memory, and the lookup asks the API server.
    assert!(lookup.lookup_now(&query("w-1", U1, true)).is_none());
    let fresh = lookup.lookup(query("w-1", U1, true)).await;
    assert_eq!(fresh.source.as_str(), "api");
    assert_eq!(gets(), 1);
    // Another uid than the cache's, or a pod it has not seen: live.
    assert!(lookup.lookup_now(&query("w-2", U1, false)).is_none());
    assert!(lookup.lookup_now(&query("w-9", U1, false)).is_none());
    let unseen = lookup.lookup(query("w-9", U1, false)).await;
    assert_eq!(unseen.source.as_str(), "api");
    assert_eq!(gets(), 2);
    // Grown older than the cache's max age: live too.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(lookup.lookup_now(&query("w-2", U2, false)).is_none());
    let old = lookup.lookup(query("w-2", U2, false)).await;
    assert_eq!(old.source.as_str(), "api");
    assert_eq!(gets(), 3);
}

#[tokio::test]
async fn owner_added_later_reaches_the_cache_through_the_watch() {
    let cluster = Cluster::start(WatchSettings::default(), |_| {}).await;
    cluster.synced().await;
    cluster.api().put_pod(NS, "w-3", U1);
    eventually("the ADDED event", || {
        cluster.watches.index.get(NS, "w-3").is_some()
    })
    .await;
    cluster.api().bookmark();
    let response = cluster.review("w-3", U1, None).await;
    assert_eq!(response["auditAnnotations"]["owner-source"], "cache");
    assert!(cluster.gets().is_empty());
}

#[tokio::test]
async fn owner_created_after_the_last_watch_event_is_found_by_one_get() {
    let cluster = Cluster::start(WatchSettings::default(), |_| {}).await;
    cluster.synced().await;
    // The worker started a moment ago: its watch event has not arrived.
    cluster.api().put_pod_unannounced(NS, "w-new", U1);
    let response = cluster.review("w-new", U1, None).await;
    assert_eq!(response["allowed"], true, "{response}");
    assert_eq!(response["auditAnnotations"]["owner-source"], "api");
    assert_eq!(
        cluster.gets(),
        vec!["GET /api/v1/namespaces/agents/pods/w-new".to_string()]
    );
}

#[tokio::test]
async fn owner_deleted_is_denied() {
    let cluster = Cluster::start(WatchSettings::default(), running_workers).await;
    cluster.synced().await;
    cluster.api().remove(apiserver::Kind::Pod, NS, "w-1");
    eventually("the DELETED event", || {
        cluster.watches.index.get(NS, "w-1").is_none()
    })
    .await;
    let response = cluster.review("w-1", U1, None).await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 403);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("not found in namespace 'agents'")
    );
    // A miss is checked live before the denial.
    assert_eq!(cluster.gets().len(), 1);
}

#[tokio::test]
async fn owner_being_deleted_is_denied_from_the_cache() {
    let cluster = Cluster::start(WatchSettings::default(), running_workers).await;
    cluster.synced().await;
    cluster.api().terminate_pod(NS, "w-1");
    eventually("the MODIFIED event", || {
        cluster
            .watches
            .index
            .get(NS, "w-1")
            .is_some_and(|p| p.terminating)
    })
    .await;
    let response = cluster.review("w-1", U1, None).await;
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("is being deleted")
    );
    assert!(cluster.gets().is_empty());
}

#[tokio::test]
async fn uid_replaced_by_a_new_pod_of_the_same_name_is_denied_after_a_get() {
    let cluster = Cluster::start(WatchSettings::default(), running_workers).await;
    cluster.synced().await;
    // The pod was recreated under the same name: a new uid.
    cluster.api().remove(apiserver::Kind::Pod, NS, "w-1");
    cluster.api().put_pod(NS, "w-1", U2);
    eventually("the new pod", || {
        cluster
            .watches
            .index
            .get(NS, "w-1")
            .is_some_and(|p| p.uid == U2)
    })
    .await;
    let response = cluster.review("w-1", U1, None).await;
    assert_eq!(response["allowed"], false);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("does not have uid '{U1}'")),
        "{message}"
    );
    assert!(!message.contains(U2), "the real uid is not told: {message}");
    assert_eq!(
        cluster.gets().len(),
        1,
        "a uid mismatch is checked live once"
    );
}

#[tokio::test]
async fn api_down_after_sync_cache_still_serves_and_misses_deny_503_in_budget() {
    let cluster = Cluster::start(WatchSettings::default(), running_workers).await;
    cluster.synced().await;
    cluster.api().update_faults(|f| f.down = true);
    cluster.api().drop_watches();
    let response = cluster
        .review("w-1", U1, Some(Duration::from_secs(10)))
        .await;
    assert_eq!(response["allowed"], true, "a cached owner is still served");
    assert_eq!(response["auditAnnotations"]["owner-source"], "cache");
    // kube retries a 503 with backoff; the lookup budget (2s) ends it.
    let started = Instant::now();
    let response = cluster
        .review("w-unknown", U1, Some(Duration::from_secs(10)))
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "not bounded by the lookup budget"
    );
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 503);
    let metrics = cluster.metrics.encode();
    let failed = [
        r#"source="api",result="error"} 1"#,
        r#"source="api",result="timeout"} 1"#,
    ];
    assert!(failed.iter().any(|f| metrics.contains(f)), "{metrics}");
    assert!(
        cluster.watches.is_synced(),
        "a lost watch does not make the cache unready"
    );
}

#[tokio::test]
async fn api_slower_than_the_budget_is_answered_before_the_deadline() {
    let cluster = Cluster::start(WatchSettings::default(), |_| {}).await;
    cluster.synced().await;
    cluster
        .api()
        .update_faults(|f| f.get_delay = Duration::from_secs(30));
    let started = Instant::now();
    // The API server gives the call 1s: the lookup gets 750 ms of it.
    let response = cluster
        .review("w-slow", U1, Some(Duration::from_secs(1)))
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "not bounded by ?timeout="
    );
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 503);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("did not answer in time"),
        "{response}"
    );
}

#[tokio::test]
async fn fail_open_allows_with_a_warning_when_the_api_is_down() {
    let server = FakeApi::start().await;
    let client = server.serve_client();
    let metrics = Arc::new(Metrics::default());
    let watches = Arc::new(Watches::spawn(
        client.clone(),
        &WatchSettings::default(),
        metrics.clone(),
    ));
    eventually("sync", || watches.is_synced()).await;
    server.api.update_faults(|f| f.down = true);
    let policy = Policy {
        fail_open: true,
        ..Policy::default()
    };
    let webhook = Webhook::new(
        policy,
        Arc::new(ClusterLookup::new(
            client,
            watches,
            LookupLimits::default(),
            Arc::new(Metrics::default()),
        )),
        metrics,
    );
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "r", "operation": "CREATE", "namespace": NS, "kind": {"kind": "Pod"},
        "object": {"metadata": {"name": "a", "labels": {"ownerguard.io/owner-pod": "w-1", "ownerguard.io/owner-uid": U1}}}}});
    let answer = webhook
        .answer(
            WebhookKind::Mutate,
            &serde_json::to_vec(&review).unwrap(),
            None,
        )
        .await
        .unwrap();
    assert!(answer.response.allowed);
    assert_eq!(answer.response.warnings.len(), 1);
}

#[tokio::test]
async fn dropped_watch_resumes_from_its_resource_version() {
    let cluster = Cluster::start(WatchSettings::default(), running_workers).await;
    cluster.synced().await;
    eventually("the watch", || {
        cluster.api().open_watches() == WATCHES_PER_SCOPE
    })
    .await;
    let lists_before = cluster
        .api()
        .calls_matching("GET /api/v1/pods?")
        .iter()
        .filter(|c| !c.contains("watch=true"))
        .count();
    cluster.api().drop_watches();
    // Changes while the watch is down arrive on the resumed watch.
    cluster.api().remove(apiserver::Kind::Pod, NS, "w-2");
    cluster.api().put_pod(NS, "w-4", U2);
    eventually("the replayed events", || {
        cluster.watches.index.get(NS, "w-4").is_some()
            && cluster.watches.index.get(NS, "w-2").is_none()
    })
    .await;
    let lists_after = cluster
        .api()
        .calls_matching("GET /api/v1/pods?")
        .iter()
        .filter(|c| !c.contains("watch=true"))
        .count();
    assert_eq!(
        lists_before, lists_after,
        "a resumable watch needs no relist"
    );
}

#[tokio::test]
async fn watch_410_gone_relists_and_swaps_the_index() {
    let cluster = Cluster::start(WatchSettings::default(), running_workers).await;
    cluster.synced().await;
    eventually("the watch", || {
        cluster.api().open_watches() == WATCHES_PER_SCOPE
    })
    .await;
    // While the watch is down, etcd compacts past its resourceVersion.
    cluster.api().drop_watches();
    cluster.api().compact();
    cluster.api().update_faults(|f| f.gone_on_next_watch = true);
    cluster.api().remove(apiserver::Kind::Pod, NS, "w-2");
    cluster.api().compact();
    cluster.api().put_pod_unannounced(NS, "w-5", U2);
    eventually("the relist", || {
        cluster.watches.index.get(NS, "w-5").is_some()
    })
    .await;
    assert!(
        cluster.watches.index.get(NS, "w-2").is_none(),
        "a pod deleted during the gap survived the relist"
    );
    assert!(cluster.watches.index.get(NS, "w-1").is_some());
    assert!(cluster.watches.is_synced());
    let lists = cluster
        .api()
        .calls_matching("GET /api/v1/pods?")
        .iter()
        .filter(|c| !c.contains("watch=true"))
        .count();
    assert!(
        lists >= 2,
        "no relist after 410: {:?}",
        cluster.api().calls()
    );
    let response = cluster.review("w-5", U2, None).await;
    assert_eq!(response["auditAnnotations"]["owner-source"], "cache");
}

#[tokio::test]
async fn namespace_and_selector_limit_the_watch_and_others_are_looked_up_live() {
    let settings = WatchSettings {
        namespaces: vec![NS.to_string()],
        selector: Some("app=worker".to_string()),
        ..WatchSettings::default()
    };
    let cluster = Cluster::start(settings, |api| {
        api.put(
            apiserver::Kind::Pod,
            NS,
            "w-1",
            U1,
            json!({"app": "worker"}),
            &[],
        );
        api.put(
            apiserver::Kind::Pod,
            NS,
            "w-2",
            U2,
            json!({"app": "other"}),
            &[],
        );
        api.put(
            apiserver::Kind::Pod,
            "elsewhere",
            "w-1",
            U1,
            json!({"app": "worker"}),
            &[],
        );
    })
    .await;
    cluster.synced().await;
    let lists = cluster
        .api()
        .calls_matching("GET /api/v1/namespaces/agents/pods?");
    assert!(
        lists.iter().any(|c| c.contains("labelSelector=app")),
        "{lists:?}"
    );
    assert!(
        cluster.api().calls_matching("GET /api/v1/pods?").is_empty(),
        "watched all namespaces"
    );
    assert_eq!(cluster.watches.index.len(), 1);
    assert_eq!(
        cluster.review("w-1", U1, None).await["auditAnnotations"]["owner-source"],
        "cache"
    );
    // Not selected: looked up live, and found.
    let response = cluster.review("w-2", U2, None).await;
    assert_eq!(response["allowed"], true);
    assert_eq!(response["auditAnnotations"]["owner-source"], "api");
}

/// `ownerguard serve` with KUBECONFIG pointing at the test API server, over
/// TLS: not ready until the pods are listed, then answers from the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_kubeconfig_answers_from_the_cluster_over_tls() {
    let server = FakeApi::start().await;
    running_workers(&server.api);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.kubeconfig(dir.path());
    let serve = common::Serve::start(
        dir.path(),
        &["--namespace", NS],
        &[("KUBECONFIG", &kubeconfig)],
    );
    let metrics_addr = serve.metrics_addr.clone();
    let deadline = Instant::now() + Duration::from_secs(15);
    while common::http_get(&metrics_addr, "/readyz").await.0 != 200 {
        assert!(Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let answer = common::send_over_tls(&serve.addr, &serve.ca(), U1).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert_eq!(
        answer["response"]["auditAnnotations"]["owner-source"],
        "cache"
    );
    assert!(
        server
            .api
            .calls_matching("GET /api/v1/namespaces/agents/pods/")
            .is_empty()
    );
    let (_, metrics) = common::http_get(&metrics_addr, "/metrics").await;
    assert!(
        metrics.contains("ownerguard_owner_cache_pods 2"),
        "{metrics}"
    );
    let answer = common::send_over_tls(&serve.addr, &serve.ca(), U2).await;
    assert_eq!(
        answer["response"]["status"]["code"], 403,
        "w-1 with w-2's uid: {answer}"
    );
    tokio::task::spawn_blocking(move || serve.terminate())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_large_list_is_read_page_by_page() {
    let cluster = Cluster::start(WatchSettings::default(), |api| {
        api.load_pods((0..1_234).map(|i| {
            (
                format!("team-{}", i % 7),
                format!("agent-{i:05}"),
                format!("uid-{i}"),
            )
        }));
    })
    .await;
    cluster.synced().await;
    assert_eq!(cluster.watches.index.len(), 1_234);
    let pages = cluster.api().calls_matching("GET /api/v1/pods?");
    assert!(
        pages.iter().any(|c| c.contains("continue=1000")),
        "not paged: {pages:?}"
    );
    assert_eq!(
        cluster
            .watches
            .index
            .get("team-3", "agent-00010")
            .map(|p| p.uid),
        Some("uid-10".to_string())
    );
}

// Issue 7, class 10: stale hits without bound.

#[tokio::test]
async fn a_silent_watch_is_not_trusted_a_lost_delete_is_caught_live() {
    let settings = WatchSettings {
        silence_limit: Duration::from_millis(400),
        ..WatchSettings::default()
    };
    let cluster = Cluster::start(settings, running_workers).await;
    cluster.synced().await;
    eventually("the watch", || {
        cluster.api().open_watches() == WATCHES_PER_SCOPE
    })
    .await;
    // The DELETED event is lost: the stream stays open and says nothing.
    cluster.api().update_faults(|f| f.mute_watches = true);
    cluster.api().remove(apiserver::Kind::Pod, NS, "w-1");
    assert!(
        cluster.watches.index.get(NS, "w-1").is_some(),
        "the cache still has it"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!cluster.watches.trusted(NS));
    let response = cluster.review("w-1", U1, None).await;
    assert_eq!(
        response["allowed"], false,
        "a gone owner was found in a stale cache"
    );
    assert_eq!(response["status"]["code"], 403);
    assert_eq!(cluster.gets().len(), 1, "the hit was checked live once");
    eventually("the health gauge", || {
        cluster
            .metrics
            .encode()
            .contains(r#"ownerguard_owner_watch_healthy{scope="all"} 0"#)
    })
    .await;
    // A bookmark is a sign of life: hits answer alone again.
    cluster.api().update_faults(|f| f.mute_watches = false);
    cluster.api().bookmark();
    eventually("trust again", || cluster.watches.trusted(NS)).await;
    cluster.api().clear_calls();
    let response = cluster.review("w-2", U2, None).await;
    assert_eq!(response["auditAnnotations"]["owner-source"], "cache");
    assert!(cluster.gets().is_empty());
}

// Issue 19: the bound holds on a stream that keeps speaking.

#[tokio::test]
async fn a_deletion_lost_on_a_live_stream_is_caught_once_the_entry_is_older_than_the_max_age() {
    let max_age = Duration::from_millis(800);
    let settings = WatchSettings {
        max_age,
        ..WatchSettings::default()
    };
    let cluster = Cluster::start(settings, running_workers).await;
    cluster.synced().await;
    eventually("the watch", || {
        cluster.api().open_watches() == WATCHES_PER_SCOPE
    })
    .await;
    cluster.api().clear_calls();
    let response = cluster.review("w-1", U1, None).await;
    assert_eq!(response["auditAnnotations"]["owner-source"], "cache");
    // w-1's deletion is lost; other pods' events keep the stream alive,
    // so the watch stays trusted throughout.
    cluster
        .api()
        .update_faults(|f| f.drop_events_of = Some("w-1".into()));
    cluster.api().remove(apiserver::Kind::Pod, NS, "w-1");
    let started = Instant::now();
    let mut churn = 0;
    while started.elapsed() < max_age + Duration::from_millis(400) {
        churn += 1;
        cluster.api().put_pod(NS, &format!("churn-{churn}"), U2);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(cluster.watches.trusted(NS), "the watch kept speaking");
    assert!(
        cluster.watches.index.get(NS, "w-1").is_some(),
        "the cache still has the gone owner"
    );
    assert!(cluster.gets().is_empty(), "{:?}", cluster.gets());
    let response = cluster.review("w-1", U1, None).await;
    assert_eq!(
        response["allowed"], false,
        "a gone owner answered from an entry older than --cache-max-age"
    );
    assert_eq!(response["status"]["code"], 403);
    assert_eq!(cluster.gets().len(), 1, "the old entry was read live");

    // A running owner read live is young again: one GET per max age.
    cluster.api().clear_calls();
    let response = cluster.review("w-2", U2, None).await;
    assert_eq!(response["auditAnnotations"]["owner-source"], "api");
    let response = cluster.review("w-2", U2, None).await;
    assert_eq!(response["auditAnnotations"]["owner-source"], "cache");
    assert_eq!(cluster.gets().len(), 1, "{:?}", cluster.gets());
}

#[tokio::test]
async fn an_old_entry_never_answers_alone_when_the_api_is_down() {
    let max_age = Duration::from_millis(500);
    let settings = WatchSettings {
        max_age,
        ..WatchSettings::default()
    };
    let cluster = Cluster::start(settings, running_workers).await;
    cluster.synced().await;
    let response = cluster.review("w-1", U1, None).await;
    assert_eq!(response["auditAnnotations"]["owner-source"], "cache");
    cluster.api().update_faults(|f| f.down = true);
    tokio::time::sleep(max_age + Duration::from_millis(200)).await;
    let response = cluster.review("w-1", U1, None).await;
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["code"], 503, "{response}");
}

#[tokio::test]
async fn a_failing_watch_is_not_trusted_until_it_recovers() {
    let cluster = Cluster::start(WatchSettings::default(), running_workers).await;
    cluster.synced().await;
    eventually("the watch", || {
        cluster.api().open_watches() == WATCHES_PER_SCOPE
    })
    .await;
    cluster.api().update_faults(|f| f.watch_fails = true);
    cluster.api().drop_watches();
    eventually("the failure to be seen", || !cluster.watches.trusted(NS)).await;
    // Replaced while the watch is down: same name, another uid.
    cluster.api().remove(apiserver::Kind::Pod, NS, "w-1");
    cluster.api().put_pod(NS, "w-1", U2);
    let response = cluster.review("w-1", U1, None).await;
    assert_eq!(
        response["allowed"], false,
        "a replaced owner was found in a failed cache"
    );
    assert!(
        cluster
            .metrics
            .encode()
            .contains(r#"ownerguard_owner_watch_failures_total{scope="all"}"#),
        "{}",
        cluster.metrics.encode()
    );
    // The watch resumes, replays what it missed, and is trusted again.
    cluster.api().update_faults(|f| f.watch_fails = false);
    eventually("the replay", || {
        cluster
            .watches
            .index
            .get(NS, "w-1")
            .is_some_and(|p| p.uid == U2)
    })
    .await;
    // A quiet watch (the finished ones replay nothing here) shows life by
    // the API server's bookmarks, about one a minute on a real one.
    eventually("trust again", || {
        cluster.api().bookmark();
        cluster.watches.trusted(NS)
    })
    .await;
}

// Classes 2 and 11: nothing invalid reaches an API path.

#[tokio::test]
async fn names_and_namespaces_that_are_not_names_never_reach_the_api() {
    let cluster = Cluster::start(WatchSettings::default(), running_workers).await;
    cluster.synced().await;
    cluster.api().clear_calls();
    for name in ["w-1?x=1", "w-1/status", "w-1#", "w-1%2Fstatus"] {
        let metadata = json!({"name": "a", "namespace": NS,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": U1}]});
        let response = cluster.review_metadata(NS, metadata, None).await;
        assert_eq!(response["status"]["code"], 400, "{name}: {response}");
    }
    let namespace = "elsewhere/pods/w-1?x=";
    let metadata = json!({"name": "a", "namespace": namespace,
        "labels": {"ownerguard.io/owner-pod": "w-1", "ownerguard.io/owner-uid": U1}});
    let response = cluster.review_metadata(namespace, metadata, None).await;
    assert_eq!(response["status"]["code"], 400, "{response}");
    assert!(
        cluster.api().calls().is_empty() || cluster.gets().is_empty(),
        "{:?}",
        cluster.api().calls()
    );
    assert!(cluster.api().calls_matching("/pods/w-1").is_empty());
}

// Class 12: errors are told in a sentence.

#[tokio::test]
async fn an_api_error_is_logged_and_answered_with_a_sentence() {
    let cluster = Cluster::start(WatchSettings::default(), running_workers).await;
    cluster.synced().await;
    cluster
        .api()
        .update_faults(|f| f.throttled = Some(Some(60)));
    let response = cluster.review("w-new", U1, None).await;
    assert_eq!(response["status"]["code"], 503);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("(the API server answered with an error)"),
        "{message}"
    );
    assert!(!message.contains("Status"), "{message}");
    assert!(message.len() < 300, "{message}");
}

// Class 13: retries bounded, Retry-After honoured.

#[tokio::test]
async fn a_429_without_retry_after_is_retried_once() {
    let cluster = Cluster::start(WatchSettings::default(), running_workers).await;
    cluster.synced().await;
    cluster.api().update_faults(|f| f.throttled = Some(None));
    let response = cluster
        .review("w-new", U1, Some(Duration::from_secs(10)))
        .await;
    assert_eq!(response["status"]["code"], 503);
    assert_eq!(cluster.gets().len(), 2, "{:?}", cluster.gets());
}

#[tokio::test]
async fn retry_after_is_honoured_when_it_fits_the_budget() {
    let cluster = Cluster::start(WatchSettings::default(), running_workers).await;
    cluster.synced().await;
    cluster.api().update_faults(|f| f.throttled = Some(Some(1)));
    let (api, started) = (cluster.api().clone(), Instant::now());
    // The API server recovers before the retry is due.
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        api.update_faults(|f| f.throttled = None);
    });
    cluster.api().put_pod_unannounced(NS, "w-new", U1);
    let response = cluster
        .review("w-new", U1, Some(Duration::from_secs(10)))
        .await;
    assert_eq!(response["allowed"], true, "{response}");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "retried before Retry-After"
    );
    assert_eq!(cluster.gets().len(), 2);
    // A Retry-After beyond the budget is not waited for.
    cluster.api().clear_calls();
    cluster
        .api()
        .update_faults(|f| f.throttled = Some(Some(30)));
    let started = Instant::now();
    let response = cluster
        .review("w-other", U1, Some(Duration::from_secs(10)))
        .await;
    assert_eq!(response["status"]["code"], 503);
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(cluster.gets().len(), 1);
}

/// A Retry-After of more seconds than the clock can add (the header is any
/// number the server writes) is beyond every budget: answered at once, not
/// a panic in the review's task.
#[tokio::test]
async fn a_retry_after_past_the_clock_is_not_waited_for() {
    let cluster = Cluster::start(WatchSettings::default(), running_workers).await;
    cluster.synced().await;
    cluster
        .api()
        .update_faults(|f| f.throttled = Some(Some(10_000_000_000_000_000_000)));
    let started = Instant::now();
    let response = cluster
        .review("w-new", U1, Some(Duration::from_secs(10)))
        .await;
    assert_eq!(response["status"]["code"], 503, "{response}");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(cluster.gets().len(), 1);
}

// Class 15: one create never becomes thousands of API calls.

#[tokio::test]
async fn thousands_of_pod_references_cost_no_api_call() {
    let cluster = Cluster::start(WatchSettings::default(), running_workers).await;
    cluster.synced().await;
    cluster.api().clear_calls();
    let references: Vec<Value> = (0..2_000)
        .map(|i| json!({"apiVersion": "v1", "kind": "Pod", "name": format!("w-{i}"), "uid": format!("u-{i}")}))
        .collect();
    let metadata = json!({"name": "big", "namespace": NS, "ownerReferences": references});
    let response = cluster.review_metadata(NS, metadata, None).await;
    assert_eq!(response["status"]["code"], 400, "{response}");
    assert!(cluster.gets().is_empty(), "{} GETs", cluster.gets().len());
}

#[tokio::test]
async fn live_lookups_are_capped_in_concurrency_across_reviews() {
    let limits = LookupLimits {
        concurrency: 2,
        rate_per_second: 1_000,
    };
    let cluster = Cluster::start_with(WatchSettings::default(), limits, running_workers).await;
    cluster.synced().await;
    cluster
        .api()
        .update_faults(|f| f.get_delay = Duration::from_millis(200));
    let reviews = (0..8).map(|i| {
        let cluster = &cluster;
        async move {
            cluster
                .review(&format!("miss-{i}"), U1, Some(Duration::from_secs(10)))
                .await
        }
    });
    let responses = futures::future::join_all(reviews).await;
    assert!(
        responses.iter().all(|r| r["status"]["code"] == 403),
        "{responses:?}"
    );
    assert_eq!(cluster.api().max_gets_in_flight(), 2);
}

#[tokio::test]
async fn live_lookups_are_capped_in_rate_and_the_excess_fails_fast() {
    let limits = LookupLimits {
        concurrency: 100,
        rate_per_second: 3,
    };
    let cluster = Cluster::start_with(WatchSettings::default(), limits, running_workers).await;
    cluster.synced().await;
    cluster.api().clear_calls();
    let started = Instant::now();
    // The API server gives each call 1 s: 750 ms for the lookup.
    let reviews = (0..10).map(|i| {
        let cluster = &cluster;
        async move {
            cluster
                .review(&format!("miss-{i}"), U1, Some(Duration::from_secs(1)))
                .await
        }
    });
    let responses = futures::future::join_all(reviews).await;
    assert!(started.elapsed() < Duration::from_secs(2));
    let throttled = responses
        .iter()
        .filter(|r| r["status"]["code"] == 503)
        .count();
    let gets = cluster.gets().len();
    assert!(gets <= 6, "{gets} GETs at 3 per second in under a second");
    assert_eq!(gets + throttled, 10, "{responses:?}");
    assert!(
        cluster
            .metrics
            .encode()
            .contains(r#"ownerguard_owner_lookups_total{source="api",result="throttled"}"#)
    );
}

// SPEC §3 rule 11: a finished owner is no owner, whether the watch of
// finished pods, its first list or only a live GET tells it.

fn finished_message(response: &Value) -> &str {
    let message = response["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("has finished"), "{response}");
    message
}

#[tokio::test]
async fn rule_11_a_pod_that_finishes_arrives_as_added_and_is_denied_from_the_cache() {
    let cluster = Cluster::start(WatchSettings::default(), running_workers).await;
    cluster.synced().await;
    eventually("the watches", || {
        cluster.api().open_watches() == WATCHES_PER_SCOPE
    })
    .await;
    // The field-selected watches of finished pods, metadata only.
    let finished_watches = cluster.api().calls_matching("fieldSelector=status.phase");
    for phase in ["Succeeded", "Failed"] {
        assert!(
            finished_watches
                .iter()
                .any(|c| c.contains(&format!("status.phase%3D{phase}"))
                    || c.contains(&format!("status.phase={phase}"))),
            "no watch of {phase} pods: {finished_watches:?}"
        );
    }
    let mut changes = cluster.watches.finished.subscribe();
    assert_eq!(cluster.review("w-1", U1, None).await["allowed"], true);
    // The kubelet reports the worker failed (evicted, a Job's failed try).
    cluster.api().set_pod_phase(NS, "w-1", "Failed");
    eventually("the ADDED event of the Failed watch", || {
        cluster.watches.finished.phase_of(NS, "w-1", U1) == Some(Finished::Failed)
    })
    .await;
    match changes.try_recv() {
        Ok(FinishedChange::Finished(pod)) => {
            assert_eq!((pod.name.as_str(), pod.phase), ("w-1", Finished::Failed));
        }
        other => panic!("the subscriber heard {other:?}"),
    }
    cluster.api().clear_calls();
    let response = cluster.review("w-1", U1, None).await;
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["code"], 403);
    assert!(finished_message(&response).contains("(phase Failed)"));
    assert!(cluster.gets().is_empty(), "answered from the cache");
    let metrics = cluster.metrics.encode();
    assert!(
        metrics.contains(r#"ownerguard_owner_lookups_total{source="cache",result="finished"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains("ownerguard_owner_cache_finished_pods 1"),
        "{metrics}"
    );
    // Another worker is not affected.
    assert_eq!(cluster.review("w-2", U2, None).await["allowed"], true);
}

#[tokio::test]
async fn rule_11_a_pod_finished_before_ownerguard_started_is_known_from_the_first_list() {
    let cluster = Cluster::start(WatchSettings::default(), |api| {
        running_workers(api);
        api.put_pod_in_phase(NS, "w-done", U1, "Succeeded");
    })
    .await;
    cluster.synced().await;
    assert_eq!(
        cluster.watches.finished.phase_of(NS, "w-done", U1),
        Some(Finished::Succeeded)
    );
    assert_eq!(cluster.watches.finished.len(), 1);
    let response = cluster.review("w-done", U1, None).await;
    assert_eq!(response["status"]["code"], 403, "{response}");
    assert!(finished_message(&response).contains("(phase Succeeded)"));
    assert!(cluster.gets().is_empty());
}

#[tokio::test]
async fn rule_11_a_finished_pod_only_the_live_get_sees_is_denied() {
    let cluster = Cluster::start(WatchSettings::default(), running_workers).await;
    cluster.synced().await;
    // Not in the cache: the GET reads the whole pod, phase included (a
    // metadata-only GET would carry no status and answer "running").
    cluster
        .api()
        .put_pod_unannounced_in_phase(NS, "w-evicted", U1, "Failed");
    let response = cluster.review("w-evicted", U1, None).await;
    assert_eq!(response["status"]["code"], 403, "{response}");
    assert!(finished_message(&response).contains("(phase Failed)"));
    assert_eq!(
        cluster.gets(),
        vec!["GET /api/v1/namespaces/agents/pods/w-evicted".to_string()]
    );
    assert!(
        cluster
            .metrics
            .encode()
            .contains(r#"ownerguard_owner_lookups_total{source="api",result="finished"} 1"#)
    );
    // A running pod found by the same GET is allowed.
    cluster.api().put_pod_unannounced(NS, "w-new", U2);
    let response = cluster.review("w-new", U2, None).await;
    assert_eq!(response["allowed"], true, "{response}");
}

#[tokio::test]
async fn rule_11_a_pod_leaving_the_finished_selection_is_deleted_from_the_set() {
    let cluster = Cluster::start(WatchSettings::default(), |api| {
        running_workers(api);
        api.put_pod_in_phase(NS, "w-done", U1, "Succeeded");
        api.put_pod_in_phase(NS, "w-odd", U2, "Failed");
    })
    .await;
    cluster.synced().await;
    assert_eq!(cluster.watches.finished.len(), 2);
    let mut changes = cluster.watches.finished.subscribe();
    // Deleted: DELETED on the watch of every pod and on the Succeeded one.
    cluster.api().remove(apiserver::Kind::Pod, NS, "w-done");
    // A phase that leaves the selection (the test server allows what the
    // real one's validation refuses, to pin the DELETED it would send).
    cluster.api().set_pod_phase(NS, "w-odd", "Running");
    eventually("the DELETED events", || cluster.watches.finished.is_empty()).await;
    let mut gone = Vec::new();
    while let Ok(change) = changes.try_recv() {
        if let FinishedChange::Gone(pod) = change {
            gone.push((pod.name, pod.phase));
        }
    }
    gone.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        gone,
        vec![
            ("w-done".to_string(), Finished::Succeeded),
            ("w-odd".to_string(), Finished::Failed)
        ]
    );
    eventually("the gauge", || {
        cluster
            .metrics
            .encode()
            .contains("ownerguard_owner_cache_finished_pods 0")
    })
    .await;
    assert_eq!(cluster.review("w-odd", U2, None).await["allowed"], true);
}

#[tokio::test]
async fn a_relist_that_fails_midway_tells_the_subscribers_what_it_changed() {
    // More finished pods than a page: the list of the Failed phase swaps in
    // the namespace its first page has passed, then fails, again and again.
    let cluster = Cluster::start(WatchSettings::default(), |api| {
        running_workers(api);
        api.put_pod_in_phase("aa-first", "evicted", "uid-first", "Failed");
        for i in 0..501 {
            api.put_pod_in_phase(
                NS,
                &format!("evicted-{i:03}"),
                &format!("uid-evicted-{i}"),
                "Failed",
            );
        }
        api.put_pod_in_phase("zz-later", "evicted", "uid-later", "Failed");
        api.update_faults(|f| f.continue_fails = true);
    })
    .await;
    let mut changes = cluster.watches.finished.subscribe();
    eventually("the namespace the first page passed swapped in", || {
        cluster
            .watches
            .finished
            .phase_of("aa-first", "evicted", "uid-first")
            .is_some()
    })
    .await;
    // The set changed without a Finished per pod: the subscriber is told to
    // read the snapshot, though no list has finished.
    let told = async {
        loop {
            match changes.recv().await {
                Ok(FinishedChange::Relisted {
                    phase: Finished::Failed,
                    ..
                }) => break,
                Ok(_) => {}
                Err(error) => panic!("{error}"),
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(20), told)
        .await
        .expect("a Relisted change for the Failed phase");
    assert!(
        cluster
            .watches
            .finished
            .phase_of("zz-later", "evicted", "uid-later")
            .is_none(),
        "the namespace after the failed page is not there"
    );
    // Nor the one the failed page would have finished: never half of it.
    assert_eq!(cluster.watches.finished.len(), 1);
}

#[tokio::test]
async fn rule_11_a_failing_watch_of_finished_pods_sends_hits_live() {
    let cluster = Cluster::start(WatchSettings::default(), running_workers).await;
    cluster.synced().await;
    eventually("the watches", || {
        cluster.api().open_watches() == WATCHES_PER_SCOPE
    })
    .await;
    cluster
        .api()
        .update_faults(|f| f.field_selectors_fail = true);
    cluster.api().drop_watches();
    eventually("the failure to be seen", || !cluster.watches.trusted(NS)).await;
    // The watch of every pod is back; only the finished ones fail.
    eventually("the pod watch back", || cluster.api().open_watches() == 1).await;
    // The worker fails while its phase cannot be watched.
    cluster.api().set_pod_phase(NS, "w-1", "Failed");
    cluster.api().clear_calls();
    let response = cluster.review("w-1", U1, None).await;
    assert_eq!(
        response["allowed"], false,
        "a finished owner was found running in a cache whose finished watch failed"
    );
    assert!(finished_message(&response).contains("(phase Failed)"));
    assert_eq!(cluster.gets().len(), 1, "the hit was checked live once");
    assert!(
        cluster
            .metrics
            .encode()
            .contains(r#"ownerguard_owner_watch_failures_total{scope="all"}"#)
    );
    // The finished watches resume, replay the change as ADDED, and the
    // cache is trusted again.
    cluster
        .api()
        .update_faults(|f| f.field_selectors_fail = false);
    eventually("the replay", || {
        cluster.watches.finished.phase_of(NS, "w-1", U1) == Some(Finished::Failed)
    })
    .await;
    eventually("trust again", || {
        cluster.api().bookmark();
        cluster.watches.trusted(NS)
    })
    .await;
    cluster.api().clear_calls();
    let response = cluster.review("w-1", U1, None).await;
    assert_eq!(response["status"]["code"], 403);
    assert!(cluster.gets().is_empty(), "answered from the cache again");
}

#[tokio::test]
async fn readiness_waits_for_the_lists_of_finished_pods_too() {
    let server = FakeApi::start().await;
    running_workers(&server.api);
    server.api.set_faults(Faults {
        field_selectors_fail: true,
        ..Faults::default()
    });
    let client = server.serve_client();
    let watches = Arc::new(Watches::spawn(
        client.clone(),
        &WatchSettings::default(),
        Arc::new(Metrics::default()),
    ));
    let lookup = ClusterLookup::new(
        client,
        watches.clone(),
        LookupLimits::default(),
        Arc::new(Metrics::default()),
    );
    eventually("the list of every pod", || watches.index.len() == 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !lookup.is_ready(),
        "ready before the finished pods were listed: a finished owner would pass as running"
    );
    server.api.set_faults(Faults::default());
    eventually("readiness once every list succeeded", || lookup.is_ready()).await;
}

// A burst of creates naming one worker whose cache entry has just grown
// older than --cache-max-age (what a Job of 500 pods does, 5 minutes into
// its worker's life): one live check stands for all of them, none is
// refused for the live lookups' limit.
#[tokio::test]
async fn a_burst_on_an_old_entry_sends_one_get_and_is_refused_nothing() {
    let max_age = Duration::from_millis(300);
    let settings = WatchSettings {
        max_age,
        ..WatchSettings::default()
    };
    let limits = LookupLimits {
        concurrency: 2,
        rate_per_second: 2,
    };
    let cluster = Cluster::start_with(settings, limits, running_workers).await;
    cluster.synced().await;
    eventually("the watch", || {
        cluster.api().open_watches() == WATCHES_PER_SCOPE
    })
    .await;
    tokio::time::sleep(max_age + Duration::from_millis(200)).await;
    assert!(cluster.watches.trusted(NS));
    cluster.api().clear_calls();
    cluster
        .api()
        .update_faults(|f| f.get_delay = Duration::from_millis(200));
    let reviews = (0..100).map(|_| {
        let cluster = &cluster;
        async move {
            cluster
                .review("w-1", U1, Some(Duration::from_secs(1)))
                .await
        }
    });
    let responses = futures::future::join_all(reviews).await;
    for response in &responses {
        assert_eq!(response["allowed"], true, "{response}");
    }
    assert_eq!(cluster.gets().len(), 1, "{:?}", cluster.gets());
}

// The same burst on an owner gone without the watch telling (its deletion
// lost): the reviews that waited for the one live check do not answer
// from the entry it refuted; none is allowed.
#[tokio::test]
async fn a_burst_on_an_old_entry_of_a_gone_owner_allows_nothing() {
    let max_age = Duration::from_millis(300);
    let settings = WatchSettings {
        max_age,
        ..WatchSettings::default()
    };
    let limits = LookupLimits {
        concurrency: 4,
        rate_per_second: 1_000,
    };
    let cluster = Cluster::start_with(settings, limits, running_workers).await;
    cluster.synced().await;
    eventually("the watch", || {
        cluster.api().open_watches() == WATCHES_PER_SCOPE
    })
    .await;
    cluster
        .api()
        .update_faults(|f| f.drop_events_of = Some("w-1".into()));
    cluster.api().remove(apiserver::Kind::Pod, NS, "w-1");
    // Other pods' events keep the watch trusted meanwhile.
    for churn in 0..5 {
        cluster.api().put_pod(NS, &format!("churn-{churn}"), U2);
        tokio::time::sleep(max_age / 2).await;
    }
    assert!(cluster.watches.trusted(NS));
    cluster
        .api()
        .update_faults(|f| f.get_delay = Duration::from_millis(200));
    for _ in 0..3 {
        let reviews = (0..30).map(|_| {
            let cluster = &cluster;
            async move {
                cluster
                    .review("w-1", U1, Some(Duration::from_secs(2)))
                    .await
            }
        });
        for response in futures::future::join_all(reviews).await {
            assert_eq!(response["allowed"], false, "{response}");
        }
    }
}
