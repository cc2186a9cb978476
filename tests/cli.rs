//! The `ownerguard` binary as a person runs it.

mod common;

use std::process::Command;

use common::review_stdin;

use base64::Engine;
use serde_json::Value;

const UID: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000001";

fn ownerguard() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ownerguard"))
}

fn manifest(owner: &str, with_uid: bool) -> String {
    let uid_label = if with_uid {
        format!("\n    ownerguard.io/owner-uid: {UID}")
    } else {
        String::new()
    };
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: prompt-1\n  labels:\n    ownerguard.io/owner-pod: {owner}{uid_label}\ndata:\n  prompt.md: hello\n"
    )
}

#[test]
fn review_of_a_manifest_from_the_owner_pod_is_allowed_and_patched() {
    let (code, answer, stderr) = review_stdin(
        &["--namespace", "agents", "--as-pod", &format!("w-1/{UID}")],
        &manifest("w-1", false),
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(answer["response"]["allowed"], true);
    let patch = base64::engine::general_purpose::STANDARD
        .decode(answer["response"]["patch"].as_str().unwrap())
        .unwrap();
    let patch: Value = serde_json::from_slice(&patch).unwrap();
    assert_eq!(patch[0]["value"][0]["uid"], UID);
    assert_eq!(
        patch[1]["path"],
        "/metadata/labels/ownerguard.io~1owner-uid"
    );
    assert_eq!(
        answer["response"]["auditAnnotations"]["owner"],
        format!("agents/w-1/{UID}")
    );
}

#[test]
fn review_as_pod_makes_an_admission_review_come_from_that_pod() {
    // The review says a user sent it; --as-pod says the pod w-1 did, and
    // the owner's uid then comes from that pod's identity.
    let review = serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "r-1", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "namespace": "agents", "operation": "CREATE", "userInfo": {"username": "alice"},
        "object": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "prompt-1", "namespace": "agents", "labels": {"ownerguard.io/owner-pod": "w-1"}}}}});
    let input = review.to_string();
    let (code, answer, stderr) = review_stdin(&[], &input);
    assert_eq!(
        code,
        Some(1),
        "without --as-pod the uid is unknown: {stderr}"
    );
    assert_eq!(answer["response"]["status"]["code"], 400);
    let (code, answer, stderr) = review_stdin(&["--as-pod", &format!("w-1/{UID}")], &input);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        answer["response"]["auditAnnotations"]["owner"],
        format!("agents/w-1/{UID}")
    );
    // And as another pod, the requester check speaks.
    let (code, answer, _) = review_stdin(
        &["--as-pod", "w-2/6f1f3d4e-0c1a-4b7e-9d2a-000000000002"],
        &input,
    );
    assert_eq!(code, Some(1));
    assert_eq!(answer["response"]["status"]["code"], 403);
}

#[test]
fn review_of_a_manifest_with_a_missing_owner_exits_1_with_the_reason() {
    let (code, answer, stderr) = review_stdin(&["--namespace", "agents"], &manifest("w-1", true));
    assert_eq!(code, Some(1));
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(answer["response"]["status"]["code"], 403);
    assert!(
        stderr.contains("owner pod 'w-1' not found in namespace 'agents'"),
        "{stderr}"
    );
}

#[test]
fn review_reads_owner_pods_and_decides_as_the_validating_webhook() {
    let dir = tempfile::tempdir().unwrap();
    let pods = dir.path().join("pods.yaml");
    std::fs::write(
        &pods,
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: w-1\n  namespace: agents\n  uid: {UID}\n"
        ),
    )
    .unwrap();
    let pods = pods.to_str().unwrap();
    let (code, answer, _) = review_stdin(
        &["--namespace", "agents", "--pods", pods],
        &manifest("w-1", true),
    );
    assert_eq!(code, Some(0));
    assert!(answer["response"]["patch"].is_string());
    // /validate: the same manifest lacks the reference.
    let (code, answer, _) = review_stdin(
        &[
            "--namespace",
            "agents",
            "--pods",
            pods,
            "--webhook",
            "validate",
        ],
        &manifest("w-1", true),
    );
    assert_eq!(code, Some(1));
    assert!(answer["response"].get("patch").is_none());
}

