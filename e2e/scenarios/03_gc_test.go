package scenarios

import (
	"context"
	"fmt"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// The garbage collector, for real: what ownerguard's references make it do.
func TestGarbageCollector(t *testing.T) {
	ns := newNamespace(t, "gc", workerRules)

	t.Run("DeletingTheWorkerCollectsItsObjects", func(t *testing.T) {
		ctx := ctxFor(t, 2*time.Minute)
		w := newWorker(t, ns, "worker-gc")
		labels := ownedLabels(w.Name(), "")
		_, err := w.Client.CoreV1().Pods(ns).Create(ctx, agentPod("gc-agent", labels), metav1.CreateOptions{})
		must(t, err, "agent pod")
		_, err = w.Client.BatchV1().Jobs(ns).Create(ctx, job("gc-job", labels), metav1.CreateOptions{})
		must(t, err, "job")
		_, err = w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("gc-prompt", labels), metav1.CreateOptions{})
		must(t, err, "configmap")
		// The collector knows an object once its informers saw it: let them.
		time.Sleep(time.Second)

		start := time.Now()
		must(t, admin.CoreV1().Pods(ns).Delete(ctx, w.Name(), metav1.DeleteOptions{}), "delete the worker")
		gets := map[string]func(context.Context) error{
			"agent pod": func(ctx context.Context) error {
				_, err := admin.CoreV1().Pods(ns).Get(ctx, "gc-agent", metav1.GetOptions{})
				return err
			},
			"job": func(ctx context.Context) error {
				_, err := admin.BatchV1().Jobs(ns).Get(ctx, "gc-job", metav1.GetOptions{})
				return err
			},
			"configmap": func(ctx context.Context) error {
				_, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "gc-prompt", metav1.GetOptions{})
				return err
			},
		}
		for what, get := range gets {
			if _, err := gone(ctx, 30*time.Second, get); err != nil {
				t.Errorf("%s not collected 30 s after its owner's deletion: %v", what, err)
				continue
			}
			t.Logf("%s collected %.2f s after the worker's deletion", what, time.Since(start).Seconds())
			fmt.Printf("    gc: %s collected %.2f s after the worker's deletion\n", what, time.Since(start).Seconds())
		}
	})

	t.Run("OrphanDeletionGoesThrough", func(t *testing.T) {
		// propagationPolicy Orphan (kubectl delete --cascade=orphan): the
		// collector removes the owner's reference from each dependent by an
		// UPDATE that ownerguard sees, then lets the owner go.
		ctx := ctxFor(t, 2*time.Minute)
		w := newWorker(t, ns, "worker-orphan")
		labels := ownedLabels(w.Name(), "")
		_, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("orphan-prompt", labels), metav1.CreateOptions{})
		must(t, err, "configmap")
		_, err = w.Client.CoreV1().Pods(ns).Create(ctx, agentPod("orphan-agent", labels), metav1.CreateOptions{})
		must(t, err, "agent pod")
		time.Sleep(time.Second)
		start := time.Now()
		must(t, admin.CoreV1().Pods(ns).Delete(ctx, w.Name(), metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationOrphan)}), "delete with propagationPolicy Orphan")
		took, err := gone(ctx, 30*time.Second, func(ctx context.Context) error {
			_, err := admin.CoreV1().Pods(ns).Get(ctx, w.Name(), metav1.GetOptions{})
			return err
		})
		if err != nil {
			pod, _ := admin.CoreV1().Pods(ns).Get(ctx, w.Name(), metav1.GetOptions{})
			t.Fatalf("the owner hangs in Terminating (finalizers %v): %v; the collector's complaints: %s",
				pod.Finalizers, err, harness.Grep(plane.KCM.Log, "orphan", 5))
		}
		fmt.Printf("    gc: owner deleted with Orphan gone after %.2f s\n", took.Seconds())
		_ = start
		cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "orphan-prompt", metav1.GetOptions{})
		must(t, err, "the orphaned configmap is kept")
		pod, err := admin.CoreV1().Pods(ns).Get(ctx, "orphan-agent", metav1.GetOptions{})
		must(t, err, "the orphaned agent pod is kept")
		for _, meta := range []metav1.ObjectMeta{cm.ObjectMeta, pod.ObjectMeta} {
			if len(meta.OwnerReferences) != 0 {
				t.Errorf("%s still has references %s", meta.Name, refsString(meta.OwnerReferences))
			}
			if meta.Labels[ownerPodLabel] != w.Name() || meta.Labels[ownerUIDLabel] != w.UID() {
				t.Errorf("%s lost its owner labels: %v", meta.Name, meta.Labels)
			}
		}
	})

	t.Run("StaleUIDWithoutWebhookCollectedAtOnce", func(t *testing.T) {
		// The trap ownerguard exists for: with the webhook uninstalled, a
		// reference whose uid is not the owner's current one makes the
		// collector delete the object right after its creation.
		ctx := ctxFor(t, 2*time.Minute)
		w := newWorker(t, ns, "worker-stale")
		stale := configMap("stale-prompt", nil)
		stale.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: w.Name(),
			UID: types.UID(uuid.NewUUID()), Controller: ptr(false), BlockOwnerDeletion: ptr(false)}}
		stale.Labels = ownedLabels(w.Name(), string(stale.OwnerReferences[0].UID))

		// With the webhook: refused.
		_, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, stale.DeepCopy(), metav1.CreateOptions{})
		if err == nil {
			t.Fatalf("a stale-uid reference was admitted with the webhook installed")
		}
		restore := uninstallWebhooks(t)
		defer restore()
		// The API server stops calling the webhook within a moment.
		must(t, harness.Until(ctx, 20*time.Second, 200*time.Millisecond, "created without the webhook", func() error {
			_, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, stale.DeepCopy(), metav1.CreateOptions{})
			return err
		}), "create with the webhook uninstalled")
		start := time.Now()
		took, err := gone(ctx, 30*time.Second, func(ctx context.Context) error {
			_, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "stale-prompt", metav1.GetOptions{})
			return err
		})
		must(t, err, "the collector deletes the stale-uid object")
		_ = start
		fmt.Printf("    gc: object with a stale-uid reference collected %.2f s after its creation\n", took.Seconds())
	})
}

