package scenarios

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
)

// Install: the chart through Helm, accepted by the API server.
func TestInstall(t *testing.T) {
	chart := harness.Chart(repo)

	t.Run("DefaultValuesInstalled", func(t *testing.T) {
		// harness.Up installed it with `helm install` and the default
		// values (image.repository set): check what the API server holds.
		ctx := ctxFor(t, time.Minute)
		out, err := plane.Helm(ctx, "status", releaseName, "--namespace", releaseNamespace)
		must(t, err, "helm status")
		if !strings.Contains(out, "STATUS: deployed") {
			t.Fatalf("helm status:\n%s", out)
		}
		m, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, releaseName, metav1.GetOptions{})
		must(t, err, "the MutatingWebhookConfiguration")
		v, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, releaseName, metav1.GetOptions{})
		must(t, err, "the ValidatingWebhookConfiguration")
		secret, err := admin.CoreV1().Secrets(releaseNamespace).Get(ctx, inst.SecretName, metav1.GetOptions{})
		must(t, err, "the chart's Secret")
		type hook struct {
			name, path string
			svcName    string
			svcNS      string
			port       *int32
			caBundle   []byte
		}
		var hooks []hook
		for _, w := range m.Webhooks {
			if w.ClientConfig.Service == nil {
				t.Fatalf("%s: no service clientConfig", w.Name)
			}
			s := w.ClientConfig.Service
			hooks = append(hooks, hook{w.Name, *s.Path, s.Name, s.Namespace, s.Port, w.ClientConfig.CABundle})
		}
		for _, w := range v.Webhooks {
			if w.ClientConfig.Service == nil {
				t.Fatalf("%s: no service clientConfig", w.Name)
			}
			s := w.ClientConfig.Service
			hooks = append(hooks, hook{w.Name, *s.Path, s.Name, s.Namespace, s.Port, w.ClientConfig.CABundle})
		}
		for _, h := range hooks {
			if h.svcName != releaseName || h.svcNS != releaseNamespace || h.port == nil || *h.port != inst.Port {
				t.Errorf("%s: service %s/%s:%v, want %s/%s:%d", h.name, h.svcNS, h.svcName, h.port, releaseNamespace, releaseName, inst.Port)
			}
			// What the API server checks on every call: the serving
			// certificate verifies against caBundle for <svc>.<ns>.svc.
			if err := verifyServing(h.caBundle, secret.Data["tls.crt"], guard.ServerName); err != nil {
				t.Errorf("%s: %v", h.name, err)
			}
		}
	})

	t.Run("ServedThroughTheServiceClusterIP", func(t *testing.T) {
		// The API server resolved the service clientConfig to the
		// ClusterIP and port and dialled it: ownerguard listens there
		// only, so any answered review proves the path.
		ctx := ctxFor(t, 30*time.Second)
		ns := newNamespace(t, "install", workerRules)
		w := newWorker(t, ns, "worker-install")
		_, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("via-service", ownedLabels(w.Name(), "")), metav1.CreateOptions{})
		must(t, err, "create through the webhook")
		n, err := guard.Metric("ownerguard_admission_requests_total", map[string]string{"webhook": "mutate", "operation": "CREATE", "resource": "configmaps"})
		must(t, err, "metric")
		if n < 1 {
			t.Fatalf("ownerguard at %s answered no configmap create", guard.Addr)
		}
		if !strings.HasPrefix(guard.Addr, inst.ClusterIP+":") {
			t.Fatalf("ownerguard listens on %s, not the ClusterIP %s", guard.Addr, inst.ClusterIP)
		}
		// The API server kept ownerguard's audit annotations, under the
		// webhook's name.
		want := ns + "/" + w.Name() + "/" + w.UID()
		must(t, harness.Until(ctx, 10*time.Second, 100*time.Millisecond, "audit annotations", func() error {
			for _, a := range auditAnnotations(t, "create", "configmaps", ns, "via-service") {
				if a[mutateWebhook+"/owner"] == want && a[mutateWebhook+"/owner-source"] != "" &&
					a[validateWebhook+"/owner"] == want {
					return nil
				}
			}
			return fmt.Errorf("no audit event of the create with %s/owner and %s/owner = %s", mutateWebhook, validateWebhook, want)
		}), "the audit log")
	})

	// Kinds whose CRDs are not installed here (no cert-manager, no
	// Prometheus Operator): stand-in CRDs that accept any spec let the
	// API server take the rest of the release; chartcheck then decodes
	// those objects strictly into cert-manager's and the Prometheus
	// Operator's own Go types.
	installStandInCRDs(t)

	entries, err := os.ReadDir(filepath.Join(chart, "ci"))
	must(t, err, "charts/ownerguard/ci")
	for _, e := range entries {
		file := e.Name()
		if !strings.HasSuffix(file, ".yaml") {
			continue
		}
		name := "ownerguard-ci-" + strings.TrimSuffix(strings.TrimSuffix(file, ".yaml"), "-values")
		t.Run("DryRunServer/"+file, func(t *testing.T) {
			ctx := ctxFor(t, 2*time.Minute)
			createNamespace(t, name)
			manifest := dryRunServer(t, ctx, name, chart, append([]string{"-f", filepath.Join(chart, "ci", file)}, harness.ChartSettings(chart)...)...)
			rendered := filepath.Join(plane.Work, name+".rendered.yaml")
			must(t, os.WriteFile(rendered, []byte(manifest), 0o600), "write the render")
			chartcheck(t, rendered)
		})
	}

	t.Run("CertManagerModeRendered", func(t *testing.T) {
		// cert-manager cannot run here: the mode is rendered by Helm
		// (the output stays in the work directory, out of git), its core
		// objects validated by the API server (dry run), the cert-manager
		// objects by their Go types, and the wiring checked.
		ctx := ctxFor(t, 2*time.Minute)
		name := "ownerguard-cm"
		createNamespace(t, name)
		out, err := plane.Helm(ctx, append([]string{"template", name, chart, "--namespace", name, "--set", "certificates.mode=certManager"}, harness.ChartSettings(chart)...)...)
		must(t, err, "helm template")
		rendered := filepath.Join(plane.Work, name+".rendered.yaml")
		must(t, os.WriteFile(rendered, []byte(out), 0o600), "write the render")
		chartcheck(t, rendered)
		dryRunServer(t, ctx, name, chart, append([]string{"--set", "certificates.mode=certManager"}, harness.ChartSettings(chart)...)...)
		for _, want := range []string{"kind: Certificate", "kind: Issuer", "cert-manager.io/inject-ca-from: " + name + "/" + name} {
			if !strings.Contains(out, want) {
				t.Errorf("the certManager render lacks %q", want)
			}
		}
	})

	t.Run("SecretModeInstalledAndServing", func(t *testing.T) {
		// certificates.mode=secret with a Secret made by `ownerguard
		// certs`: installed for real, served, and called by the API server
		// beside the default installation.
		ctx := ctxFor(t, 3*time.Minute)
		name := "ownerguard-secret"
		createNamespace(t, name)
		dir := t.TempDir()
		bundle, err := exec.CommandContext(ctx, os.Getenv("OWNERGUARD_BIN"), "certs", "--out", dir, "--dns", name+"."+name+".svc", "--days", "30").Output()
		must(t, err, "ownerguard certs")
		crt, _ := os.ReadFile(filepath.Join(dir, "tls.crt"))
		key, _ := os.ReadFile(filepath.Join(dir, "tls.key"))
		_, err = admin.CoreV1().Secrets(name).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "ownerguard-serving"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": crt, "tls.key": key}}, metav1.CreateOptions{})
		must(t, err, "the serving Secret")
		_, err = plane.Helm(ctx, append([]string{"install", name, chart, "--namespace", name,
			"-f", filepath.Join(chart, "ci", "secret-values.yaml"),
			"--set", "certificates.secret.caBundle=" + strings.TrimSpace(string(bundle))}, harness.ChartSettings(chart)...)...)
		must(t, err, "helm install, secret mode")
		uninstalled := false
		defer func() {
			if !uninstalled {
				_, _ = plane.Helm(context.Background(), "uninstall", name, "--namespace", name)
			}
		}()
		secondInst, err := harness.ReadInstallation(ctx, admin, name, name)
		must(t, err, "read the installation")
		if secondInst.SecretName != "ownerguard-serving" {
			t.Fatalf("the Deployment mounts %q, not the given Secret", secondInst.SecretName)
		}
		second, err := plane.Serve(ctx, admin, secondInst, harness.ServeOptions{Name: "ownerguard-secret-mode",
			Token: plane.PKI.AdminToken, MetricsPort: 9452})
		must(t, err, "serve the secret-mode installation")
		defer second.Stop(30 * time.Second)
		ns := newNamespace(t, "secretmode", workerRules)
		w := newWorker(t, ns, "worker-secret")
		calls := func() float64 {
			n, _ := second.Metric("ownerguard_admission_requests_total", map[string]string{"webhook": "mutate", "operation": "CREATE", "resource": "configmaps"})
			return n
		}
		create := func() error {
			cm, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("both-"+rand.String(6), ownedLabels(w.Name(), "")), metav1.CreateOptions{})
			if err != nil {
				return err
			}
			return checkOwned(cm.ObjectMeta, w, true)
		}
		must(t, harness.Until(ctx, 20*time.Second, 200*time.Millisecond, "the second installation called", func() error {
			if err := create(); err != nil {
				return err
			}
			if calls() < 1 {
				return fmt.Errorf("the secret-mode ownerguard answered nothing yet")
			}
			return nil
		}), "a create through both installations")
		// Uninstalled, and no longer called, before its server stops: the
		// next scenarios must not meet a configuration left without server.
		_, err = plane.Helm(ctx, "uninstall", name, "--namespace", name)
		must(t, err, "helm uninstall")
		uninstalled = true
		must(t, harness.Until(ctx, 20*time.Second, 200*time.Millisecond, "the API server stops calling it", func() error {
			before := calls()
			if err := create(); err != nil {
				return err
			}
			if after := calls(); after != before {
				return fmt.Errorf("still called (%v reviews)", after)
			}
			return nil
		}), "uninstalled")
	})
}

