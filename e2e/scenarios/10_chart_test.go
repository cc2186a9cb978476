package scenarios

// The chart's production properties (issue 10), proved against the real
// API server and real Helm; ownerguard runs in place of the chart's pods
// (from the image, as the Deployment says), with the chart's certificate,
// and the install check (a Job or a helm test Pod, which no kubelet runs
// here) runs as a process with the identity the chart gives it.

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"
)

func chartDir() string { return filepath.Join(repo, "charts", "ownerguard") }

// helmTemplate renders the chart as the cluster's version (helm template
// does not ask the cluster, and Helm's default is older than the chart's
// kubeVersion).
func helmTemplate(t *testing.T, args ...string) (string, error) {
	t.Helper()
	version, err := admin.Discovery().ServerVersion()
	must(t, err, "the API server's version")
	return plane.Helm(ctxFor(t, time.Minute), append([]string{"template", releaseName, chartDir(), "--namespace", releaseNamespace,
		"--kube-version", version.GitVersion}, args...)...)
}

// restartGuard brings the chart's ownerguard back after a scenario stopped it.
func restartGuard(t *testing.T) {
	t.Helper()
	ctx := ctxFor(t, 2*time.Minute)
	must(t, cluster.StartGuard(ctx, recordDir), "restart ownerguard")
	guard = cluster.Guard
}

// stopGuard stops the chart's ownerguard; the returned function (also run
// when the test ends) starts it again, once.
func stopGuard(t *testing.T) (restart func()) {
	t.Helper()
	guard.Stop(30 * time.Second)
	var once sync.Once
	restart = func() { once.Do(func() { restartGuard(t) }) }
	t.Cleanup(restart)
	return restart
}

// --- The webhooks' matchConditions, while ownerguard is down ------------------

