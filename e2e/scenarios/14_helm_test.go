package scenarios

// Helm 4, the chart's primary Helm, and the way users get to it (issue
// 24): a release Helm 3 installed, upgraded and rolled back by Helm 4;
// server-side apply and who owns the fields another manager writes (the
// CA injector's caBundle); --rollback-on-failure undoing a failed install.
// Each release here has a keyPrefix of its own, so that its webhooks see
// none of the other scenarios' objects.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// releaseStatus is what `helm status -o json` says of a release.
type releaseStatus struct {
	Version     int    `json:"version"`
	ApplyMethod string `json:"apply_method"` // Helm 4: "ssa" or "csa"; Helm 3 writes none
	Info        struct {
		Status string `json:"status"`
	} `json:"info"`
}

// helmStatus asks Helm 4 for the release's status.
func helmStatus(t *testing.T, name string) releaseStatus {
	t.Helper()
	out, err := plane.Helm(ctxFor(t, time.Minute), "status", name, "--namespace", name, "-o", "json")
	must(t, err, "helm status")
	var s releaseStatus
	must(t, json.Unmarshal([]byte(out), &s), "helm status -o json")
	return s
}

// wantRelease: the release is deployed at revision, applied by method
// ("" for a revision Helm 3 made), and serves with a caBundle that
// verifies the chart's serving certificate for the Service.
func wantRelease(t *testing.T, name string, revision int, method string) {
	t.Helper()
	s := helmStatus(t, name)
	if s.Info.Status != "deployed" || s.Version != revision || s.ApplyMethod != method {
		t.Fatalf("release %s: %s at revision %d applied %q, want deployed at %d applied %q", name, s.Info.Status, s.Version, s.ApplyMethod, revision, method)
	}
	tls, err := admin.CoreV1().Secrets(name).Get(ctxFor(t, 30*time.Second), name+"-tls", metav1.GetOptions{})
	must(t, err, "the serving Secret")
	for i, b := range caBundles(t, name) {
		must(t, verifyServing(b, tls.Data["tls.crt"], name+"."+name+".svc"), fmt.Sprintf("caBundle %d of %s verifies the serving certificate", i, name))
	}
}

// fieldManagers: the managers (manager/operation) that own the field at
// path (fieldsV1 keys, e.g. `f:webhooks`, `k:{"name":"x"}`) of an object.
func fieldManagers(entries []metav1.ManagedFieldsEntry, path ...string) []string {
	var owners []string
	for _, e := range entries {
		if e.FieldsV1 == nil {
			continue
		}
		var node map[string]any
		if json.Unmarshal(e.FieldsV1.Raw, &node) != nil {
			continue
		}
		found := true
		for _, key := range path {
			next, ok := node[key].(map[string]any)
			if !ok {
				found = false
				break
			}
			node = next
		}
		if found {
			owners = append(owners, e.Manager+"/"+string(e.Operation))
		}
	}
	return owners
}

// webhookKey is the fieldsV1 key of a webhook entry (the list's key is its name).
func webhookKey(name string) string { return fmt.Sprintf(`k:{"name":%q}`, name) }

// caBundleOwners: for each webhook entry of the release's two
// configurations, who owns its clientConfig.caBundle.
func caBundleOwners(t *testing.T, name string) map[string][]string {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	m, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	must(t, err, "mutating configuration")
	v, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	must(t, err, "validating configuration")
	owners := map[string][]string{}
	for _, w := range m.Webhooks {
		owners[w.Name] = fieldManagers(m.ManagedFields, "f:webhooks", webhookKey(w.Name), "f:clientConfig", "f:caBundle")
	}
	for _, w := range v.Webhooks {
		owners[w.Name] = fieldManagers(v.ManagedFields, "f:webhooks", webhookKey(w.Name), "f:clientConfig", "f:caBundle")
	}
	if all, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name+"-cluster-wide", metav1.GetOptions{}); err == nil {
		for _, w := range all.Webhooks {
			owners[w.Name] = fieldManagers(all.ManagedFields, "f:webhooks", webhookKey(w.Name), "f:clientConfig", "f:caBundle")
		}
	}
	return owners
}

