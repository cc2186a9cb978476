package scenarios

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Updates through real PATCH and PUT: ownership is set at create time.
func TestUpdates(t *testing.T) {
	ns := newNamespace(t, "updates", workerRules)
	w := newWorker(t, ns, "worker-upd")
	other := newPod(t, ns, "worker-other")
	labels := ownedLabels(w.Name(), "")
	create := func(t *testing.T, name string) *corev1.ConfigMap {
		cm, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctxFor(t, 30*time.Second), configMap(name, labels), metav1.CreateOptions{})
		must(t, err, "create "+name)
		must(t, checkOwned(cm.ObjectMeta, w, true), "created")
		return cm
	}
	// deniedOnUpdate: the update is refused with 403 by ownerguard.
	deniedOnUpdate := func(t *testing.T, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("the update was admitted")
		}
		code, message := denial(err)
		want := fmt.Sprintf("admission webhook %q denied the request: ", mutateWebhook)
		if code != 403 || len(message) <= len(want) || message[:len(want)] != want {
			t.Fatalf("denied %d %q; want 403 from %s", code, message, mutateWebhook)
		}
		t.Logf("denied: %s", message)
	}

	t.Run("OwnerLabelChangeDenied", func(t *testing.T) {
		ctx := ctxFor(t, 30*time.Second)
		cm := create(t, "upd-label")
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, ownerPodLabel, other.Name)
		_, err := w.Client.CoreV1().ConfigMaps(ns).Patch(ctx, cm.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		deniedOnUpdate(t, err)
		patch = fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, ownerPodLabel)
		_, err = w.Client.CoreV1().ConfigMaps(ns).Patch(ctx, cm.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		deniedOnUpdate(t, err)
	})

	t.Run("LiveOwnerReferenceRemovalDenied", func(t *testing.T) {
		ctx := ctxFor(t, 30*time.Second)
		cm := create(t, "upd-ref")
		_, err := w.Client.CoreV1().ConfigMaps(ns).Patch(ctx, cm.Name, types.JSONPatchType,
			[]byte(`[{"op":"remove","path":"/metadata/ownerReferences"}]`), metav1.PatchOptions{})
		deniedOnUpdate(t, err)
		// The same through PUT, keeping the uid label (so that it is not
		// the restorable kubectl replace of the original manifest).
		cm.OwnerReferences = nil
		_, err = w.Client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
		if err == nil {
			stored, _ := admin.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{})
			must(t, checkOwned(stored.ObjectMeta, w, true), "a PUT without the reference is either refused or restored")
		}
	})

	t.Run("PutOfOriginalManifestRestoresReference", func(t *testing.T) {
		ctx := ctxFor(t, 30*time.Second)
		create(t, "upd-put")
		original := configMap("upd-put", labels)
		original.Data["prompt"] = "changed"
		cm, err := w.Client.CoreV1().ConfigMaps(ns).Update(ctx, original, metav1.UpdateOptions{})
		must(t, err, "PUT of the original manifest")
		must(t, checkOwned(cm.ObjectMeta, w, true), "after the PUT")
	})

	t.Run("BlockingReferenceUnblocked", func(t *testing.T) {
		// The API server runs OwnerReferencesPermissionEnforcement: the
		// worker may not set blockOwnerDeletion (no update on
		// pods/finalizers). /mutate sets it back to false before that
		// plugin and the validating webhook look at the final object.
		ctx := ctxFor(t, 30*time.Second)
		cm := create(t, "upd-block")
		refs := cm.OwnerReferences
		refs[0].BlockOwnerDeletion = ptr(true)
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": refs}})
		updated, err := w.Client.CoreV1().ConfigMaps(ns).Patch(ctx, cm.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		must(t, err, "patch making the reference blocking")
		must(t, checkOwned(updated.ObjectMeta, w, true), "after the patch")

		// The same object created with a blocking reference by the worker.
		blocked := configMap("upd-blocked-create", labels)
		blocked.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: w.Name(), UID: w.Pod.UID, Controller: ptr(false), BlockOwnerDeletion: ptr(true)}}
		created, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, blocked, metav1.CreateOptions{})
		must(t, err, "create with a blocking reference")
		must(t, checkOwned(created.ObjectMeta, w, true), "created")
	})

	t.Run("UnrelatedUpdateAllowed", func(t *testing.T) {
		ctx := ctxFor(t, 30*time.Second)
		cm := create(t, "upd-data")
		_, err := w.Client.CoreV1().ConfigMaps(ns).Patch(ctx, cm.Name, types.MergePatchType, []byte(`{"data":{"prompt":"v2"},"metadata":{"labels":{"stage":"2"}}}`), metav1.PatchOptions{})
		must(t, err, "a patch that leaves ownership alone")
	})
}