func TestChartOutage(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	ns := newNamespace(t, "outage", workerRules)
	w := newWorker(t, ns, "worker-outage")
	labels := ownedLabels(w.Name(), "")
	held := configMap("held", labels)
	held.Finalizers = []string{"e2e.ownerguard.io/hold"}
	cm, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, held, metav1.CreateOptions{})
	must(t, err, "create a labelled ConfigMap with a finalizer")
	must(t, checkOwned(cm.ObjectMeta, w, true), "completed")
	replicas := int32(1)
	dep, err := admin.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "agents", Labels: ownedLabels(w.Name(), w.UID())},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "e2e.invalid/agent:1"}}}}},
	}, metav1.CreateOptions{})
	must(t, err, "create a labelled Deployment")

	// A namespace in warn only asked to be told: its webhooks fail open.
	warnNS := newNamespace(t, "outage-warn", workerRules)
	setMode(t, warnNS, "warn")
	warnWorker := newWorker(t, warnNS, "worker-outage-warn")

	stopGuard(t)
	down := func(err error) bool { return err != nil && strings.Contains(err.Error(), "failed calling webhook") }

	// ... and while ownerguard is down a namespace in warn is not refused.
	stored, err := warnWorker.Client.CoreV1().ConfigMaps(warnNS).Create(ctx, configMap("while-down", ownedLabels(warnWorker.Name(), "")), metav1.CreateOptions{})
	must(t, err, "a labelled create in a namespace in warn while ownerguard is down")
	if len(stored.OwnerReferences) != 0 {
		t.Fatalf("stored with %s while ownerguard was down", refsString(stored.OwnerReferences))
	}

	// What ownerguard owns is refused while it is down (failurePolicy Fail).
	_, err = w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("new", labels), metav1.CreateOptions{})
	if !down(err) {
		t.Fatalf("a labelled create while ownerguard is down: %v, want failed calling webhook", err)
	}
	_, err = admin.CoreV1().ConfigMaps(ns).Patch(ctx, "held", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"ownerguard.io/owner-pod":"someone-else"}}}`), metav1.PatchOptions{})
	if !down(err) {
		t.Fatalf("changing the owner label while ownerguard is down: %v, want failed calling webhook", err)
	}
	_, err = admin.CoreV1().ConfigMaps(ns).Patch(ctx, "held", types.JSONPatchType,
		[]byte(`[{"op":"remove","path":"/metadata/ownerReferences"}]`), metav1.PatchOptions{})
	if !down(err) {
		t.Fatalf("removing the reference while ownerguard is down: %v, want failed calling webhook", err)
	}
	// What it has no opinion on goes through.
	_, err = admin.CoreV1().ConfigMaps(ns).Patch(ctx, "held", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"note":"edited while down"}},"data":{"k":"v"}}`), metav1.PatchOptions{})
	must(t, err, "an annotation and data edit while ownerguard is down")
	_, err = admin.AppsV1().Deployments(ns).Patch(ctx, dep.Name, types.MergePatchType, []byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{})
	must(t, err, "scale a labelled Deployment while ownerguard is down")
	_, err = admin.AppsV1().Deployments(ns).Patch(ctx, dep.Name, types.MergePatchType,
		[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"a","image":"e2e.invalid/agent:2"}]}}}}`), metav1.PatchOptions{})
	must(t, err, "roll a labelled Deployment out while ownerguard is down")
	must(t, admin.CoreV1().ConfigMaps(ns).Delete(ctx, "held", metav1.DeleteOptions{}), "delete the held ConfigMap")
	_, err = admin.CoreV1().ConfigMaps(ns).Patch(ctx, "held", types.JSONPatchType,
		[]byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{})
	must(t, err, "remove the finalizer of a labelled object being deleted, while ownerguard is down")
	_, err = gone(ctx, 30*time.Second, func(ctx context.Context) error {
		_, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "held", metav1.GetOptions{})
		return err
	})
	must(t, err, "the ConfigMap gone once its finalizer is removed")
}

// --- The install check, as the chart runs it -------------------------------------

// checkIdentity creates the install check's ServiceAccount, Role and
// RoleBinding from the chart (they are hooks: helm creates them for the
// hook run) and returns a kubeconfig of that ServiceAccount.
func checkIdentity(t *testing.T) string {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	out, err := helmTemplate(t,
		"--set", "image.repository=e2e.invalid/ownerguard", "--set", "certificates.mode=certManager",
		"--show-only", "templates/check-serviceaccount.yaml", "--show-only", "templates/check-role.yaml",
		"--show-only", "templates/check-rolebinding.yaml")
	must(t, err, "render the check's RBAC")
	var sa corev1.ServiceAccount
	var role rbacv1.Role
	var binding rbacv1.RoleBinding
	for _, doc := range strings.Split(out, "\n---") {
		var head metav1.TypeMeta
		must(t, yaml.Unmarshal([]byte(doc), &head), "a rendered object")
		switch head.Kind {
		case "ServiceAccount":
			must(t, yaml.UnmarshalStrict([]byte(doc), &sa), "ServiceAccount")
		case "RoleBinding":
			must(t, yaml.UnmarshalStrict([]byte(doc), &binding), "RoleBinding")
		case "Role":
			must(t, yaml.UnmarshalStrict([]byte(doc), &role), "Role")
		}
	}
	_, err = admin.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx, &sa, metav1.CreateOptions{})
	must(t, err, "the check's ServiceAccount")
	_, err = admin.RbacV1().Roles(role.Namespace).Create(ctx, &role, metav1.CreateOptions{})
	must(t, err, "the check's Role")
	_, err = admin.RbacV1().RoleBindings(binding.Namespace).Create(ctx, &binding, metav1.CreateOptions{})
	must(t, err, "the check's RoleBinding")
	t.Cleanup(func() {
		bg := context.Background()
		_ = admin.RbacV1().RoleBindings(binding.Namespace).Delete(bg, binding.Name, metav1.DeleteOptions{})
		_ = admin.RbacV1().Roles(role.Namespace).Delete(bg, role.Name, metav1.DeleteOptions{})
		_ = admin.CoreV1().ServiceAccounts(sa.Namespace).Delete(bg, sa.Name, metav1.DeleteOptions{})
	})
	expiry := int64(3600)
	tr, err := admin.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	must(t, err, "a token of the check's ServiceAccount")
	path := filepath.Join(t.TempDir(), "check.kubeconfig")
	must(t, harness.Kubeconfig(path, harness.APIURL(harness.APIPort), plane.PKI.CAFile, tr.Status.Token), "kubeconfig")
	return path
}

// checkArgs: the container args of the chart's post-install Job (wait
// replaced), read from the render.
func checkArgs(t *testing.T, wait string) []string {
	t.Helper()
	out, err := helmTemplate(t,
		"--set", "image.repository=e2e.invalid/ownerguard", "--set", "certificates.mode=certManager",
		"--show-only", "templates/check-job.yaml")
	must(t, err, "render the check Job")
	var job struct {
		Spec struct {
			Template struct {
				Spec corev1.PodSpec `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	must(t, yaml.Unmarshal([]byte(out), &job), "the check Job")
	var args []string
	for _, a := range job.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--wait=") {
			a = "--wait=" + wait
		}
		args = append(args, a)
	}
	return args
}