// uninstallWebhooks deletes ownerguard's two webhook configurations (as
// the README's uninstall does) and returns what re-creates them.
func uninstallWebhooks(t *testing.T) func() {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	m, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, releaseName, metav1.GetOptions{})
	must(t, err, "get the mutating configuration")
	v, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, releaseName, metav1.GetOptions{})
	must(t, err, "get the validating configuration")
	must(t, admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, releaseName, metav1.DeleteOptions{}), "delete")
	must(t, admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, releaseName, metav1.DeleteOptions{}), "delete")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		restoreWebhooks(ctx, t, m, v)
	}
}

func restoreWebhooks(ctx context.Context, t *testing.T, m *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration) {
	m, v = m.DeepCopy(), v.DeepCopy()
	m.ResourceVersion, m.UID, m.ManagedFields = "", "", nil
	v.ResourceVersion, v.UID, v.ManagedFields = "", "", nil
	if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Errorf("restore the mutating configuration: %v", err)
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Errorf("restore the validating configuration: %v", err)
	}
	// Back in force once a labelled create with a missing owner is refused.
	probe := configMap("webhook-probe", ownedLabels("no-such-worker", string(uuid.NewUUID())))
	err := harness.Until(ctx, 20*time.Second, 200*time.Millisecond, "the webhook back in force", func() error {
		_, err := admin.CoreV1().ConfigMaps("default").Create(ctx, probe.DeepCopy(), metav1.CreateOptions{})
		if err == nil {
			_ = admin.CoreV1().ConfigMaps("default").Delete(ctx, probe.Name, metav1.DeleteOptions{})
			return fmt.Errorf("a labelled create with a missing owner was admitted")
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

var _ = corev1.Pod{}