#[test]
fn review_of_bad_input_exits_2() {
    for input in [
        "{not json",
        "[1, 2]",
        "just a string",
        "apiVersion: v1\nkind: Pod\n",
    ] {
        let (code, _, stderr) = review_stdin(&[], input);
        assert_eq!(code, Some(2), "{input}: {stderr}");
        assert!(stderr.starts_with("ownerguard review:"), "{stderr}");
    }
    // Every input error names where the input came from.
    let (_, _, stderr) = review_stdin(&[], "{not json");
    assert!(stderr.contains("standard input"), "{stderr}");
    let output = ownerguard()
        .args(["review", "/nonexistent/review.json"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/nonexistent/review.json"), "{stderr}");
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "a: [\n").unwrap();
    let output = ownerguard().arg("review").arg(&bad).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&*bad.to_string_lossy()), "{stderr}");
    let (code, _, stderr) = review_stdin(
        &["--pods", "/nonexistent/pods.yaml"],
        &manifest("w-1", true),
    );
    assert_eq!(code, Some(2));
    assert!(stderr.contains("/nonexistent/pods.yaml"), "{stderr}");
}

#[test]
fn a_key_prefix_too_long_for_the_names_built_on_it_is_refused_at_start() {
    // Sixty-three-character labels joined by dots: a DNS subdomain either
    // way, 240 characters the longest whose `held-restart.<prefix>` is one.
    let prefix = |len: usize| {
        let mut text = String::new();
        while text.len() < len {
            if !text.is_empty() {
                text.push('.');
            }
            let label = (len - text.len()).min(63);
            text.push_str(&"a".repeat(label));
        }
        text
    };
    let longest = prefix(240);
    let manifest = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: prompt-1\n  labels:\n    {longest}/owner-pod: w-1\n"
    );
    let (code, stdout, stderr) = review_stdin(&["--key-prefix", &longest], &manifest);
    // Judged (the owner is not in the pods given), not refused as an argument.
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stdout.to_string().contains("w-1"), "{stdout}");

    let too_long = prefix(241);
    assert_eq!(too_long.len(), 241);
    let (code, _, stderr) = review_stdin(&["--key-prefix", &too_long], &manifest);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("at most 240"), "{stderr}");
    let output = ownerguard()
        .args(["serve", "--dev", "--key-prefix", &too_long])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("at most 240"));
}