func TestChartInstallCheck(t *testing.T) {
	kubeconfig := checkIdentity(t)
	run := func(t *testing.T, wait string) (string, error) {
		ctx := ctxFor(t, 2*time.Minute)
		out, err := ownerguardCmd(ctx, kubeconfig, checkArgs(t, wait)...)
		t.Logf("install check:\n%s", out)
		return out, err
	}
	t.Run("PassesWhileServing", func(t *testing.T) {
		out, err := run(t, "0s")
		must(t, err, "the install check")
		if !hasLine(out, "ok   probe in default: "+mutateWebhook+" answered") {
			t.Fatalf("want one ok probe line, have:\n%s", out)
		}
	})
	t.Run("FailsLoudlyWhileNotServing", func(t *testing.T) {
		stopGuard(t)
		out, err := run(t, "3s")
		if err == nil || !hasLine(out, "FAIL probe in default: the API server could not call the webhook") {
			t.Fatalf("the install check with ownerguard down: %v, want exit 1 and the reason:\n%s", err, out)
		}
	})
	t.Run("WaitsForTheServerToStart", func(t *testing.T) {
		restart := stopGuard(t)
		type result struct {
			out string
			err error
		}
		done := make(chan result, 1)
		go func() {
			out, err := ownerguardCmd(context.Background(), kubeconfig, checkArgs(t, "90s")...)
			done <- result{out, err}
		}()
		time.Sleep(5 * time.Second)
		restart()
		r := <-done
		t.Logf("install check:\n%s", r.out)
		must(t, r.err, "the install check while the server starts")
	})
}

// --- Certificates: kept, renewed, rotated without a failed create -------------

// creates is a steady stream of labelled creates by a worker, every 25 ms.
type creates struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	errors     []string
	stop       chan struct{}
	done       chan struct{}
}

func startCreates(t *testing.T, w *Worker) *creates {
	c := &creates{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for i := 0; ; i++ {
			select {
			case <-c.stop:
				return
			case <-time.After(25 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			object := configMap("", ownedLabels(w.Name(), ""))
			object.GenerateName = "stream-"
			_, err := w.Client.CoreV1().ConfigMaps(w.NS()).Create(ctx, object, metav1.CreateOptions{})
			cancel()
			if err != nil {
				c.failed.Add(1)
				c.mu.Lock()
				if len(c.errors) < 5 {
					c.errors = append(c.errors, err.Error())
				}
				c.mu.Unlock()
			} else {
				c.ok.Add(1)
			}
		}
	}()
	return c
}

// end stops the stream and fails the test if a create failed.
func (c *creates) end(t *testing.T) {
	t.Helper()
	close(c.stop)
	<-c.done
	t.Logf("%d labelled creates, %d failed", c.ok.Load(), c.failed.Load())
	if c.failed.Load() > 0 || c.ok.Load() == 0 {
		t.Fatalf("%d of %d labelled creates failed: %s", c.failed.Load(), c.failed.Load()+c.ok.Load(), strings.Join(c.errors, "; "))
	}
}

func caBundles(t *testing.T, name string) [][]byte {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	m, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	must(t, err, "mutating configuration")
	v, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	must(t, err, "validating configuration")
	var bundles [][]byte
	for _, w := range m.Webhooks {
		bundles = append(bundles, w.ClientConfig.CABundle)
	}
	for _, w := range v.Webhooks {
		bundles = append(bundles, w.ClientConfig.CABundle)
	}
	// The cluster-wide switch's configuration, when it is on.
	if all, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name+"-cluster-wide", metav1.GetOptions{}); err == nil {
		for _, w := range all.Webhooks {
			bundles = append(bundles, w.ClientConfig.CABundle)
		}
	}
	return bundles
}

func pemCount(data []byte) int {
	n := 0
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return n
		}
		n++
	}
}

func notAfter(t *testing.T, certPEM []byte) time.Time {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("no certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	must(t, err, "parse the certificate")
	return cert.NotAfter
}

// serveSecret does what the kubelet and the reload do in a pod: the
// guard's Secret volume takes the Secret's content (the kubelet's own
// writer: both files swapped at once, with ..data), and the server serves
// it within its reload interval.
func serveSecret(t *testing.T, og *harness.Ownerguard, namespace, secret string) {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	s, err := admin.CoreV1().Secrets(namespace).Get(ctx, secret, metav1.GetOptions{})
	must(t, err, "the serving Secret")
	must(t, og.ProjectSecret(s), "project the Secret into the guard's volume")
	want := float64(notAfter(t, s.Data["tls.crt"]).Unix())
	must(t, harness.Until(ctx, 30*time.Second, 250*time.Millisecond, "the certificate reloaded", func() error {
		got, err := og.Metric("ownerguard_tls_certificate_expiry_timestamp_seconds", nil)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("serving notAfter %v, want %v", got, want)
		}
		return nil
	}), "reload")
}

func annotateNotAfter(t *testing.T, namespace, secret string, at time.Time) {
	t.Helper()
	annotateExpiry(t, namespace, secret, "ownerguard.io/not-after", at)
}