// helmRelease installs a release of the chart with its own namespace and
// keyPrefix through install (plane.Helm or plane.Helm3), uninstalled by
// Helm 4 when the test ends.
func helmRelease(t *testing.T, install func(context.Context, ...string) (string, error), name string, args ...string) {
	t.Helper()
	chart := chartDir()
	all := append([]string{"install", name, chart, "--namespace", name, "--create-namespace",
		"--set", "keyPrefix=" + name + ".e2e.ownerguard.io"}, harness.ChartSettings(chart)...)
	_, err := install(ctxFor(t, 3*time.Minute), append(all, args...)...)
	must(t, err, "helm install "+name)
	t.Cleanup(func() {
		if _, err := plane.Helm(context.Background(), "uninstall", name, "--namespace", name); err != nil && !strings.Contains(err.Error(), "not found") {
			t.Errorf("helm uninstall %s: %v", name, err)
		}
		_ = admin.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// TestHelm3ReleaseUpgradedByHelm4: the path real users take. A release
// installed and upgraded by Helm 3 is upgraded by Helm 4 (client-side, as
// Helm 4 keeps a Helm 3 release until told otherwise), rolled back,
// switched to server-side apply, upgraded and rolled back again, and
// uninstalled; after each step the release is deployed at the revision
// expected, its certificate kept, its caBundles verifying it.
func TestHelm3ReleaseUpgradedByHelm4(t *testing.T) {
	const name = "ownerguard-helm3"
	upgrade := func(t *testing.T, helm func(context.Context, ...string) (string, error), extra ...string) {
		t.Helper()
		// The README's upgrade: --reset-then-reuse-values keeps the
		// release's values and takes the chart's new defaults.
		_, err := helm(ctxFor(t, 3*time.Minute), append([]string{"upgrade", name, chartDir(), "--namespace", name,
			"--reset-then-reuse-values"}, extra...)...)
		must(t, err, "helm upgrade")
	}
	rollback := func(t *testing.T, revision int) {
		t.Helper()
		_, err := plane.Helm(ctxFor(t, 3*time.Minute), "rollback", name, fmt.Sprint(revision), "--namespace", name)
		must(t, err, "helm rollback")
	}
	servingCert := func(t *testing.T) []byte {
		t.Helper()
		s, err := admin.CoreV1().Secrets(name).Get(ctxFor(t, 30*time.Second), name+"-tls", metav1.GetOptions{})
		must(t, err, "the serving Secret")
		return s.Data["tls.crt"]
	}

	helmRelease(t, plane.Helm3, name)
	wantRelease(t, name, 1, "")
	cert := servingCert(t)
	steps := []struct {
		name     string
		do       func(t *testing.T)
		revision int
		method   string
	}{
		{"Helm3Upgrade", func(t *testing.T) { upgrade(t, plane.Helm3) }, 2, ""},
		{"Helm4UpgradeStaysClientSide", func(t *testing.T) { upgrade(t, plane.Helm) }, 3, "csa"},
		{"Helm4RollbackToAHelm3Revision", func(t *testing.T) { rollback(t, 2) }, 4, "csa"},
		{"Helm4UpgradeToServerSideApply", func(t *testing.T) { upgrade(t, plane.Helm, "--server-side=true") }, 5, "ssa"},
		{"Helm4UpgradeServerSide", func(t *testing.T) { upgrade(t, plane.Helm) }, 6, "ssa"},
		{"Helm4Rollback", func(t *testing.T) { rollback(t, 5) }, 7, "ssa"},
	}
	for _, step := range steps {
		if !t.Run(step.name, func(t *testing.T) {
			step.do(t)
			wantRelease(t, name, step.revision, step.method)
			if string(servingCert(t)) != string(cert) {
				t.Fatal("the serving certificate changed: an upgrade must keep it")
			}
			if step.method == "ssa" {
				// Server-side apply: Helm owns the caBundles it renders,
				// by apply; the managed fields of its client-side
				// revisions were migrated, not left beside them.
				for webhook, owners := range caBundleOwners(t, name) {
					if strings.Join(owners, ",") != "helm/Apply" {
						t.Errorf("caBundle of %s owned by %v, want helm/Apply alone", webhook, owners)
					}
				}
			}
		}) {
			t.FailNow()
		}
	}

	t.Run("Helm4Uninstall", func(t *testing.T) {
		_, err := plane.Helm(ctxFor(t, 3*time.Minute), "uninstall", name, "--namespace", name)
		must(t, err, "helm uninstall")
		_, err = admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctxFor(t, 30*time.Second), name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Fatalf("the MutatingWebhookConfiguration after uninstall: %v, want not found", err)
		}
	})
}

// TestHelmServerSideApply: what server-side apply means for the chart.
func TestHelmServerSideApply(t *testing.T) {
	// The suite's release was installed by Helm 4: server-side, Helm the
	// one owner of the caBundles it renders and of the Secrets it makes.
	t.Run("ChartModeInstalledServerSide", func(t *testing.T) {
		s, err := plane.Helm(ctxFor(t, time.Minute), "status", releaseName, "--namespace", releaseNamespace, "-o", "json")
		must(t, err, "helm status")
		var st releaseStatus
		must(t, json.Unmarshal([]byte(s), &st), "helm status -o json")
		if st.ApplyMethod != "ssa" {
			t.Fatalf("the suite's release applied %q, want ssa (Helm 4's default for an install)", st.ApplyMethod)
		}
		for _, secret := range []string{releaseName + "-tls", releaseName + "-ca"} {
			got, err := admin.CoreV1().Secrets(releaseNamespace).Get(ctxFor(t, 30*time.Second), secret, metav1.GetOptions{})
			must(t, err, secret)
			if owners := fieldManagers(got.ManagedFields, "f:data"); strings.Join(owners, ",") != "helm/Apply" {
				t.Errorf("data of %s owned by %v, want helm/Apply alone", secret, owners)
			}
		}
	})

	// certManager mode: cert-manager's CA injector writes every entry's
	// caBundle by a forced server-side apply as cert-manager-cainjector
	// (pkg/controller/cainjector/reconciler.go of cert-manager v1.21,
	// which runs nowhere here: the test writes what it writes, the way
	// it writes it). The chart renders no caBundle in this mode, so no
	// upgrade, switch or rollback may revert it or conflict with it.
	t.Run("CertManagerInjectorKeepsItsCABundle", func(t *testing.T) {
		const name = "ownerguard-cm"
		installStandInCRDs(t)
		helmRelease(t, plane.Helm, name, "--set", "certificates.mode=certManager")
		injected := plane.PKI.CA.CertPEM
		inject := func(t *testing.T) {
			t.Helper()
			ctx := ctxFor(t, 30*time.Second)
			apply := func(kind, name string, names []string) {
				var entries []map[string]any
				for _, n := range names {
					entries = append(entries, map[string]any{"name": n, "clientConfig": map[string]any{"caBundle": injected}})
				}
				body, err := json.Marshal(map[string]any{"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
					"metadata": map[string]any{"name": name}, "webhooks": entries})
				must(t, err, "the injector's apply")
				opts := metav1.PatchOptions{FieldManager: "cert-manager-cainjector", Force: ptr(true)}
				if kind == "MutatingWebhookConfiguration" {
					_, err = admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, name, types.ApplyPatchType, body, opts)
				} else {
					_, err = admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Patch(ctx, name, types.ApplyPatchType, body, opts)
				}
				must(t, err, "inject the CA into the "+kind)
			}
			m, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
			must(t, err, "mutating configuration")
			v, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
			must(t, err, "validating configuration")
			apply("MutatingWebhookConfiguration", name, mutatingNames(m.Webhooks))
			apply("ValidatingWebhookConfiguration", name, validatingNames(v.Webhooks))
			if all, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name+"-cluster-wide", metav1.GetOptions{}); err == nil {
				apply("ValidatingWebhookConfiguration", all.Name, validatingNames(all.Webhooks))
			}
		}
		// kept: every entry's caBundle is the injected CA, the injector
		// its one owner.
		kept := func(t *testing.T, what string) {
			t.Helper()
			for i, b := range caBundles(t, name) {
				if string(b) != string(injected) {
					t.Fatalf("%s: caBundle %d is not the injected CA (%d bytes)", what, i, len(b))
				}
			}
			for webhook, owners := range caBundleOwners(t, name) {
				if strings.Join(owners, ",") != "cert-manager-cainjector/Apply" {
					t.Fatalf("%s: caBundle of %s owned by %v, want cert-manager-cainjector/Apply alone", what, webhook, owners)
				}
			}
		}
		upgrade := func(t *testing.T, extra ...string) {
			t.Helper()
			_, err := plane.Helm(ctxFor(t, 3*time.Minute), append([]string{"upgrade", name, chartDir(), "--namespace", name,
				"--reuse-values"}, extra...)...)
			must(t, err, "helm upgrade (no --force-conflicts)")
		}
		inject(t)
		kept(t, "injected")
		upgrade(t)
		kept(t, "after an upgrade")
		// The cluster-wide switch adds a webhook entry, which the
		// injector then fills; turning it off removes that entry again.
		upgrade(t, "--set", "validation.allPodOwnerReferences.enabled=true")
		inject(t)
		kept(t, "after the cluster-wide switch went on")
		upgrade(t, "--set", "validation.allPodOwnerReferences.enabled=false")
		kept(t, "after the cluster-wide switch went off")
		if _, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctxFor(t, 30*time.Second), name+"-cluster-wide", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the cluster-wide configuration after the switch went off: %v, want not found", err)
		}
		_, err := plane.Helm(ctxFor(t, 3*time.Minute), "rollback", name, "1", "--namespace", name)
		must(t, err, "helm rollback")
		kept(t, "after a rollback")
	})
}

