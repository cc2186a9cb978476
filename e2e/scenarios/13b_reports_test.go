package scenarios

// Issue 26 item 3 against the real API server: `ownerguard audit
// --reports` writes its findings as one policy report per namespace, in
// the API the cluster serves, with the real CRDs of each project
// (OpenReports' from github.com/openreports/reports-api, the policy
// working group's wgpolicyk8s.io from Kyverno's module, which ships it):
// OpenReports preferred when both are installed; each pass replaces the
// report whole, so a result that no longer holds is gone, and a namespace
// with no object of ownerguard's loses its report.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// The projects' published modules the CRDs come from: e2e/lib.sh pins
// them (E2E_REPORT_MODULES) and fetches them before the suite enters its
// network namespace, into E2E_MODULE_<NAME>.
const (
	openReportsModule = "OPENREPORTS"
	openReportsCRD    = "config/crd/openreports.io_reports.yaml"
	kyvernoModule     = "KYVERNO"
	wgpolicyCRD       = "config/crds/policyreport/wgpolicyk8s.io_policyreports.yaml"
)

var (
	openReports = schema.GroupVersionResource{Group: "openreports.io", Version: "v1alpha1", Resource: "reports"}
	wgpolicy    = schema.GroupVersionResource{Group: "wgpolicyk8s.io", Version: "v1alpha2", Resource: "policyreports"}
)

// moduleFile: a file of the Go module e2e/lib.sh fetched as name.
func moduleFile(t *testing.T, name, file string) []byte {
	t.Helper()
	dir := os.Getenv("E2E_MODULE_" + name)
	if dir == "" {
		t.Fatalf("E2E_MODULE_%s is not set: run the suite with e2e/run, which fetches the module", name)
	}
	data, err := os.ReadFile(filepath.Join(dir, file))
	must(t, err, "read "+file+" of "+name)
	return data
}

// installCRD installs the CRD of file in module and waits until it is
// served; it is removed when the test ends.
func installCRD(t *testing.T, module, file string) {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	var crd apiextensionsv1.CustomResourceDefinition
	must(t, yaml.Unmarshal(moduleFile(t, module, file), &crd), "decode the CRD of "+module)
	client := apiextensions.NewForConfigOrDie(plane.RESTConfig())
	_, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		must(t, err, "create the CRD "+crd.Name)
	}
	t.Cleanup(func() {
		_ = client.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), crd.Name, metav1.DeleteOptions{})
	})
	must(t, harness.Until(ctx, 30*time.Second, 200*time.Millisecond, "established", func() error {
		got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("%s not established", crd.Name)
	}), "the CRD "+crd.Name)
	// Established is not served yet: the custom resources' storage starts
	// a moment later (429 "storage is (re)initializing" until then).
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: crd.Spec.Versions[0].Name, Resource: crd.Spec.Names.Plural}
	must(t, harness.Until(ctx, 30*time.Second, 200*time.Millisecond, "served", func() error {
		_, err := dynamic.NewForConfigOrDie(plane.RESTConfig()).Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
		return err
	}), "the custom resources of "+crd.Name)
}