// annotateExpiry sets the expiry annotation key of a chart-made Secret.
func annotateExpiry(t *testing.T, namespace, secret, key string, at time.Time) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"%d"}}}`, key, at.Unix())
	_, err := admin.CoreV1().Secrets(namespace).Patch(ctxFor(t, 30*time.Second), secret, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	must(t, err, "mark "+secret+" as expiring")
}

func TestChartCertificates(t *testing.T) {
	tlsSecret, caSecret := releaseName+"-tls", releaseName+"-ca"
	secrets := func(t *testing.T) (tls, ca *corev1.Secret) {
		ctx := ctxFor(t, 30*time.Second)
		tls, err := admin.CoreV1().Secrets(releaseNamespace).Get(ctx, tlsSecret, metav1.GetOptions{})
		must(t, err, tlsSecret)
		ca, err = admin.CoreV1().Secrets(releaseNamespace).Get(ctx, caSecret, metav1.GetOptions{})
		must(t, err, caSecret)
		return tls, ca
	}
	upgrade := func(t *testing.T) {
		// --force-conflicts: this test stands in for time passing by
		// writing the Secrets' expiry annotations itself, and
		// TestDoctor restored a caBundle it had broken, both with this
		// client's own field manager; Helm 4's server-side apply would
		// otherwise refuse to take those fields back (a user who edited
		// a chart object by hand does the same: docs/operations.md).
		_, err := plane.Helm(ctxFor(t, 3*time.Minute), "upgrade", releaseName, chartDir(), "--namespace", releaseNamespace, "--reuse-values", "--force-conflicts")
		must(t, err, "helm upgrade")
		// After it Helm owns what it renders, by apply: the caBundles and
		// the Secrets' data (a manager that wrote the same value keeps a
		// share, as server-side apply has it; one that wrote another
		// value lost the field to the forced apply).
		for webhook, owners := range caBundleOwners(t, releaseName) {
			if !slices.Contains(owners, "helm/Apply") {
				t.Errorf("caBundle of %s owned by %v after the upgrade, want helm/Apply among them", webhook, owners)
			}
		}
		tls, ca := secrets(t)
		for _, s := range []*corev1.Secret{tls, ca} {
			if owners := fieldManagers(s.ManagedFields, "f:data"); !slices.Contains(owners, "helm/Apply") {
				t.Errorf("data of %s owned by %v after the upgrade, want helm/Apply among them", s.Name, owners)
			}
		}
	}
	ns := newNamespace(t, "certs", workerRules)
	w := newWorker(t, ns, "worker-certs")

	t.Run("BlindRenderRefused", func(t *testing.T) {
		// As Argo CD renders: helm template, no lookup.
		_, err := helmTemplate(t, "--set", "image.repository=e2e.invalid/ownerguard")
		if err == nil || !strings.Contains(err.Error(), "certificates.mode=chart needs the cluster at render time") {
			t.Fatalf("helm template in chart mode: %v, want the refusal", err)
		}
	})

	t.Run("KeptAtUpgrade", func(t *testing.T) {
		tls0, ca0 := secrets(t)
		bundles0 := caBundles(t, releaseName)
		stream := startCreates(t, w)
		upgrade(t)
		stream.end(t)
		tls1, ca1 := secrets(t)
		for _, f := range []string{"tls.crt", "tls.key", "ca.crt"} {
			if !bytes.Equal(tls0.Data[f], tls1.Data[f]) {
				t.Errorf("%s of %s changed at an upgrade", f, tlsSecret)
			}
		}
		if !bytes.Equal(ca0.Data["tls.key"], ca1.Data["tls.key"]) {
			t.Errorf("the CA changed at an upgrade")
		}
		for i, b := range caBundles(t, releaseName) {
			if !bytes.Equal(b, bundles0[i]) {
				t.Errorf("caBundle %d changed at an upgrade", i)
			}
		}
	})

	t.Run("CertificateRenewedUnderItsCA", func(t *testing.T) {
		tls0, _ := secrets(t)
		bundles0 := caBundles(t, releaseName)
		annotateNotAfter(t, releaseNamespace, tlsSecret, time.Now().Add(24*time.Hour))
		stream := startCreates(t, w)
		upgrade(t)
		tls1, _ := secrets(t)
		if bytes.Equal(tls0.Data["tls.crt"], tls1.Data["tls.crt"]) {
			t.Fatal("the certificate was not renewed")
		}
		if !bytes.Equal(tls0.Data["ca.crt"], tls1.Data["ca.crt"]) {
			t.Fatal("the CA changed with the certificate")
		}
		for i, b := range caBundles(t, releaseName) {
			if !bytes.Equal(b, bundles0[i]) {
				t.Errorf("caBundle %d changed", i)
			}
			must(t, verifyServing(b, tls1.Data["tls.crt"], guard.ServerName), "the renewed certificate verifies")
		}
		time.Sleep(2 * time.Second)
		serveSecret(t, guard, releaseNamespace, tlsSecret)
		time.Sleep(2 * time.Second)
		stream.end(t)
	})

	t.Run("CARenewedWithBothCAsTrusted", func(t *testing.T) {
		tls0, _ := secrets(t)
		annotateNotAfter(t, releaseNamespace, caSecret, time.Now().Add(24*time.Hour))
		stream := startCreates(t, w)
		upgrade(t)
		tls1, _ := secrets(t)
		if bytes.Equal(tls0.Data["ca.crt"], tls1.Data["ca.crt"]) {
			t.Fatal("the CA was not renewed")
		}
		for i, b := range caBundles(t, releaseName) {
			if pemCount(b) != 2 {
				t.Fatalf("caBundle %d holds %d certificates, want the new CA and the previous one", i, pemCount(b))
			}
			must(t, verifyServing(b, tls0.Data["tls.crt"], guard.ServerName), "the certificate still served verifies")
			must(t, verifyServing(b, tls1.Data["tls.crt"], guard.ServerName), "the new certificate verifies")
		}
		// The pods still serve the old certificate for a while: nothing fails.
		time.Sleep(3 * time.Second)
		serveSecret(t, guard, releaseNamespace, tlsSecret)
		time.Sleep(2 * time.Second)
		// The next upgrade keeps the previous CA (kept in the CA Secret as
		// previous-ca.crt): a pod whose volume refreshes late is still
		// trusted, until the next CA renewal or the previous CA's expiry.
		upgrade(t)
		_, ca1 := secrets(t)
		if len(ca1.Data["previous-ca.crt"]) == 0 {
			t.Fatalf("%s keeps no previous-ca.crt", caSecret)
		}
		for i, b := range caBundles(t, releaseName) {
			if pemCount(b) != 2 {
				t.Fatalf("caBundle %d holds %d certificates after the next upgrade, want the new CA and the previous one", i, pemCount(b))
			}
		}
		// Once the previous CA has expired, an upgrade drops it.
		annotateExpiry(t, releaseNamespace, caSecret, "ownerguard.io/previous-ca-not-after", time.Now().Add(-time.Hour))
		upgrade(t)
		for i, b := range caBundles(t, releaseName) {
			if pemCount(b) != 1 {
				t.Fatalf("caBundle %d holds %d certificates once the previous CA expired, want the new CA only", i, pemCount(b))
			}
		}
		time.Sleep(2 * time.Second)
		stream.end(t)
	})
}

func TestChartSecretModeRotation(t *testing.T) {
	ctx := ctxFor(t, 5*time.Minute)
	name := "ownerguard-rotation"
	createNamespace(t, name)
	dns := []string{name + "." + name + ".svc", name + "." + name + ".svc.cluster.local"}
	makeCerts := func(dir string) {
		_, err := exec.CommandContext(ctx, os.Getenv("OWNERGUARD_BIN"), append([]string{"certs", "--out", dir, "--dns"}, dns...)...).Output()
		must(t, err, "ownerguard certs")
	}
	read := func(dir, f string) []byte {
		data, err := os.ReadFile(filepath.Join(dir, f))
		must(t, err, "read "+f)
		return data
	}
	b64 := base64.StdEncoding.EncodeToString
	old, next := t.TempDir(), t.TempDir()
	makeCerts(old)
	makeCerts(next)
	_, err := admin.CoreV1().Secrets(name).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "serving"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": read(old, "tls.crt"), "tls.key": read(old, "tls.key")}}, metav1.CreateOptions{})
	must(t, err, "the serving Secret")
	helm := func(verb, bundle string) {
		_, err := plane.Helm(ctx, append([]string{verb, name, chartDir(), "--namespace", name,
			"--set", "certificates.mode=secret", "--set", "certificates.secret.name=serving",
			"--set", "certificates.secret.caBundle=" + bundle}, harness.ChartSettings(chartDir())...)...)
		must(t, err, "helm "+verb)
	}
	helm("install", b64(read(old, "ca.crt")))
	t.Cleanup(func() {
		if _, err := plane.Helm(context.Background(), "uninstall", name, "--namespace", name); err != nil {
			t.Errorf("helm uninstall: %v", err)
		}
	})
	in, err := harness.ReadInstallation(ctx, admin, name, name)
	must(t, err, "the installation")
	og, err := plane.Serve(ctx, admin, in, harness.ServeOptions{Name: name, Token: plane.PKI.AdminToken, MetricsPort: 9461})
	must(t, err, "serve the secret-mode installation")
	defer og.Stop(30 * time.Second)

	ns := newNamespace(t, "rotation", workerRules)
	w := newWorker(t, ns, "worker-rotation")
	stream := startCreates(t, w)
	// 1. Trust both CAs.
	helm("upgrade", b64(append(read(old, "ca.crt"), read(next, "ca.crt")...)))
	time.Sleep(2 * time.Second)
	// 2. The new pair in the Secret, and in the pods.
	s, err := admin.CoreV1().Secrets(name).Get(ctx, "serving", metav1.GetOptions{})
	must(t, err, "the Secret")
	s.Data = map[string][]byte{"tls.crt": read(next, "tls.crt"), "tls.key": read(next, "tls.key")}
	_, err = admin.CoreV1().Secrets(name).Update(ctx, s, metav1.UpdateOptions{})
	must(t, err, "swap the Secret")
	serveSecret(t, og, name, "serving")
	time.Sleep(2 * time.Second)
	// 3. Trust the new CA only.
	helm("upgrade", b64(read(next, "ca.crt")))
	time.Sleep(2 * time.Second)
	stream.end(t)
	for i, b := range caBundles(t, name) {
		if !bytes.Equal(b, read(next, "ca.crt")) {
			t.Errorf("caBundle %d is not the new CA alone", i)
		}
	}
	// The Secret is the user's: no Helm upgrade took a field of it.
	s, err = admin.CoreV1().Secrets(name).Get(ctx, "serving", metav1.GetOptions{})
	must(t, err, "the Secret")
	for _, f := range s.ManagedFields {
		if f.Manager == "helm" {
			t.Errorf("Helm manages fields of the user's Secret: %s %s", f.Operation, f.FieldsV1.Raw)
		}
	}
}

// --- Bad values, refused by Helm with the cluster there ------------------------

func TestChartRefusals(t *testing.T) {
	dir := filepath.Join(repo, "tests", "chart", "refused")
	entries, err := os.ReadDir(dir)
	must(t, err, "tests/chart/refused")
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		file := filepath.Join(dir, e.Name())
		t.Run(strings.TrimSuffix(e.Name(), ".yaml"), func(t *testing.T) {
			text, err := os.ReadFile(file)
			must(t, err, "read")
			want := strings.TrimPrefix(strings.SplitN(string(text), "\n", 2)[0], "# refused: ")
			name := strings.TrimSuffix("r-"+strings.TrimSuffix(e.Name(), ".yaml"), "-")
			if len(name) > 40 {
				name = strings.TrimSuffix(name[:40], "-")
			}
			createNamespace(t, name)
			_, err = plane.Helm(ctxFor(t, 2*time.Minute), "install", name, chartDir(), "--namespace", name, "--dry-run=server", "-f", file)
			if strings.Contains(string(text), "allowRenderWithoutCluster: false") {
				// Refused without the cluster only: with it, lookup works.
				must(t, err, "helm install --dry-run=server of a blind-render refusal")
				return
			}
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("helm install --dry-run=server -f %s: %v\nwant the refusal %q", e.Name(), err, want)
			}
		})
	}
}

// --- doctor fails on each broken installation -------------------------------

func TestChartDoctor(t *testing.T) {
	// doctorWith runs doctor, with the probe unless alone: a broken
	// configuration that only the probe caught would be found by a probe
	// of the API server, not by reading the configuration (issue 19).
	doctorWith := func(t *testing.T, alone bool) (string, error) {
		args := []string{"doctor", "--namespace", releaseNamespace, "--name", releaseName}
		if !alone {
			args = append(args, "--probe", "default")
		}
		out, err := ownerguardCmd(ctxFor(t, time.Minute), plane.AdminKubeconfig, args...)
		t.Logf("ownerguard %s:\n%s", strings.Join(args, " "), out)
		return out, err
	}
	doctor := func(t *testing.T) (string, error) { return doctorWith(t, false) }
	ctx := ctxFor(t, 5*time.Minute)
	t.Run("PassesOnTheInstallationWithTheProbe", func(t *testing.T) {
		waitDeploymentReady(ctx, t)
		out, err := doctor(t)
		must(t, err, "doctor")
		if !hasLine(out, "ok   probe in default: "+mutateWebhook+" answered") {
			t.Fatal("no passing probe line")
		}
	})

	webhooks := func(edit func(m *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration)) func(t *testing.T) func() {
		return func(t *testing.T) func() {
			m, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, releaseName, metav1.GetOptions{})
			must(t, err, "mutating")
			v, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, releaseName, metav1.GetOptions{})
			must(t, err, "validating")
			m0, v0 := m.DeepCopy(), v.DeepCopy()
			edit(m, v)
			_, err = admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{})
			must(t, err, "break the mutating configuration")
			_, err = admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{})
			must(t, err, "break the validating configuration")
			return func() {
				for _, restore := range []func() error{
					func() error {
						cur, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, releaseName, metav1.GetOptions{})
						if err == nil {
							cur.Webhooks = m0.Webhooks
							_, err = admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, cur, metav1.UpdateOptions{})
						}
						return err
					},
					func() error {
						cur, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, releaseName, metav1.GetOptions{})
						if err == nil {
							cur.Webhooks = v0.Webhooks
							_, err = admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, cur, metav1.UpdateOptions{})
						}
						return err
					},
				} {
					if err := restore(); err != nil {
						t.Errorf("restore: %v", err)
					}
				}
			}
		}
	}
	deployment := func(edit func(d *appsv1.Deployment)) func(t *testing.T) func() {
		return func(t *testing.T) func() {
			d, err := admin.AppsV1().Deployments(releaseNamespace).Get(ctx, releaseName, metav1.GetOptions{})
			must(t, err, "the Deployment")
			original := d.Spec.Template.DeepCopy()
			must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
				d, err := admin.AppsV1().Deployments(releaseNamespace).Get(ctx, releaseName, metav1.GetOptions{})
				if err != nil {
					return err
				}
				edit(d)
				_, err = admin.AppsV1().Deployments(releaseNamespace).Update(ctx, d, metav1.UpdateOptions{})
				return err
			}), "break the Deployment")
			return func() {
				err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
					cur, err := admin.AppsV1().Deployments(releaseNamespace).Get(ctx, releaseName, metav1.GetOptions{})
					if err == nil {
						cur.Spec.Template = *original
						_, err = admin.AppsV1().Deployments(releaseNamespace).Update(ctx, cur, metav1.UpdateOptions{})
					}
					return err
				})
				if err != nil {
					t.Errorf("restore the Deployment: %v", err)
				}
			}
		}
	}
	otherSecret := func(t *testing.T) {
		ca, err := harness.NewCA("stale")
		must(t, err, "ca")
		certPEM, keyPEM, err := ca.Serving(releaseName+"."+releaseNamespace+".svc", []string{releaseName + "." + releaseNamespace + ".svc"}, nil)
		must(t, err, "certificate")
		_, err = admin.CoreV1().Secrets(releaseNamespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "serving-elsewhere"},
			Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM}}, metav1.CreateOptions{})
		must(t, err, "another Secret")
		t.Cleanup(func() {
			_ = admin.CoreV1().Secrets(releaseNamespace).Delete(context.Background(), "serving-elsewhere", metav1.DeleteOptions{})
		})
	}

	inverted := func() *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: ownerPodLabel, Operator: metav1.LabelSelectorOpDoesNotExist}}}
	}
	for _, c := range []struct {
		name   string
		break_ func(t *testing.T) func()
		fails  []string
		// Without --probe: the configuration alone must tell.
		alone bool
	}{
		{"MutatingSelectorInvertedWithoutConditions", webhooks(func(m *admissionregistrationv1.MutatingWebhookConfiguration, _ *admissionregistrationv1.ValidatingWebhookConfiguration) {
			m.Webhooks[0].ObjectSelector = inverted()
			m.Webhooks[0].MatchConditions = nil
		}), []string{"FAIL objectSelector of mutating " + mutateWebhook}, true},
		{"ValidatingSelectorInvertedWithoutConditions", webhooks(func(_ *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			v.Webhooks[0].ObjectSelector = inverted()
			v.Webhooks[0].MatchConditions = nil
		}), []string{"FAIL objectSelector of validating " + validateWebhook}, true},
		{"WebhooksOfTheTwoConfigurationsSwapped", webhooks(func(m *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			mw, vw := m.Webhooks[0], v.Webhooks[0]
			m.Webhooks[0] = admissionregistrationv1.MutatingWebhook{Name: vw.Name, ClientConfig: vw.ClientConfig, Rules: vw.Rules,
				FailurePolicy: vw.FailurePolicy, MatchPolicy: vw.MatchPolicy, NamespaceSelector: vw.NamespaceSelector, ObjectSelector: vw.ObjectSelector,
				SideEffects: vw.SideEffects, TimeoutSeconds: vw.TimeoutSeconds, AdmissionReviewVersions: vw.AdmissionReviewVersions,
				MatchConditions: vw.MatchConditions, ReinvocationPolicy: mw.ReinvocationPolicy}
			v.Webhooks[0] = admissionregistrationv1.ValidatingWebhook{Name: mw.Name, ClientConfig: mw.ClientConfig, Rules: mw.Rules,
				FailurePolicy: mw.FailurePolicy, MatchPolicy: mw.MatchPolicy, NamespaceSelector: mw.NamespaceSelector, ObjectSelector: mw.ObjectSelector,
				SideEffects: mw.SideEffects, TimeoutSeconds: mw.TimeoutSeconds, AdmissionReviewVersions: mw.AdmissionReviewVersions,
				MatchConditions: mw.MatchConditions}
		}), []string{"FAIL role of mutating " + validateWebhook, "FAIL role of validating " + mutateWebhook,
			"FAIL webhook " + mutateWebhook, "FAIL webhook " + validateWebhook}, true},
		{"PathsSwapped", webhooks(func(m *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			m.Webhooks[0].ClientConfig.Service.Path = ptr("/validate")
			v.Webhooks[0].ClientConfig.Service.Path = ptr("/mutate")
		}), []string{"FAIL path of mutating " + mutateWebhook, "FAIL path of validating " + validateWebhook}, false},
		{"WebhookAtTheRootPath", webhooks(func(m *admissionregistrationv1.MutatingWebhookConfiguration, _ *admissionregistrationv1.ValidatingWebhookConfiguration) {
			m.Webhooks[0].ClientConfig.Service.Path = ptr("/")
		}), []string{"FAIL path of mutating " + mutateWebhook}, false},
		{"WebhookAtTheMetricsPort", webhooks(func(_ *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			v.Webhooks[0].ClientConfig.Service.Port = ptr(int32(9090))
		}), []string{"FAIL service of validating " + validateWebhook}, false},
		{"NoWebhooks", webhooks(func(_ *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			v.Webhooks = nil
		}), []string{"FAIL ValidatingWebhookConfiguration: " + releaseName + " has no webhooks"}, false},
		{"RulesOnlyDelete", webhooks(func(m *admissionregistrationv1.MutatingWebhookConfiguration, _ *admissionregistrationv1.ValidatingWebhookConfiguration) {
			for i := range m.Webhooks[0].Rules {
				m.Webhooks[0].Rules[i].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Delete}
			}
			m.Webhooks[0].MatchConditions = nil
		}), []string{"FAIL rules of mutating " + mutateWebhook}, false},
		{"ObjectSelectorThatNeverMatches", webhooks(func(m *admissionregistrationv1.MutatingWebhookConfiguration, _ *admissionregistrationv1.ValidatingWebhookConfiguration) {
			m.Webhooks[0].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{ownerPodLabel: "never"}}
		}), []string{"FAIL objectSelector of mutating " + mutateWebhook, "FAIL probe in default"}, false},
		{"SecretUnderAnotherVolumeName", func(t *testing.T) func() {
			otherSecret(t)
			return deployment(func(d *appsv1.Deployment) {
				spec := &d.Spec.Template.Spec
				spec.Volumes = []corev1.Volume{{Name: "serving", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "serving-elsewhere"}}}}
				spec.Containers[0].VolumeMounts[0].Name = "serving"
			})(t)
		}, []string{"FAIL caBundle of mutating " + mutateWebhook, "FAIL caBundle of validating " + validateWebhook}, false},
		{"FlagsInCommand", deployment(func(d *appsv1.Deployment) {
			c := &d.Spec.Template.Spec.Containers[0]
			c.Command, c.Args = c.Args, nil
		}), []string{"FAIL server: ", "FAIL serving certificate: "}, false},
		{"DisruptionBudgetOfAll", func(t *testing.T) func() {
			pdb, err := admin.PolicyV1().PodDisruptionBudgets(releaseNamespace).Get(ctx, releaseName, metav1.GetOptions{})
			must(t, err, "the PodDisruptionBudget")
			original := pdb.Spec.DeepCopy()
			all := intstr.FromString("100%")
			pdb.Spec.MaxUnavailable = &all
			_, err = admin.PolicyV1().PodDisruptionBudgets(releaseNamespace).Update(ctx, pdb, metav1.UpdateOptions{})
			must(t, err, "break the PodDisruptionBudget")
			return func() {
				cur, err := admin.PolicyV1().PodDisruptionBudgets(releaseNamespace).Get(ctx, releaseName, metav1.GetOptions{})
				if err == nil {
					cur.Spec = *original
					_, err = admin.PolicyV1().PodDisruptionBudgets(releaseNamespace).Update(ctx, cur, metav1.UpdateOptions{})
				}
				if err != nil {
					t.Errorf("restore the PodDisruptionBudget: %v", err)
				}
			}
		}, []string{"FAIL PodDisruptionBudget: "}, false},
	} {
		t.Run("FailsOn"+c.name, func(t *testing.T) {
			restore := c.break_(t)
			out, err := doctorWith(t, c.alone)
			restore()
			if err == nil {
				t.Fatal("doctor passed a broken installation")
			}
			for _, want := range c.fails {
				if !hasLine(out, want) {
					t.Errorf("no line %q", want)
				}
			}
		})
	}
	t.Run("PassesAgainOnceRestored", func(t *testing.T) {
		// The restored Deployment's rollout settles first.
		must(t, harness.Until(ctx, time.Minute, time.Second, "doctor passes", func() error {
			_, err := doctor(t)
			return err
		}), "doctor on the restored installation")
	})
}
