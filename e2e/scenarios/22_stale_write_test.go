package scenarios

// A write from a stale cache, as Kubernetes' own tests found it: the
// endpointslice controller, while a namespace was torn down, updated a
// labelled object from its cache 50 ms after the garbage collector had
// removed the (deleted) worker's reference from it. The API server runs
// the mutating webhooks before it compares resourceVersions, so ownerguard
// saw a copy that still named a gone worker and refused it: a refusal of
// a Kubernetes component, for a write that could only end in a conflict.
// Here the same order, made on purpose: the stale copy's UPDATE must get
// the API server's conflict (the writer then retries on the current
// object), and the same content written against the current version, or
// unconditionally, must still be judged and refused.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStaleWriteAfterWorkerGone(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	ns := newNamespace(t, "stale", workerRules)
	w := newWorker(t, ns, "worker-stale")
	// A second owner that stays, so that the collector keeps the object
	// and only removes the worker's reference once the worker is gone.
	keeper, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, configMap("keeper", nil), metav1.CreateOptions{})
	must(t, err, "create the second owner")
	cm := configMap("stale-copy", ownedLabels(w.Name(), w.UID()))
	cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: keeper.Name, UID: keeper.UID}}
	stale, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	must(t, err, "create the labelled object")
	must(t, checkOwned(stale.ObjectMeta, w, false), "created")

	must(t, admin.CoreV1().Pods(ns).Delete(ctx, w.Name(), metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}), "delete the worker")
	_, err = gone(ctx, time.Minute, func(ctx context.Context) error {
		_, err := admin.CoreV1().Pods(ns).Get(ctx, w.Name(), metav1.GetOptions{})
		return err
	})
	must(t, err, "the worker gone")
	var current *corev1.ConfigMap
	must(t, harness.Until(ctx, 90*time.Second, 200*time.Millisecond, "the collector removed the gone worker's reference", func() error {
		current, err = admin.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, ref := range current.OwnerReferences {
			if ref.UID == w.Pod.UID {
				return fmt.Errorf("still %s", refsString(current.OwnerReferences))
			}
		}
		return nil
	}), "the collector's removal")

	// The stale copy: the gone worker's reference, an older version.
	write := stale.DeepCopy()
	write.Data["prompt"] = "written from a stale cache"
	_, err = admin.CoreV1().ConfigMaps(ns).Update(ctx, write, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) {
		code, message := denial(err)
		t.Fatalf("the stale copy's update: want the API server's conflict, got %d %q", code, message)
	}

	// The same content against the current version, and unconditionally:
	// judged, and refused (the worker it names is gone).
	for _, version := range []string{current.ResourceVersion, ""} {
		write := stale.DeepCopy()
		write.ResourceVersion = version
		_, err = admin.CoreV1().ConfigMaps(ns).Update(ctx, write, metav1.UpdateOptions{})
		code, message := denial(err)
		if err == nil || apierrors.IsConflict(err) || code < 400 || code > 499 || !strings.Contains(message, mutateWebhook) {
			t.Fatalf("the gone worker's reference written back (resourceVersion %q): want ownerguard's refusal, got %d %q", version, code, message)
		}
		t.Logf("resourceVersion %q: refused %d: %s", version, code, message)
	}
	after, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{})
	must(t, err, "read the object back")
	if after.ResourceVersion != current.ResourceVersion || after.Data["prompt"] != current.Data["prompt"] {
		t.Fatalf("the object changed: resourceVersion %s (was %s), prompt %q", after.ResourceVersion, current.ResourceVersion, after.Data["prompt"])
	}
}
