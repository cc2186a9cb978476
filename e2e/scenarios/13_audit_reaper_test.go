package scenarios

// Issue 16 against the real API server and collector: `ownerguard audit`
// finds what was made with the webhook uninstalled (leaked, a missing
// reference), --fix repairs the second through the webhooks, and deleting
// the owner then collects it; the reaper (`serve --reap-finished`) releases
// what a worker owns once its pod has been Failed (by its kubelet: the
// scenarios' hollow node, its deadline passed) for the grace period, and
// of two replicas only the Lease's holder reaps.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// auditLines runs `ownerguard audit --output json` on ns as the admin: its
// findings by object name, and the exit error.
func auditLines(t *testing.T, ns string, extra ...string) (map[string]map[string]any, error) {
	t.Helper()
	args := append([]string{"audit", "--namespace", ns, "--resource", "configmaps", "--output", "json"}, extra...)
	out, err := ownerguardCmd(ctxFor(t, time.Minute), plane.AdminKubeconfig, args...)
	t.Logf("ownerguard %s:\n%s", strings.Join(args, " "), out)
	found := map[string]map[string]any{}
	for _, line := range strings.Split(out, "\n") {
		var finding map[string]any
		if json.Unmarshal([]byte(line), &finding) == nil && finding["name"] != nil {
			found[finding["name"].(string)] = finding
		}
	}
	return found, err
}

func TestAudit(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	ns := newNamespace(t, "audit", nil)
	w := newPod(t, ns, "worker-audit")
	goneOwner := newPod(t, ns, "worker-gone")
	must(t, admin.CoreV1().Pods(ns).Delete(ctx, goneOwner.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}), "delete the gone worker")

	// Made with the webhook uninstalled, as before ownerguard: one labelled
	// for a worker that is gone, one for a worker that runs; neither has a
	// reference.
	restore := uninstallWebhooks(t)
	leaked := configMap("leaked-prompt", ownedLabels(goneOwner.Name, string(goneOwner.UID)))
	missing := configMap("missing-prompt", ownedLabels(w.Name, string(w.UID)))
	must(t, harness.Until(ctx, 20*time.Second, 200*time.Millisecond, "created without the webhook", func() error {
		_, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, leaked.DeepCopy(), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		created, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, missing.DeepCopy(), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if len(created.OwnerReferences) != 0 {
			return fmt.Errorf("the webhook still answers: %v", created.OwnerReferences)
		}
		return nil
	}), "create with the webhook uninstalled")
	restore()

	found, err := auditLines(t, ns)
	if err == nil {
		t.Fatalf("audit exited 0 with a leak and a missing reference")
	}
	if got := found["leaked-prompt"]["state"]; got != "leaked" {
		t.Errorf("leaked-prompt: %v, want leaked", got)
	}
	if got := found["missing-prompt"]["state"]; got != "missing-reference" {
		t.Errorf("missing-prompt: %v, want missing-reference", got)
	}

	// --fix, through the webhooks (restored): the reference added, nothing
	// deleted.
	waitDeploymentReady(ctx, t)
	must(t, harness.Until(ctx, 30*time.Second, time.Second, "fixed", func() error {
		found, _ := auditLines(t, ns, "--fix")
		if got := found["missing-prompt"]["fix"]; got != "fixed" {
			return fmt.Errorf("missing-prompt: fix %v", got)
		}
		return nil
	}), "audit --fix")
	fixed, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "missing-prompt", metav1.GetOptions{})
	must(t, err, "the fixed ConfigMap")
	if len(fixed.OwnerReferences) != 1 || fixed.OwnerReferences[0].UID != w.UID || *fixed.OwnerReferences[0].BlockOwnerDeletion {
		t.Fatalf("fixed with %v, want one non-blocking reference to %s", fixed.OwnerReferences, w.Name)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "leaked-prompt", metav1.GetOptions{}); err != nil {
		t.Errorf("--fix deleted the leaked object: %v", err)
	}
	// The repair told on the owner pod (kubectl describe pod).
	fixedEvent := untilPodEvent(ctx, t, w, "OwnerReferenceFixed")
	if !strings.Contains(fixedEvent.Note, "'missing-prompt'") {
		t.Fatalf("the OwnerReferenceFixed event says %q", fixedEvent.Note)
	}
	found, _ = auditLines(t, ns)
	if _, left := found["missing-prompt"]; left {
		t.Errorf("missing-prompt still found after --fix: %v", found["missing-prompt"])
	}

	// The owner deleted, the collector takes what --fix tied to it.
	must(t, admin.CoreV1().Pods(ns).Delete(ctx, w.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}), "delete the worker")
	took, err := gone(ctx, 60*time.Second, func(ctx context.Context) error {
		_, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "missing-prompt", metav1.GetOptions{})
		return err
	})
	must(t, err, "the collector deletes the fixed object with its owner")
	fmt.Printf("    audit: leaked and missing-reference found; --fix added the reference; the object collected %.2f s after its owner's deletion\n", took.Seconds())
}

