package scenarios

// Bytes the API server passes through unchanged: a RawExtension (a
// ControllerRevision's data, a ResourceClaim's opaque device parameters)
// keeps the bytes the client sent, through decode, storage and the
// webhook client's encoder, invalid UTF-8 included, and validation never
// looks at them.

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"ownerguard.io/e2e/harness"
)

// invalidUTF8 is JSON whose one string holds bytes that are no UTF-8: a
// lone continuation byte, an overlong encoding, a byte UTF-8 never uses.
var invalidUTF8 = []byte("{\"note\":\"\x80 \xc0\xaf \xff\"}")

// TestRawBytes: a labelled ControllerRevision and a labelled ResourceClaim
// whose raw fields hold invalid UTF-8 are created by a worker and admitted
// with the worker's reference: ownerguard passes over what it does not
// read, whatever its bytes. A webhook sorted before ownerguard's
// (harness.Gate, open) keeps the bodies the API server sent, which show the
// bytes arrive unchanged; E2E_UPDATE_RECORDED=1 writes them to
// tests/fixtures/apiserver/, where `cargo test` decides them again.
func TestRawBytes(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	ns := newNamespace(t, "raw", append(walkRules(),
		rbacRule("apps", "controllerrevisions"), rbacRule("resource.k8s.io", "resourceclaims")))
	w := newWorker(t, ns, "worker-raw")
	gate, err := harness.StartGate("aa-e2e-raw-" + ns)
	must(t, err, "start the recording webhook")
	gate.Open()
	t.Cleanup(func() { gate.Close(ctxFor(t, 30*time.Second), admin) })
	must(t, gate.RegisterFor(ctx, admin, admissionregistrationv1.Rule{
		APIGroups: []string{"apps", "resource.k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"controllerrevisions", "resourceclaims"},
	}, admissionregistrationv1.Create, ns, "true"), "register the recording webhook")
	must(t, gate.Ready(ctx, func(ctx context.Context) error {
		_, err := admin.AppsV1().ControllerRevisions(ns).Create(ctx, &appsv1.ControllerRevision{
			ObjectMeta: metav1.ObjectMeta{Name: "probe", Annotations: map[string]string{harness.GateProbe: "yes"}},
			Data:       runtime.RawExtension{Raw: []byte("{}")},
		}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}), "the recording webhook registered")

	recorded := map[string][]byte{}
	t.Run("ControllerRevisionData", func(t *testing.T) {
		revision, err := w.Client.AppsV1().ControllerRevisions(ns).Create(ctx, &appsv1.ControllerRevision{
			ObjectMeta: metav1.ObjectMeta{Name: "raw-revision", Labels: ownedLabels(w.Name(), "")},
			Data:       runtime.RawExtension{Raw: invalidUTF8},
			Revision:   1,
		}, metav1.CreateOptions{})
		must(t, err, "create a labelled ControllerRevision with invalid UTF-8 in its data")
		must(t, checkOwned(revision.ObjectMeta, w, true), "the ControllerRevision")
		if !bytes.Contains(revision.Data.Raw, invalidUTF8[9:13]) {
			t.Fatalf("the API server stored other bytes: %q", revision.Data.Raw)
		}
		recorded["create-controllerrevision-invalid-utf8-data"] = sentWith(t, gate, "raw-revision")
	})
	t.Run("ResourceClaimOpaqueParameters", func(t *testing.T) {
		needsMinor(t, 34, "1.33 serves no resource.k8s.io version by default (DRA is beta and off); resource.k8s.io/v1 is GA from 1.34")
		must(t, resourceV1Served(), "resource.k8s.io/v1 (DRA, GA in Kubernetes 1.34)")
		claim, err := w.Client.ResourceV1().ResourceClaims(ns).Create(ctx, &resourcev1.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "raw-claim", Labels: ownedLabels(w.Name(), "")},
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
				Requests: []resourcev1.DeviceRequest{{Name: "accel", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "accel.e2e.ownerguard.io"}}},
				Config: []resourcev1.DeviceClaimConfiguration{{DeviceConfiguration: resourcev1.DeviceConfiguration{
					Opaque: &resourcev1.OpaqueDeviceConfiguration{Driver: "accel.e2e.ownerguard.io", Parameters: runtime.RawExtension{Raw: invalidUTF8}},
				}}},
			}},
		}, metav1.CreateOptions{})
		must(t, err, "create a labelled ResourceClaim with invalid UTF-8 in its opaque parameters")
		must(t, checkOwned(claim.ObjectMeta, w, true), "the ResourceClaim")
		recorded["create-resourceclaim-invalid-utf8-parameters"] = sentWith(t, gate, "raw-claim")
	})
	if os.Getenv("E2E_UPDATE_RECORDED") == "" {
		return
	}
	dir := filepath.Join(repo, "tests", "fixtures", "apiserver")
	must(t, os.MkdirAll(dir, 0o755), "mkdir")
	for name, body := range recorded {
		must(t, os.WriteFile(filepath.Join(dir, name+".json"), body, 0o644), "write "+name)
	}
}

// sentWith: the body the API server sent the recording webhook for the
// object named name, which must hold the invalid bytes as the client sent
// them.
func sentWith(t *testing.T, gate *harness.Gate, name string) []byte {
	t.Helper()
	for _, body := range gate.Bodies() {
		if bytes.Contains(body, []byte(`"name":"`+name+`"`)) {
			if !bytes.Contains(body, invalidUTF8[9:13]) {
				t.Fatalf("the API server sent %s without the client's bytes: %q", name, body)
			}
			return body
		}
	}
	t.Fatalf("the API server sent no review of %s", name)
	return nil
}

// rbacRule: every verb on one resource of one API group.
func rbacRule(group, resource string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{resource}, Verbs: allVerbs}
}
