package scenarios

// The install a platform team makes from a published release, end to
// end: the chart and the image in an OCI registry, both verified with
// cosign by digest and the release's public key, the chart installed by
// its digest (`helm install oci://…@sha256:…`), the image it names
// pulled by digest by the node and run, and the webhook it runs judging
// a worker's creates. The registry is the one `release/publish` pushed
// to and signed in, served again from the storage it kept.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// publishedRelease is what release/publish kept in target/release: the
// registry's storage, the public key, and published.env (the digests,
// the registry and cosign it built).
type publishedRelease struct {
	dir string
	env map[string]string
}

// readPublished reads the release published from this checkout. Without
// one the scenario is skipped, saying how to make it, unless
// E2E_REQUIRE_RELEASE is set (CI publishes before this suite runs).
func readPublished(t *testing.T) publishedRelease {
	t.Helper()
	notHere := func(why string) {
		t.Helper()
		why += ": run `bash .ci/image`, `bash release/sbom` and `bash release/publish` first"
		if os.Getenv("E2E_REQUIRE_RELEASE") != "" {
			t.Fatal(why)
		}
		skipFor(t, why)
	}
	// Where release/publish writes: the target directory's release/
	// (CARGO_TARGET_DIR's, when set), as e2e/lib.sh says.
	dir := os.Getenv("E2E_RELEASE_DIR")
	if dir == "" {
		dir = filepath.Join(repo, "target", "release")
	}
	f, err := os.Open(filepath.Join(dir, "published.env"))
	if err != nil {
		notHere(fmt.Sprintf("no release published from this checkout (%v)", err))
	}
	defer f.Close()
	r := publishedRelease{dir: dir, env: map[string]string{}}
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		if k, v, ok := strings.Cut(lines.Text(), "="); ok {
			r.env[k] = v
		}
	}
	must(t, lines.Err(), "read published.env")
	for _, k := range []string{"COMMIT", "REGISTRY_BIN", "COSIGN", "IMAGE_REPOSITORY", "IMAGE_DIGEST", "CHART_REPOSITORY", "CHART_DIGEST"} {
		if r.env[k] == "" {
			t.Fatalf("published.env names no %s: rerun `bash release/publish`", k)
		}
	}
	head, err := exec.Command("git", "-C", repo, "rev-parse", "HEAD").Output()
	must(t, err, "git rev-parse HEAD")
	if commit := strings.TrimSpace(string(head)); r.env["COMMIT"] != commit {
		notHere(fmt.Sprintf("the release published here is of commit %s, the checkout is at %s", r.env["COMMIT"], commit))
	}
	return r
}

// serveRegistry serves the kept storage again, read-only, on loopback in
// the suite's network namespace, with the registry release/publish used;
// its access log is the proof of what was pulled.
func serveRegistry(t *testing.T, r publishedRelease) (string, *harness.Process) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err, "a free port")
	addr := l.Addr().String()
	must(t, l.Close(), "free the port")
	config := filepath.Join(t.TempDir(), "registry.yml")
	must(t, os.WriteFile(config, []byte(fmt.Sprintf(`version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: %s
  maintenance:
    readonly:
      enabled: true
    uploadpurging:
      enabled: false
http:
  addr: %s
`, filepath.Join(r.dir, "registry"), addr)), 0o600), "registry config")
	// No traces: the registry would export them to a collector that is
	// not there.
	proc, err := harness.Start("registry", plane.Logs, []string{"OTEL_TRACES_EXPORTER=none"}, r.env["REGISTRY_BIN"], "serve", config)
	must(t, err, "start the registry")
	t.Cleanup(func() { proc.Stop(5 * time.Second) })
	must(t, harness.WaitHTTP(ctxFor(t, 30*time.Second), proc, &http.Client{Timeout: 2 * time.Second}, "http://"+addr+"/v2/", "", 20*time.Second), "the registry serves")
	return addr, proc
}

// errNotSigned: cosign verify ran and found no signature made with the
// key (not an error of the registry or of the command).
var errNotSigned = errors.New("no signature made with the key")