/// A duration longer than Go's, or a zero where zero would stop the
/// server's own timers, is refused before the server starts, with the
/// reason. (Were one taken, the server would start: it is stopped, and the
/// test fails, rather than waiting on it.)
#[test]
fn durations_the_server_cannot_keep_are_refused_at_start() {
    for (flag, value, says) in [
        (
            "--idle-timeout",
            "3000000h",
            "longer than a duration may be",
        ),
        (
            "--lookup-timeout",
            "2562047h47m16.854775808s",
            "2562047h47m16.854775807s",
        ),
        (
            "--reap-after",
            "5124095.9h",
            "longer than a duration may be",
        ),
        ("--tls-reload-interval", "0s", "is zero"),
        ("--lookup-timeout", "0ms", "is under a millisecond"),
        ("--lookup-timeout", "999us", "is under a millisecond"),
        ("--idle-timeout", "0", "is zero"),
        ("--reap-after", "5m ", "is not a duration"),
    ] {
        let mut server = ownerguard()
            .args(["serve", "--dev", flag, value])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        let status = loop {
            if let Some(status) = server.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > std::time::Duration::from_secs(20) {
                server.kill().unwrap();
                panic!("{flag} {value:?} was taken: the server started");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut server.stderr.take().unwrap(), &mut stderr).unwrap();
        assert_eq!(status.code(), Some(2), "{flag} {value:?}: {stderr}");
        assert!(stderr.contains(flag) && stderr.contains(says), "{stderr}");
    }
}

#[test]
fn review_prints_the_object_as_it_would_be_stored() {
    // Judged from the stored object's side: the reference there resolves
    // to the requester pod by apiVersion, kind, name and uid, non-blocking.
    let as_pod = format!("w-1/{UID}");
    let args = ["--namespace", "agents", "--as-pod", &as_pod, "--output"];
    let (code, object, stderr) =
        review_stdin(&[&args[..], &["object"]].concat(), &manifest("w-1", false));
    assert_eq!(code, Some(0), "{stderr}");
    let references = object["metadata"]["ownerReferences"].as_array().unwrap();
    assert_eq!(references.len(), 1, "{object}");
    let reference = &references[0];
    assert_eq!(
        (
            &reference["apiVersion"],
            &reference["kind"],
            &reference["name"],
            &reference["uid"]
        ),
        (&"v1".into(), &"Pod".into(), &"w-1".into(), &UID.into())
    );
    assert_ne!(reference["blockOwnerDeletion"], true);
    assert_eq!(object["metadata"]["labels"]["ownerguard.io/owner-uid"], UID);
    assert_eq!(object["data"]["prompt.md"], "hello");
    // The patch alone, decoded.
    let (code, patch, _) = review_stdin(&[&args[..], &["patch"]].concat(), &manifest("w-1", false));
    assert_eq!(code, Some(0));
    assert!(
        patch.as_array().is_some_and(|ops| !ops.is_empty()),
        "{patch}"
    );
    // Denied: nothing would be stored, nothing printed, the reason on
    // standard error.
    for output in ["object", "patch"] {
        let (code, printed, stderr) = review_stdin(
            &["--namespace", "agents", "--output", output],
            &manifest("w-9", true),
        );
        assert_eq!(code, Some(1), "{stderr}");
        assert_eq!(printed, Value::Null);
        assert!(stderr.contains("w-9"), "{stderr}");
    }
}

#[test]
fn version_names_the_commit_and_its_date() {
    let output = ownerguard().arg("--version").output().unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    let rest = text
        .trim()
        .strip_prefix(&format!(
            "ownerguard {} (commit ",
            env!("CARGO_PKG_VERSION")
        ))
        .unwrap_or_else(|| panic!("{text}"));
    let (commit, date) = rest
        .strip_suffix(')')
        .and_then(|r| r.split_once(", "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        commit == "unknown" || commit.chars().all(|c| c.is_ascii_hexdigit()),
        "{text}"
    );
    assert!(
        date == "unknown" || (date.len() == 10 && date.chars().filter(|c| *c == '-').count() == 2),
        "{text}"
    );
}

#[test]
fn completion_scripts_are_printed_for_each_shell() {
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let output = ownerguard().args(["completion", shell]).output().unwrap();
        assert!(output.status.success(), "{shell}");
        let script = String::from_utf8(output.stdout).unwrap();
        // Every command and a flag of each is offered.
        for word in [
            "serve",
            "review",
            "doctor",
            "audit",
            "release",
            "kubeconfig",
        ] {
            assert!(script.contains(word), "{shell}: {word}");
        }
    }
}

#[test]
fn a_command_error_is_printed_once() {
    let output = ownerguard()
        .args([
            "release",
            "--namespace",
            "agents",
            "--owner-pod",
            "w-1",
            "--owner-uid",
            UID,
            "--kubeconfig",
            "/nonexistent/kubeconfig",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr.matches("/nonexistent/kubeconfig").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.starts_with("ownerguard: "), "{stderr}");
    // An error whose message carries its cause's text: the cause once.
    let output = ownerguard()
        .args(["certs", "--out", "/dev/null/certs", "--dns", "a.example"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.matches("Not a directory").count(), 1, "{stderr}");
}

#[test]
fn doctor_prints_json_lines_with_output_json() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n",
    )
    .unwrap();
    let output = ownerguard()
        .args(["doctor", "--output", "json", "--context", "nowhere"])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let line: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(line["verdict"], "fail");
    assert_eq!(line["check"], "cluster");
    assert!(
        line["detail"].as_str().unwrap().contains("nowhere"),
        "{line}"
    );
}

#[test]
fn certs_writes_a_ca_and_a_serving_certificate_and_prints_the_ca_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("certs");
    let output = ownerguard()
        .args([
            "certs",
            "--out",
            out.to_str().unwrap(),
            "--dns",
            "ownerguard.ownerguard.svc",
            "ownerguard.ownerguard.svc.cluster.local",
            "--ip",
            "127.0.0.1",
            "--days",
            "90",
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let bundle = String::from_utf8(output.stdout).unwrap();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(bundle.trim())
        .unwrap();
    assert_eq!(decoded, std::fs::read(out.join("ca.crt")).unwrap());
    assert!(out.join("tls.crt").exists());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(out.join("tls.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // The pair serves: the server loads it.
    ownerguard::serve::ReloadingCertificate::load(&out.join("tls.crt"), &out.join("tls.key"))
        .unwrap();
}

/// A log reader that stops reading does not stop the reviews: standard
/// error is a pipe nobody reads here (64 KiB in Linux, some 150 decision
/// lines), as a container runtime's can be for a while, and 600 reviews
/// are still answered; every line is written once the pipe drains.
#[test]
fn reviews_are_answered_while_nothing_reads_the_log() {
    const REVIEWS: usize = 600;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("pods.yaml"),
        format!("kind: Pod\nmetadata: {{name: w-1, namespace: agents, uid: {UID}}}\n"),
    )
    .unwrap();
    let mut serve = common::Serve::start(dir.path(), &["--pods", "pods.yaml"], &[]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (addr, ca) = (serve.addr.clone(), serve.ca());
    let answered = runtime.block_on(async {
        tokio::time::timeout(std::time::Duration::from_secs(60), async {
            for _ in 0..REVIEWS {
                let answer = common::send_over_tls(&addr, &ca, UID).await;
                assert_eq!(answer["response"]["allowed"], true, "{answer}");
            }
        })
        .await
    });
    assert!(
        answered.is_ok(),
        "reviews stopped being answered once the unread log pipe was full"
    );
    // The pipe drains (as a runtime's reader catches up); then SIGTERM.
    let log = serve.read_log_in_background();
    std::thread::sleep(std::time::Duration::from_millis(500));
    serve.terminate();
    let rest = log.join().unwrap();
    let decisions = rest.iter().filter(|l| l.contains("\"decision\"")).count();
    assert_eq!(decisions, REVIEWS, "a decision line was lost");
}

/// `serve --dev` on a fresh directory: makes its certificates, serves a
/// review over TLS, and exits 0 on SIGTERM.
#[test]
fn serve_dev_answers_over_tls_and_exits_0_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("pods.yaml"),
        format!("kind: Pod\nmetadata: {{name: w-1, namespace: agents, uid: {UID}}}\n"),
    )
    .unwrap();
    let serve = common::Serve::start(
        dir.path(),
        &["--pods", "pods.yaml", "--record", "recorded"],
        &[],
    );
    assert!(dir.path().join("certs/tls.key").exists() && dir.path().join("certs/ca.crt").exists());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let answer = runtime.block_on(common::send_over_tls(&serve.addr, &serve.ca(), UID));
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert!(answer["response"]["patch"].is_string());
    let rest = serve.terminate();
    // --record wrote the review as a test case.
    let cases: Vec<_> = std::fs::read_dir(dir.path().join("recorded"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(cases.len(), 1, "{cases:?}");
    for file in [
        "request.json",
        "pods.yaml",
        "case.yaml",
        "response.json",
        "patched.json",
    ] {
        assert!(
            cases[0].join(file).exists(),
            "no {file} in {}",
            cases[0].display()
        );
    }
    assert!(
        rest.iter().any(|l| l.contains("\"decision\"")
            && l.contains("\"result\":\"patched\"")
            && l.contains("\"user\":\"alice\"")),
        "no decision line naming who asked: {rest:?}"
    );
}

#[test]
fn review_decides_a_review_the_api_server_wrote_with_bytes_that_are_not_utf8() {
    // A ControllerRevision whose data holds invalid UTF-8, as the real API
    // server sent it (tests/fixtures/apiserver/): decided as the server
    // decides it, from its own bytes.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/apiserver/create-controllerrevision-invalid-utf8-data.json");
    let bytes = std::fs::read(&path).unwrap();
    assert!(std::str::from_utf8(&bytes).is_err());
    let review: Value = serde_json::from_str(&String::from_utf8_lossy(&bytes)).unwrap();
    let extra = &review["request"]["userInfo"]["extra"];
    let as_pod = format!(
        "{}/{}",
        extra["authentication.kubernetes.io/pod-name"][0]
            .as_str()
            .unwrap(),
        extra["authentication.kubernetes.io/pod-uid"][0]
            .as_str()
            .unwrap()
    );
    let out = ownerguard()
        .args(["review", "--as-pod", &as_pod])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(answer["response"]["patch"].is_string(), "{answer}");
}

#[test]
fn review_of_a_cluster_scoped_manifest_has_no_namespace() {
    // A ClusterRole labelled for a pod: the API server sends it with no
    // namespace, and ownerguard refuses it (a pod owns only what is in its
    // own namespace), whatever namespace a manifest would default to.
    let role = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: r\n  labels:\n    ownerguard.io/owner-pod: w-1\n    ownerguard.io/owner-uid: {UID}\nrules: []\n"
    );
    let (code, answer, stderr) = review_stdin(&["--as-pod", &format!("w-1/{UID}")], &role);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(answer["response"]["status"]["code"], 403, "{answer}");
    assert!(stderr.contains("cluster-scoped"), "{stderr}");
    let (code, _, stderr) = review_stdin(&["--namespace", "agents"], &role);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("cluster-scoped"), "{stderr}");
    // A namespace given twice must agree, as kubectl has it.
    let configmap = manifest("w-1", true).replace(
        "  name: prompt-1\n",
        "  name: prompt-1\n  namespace: agents\n",
    );
    let (code, _, stderr) = review_stdin(&["--namespace", "other"], &configmap);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("does not match --namespace"), "{stderr}");
}
