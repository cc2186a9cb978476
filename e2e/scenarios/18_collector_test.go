package scenarios

// The garbage collector under every identity it can have (issue 25, item
// 4; SPEC rule 16): with kube-controller-manager's
// --use-service-account-credentials (kubeadm; the rest of the suite) it
// is system:serviceaccount:kube-system:generic-garbage-collector, without
// it (the flag's default) every controller calls the API server as the
// controller manager's own user, system:kube-controller-manager. Under
// each: an orphaning that leaves an object over ownerguard's reference
// limit, and a foreground deletion, go through. Last of the suite: it
// restarts the controller manager, whose controllers (the collector's
// graph above all) then take a while to be whole again.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestCollectorIdentities(t *testing.T) {
	for _, shared := range []bool{false, true} {
		name := "ServiceAccountCredentials"
		if shared {
			name = "SharedControllerManagerUser"
		}
		t.Run(name, func(t *testing.T) {
			if shared {
				// Without per-controller credentials the controller
				// manager's user needs what every controller needs: a
				// cluster that runs so grants it (here, cluster-admin).
				ctx := ctxFor(t, 2*time.Minute)
				binding := &rbacv1.ClusterRoleBinding{
					ObjectMeta: metav1.ObjectMeta{Name: "e2e-kcm-shared-credentials"},
					RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
					Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "system:kube-controller-manager"}},
				}
				_, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
				must(t, err, "bind the controller manager's user")
				must(t, plane.RestartKCM(ctx, true), "restart the controller manager without --use-service-account-credentials")
				t.Cleanup(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
					if err := plane.RestartKCM(ctx, false); err != nil {
						t.Errorf("restart the controller manager with --use-service-account-credentials: %v", err)
					}
					_ = admin.RbacV1().ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
				})
			}
			ns := newNamespace(t, "collector", workerRules)
			t.Run("OrphaningOverTheReferenceLimit", func(t *testing.T) { orphanOverTheLimit(t, ns) })
			t.Run("ForegroundDeletion", func(t *testing.T) { foregroundDeletion(t, ns) })
		})
	}
}

// orphanOverTheLimit: an object owned by the worker and by more pods than
// ownerguard's reference limit (32; made while its webhooks were away, as
// an object from before the install is) loses the worker's reference to
// the collector's orphaning UPDATE; the owner goes, nothing hangs.
func orphanOverTheLimit(t *testing.T, ns string) {
	ctx := ctxFor(t, 3*time.Minute)
	w := newWorker(t, ns, "worker-over")
	refs := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: w.Name(), UID: w.Pod.UID, Controller: ptr(false), BlockOwnerDeletion: ptr(false)}}
	for i := range 36 {
		p := newPod(t, ns, fmt.Sprintf("co-owner-%d", i))
		refs = append(refs, metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID, Controller: ptr(false), BlockOwnerDeletion: ptr(false)})
	}
	cm := configMap("many-owners", ownedLabels(w.Name(), w.UID()))
	cm.OwnerReferences = refs
	restore := uninstallWebhooks(t)
	must(t, harness.Until(ctx, 20*time.Second, 200*time.Millisecond, "created without the webhook", func() error {
		_, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, cm.DeepCopy(), metav1.CreateOptions{})
		return err
	}), "create the object over the limit")
	restore()
	must(t, admin.CoreV1().Pods(ns).Delete(ctx, w.Name(), metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationOrphan)}), "delete the worker with Orphan")
	took, err := gone(ctx, 60*time.Second, func(ctx context.Context) error {
		_, err := admin.CoreV1().Pods(ns).Get(ctx, w.Name(), metav1.GetOptions{})
		return err
	})
	if err != nil {
		pod, _ := admin.CoreV1().Pods(ns).Get(ctx, w.Name(), metav1.GetOptions{})
		t.Fatalf("the owner hangs in Terminating (finalizers %v): %v; the collector's complaints: %s",
			pod.Finalizers, err, harness.Grep(plane.KCM.Log, "many-owners", 5))
	}
	got, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "many-owners", metav1.GetOptions{})
	must(t, err, "the orphaned object is kept")
	if len(got.OwnerReferences) != len(refs)-1 {
		t.Fatalf("%d references after the orphaning, want %d: the worker's removed, the others kept", len(got.OwnerReferences), len(refs)-1)
	}
	for _, r := range got.OwnerReferences {
		if r.UID == w.Pod.UID {
			t.Fatal("the worker's reference is still there")
		}
	}
	fmt.Printf("    collector: orphaned an object of %d references in %.2f s\n", len(refs), took.Seconds())
}

// foregroundDeletion: the worker deleted with propagationPolicy
// Foreground; the collector deletes its agent pod and prompt, then the
// worker itself.
func foregroundDeletion(t *testing.T, ns string) {
	ctx := ctxFor(t, 2*time.Minute)
	w := newWorker(t, ns, "worker-fg")
	labels := ownedLabels(w.Name(), "")
	_, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("fg-prompt", labels), metav1.CreateOptions{})
	must(t, err, "configmap")
	_, err = w.Client.CoreV1().Pods(ns).Create(ctx, agentPod("fg-agent", labels), metav1.CreateOptions{})
	must(t, err, "agent pod")
	must(t, admin.CoreV1().Pods(ns).Delete(ctx, w.Name(), metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationForeground)}), "delete the worker with Foreground")
	for what, get := range map[string]func(context.Context) error{
		"the worker": func(ctx context.Context) error {
			_, err := admin.CoreV1().Pods(ns).Get(ctx, w.Name(), metav1.GetOptions{})
			return err
		},
		"the agent": func(ctx context.Context) error {
			_, err := admin.CoreV1().Pods(ns).Get(ctx, "fg-agent", metav1.GetOptions{})
			return err
		},
		"the prompt": func(ctx context.Context) error {
			_, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "fg-prompt", metav1.GetOptions{})
			return err
		},
	} {
		if _, err := gone(ctx, 60*time.Second, get); err != nil {
			pod, _ := admin.CoreV1().Pods(ns).Get(ctx, w.Name(), metav1.GetOptions{})
			t.Fatalf("%s not collected: %v (the worker's finalizers %v); the collector: %s", what, err, pod.Finalizers,
				harness.Grep(plane.KCM.Log, ns+"/", 5))
		}
	}
}