// dryRunServer: `helm install --dry-run=server`, every object sent to the
// API server as a dry run; the manifest Helm rendered.
func dryRunServer(t *testing.T, ctx context.Context, name, chart string, args ...string) string {
	t.Helper()
	out, err := plane.Helm(ctx, append([]string{"install", name, chart, "--namespace", name, "--dry-run=server", "-o", "json"}, args...)...)
	must(t, err, "helm install --dry-run=server")
	var release struct {
		Manifest string `json:"manifest"`
	}
	must(t, json.Unmarshal([]byte(out), &release), "helm's release JSON")
	if !strings.Contains(release.Manifest, "kind: MutatingWebhookConfiguration") {
		t.Fatalf("the dry run rendered no MutatingWebhookConfiguration:\n%s", out)
	}
	return release.Manifest
}

func createNamespace(t *testing.T, name string) {
	t.Helper()
	_, err := admin.CoreV1().Namespaces().Create(ctxFor(t, 30*time.Second), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("namespace %s: %v", name, err)
	}
}

func chartcheck(t *testing.T, rendered string) {
	t.Helper()
	in, err := os.Open(rendered)
	must(t, err, "open the render")
	defer in.Close()
	cmd := exec.Command(filepath.Join(plane.Bin, "chartcheck"))
	cmd.Stdin = in
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	must(t, err, "chartcheck")
}