// policyReport reads ownerguard's report of ns in gvr; nil when there is none.
func policyReport(t *testing.T, gvr schema.GroupVersionResource, ns string) map[string]any {
	t.Helper()
	got, err := dynamic.NewForConfigOrDie(plane.RESTConfig()).Resource(gvr).Namespace(ns).Get(ctxFor(t, 30*time.Second), "ownerguard", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	must(t, err, "get the report")
	return got.Object
}

// resultsByName: the report's results by the name of the object each is
// about, with its rule.
func resultsByName(object map[string]any) map[string]string {
	found := map[string]string{}
	results, _ := object["results"].([]any)
	for _, r := range results {
		result, _ := r.(map[string]any)
		resources, _ := result["resources"].([]any)
		for _, res := range resources {
			ref, _ := res.(map[string]any)
			name, _ := ref["name"].(string)
			rule, _ := result["rule"].(string)
			found[name] = rule
		}
	}
	return found
}

func auditReports(t *testing.T, ns string) string {
	t.Helper()
	args := []string{"audit", "--namespace", ns, "--resource", "configmaps", "--reports"}
	out, _ := ownerguardCmd(ctxFor(t, time.Minute), plane.AdminKubeconfig, args...)
	t.Logf("ownerguard %s:\n%s", strings.Join(args, " "), out)
	return out
}

func TestPolicyReports(t *testing.T) {
	ctx := ctxFor(t, 4*time.Minute)
	ns := newNamespace(t, "reports", nil)
	w := newPod(t, ns, "worker-reports")
	gone := newPod(t, ns, "worker-gone")
	must(t, admin.CoreV1().Pods(ns).Delete(ctx, gone.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}), "delete the gone worker")
	// Made with the webhooks uninstalled, as before ownerguard.
	restore := uninstallWebhooks(t)
	for _, cm := range []struct{ name, owner, uid string }{
		{"leaked-prompt", gone.Name, string(gone.UID)},
		{"missing-prompt", w.Name, string(w.UID)},
	} {
		must(t, harness.Until(ctx, 20*time.Second, 200*time.Millisecond, "created without the webhook", func() error {
			created, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, configMap(cm.name, ownedLabels(cm.owner, cm.uid)), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			if err == nil && len(created.OwnerReferences) != 0 {
				_ = admin.CoreV1().ConfigMaps(ns).Delete(ctx, cm.name, metav1.DeleteOptions{})
				return fmt.Errorf("the webhook still answers")
			}
			return err
		}), "create "+cm.name)
	}
	restore()

	t.Run("NoReportAPISaidSo", func(t *testing.T) {
		out := auditReports(t, ns)
		if !strings.Contains(out, "no report written: the cluster serves neither") {
			t.Fatalf("audit --reports without a report CRD said:\n%s", out)
		}
	})

	installCRD(t, kyvernoModule, wgpolicyCRD)
	t.Run("Wgpolicy", func(t *testing.T) {
		out := auditReports(t, ns)
		if !strings.Contains(out, "wgpolicyk8s.io/v1alpha2 PolicyReport") {
			t.Fatalf("audit --reports said:\n%s", out)
		}
		got := resultsByName(policyReport(t, wgpolicy, ns))
		if got["leaked-prompt"] != "leaked" || got["missing-prompt"] != "missing-reference" || len(got) != 2 {
			t.Fatalf("the PolicyReport's results: %v, want leaked-prompt leaked and missing-prompt missing-reference", got)
		}
	})

	// Both APIs served from here on: OpenReports is preferred.
	installCRD(t, openReportsModule, openReportsCRD)
	t.Run("OpenReportsPreferredAndReplacedWhole", func(t *testing.T) {
		if out := auditReports(t, ns); !strings.Contains(out, "openreports.io/v1alpha1 Report") {
			t.Fatalf("audit --reports with both APIs said:\n%s", out)
		}
		object := policyReport(t, openReports, ns)
		got := resultsByName(object)
		if got["leaked-prompt"] != "leaked" || got["missing-prompt"] != "missing-reference" || len(got) != 2 {
			t.Fatalf("the Report's results: %v", got)
		}
		summary, _ := object["summary"].(map[string]any)
		if fmt.Sprint(summary["fail"]) != "2" {
			t.Fatalf("the Report's summary: %v, want fail 2", summary)
		}
		// The PolicyReport of the other API, which no longer holds, is gone.
		if left := policyReport(t, wgpolicy, ns); left != nil {
			t.Fatal("the PolicyReport written before OpenReports was installed is still there")
		}
		// Each result says its severity and its fix.
		for _, r := range object["results"].([]any) {
			result := r.(map[string]any)
			properties, _ := result["properties"].(map[string]any)
			if result["severity"] == nil || properties["fix"] == nil || properties["owner"] == nil {
				t.Fatalf("a result without its severity, fix or owner: %v", result)
			}
		}
		// The leak deleted: the next pass's report no longer holds it.
		must(t, admin.CoreV1().ConfigMaps(ns).Delete(ctx, "leaked-prompt", metav1.DeleteOptions{}), "delete the leak")
		auditReports(t, ns)
		got = resultsByName(policyReport(t, openReports, ns))
		if len(got) != 1 || got["missing-prompt"] != "missing-reference" {
			t.Fatalf("after the leak was deleted, the Report's results: %v, want missing-prompt only", got)
		}
		// Nothing of ownerguard's left in the namespace: no report.
		must(t, admin.CoreV1().ConfigMaps(ns).Delete(ctx, "missing-prompt", metav1.DeleteOptions{}), "delete the other")
		auditReports(t, ns)
		if left := policyReport(t, openReports, ns); left != nil {
			t.Fatalf("a Report left in a namespace with nothing of ownerguard's: %v", left["results"])
		}
		fmt.Printf("    reports: wgpolicyk8s.io and openreports.io written from the projects' CRDs, replaced whole, deleted when empty\n")
	})
}