// cosignVerified runs `cosign verify` as docs/install.md tells a user
// to, and wants a signature of that very digest among what it verified
// (cosign verify passes on an attestation made with the key too).
func cosignVerified(ctx context.Context, r publishedRelease, key, ref string) error {
	digest := ref[strings.LastIndex(ref, "@")+1:]
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, r.env["COSIGN"], "verify", "--key", key,
		"--insecure-ignore-tlog=true", "--allow-insecure-registry", ref)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		// What cosign says when the signatures it found were not made
		// with this key.
		if strings.Contains(stderr.String(), "accepted signatures do not match threshold") ||
			strings.Contains(stderr.String(), "no matching signatures") {
			return fmt.Errorf("cosign verify %s: %w: %s", ref, errNotSigned, lastLine(stderr.String()))
		}
		return fmt.Errorf("cosign verify %s: %v: %s", ref, err, lastLine(stderr.String()))
	}
	var payloads []struct {
		Critical struct {
			Type  string `json:"type"`
			Image struct {
				Digest string `json:"docker-manifest-digest"`
			} `json:"image"`
		} `json:"critical"`
	}
	if err := json.Unmarshal(out.Bytes(), &payloads); err != nil {
		return fmt.Errorf("cosign verify %s: %v", ref, err)
	}
	for _, p := range payloads {
		if p.Critical.Type == "https://sigstore.dev/cosign/sign/v1" && p.Critical.Image.Digest == digest {
			return nil
		}
	}
	return fmt.Errorf("cosign verify %s passed on no signature of %s", ref, digest)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func TestInstallFromRegistry(t *testing.T) {
	if harness.Mode() != "image" {
		if os.Getenv("E2E_REQUIRE_RELEASE") != "" {
			t.Fatal("E2E_REQUIRE_RELEASE needs E2E_OWNERGUARD=image: the published image runs only there")
		}
		skipFor(t, "installs the published image, which E2E_OWNERGUARD=process does not run")
	}
	const (
		name      = "ownerguard-registry"
		keyPrefix = "registry.e2e.ownerguard.io"
	)
	rel := readPublished(t)
	ctx := ctxFor(t, 8*time.Minute)
	start := time.Now()
	registry, registryProc := serveRegistry(t, rel)
	image := registry + "/" + rel.env["IMAGE_REPOSITORY"] + "@" + rel.env["IMAGE_DIGEST"]
	chart := registry + "/" + rel.env["CHART_REPOSITORY"] + "@" + rel.env["CHART_DIGEST"]

	// 1. Verify before installing, with the public key alone; and a key
	// that did not sign them fails.
	key := filepath.Join(rel.dir, "cosign.pub")
	for _, ref := range []string{image, chart} {
		must(t, cosignVerified(ctx, rel, key, ref), "verify "+ref)
	}
	otherDir := t.TempDir()
	gen := exec.CommandContext(ctx, rel.env["COSIGN"], "generate-key-pair", "--output-key-prefix", filepath.Join(otherDir, "other"))
	gen.Env = append(os.Environ(), "COSIGN_PASSWORD=other")
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("cosign generate-key-pair: %v: %s", err, out)
	}
	for _, ref := range []string{image, chart} {
		if err := cosignVerified(ctx, rel, filepath.Join(otherDir, "other.pub"), ref); !errors.Is(err, errNotSigned) {
			t.Fatalf("cosign verify of %s with a key that did not sign it: %v, want no signature made with the key", ref, err)
		}
	}

	// 2. Install the chart by its digest, the image by its digest, as
	// docs/install.md shows; the node pulls the image and runs it.
	node := plane.StartNode(admin, name, name, 150)
	installed := false
	t.Cleanup(func() {
		if installed {
			if _, err := plane.Helm(context.Background(), "uninstall", name, "--namespace", name); err != nil {
				t.Errorf("helm uninstall: %v", err)
			}
		}
		node.Stop()
		_ = admin.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
		if t.Failed() {
			printTimeline("node (on failure)", start, node.Events())
		}
	})
	_, err := plane.Helm(ctx, "install", name, "oci://"+chart, "--plain-http",
		"--namespace", name, "--create-namespace", "--set", "keyPrefix="+keyPrefix,
		"--set", "image.repository="+registry+"/"+rel.env["IMAGE_REPOSITORY"],
		"--set", "image.digest="+rel.env["IMAGE_DIGEST"],
		"--set", "check.afterInstall=false", "--rollback-on-failure", "--timeout", "3m")
	must(t, err, "helm install oci://"+chart)
	installed = true
	waitReleaseReady(t, ctx, name, 2*time.Minute)

	// What runs is the image pulled by digest, and it is this checkout's
	// build (the one every other scenario runs).
	pods := releasePods(t, ctx, name)
	started := 0
	for _, e := range node.Events() {
		for pod := range pods {
			if strings.Contains(e.What, "kubelet: "+pod+": container of "+image+" started") {
				started++
			}
		}
	}
	if len(pods) == 0 || started < len(pods) {
		t.Fatalf("%d of the release's %d pods started from %s; the node's events: %v", started, len(pods), image, node.Events())
	}
	// The node's runtime fetched the manifest of that digest from this
	// registry (its access log), and the image holds this checkout's
	// build (the one every other scenario runs).
	manifest := `"GET /v2/` + rel.env["IMAGE_REPOSITORY"] + `/manifests/` + rel.env["IMAGE_DIGEST"] + ` HTTP/1.1" 200 `
	pulls := 0
	for _, line := range strings.Split(registryProc.Tail(10000), "\n") {
		if strings.Contains(line, manifest) && strings.Contains(line, `"containers/`) {
			pulls++
		}
	}
	if pulls == 0 {
		t.Fatalf("the registry served no manifest %s to the node's runtime (podman): its log:\n%s", rel.env["IMAGE_DIGEST"], registryProc.Tail(40))
	}
	must(t, harness.CheckImage(ctx, image, os.Getenv("OWNERGUARD_BIN")), "the image pulled holds this checkout's build")

	// 3. It is the webhook: a worker's labelled create gets the worker's
	// reference, one naming a pod that does not exist is refused, saying
	// how to fix it.
	ns := newNamespace(t, "registry", workerRules)
	w := newWorker(t, ns, "worker-registry")
	owned := map[string]string{keyPrefix + "/owner-pod": w.Name()}
	cm, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("prompt-registry", owned), metav1.CreateOptions{})
	must(t, err, "the worker's labelled ConfigMap")
	refs := cm.OwnerReferences
	if len(refs) != 1 || refs[0].APIVersion != "v1" || refs[0].Kind != "Pod" || refs[0].Name != w.Name() || refs[0].UID != w.Pod.UID ||
		refs[0].BlockOwnerDeletion == nil || *refs[0].BlockOwnerDeletion {
		t.Fatalf("the ConfigMap's references %s, want the worker's alone, non-blocking", refsString(refs))
	}
	_, err = admin.CoreV1().ConfigMaps(ns).Create(ctx, configMap("prompt-nobody", map[string]string{
		keyPrefix + "/owner-pod": "no-such-worker", keyPrefix + "/owner-uid": string(w.Pod.UID)}), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "owner pod 'no-such-worker' not found in namespace '"+ns+"'") {
		t.Fatalf("a ConfigMap naming a pod that does not exist: %v, want a refusal naming the pod and the namespace", err)
	}
}