func TestReaper(t *testing.T) {
	ctx := ctxFor(t, 4*time.Minute)
	ns := newNamespace(t, "reaper", workerRules)
	// The worker runs on the scenarios' kubelet, which fails it.
	w := runningWorker(t, ns, "worker-reaped", nil)
	labels := ownedLabels(w.Name(), "")
	_, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("reaped-prompt", labels), metav1.CreateOptions{})
	must(t, err, "the worker's ConfigMap")
	_, err = w.Client.CoreV1().Pods(ns).Create(ctx, agentPod("reaped-agent", labels), metav1.CreateOptions{})
	must(t, err, "the worker's agent")

	// Two replicas, as the chart runs them, with the reaper on.
	const after = 4 * time.Second
	replicas := make([]*harness.Ownerguard, 2)
	for i := range replicas {
		og, err := plane.Serve(ctx, admin, inst, harness.ServeOptions{
			Name: fmt.Sprintf("ownerguard-reaper-%d", i), Token: plane.PKI.OwnerguardAdminToken,
			Addr: fmt.Sprintf("127.0.0.1:%d", 8470+i), MetricsPort: 9470 + i,
			ExtraArgs: []string{"--reap-finished", "--reap-after=" + after.String(), "--reaper-lease=e2e-reaper",
				"--reaper-lease-namespace=" + ns, fmt.Sprintf("--reaper-identity=replica-%d", i), "--events"}})
		must(t, err, "a reaper")
		defer og.Stop(30 * time.Second)
		replicas[i] = og
	}
	leaders := func() int {
		n := 0
		for _, og := range replicas {
			if v, err := og.Metric("ownerguard_reaper_leader", nil); err == nil && v == 1 {
				n++
			}
		}
		return n
	}
	must(t, harness.Until(ctx, 30*time.Second, 200*time.Millisecond, "one leader", func() error {
		if n := leaders(); n != 1 {
			return fmt.Errorf("%d replicas lead", n)
		}
		return nil
	}), "the Lease")

	// The worker fails: given a deadline already past, its kubelet fails
	// it (DeadlineExceeded). The time is the watch event's, as the
	// reaper's is (which may come a few milliseconds sooner).
	watch, err := admin.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + w.Name(), ResourceVersion: w.Pod.ResourceVersion})
	must(t, err, "watch the worker")
	defer watch.Stop()
	_, err = admin.CoreV1().Pods(ns).Patch(ctx, w.Name(), types.MergePatchType, []byte(`{"spec":{"activeDeadlineSeconds":1}}`), metav1.PatchOptions{})
	must(t, err, "give the worker a deadline")
	var failedAt time.Time
	for failedAt.IsZero() {
		select {
		case event, open := <-watch.ResultChan():
			if !open {
				t.Fatal("the worker's watch ended before it failed")
			}
			if pod, ok := event.Object.(*corev1.Pod); ok && pod.Status.Phase == corev1.PodFailed {
				failedAt = time.Now()
				if pod.Status.Reason != "DeadlineExceeded" {
					t.Fatalf("the worker failed for %q, not its kubelet's DeadlineExceeded", pod.Status.Reason)
				}
			}
		case <-ctx.Done():
			t.Fatal("the worker's kubelet did not fail it")
		}
	}

	time.Sleep(after / 2)
	if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "reaped-prompt", metav1.GetOptions{}); err != nil {
		t.Fatalf("reaped within the grace period (%v): %v", after, err)
	}
	took, err := gone(ctx, 60*time.Second, func(ctx context.Context) error {
		_, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "reaped-prompt", metav1.GetOptions{})
		return err
	})
	must(t, err, "the reaper releases the finished worker's ConfigMap")
	_, err = gone(ctx, 60*time.Second, func(ctx context.Context) error {
		_, err := admin.CoreV1().Pods(ns).Get(ctx, "reaped-agent", metav1.GetOptions{})
		return err
	})
	must(t, err, "the reaper releases the finished worker's agent")
	if since := time.Since(failedAt); since < after-200*time.Millisecond {
		t.Errorf("reaped %v after the failure, before the grace period %v", since, after)
	}
	if _, err := admin.CoreV1().Pods(ns).Get(ctx, w.Name(), metav1.GetOptions{}); err != nil {
		t.Errorf("the finished worker itself was deleted: %v", err)
	}
	time.Sleep(2 * time.Second)
	reaped := 0.0
	for _, og := range replicas {
		v, _ := og.Metric("ownerguard_reaped_objects_total", map[string]string{"resource": "configmaps"})
		reaped += v
	}
	if reaped != 1 {
		t.Errorf("ownerguard_reaped_objects_total{resource=configmaps} summed over the replicas is %v, want 1: reaped twice, or counted by neither", reaped)
	}
	if n := leaders(); n != 1 {
		t.Errorf("%d replicas lead", n)
	}
	// The release told on the finished worker (kubectl describe pod).
	reapedEvent := untilPodEvent(ctx, t, w.Pod, "Reaped")
	if !strings.Contains(reapedEvent.Note, "1 pod(s), 0 Job(s), 1 ConfigMap(s)") {
		t.Errorf("the Reaped event says %q", reapedEvent.Note)
	}
	fmt.Printf("    reaper: the finished worker's objects released %.2f s after it failed (--reap-after=%v); one replica of two reaped\n", took.Seconds()+after.Seconds()/2, after)
}
