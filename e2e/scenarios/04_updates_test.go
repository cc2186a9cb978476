package scenarios

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

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
	// deniedOnUpdate: the update is refused by ownerguard, with wantCode
	// (0: any 4xx).
	deniedOnUpdate := func(t *testing.T, err error, wantCode int32) {
		t.Helper()
		if err == nil {
			t.Fatalf("the update was admitted")
		}
		code, message := denial(err)
		want := fmt.Sprintf("admission webhook %q denied the request: ", mutateWebhook)
		if (wantCode != 0 && code != wantCode) || code < 400 || code > 499 || !strings.HasPrefix(message, want) {
			t.Fatalf("denied %d %q; want %d from %s", code, message, wantCode, mutateWebhook)
		}
		t.Logf("denied %d: %s", code, message)
	}

	t.Run("OwnerLabelChangeDenied", func(t *testing.T) {
		ctx := ctxFor(t, 30*time.Second)
		cm := create(t, "upd-label")
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, ownerPodLabel, other.Name)
		_, err := w.Client.CoreV1().ConfigMaps(ns).Patch(ctx, cm.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		deniedOnUpdate(t, err, 403)
		// Both owner labels removed while the owner runs and its
		// reference stays.
		patch = fmt.Sprintf(`{"metadata":{"labels":{%q:null,%q:null}}}`, ownerPodLabel, ownerUIDLabel)
		_, err = w.Client.CoreV1().ConfigMaps(ns).Patch(ctx, cm.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		deniedOnUpdate(t, err, 403)
		// The owner-pod label alone removed: the uid label left names no
		// owner (400, malformed) and ownership may not change anyway.
		patch = fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, ownerPodLabel)
		_, err = w.Client.CoreV1().ConfigMaps(ns).Patch(ctx, cm.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		deniedOnUpdate(t, err, 0)
	})

	t.Run("LiveOwnerReferenceCannotBeRemoved", func(t *testing.T) {
		// Removing the running owner's reference never takes effect:
		// either refused (403) or, where the update merely omits what
		// ownerguard added, put back by /mutate.
		ctx := ctxFor(t, 30*time.Second)
		cm := create(t, "upd-ref")
		removals := map[string]func() error{
			"JSON patch removing ownerReferences": func() error {
				_, err := w.Client.CoreV1().ConfigMaps(ns).Patch(ctx, cm.Name, types.JSONPatchType,
					[]byte(`[{"op":"remove","path":"/metadata/ownerReferences"}]`), metav1.PatchOptions{})
				return err
			},
			"merge patch setting ownerReferences to []": func() error {
				_, err := w.Client.CoreV1().ConfigMaps(ns).Patch(ctx, cm.Name, types.MergePatchType,
					[]byte(`{"metadata":{"ownerReferences":[]}}`), metav1.PatchOptions{})
				return err
			},
			"PUT without the reference, labels kept": func() error {
				current, err := w.Client.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				current.OwnerReferences = nil
				_, err = w.Client.CoreV1().ConfigMaps(ns).Update(ctx, current, metav1.UpdateOptions{})
				return err
			},
		}
		for what, remove := range removals {
			err := remove()
			if err != nil {
				deniedOnUpdate(t, err, 403)
				continue
			}
			stored, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{})
			must(t, err, "get")
			if err := checkOwned(stored.ObjectMeta, w, true); err != nil {
				t.Errorf("%s admitted and the reference not put back: %v", what, err)
			} else {
				t.Logf("%s: admitted with the reference put back", what)
			}
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

	// Another worker P, with its own pod-bound token, adds its own Pod
	// reference (labels untouched) to an object of W's: the same final
	// object is refused on CREATE, so it is on UPDATE, by a JSON patch and
	// by a PUT; the object keeps W's reference alone.
	addsItself := func(t *testing.T, p *Worker, name string) {
		t.Helper()
		ctx := ctxFor(t, 30*time.Second)
		ref := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: p.Name(), UID: p.Pod.UID, Controller: ptr(false), BlockOwnerDeletion: ptr(false)}
		current, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		must(t, err, "get "+name)
		op := map[string]any{"op": "add", "path": "/metadata/ownerReferences/-", "value": ref}
		if len(current.OwnerReferences) == 0 {
			op = map[string]any{"op": "add", "path": "/metadata/ownerReferences", "value": []metav1.OwnerReference{ref}}
		}
		patch, _ := json.Marshal([]any{op})
		_, err = p.Client.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{})
		deniedOnUpdate(t, err, 403)
		current.OwnerReferences = append(current.OwnerReferences, ref)
		_, err = p.Client.CoreV1().ConfigMaps(ns).Update(ctx, current, metav1.UpdateOptions{})
		deniedOnUpdate(t, err, 403)
		stored, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		must(t, err, "get "+name)
		for _, r := range stored.OwnerReferences {
			if r.UID == p.Pod.UID {
				t.Fatalf("%s holds the other worker's reference: %s", name, refsString(stored.OwnerReferences))
			}
		}
	}

	t.Run("AnotherWorkerCannotMakeItselfCoOwner", func(t *testing.T) {
		p := newWorker(t, ns, "worker-coowner")
		create(t, "upd-coowner")
		addsItself(t, p, "upd-coowner")
		stored, err := admin.CoreV1().ConfigMaps(ns).Get(ctxFor(t, 30*time.Second), "upd-coowner", metav1.GetOptions{})
		must(t, err, "get")
		must(t, checkOwned(stored.ObjectMeta, w, true), "after the refused updates")
	})

	t.Run("OrphanedObjectCannotBeAdopted", func(t *testing.T) {
		// W2's object, orphaned (W2 deleted with propagationPolicy Orphan:
		// the collector removed the reference, the labels stay W2's),
		// then adopted by P the same way.
		ctx := ctxFor(t, time.Minute)
		w2 := newWorker(t, ns, "worker-orphaning")
		p := newWorker(t, ns, "worker-adopter")
		_, err := w2.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("upd-orphan", ownedLabels(w2.Name(), "")), metav1.CreateOptions{})
		must(t, err, "create as W2")
		time.Sleep(time.Second) // the collector's informers see it
		must(t, admin.CoreV1().Pods(ns).Delete(ctx, w2.Name(), metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationOrphan)}), "delete W2, orphaning")
		must(t, harness.Until(ctx, 30*time.Second, 100*time.Millisecond, "orphaned", func() error {
			cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "upd-orphan", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(cm.OwnerReferences) != 0 || cm.Labels[ownerPodLabel] != w2.Name() {
				return fmt.Errorf("references %s, labels %v", refsString(cm.OwnerReferences), cm.Labels)
			}
			return nil
		}), "the collector orphans the object, labels kept")
		addsItself(t, p, "upd-orphan")
	})

	t.Run("UnrelatedUpdateAllowed", func(t *testing.T) {
		ctx := ctxFor(t, 30*time.Second)
		cm := create(t, "upd-data")
		_, err := w.Client.CoreV1().ConfigMaps(ns).Patch(ctx, cm.Name, types.MergePatchType, []byte(`{"data":{"prompt":"v2"},"metadata":{"labels":{"stage":"2"}}}`), metav1.PatchOptions{})
		must(t, err, "a patch that leaves ownership alone")
	})
}
