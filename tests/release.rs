//! `release` against the loopback API server: only what the owner's uid
//! owns goes, Jobs with their pods; a 403 on Jobs is skipped; it waits for
//! slow pods and gives up at its timeout.

mod apiserver;

use std::time::Duration;

use apiserver::{FakeApi, Faults, Kind, Running};
use ownerguard::commands::release::{Owner, ReleaseError, Released, release};
use serde_json::json;

const NS: &str = "agents";
const OWNER: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000001";
const OTHER: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000002";

fn owner() -> Owner {
    Owner {
        namespace: NS.into(),
        name: "w-1".into(),
        uid: OWNER.into(),
    }
}

/// A namespace shared by two workers and some objects of nobody.
async fn mixed_namespace() -> Running {
    let server = FakeApi::start().await;
    let api = &server.api;
    api.put_pod(NS, "w-1", OWNER);
    api.put_pod(NS, "w-2", OTHER);
    api.put(Kind::Pod, NS, "agent-a", "p-a", json!({}), &[OWNER]);
    api.put(Kind::Pod, NS, "agent-b", "p-b", json!({}), &[OWNER]);
    api.put(Kind::Pod, NS, "agent-other", "p-o", json!({}), &[OTHER]);
    api.put(Kind::Pod, NS, "web", "p-w", json!({}), &[]);
    api.put(Kind::Job, NS, "step-1", "j-1", json!({}), &[OWNER]);
    api.put_job_pod(NS, "step-1-abcde", "p-j1", "step-1", "j-1");
    api.put(Kind::Job, NS, "step-other", "j-o", json!({}), &[OTHER]);
    api.put_job_pod(NS, "step-other-fghij", "p-jo", "step-other", "j-o");
    api.put(Kind::ConfigMap, NS, "prompt-1", "c-1", json!({}), &[OWNER]);
    api.put(
        Kind::ConfigMap,
        NS,
        "prompt-other",
        "c-o",
        json!({}),
        &[OTHER],
    );
    api.put(Kind::ConfigMap, NS, "settings", "c-s", json!({}), &[]);
    // Another namespace with an object naming the same uid: not ours.
    api.put(
        Kind::Pod,
        "elsewhere",
        "agent-x",
        "p-x",
        json!({}),
        &[OWNER],
    );
    server
}

fn deletes(server: &Running) -> Vec<String> {
    server.api.calls_matching("DELETE ")
}