func mutatingNames(ws []admissionregistrationv1.MutatingWebhook) []string {
	var names []string
	for _, w := range ws {
		names = append(names, w.Name)
	}
	return names
}

func validatingNames(ws []admissionregistrationv1.ValidatingWebhook) []string {
	var names []string
	for _, w := range ws {
		names = append(names, w.Name)
	}
	return names
}

// TestHelmRollbackOnFailure: the README's install flag. An install that
// never becomes ready (no kubelet runs its pods here) is undone by
// --rollback-on-failure once its --timeout is over: no release, no
// webhook configuration left to refuse creates. (TestInstallWindow
// installs with the same flags where a stand-in kubelet runs the pods,
// and succeeds.)
func TestHelmRollbackOnFailure(t *testing.T) {
	const name = "ownerguard-rof"
	chart := chartDir()
	start := time.Now()
	_, err := plane.Helm(ctxFor(t, 3*time.Minute), append([]string{"install", name, chart, "--namespace", name, "--create-namespace",
		"--set", "keyPrefix=" + name + ".e2e.ownerguard.io", "--rollback-on-failure", "--timeout", "20s"}, harness.ChartSettings(chart)...)...)
	t.Cleanup(func() {
		_, _ = plane.Helm(context.Background(), "uninstall", name, "--namespace", name)
		_ = admin.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if err == nil {
		t.Fatal("an install whose pods never become ready succeeded with --rollback-on-failure")
	}
	t.Logf("helm install --rollback-on-failure failed after %.1f s, as it must: %v", time.Since(start).Seconds(), err)
	if _, err := plane.Helm(ctxFor(t, time.Minute), "status", name, "--namespace", name); err == nil {
		t.Fatal("the failed release is still there")
	}
	for _, get := range []func() error{
		func() error {
			_, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctxFor(t, 30*time.Second), name, metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctxFor(t, 30*time.Second), name, metav1.GetOptions{})
			return err
		},
	} {
		if err := get(); !apierrors.IsNotFound(err) {
			t.Fatalf("a webhook configuration of the failed release: %v, want not found", err)
		}
	}
}