// verifyServing: certPEM verifies against bundle for dnsName, as the API
// server verifies a service webhook.
func verifyServing(bundle, certPEM []byte, dnsName string) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		return fmt.Errorf("caBundle holds no certificate")
	}
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return fmt.Errorf("the Secret's tls.crt holds no certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return err
	}
	_, err = cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: dnsName})
	return err
}

func installStandInCRDs(t *testing.T) {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	client := apiextensions.NewForConfigOrDie(plane.RESTConfig())
	anything := &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr(true)}
	for _, c := range []struct{ group, kind, plural string }{
		{"cert-manager.io", "Certificate", "certificates"},
		{"cert-manager.io", "Issuer", "issuers"},
		{"monitoring.coreos.com", "ServiceMonitor", "servicemonitors"},
		{"monitoring.coreos.com", "PrometheusRule", "prometheusrules"},
	} {
		crd := &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: c.plural + "." + c.group, Labels: map[string]string{"e2e.ownerguard.io/stand-in": "true"}},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: c.group, Scope: apiextensionsv1.NamespaceScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: c.kind, Plural: c.plural, Singular: strings.ToLower(c.kind), ListKind: c.kind + "List"},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": *anything, "status": *anything}}}}},
			},
		}
		if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("stand-in CRD %s: %v", crd.Name, err)
		}
		must(t, harness.Until(ctx, 30*time.Second, 200*time.Millisecond, crd.Name+" established", func() error {
			got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
			return fmt.Errorf("not established")
		}), "CRD")
	}
}