#[tokio::test]
async fn only_what_the_owner_uid_owns_is_released_jobs_with_their_pods() {
    let server = mixed_namespace().await;
    let released = release(server.client(), &owner(), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(
        released,
        Released {
            pods: 3,
            jobs: 1,
            config_maps: 1
        }
    );
    let api = &server.api;
    for gone in [
        (Kind::Pod, "agent-a"),
        (Kind::Pod, "agent-b"),
        (Kind::Pod, "step-1-abcde"),
        (Kind::Job, "step-1"),
        (Kind::ConfigMap, "prompt-1"),
    ] {
        assert!(!api.exists(gone.0, NS, gone.1), "{gone:?} still there");
    }
    for kept in [
        (Kind::Pod, "w-1"),
        (Kind::Pod, "w-2"),
        (Kind::Pod, "agent-other"),
        (Kind::Pod, "web"),
        (Kind::Job, "step-other"),
        (Kind::Pod, "step-other-fghij"),
        (Kind::ConfigMap, "prompt-other"),
        (Kind::ConfigMap, "settings"),
    ] {
        assert!(api.exists(kept.0, NS, kept.1), "{kept:?} was deleted");
    }
    assert!(api.exists(Kind::Pod, "elsewhere", "agent-x"));
    let deletes = deletes(&server);
    assert_eq!(deletes.len(), 5, "{deletes:#?}");
    // The Job goes first, so its controller does not replace its pods.
    assert!(
        deletes[0].starts_with("DELETE /apis/batch/v1/namespaces/agents/jobs/step-1?"),
        "{deletes:#?}"
    );
    for delete in &deletes {
        assert!(
            delete.contains(r#""propagationPolicy":"Background""#),
            "{delete}"
        );
        assert!(
            delete.contains(r#""preconditions":{"uid":"#),
            "no uid precondition: {delete}"
        );
    }
}

#[tokio::test]
async fn forbidden_jobs_are_skipped_and_the_rest_released() {
    let server = mixed_namespace().await;
    server.api.set_faults(Faults {
        jobs_forbidden: true,
        ..Faults::default()
    });
    let released = release(server.client(), &owner(), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(
        released,
        Released {
            pods: 2,
            jobs: 0,
            config_maps: 1
        }
    );
    assert!(server.api.exists(Kind::Job, NS, "step-1"));
    assert!(
        server.api.exists(Kind::Pod, NS, "step-1-abcde"),
        "a Job's pod went without its Job"
    );
}

#[tokio::test]
async fn release_waits_for_pods_slow_to_disappear() {
    let server = mixed_namespace().await;
    server.api.set_faults(Faults {
        pod_linger: Duration::from_millis(700),
        ..Faults::default()
    });
    release(server.client(), &owner(), Duration::from_secs(10))
        .await
        .unwrap();
    assert!(
        !server.api.exists(Kind::Pod, NS, "agent-a"),
        "returned before the pods were gone"
    );
    let lists = server
        .api
        .calls_matching("GET /api/v1/namespaces/agents/pods?");
    assert!(lists.len() >= 2, "no polling: {lists:?}");
}

#[tokio::test]
async fn release_gives_up_at_its_timeout_naming_the_pods_left() {
    let server = mixed_namespace().await;
    server.api.set_faults(Faults {
        pods_never_go: true,
        ..Faults::default()
    });
    let error = release(server.client(), &owner(), Duration::from_millis(600))
        .await
        .unwrap_err();
    match error {
        ReleaseError::Incomplete { left, .. } => {
            assert_eq!(left.len(), 3, "{left:?}");
            assert!(
                left.iter()
                    .any(|l| l.starts_with("Pod/agent-a: still there"))
            );
        }
        other => panic!("{other}"),
    }
}

#[tokio::test]
async fn a_reference_with_the_owners_uid_under_another_kind_or_name_is_not_the_owners() {
    let server = FakeApi::start().await;
    let api = &server.api;
    api.put_pod(NS, "w-1", OWNER);
    api.put(Kind::Pod, NS, "agent-a", "p-a", json!({}), &[OWNER]);
    let reference = |api_version: &str, kind: &str, name: &str| json!([{"apiVersion": api_version, "kind": kind, "name": name, "uid": OWNER}]);
    api.put_with_references(
        Kind::Pod,
        NS,
        "lower-kind",
        "p-l",
        reference("v1", "pod", "w-1"),
    );
    api.put_with_references(
        Kind::Pod,
        NS,
        "other-name",
        "p-n",
        reference("v1", "Pod", "w-2"),
    );
    api.put_with_references(
        Kind::ConfigMap,
        NS,
        "other-group",
        "c-g",
        reference("apps/v1", "Pod", "w-1"),
    );
    api.put_with_references(
        Kind::Job,
        NS,
        "other-kind",
        "j-k",
        reference("v1", "ConfigMap", "w-1"),
    );
    let released = release(server.client(), &owner(), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(
        released,
        Released {
            pods: 1,
            jobs: 0,
            config_maps: 0
        }
    );
    for (kind, name) in [
        (Kind::Pod, "lower-kind"),
        (Kind::Pod, "other-name"),
        (Kind::ConfigMap, "other-group"),
        (Kind::Job, "other-kind"),
    ] {
        assert!(server.api.exists(kind, NS, name), "{name} was released");
    }
}

#[tokio::test]
async fn a_403_on_deleting_jobs_skips_them_and_releases_the_rest() {
    let server = mixed_namespace().await;
    server.api.set_faults(Faults {
        delete_fails: Some((Kind::Job, None, 403)),
        ..Faults::default()
    });
    let released = release(server.client(), &owner(), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(
        released,
        Released {
            pods: 2,
            jobs: 0,
            config_maps: 1
        }
    );
    assert!(server.api.exists(Kind::Job, NS, "step-1"));
    assert!(
        server.api.exists(Kind::Pod, NS, "step-1-abcde"),
        "the pod of a Job that stays would only be replaced"
    );
}

#[tokio::test]
async fn a_failed_delete_does_not_stop_the_others_and_is_named() {
    let server = mixed_namespace().await;
    server.api.set_faults(Faults {
        delete_fails: Some((Kind::Pod, Some("agent-a".into()), 500)),
        ..Faults::default()
    });
    let error = release(server.client(), &owner(), Duration::from_secs(10))
        .await
        .unwrap_err();
    let ReleaseError::Incomplete { left, .. } = &error else {
        panic!("{error}");
    };
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].starts_with("Pod/agent-a: 500"), "{left:?}");
    for gone in ["agent-b", "step-1-abcde"] {
        assert!(!server.api.exists(Kind::Pod, NS, gone), "{gone} stayed");
    }
    assert!(!server.api.exists(Kind::Job, NS, "step-1"));
    assert!(!server.api.exists(Kind::ConfigMap, NS, "prompt-1"));
    assert!(server.api.exists(Kind::Pod, NS, "agent-a"));
    assert!(error.to_string().contains("agent-a"), "{error}");
}

#[tokio::test]
async fn empty_owner_is_refused_before_any_request() {
    let server = mixed_namespace().await;
    server.api.clear_calls();
    for owner in [
        Owner {
            name: " ".into(),
            ..owner()
        },
        Owner {
            uid: String::new(),
            ..owner()
        },
    ] {
        let error = release(server.client(), &owner, Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(
            matches!(error, ReleaseError::InvalidOwner { .. }),
            "{error}"
        );
    }
    assert!(server.api.calls().is_empty(), "{:?}", server.api.calls());
}

#[tokio::test]
async fn owner_missing_or_with_another_uid_deletes_nothing() {
    let server = mixed_namespace().await;
    let error = release(
        server.client(),
        &Owner {
            name: "w-9".into(),
            ..owner()
        },
        Duration::from_secs(1),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(error, ReleaseError::OwnerNotFound { .. }),
        "{error}"
    );
    let error = release(
        server.client(),
        &Owner {
            uid: OTHER.into(),
            ..owner()
        },
        Duration::from_secs(1),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(error, ReleaseError::OwnerUidMismatch { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("downward API metadata.uid"));
    assert!(deletes(&server).is_empty());
}

#[test]
fn release_command_refuses_an_empty_uid_and_exits_1() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ownerguard"))
        .args([
            "release",
            "--namespace",
            NS,
            "--owner-pod",
            "w-1",
            "--owner-uid",
            "",
        ])
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--owner-uid is empty"));
}

#[tokio::test]
async fn release_command_works_with_kubeconfig() {
    let server = mixed_namespace().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.kubeconfig(dir.path());
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_ownerguard"))
        .args([
            "release",
            "--namespace",
            NS,
            "--owner-pod",
            "w-1",
            "--owner-uid",
            OWNER,
            "--timeout",
            "10s",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .await
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        String::from_utf8_lossy(&output.stdout)
            .contains("released 3 pod(s), 1 Job(s) and 1 ConfigMap(s)")
    );
}

#[tokio::test]
async fn an_object_recreated_under_the_same_name_is_not_deleted() {
    let server = FakeApi::start().await;
    server.api.put_pod(NS, "w-1", OWNER);
    server.api.put(
        Kind::ConfigMap,
        NS,
        "prompt-1",
        "c-old",
        json!({}),
        &[OWNER],
    );
    // Listed as owned, then replaced by someone else's before the delete.
    server.api.set_faults(Faults {
        replace_after_list: Some((Kind::ConfigMap, NS.into(), "prompt-1".into())),
        ..Faults::default()
    });
    let released = release(server.client(), &owner(), Duration::from_secs(5))
        .await
        .unwrap();
    let delete = deletes(&server);
    assert_eq!(delete.len(), 1, "{delete:?}");
    assert!(delete[0].contains(r#""uid":"c-old""#), "{delete:?}");
    assert_eq!(released.config_maps, 0, "a refused delete was counted");
    assert!(
        server.api.exists(Kind::ConfigMap, NS, "prompt-1"),
        "the newcomer was deleted"
    );
}

#[tokio::test]
async fn an_object_another_running_pod_also_owns_stays_with_it() {
    // The collector deletes a dependent only once none of its owners is
    // left: one with w-2's reference beside w-1's lives on with w-2, and
    // release must not take it away from w-2 (the reaper releases finished
    // pods while their co-owners run).
    let server = FakeApi::start().await;
    let api = &server.api;
    api.put_pod(NS, "w-1", OWNER);
    api.put_pod(NS, "w-2", OTHER);
    let labels = json!({"ownerguard.io/owner-pod": "w-2", "ownerguard.io/owner-uid": OTHER});
    api.put(
        Kind::ConfigMap,
        NS,
        "shared",
        "c-s",
        labels,
        &[OTHER, OWNER],
    );
    api.put(
        Kind::Pod,
        NS,
        "shared-agent",
        "p-s",
        json!({}),
        &[OWNER, OTHER],
    );
    api.put(
        Kind::Job,
        NS,
        "shared-step",
        "j-s",
        json!({}),
        &[OWNER, OTHER],
    );
    api.put(Kind::Pod, NS, "mine", "p-m", json!({}), &[OWNER]);
    let released = release(server.client(), &owner(), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(
        released,
        Released {
            pods: 1,
            jobs: 0,
            config_maps: 0
        }
    );
    for (kind, name) in [
        (Kind::ConfigMap, "shared"),
        (Kind::Pod, "shared-agent"),
        (Kind::Job, "shared-step"),
    ] {
        assert!(server.api.exists(kind, NS, name), "{name} was released");
    }
    let deleted = deletes(&server);
    assert_eq!(deleted.len(), 1, "{deleted:?}");
    assert!(
        deleted[0].starts_with("DELETE /api/v1/namespaces/agents/pods/mine?"),
        "{deleted:?}"
    );
}

#[tokio::test]
async fn an_object_already_terminating_is_waited_for_not_deleted_again() {
    let server = FakeApi::start().await;
    let api = &server.api;
    api.put_pod(NS, "w-1", OWNER);
    api.put(Kind::Pod, NS, "agent-a", "p-a", json!({}), &[OWNER]);
    api.terminate_pod(NS, "agent-a");
    server.api.set_faults(Faults {
        pods_never_go: true,
        ..Faults::default()
    });
    let error = release(server.client(), &owner(), Duration::from_millis(600))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("Pod/agent-a: still there"),
        "{error}"
    );
    assert!(deletes(&server).is_empty(), "{:?}", deletes(&server));
}

#[tokio::test]
async fn an_object_shared_with_a_pod_that_owns_nothing_any_more_is_released() {
    // Beside the owner, a finished pod, one being deleted, or one gone:
    // none keeps the object once the owner is released, so it goes (the
    // reaper releasing the second of two finished co-owners needs this).
    let server = FakeApi::start().await;
    let api = &server.api;
    api.put_pod(NS, "w-1", OWNER);
    const DONE: &str = "6f1f3d4e-0c1a-4b7e-9d2a-0000000000d0";
    const GOING: &str = "6f1f3d4e-0c1a-4b7e-9d2a-0000000000d1";
    const GONE: &str = "6f1f3d4e-0c1a-4b7e-9d2a-0000000000d2";
    api.put_pod_in_phase(NS, "w-done", DONE, "Succeeded");
    api.put_pod(NS, "w-going", GOING);
    api.terminate_pod(NS, "w-going");
    api.put(
        Kind::ConfigMap,
        NS,
        "with-finished",
        "c-1",
        json!({}),
        &[OWNER, DONE],
    );
    api.put(
        Kind::ConfigMap,
        NS,
        "with-going",
        "c-2",
        json!({}),
        &[GOING, OWNER],
    );
    api.put(
        Kind::ConfigMap,
        NS,
        "with-gone",
        "c-3",
        json!({}),
        &[OWNER, GONE],
    );
    // Only finished or gone pods, not the owner: not the owner's to take.
    api.put(
        Kind::ConfigMap,
        NS,
        "not-ours",
        "c-4",
        json!({}),
        &[DONE, GONE],
    );
    // `/v1` is the collector's v1: the owner's reference.
    api.put_with_references(
        Kind::ConfigMap,
        NS,
        "slash-v1",
        "c-5",
        json!([{"apiVersion": "/v1", "kind": "Pod", "name": "w-1", "uid": OWNER}]),
    );
    let released = release(server.client(), &owner(), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(released.config_maps, 4, "{released:?}");
    for name in ["with-finished", "with-going", "with-gone", "slash-v1"] {
        assert!(!api.exists(Kind::ConfigMap, NS, name), "{name} left");
    }
    assert!(api.exists(Kind::ConfigMap, NS, "not-ours"));
}
