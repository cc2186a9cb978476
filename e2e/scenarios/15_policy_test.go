package scenarios

// MutatingAdmissionPolicy (GA in 1.36) against ownerguard's /mutate
// (issue 24, item 6): what a policy inside the API server can do for the
// simplest case, the caller that is its own owner, and what it cannot,
// proven on the real API server. The measurement (one webhook call per
// create instead of two) is bench/create.sh's; the decision and its
// figures are in docs/reference/apiserver.md#mutatingadmissionpolicy.

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMutatingAdmissionPolicy(t *testing.T) {
	needsMinor(t, 36, "MutatingAdmissionPolicy is GA and on from 1.36 (beta and off in 1.34 and 1.35)")
	ns := newNamespace(t, "policy", workerRules)
	w := newWorker(t, ns, "worker-policy")
	ctx := ctxFor(t, 3*time.Minute)
	must(t, harness.InstallPolicy(ctx, admin, "ownerguard.io", ns, "configmaps", "pods", "jobs"), "install the policy")
	t.Cleanup(func() { _ = harness.RemovePolicy(ctxFor(t, 30*time.Second), admin) })
	mutated := func(resource, result string) float64 {
		n, _ := guard.Metric("ownerguard_admission_requests_total", map[string]string{"webhook": "mutate", "operation": "CREATE", "resource": resource, "result": result})
		return n
	}
	// The API server loads a policy, and the types it converts objects
	// to, in the background: until then a create gets 503 from it.
	var cm *corev1.ConfigMap
	must(t, harness.Until(ctx, 60*time.Second, 500*time.Millisecond, "the policy in force", func() error {
		var err error
		cm, err = w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("policy-probe", ownedLabels(w.Name(), "")), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if cm.Annotations[harness.PolicyMarkerAnnotation] != "policy" {
			return errors.New("the policy has not mutated the create yet")
		}
		return nil
	}), "the policy")

	t.Run("CallerIsOwnerCompletedByThePolicy", func(t *testing.T) {
		// The worker labels its ConfigMap with its name only; the policy
		// takes the uid from the worker's own token and writes the
		// reference and the uid label; ownerguard's /mutate, called
		// after it, finds nothing left to patch; /validate judges the
		// final object and admits it.
		patched, allowed := mutated("configmaps", "patched"), mutated("configmaps", "allowed")
		cm, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("by-policy", ownedLabels(w.Name(), "")), metav1.CreateOptions{})
		must(t, err, "create as the worker")
		must(t, checkOwned(cm.ObjectMeta, w, true), "the stored ConfigMap")
		if cm.Annotations[harness.PolicyMarkerAnnotation] != "policy" {
			t.Fatal("the policy did not mutate the create")
		}
		if mutated("configmaps", "patched") != patched || mutated("configmaps", "allowed") <= allowed {
			t.Fatalf("/mutate answered: patched %v -> %v, allowed %v -> %v; want one allowed without a patch",
				patched, mutated("configmaps", "patched"), allowed, mutated("configmaps", "allowed"))
		}
		fmt.Printf("    policy: %s stored with %s, /mutate had nothing to add\n", cm.Name, refsString(cm.OwnerReferences))
	})

	// What it cannot do, each caught by ownerguard's webhooks after it.
	t.Run("CannotLookTheOwnerUp", func(t *testing.T) {
		// A uid label of no running pod: the policy writes the reference
		// it is given (it cannot ask the cluster); ownerguard refuses.
		_, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("stale-uid", ownedLabels(w.Name(), "00000000-0000-4000-8000-000000000000")), metav1.CreateOptions{})
		wantRefusedByOwnerguard(t, err, "whose uid differs")
		// A finished worker: its token is still valid and the policy sees
		// no phase; ownerguard refuses. It learns the phase from its
		// watch a moment after the status update, so the worker tries
		// (dry run) until refused, at most 10 s, as in TestFinishedOwner.
		done := newWorker(t, ns, "worker-policy-done")
		finish(t, done.Pod, corev1.PodSucceeded)
		must(t, harness.Until(ctx, 10*time.Second, 200*time.Millisecond, "refused as finished", func() error {
			_, err := done.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("finished", ownedLabels(done.Name(), "")), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return refusedAsFinished(err, done.Name())
		}), "a ConfigMap of the finished worker")
	})

	t.Run("TemplatesLeftToOwnerguard", func(t *testing.T) {
		// The policy writes the Job's own reference; the uid label of
		// the pod template, which the Job controller's pods need (they
		// arrive with no pod identity), is /mutate's: it patches.
		patched := mutated("jobs", "patched")
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "agents", Labels: ownedLabels(w.Name(), "")},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: ownedLabels(w.Name(), "")},
				Spec:       agentPod("x", nil).Spec,
			}},
		}
		job.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
		got, err := w.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		must(t, err, "create a Job as the worker")
		if got.Spec.Template.Labels[ownerUIDLabel] != w.UID() {
			t.Fatalf("the template's uid label %q, want %q", got.Spec.Template.Labels[ownerUIDLabel], w.UID())
		}
		if mutated("jobs", "patched") <= patched {
			t.Fatal("/mutate did not patch the Job: the template's uid label came from elsewhere")
		}
	})
}

// wantRefusedByOwnerguard: err is a refusal of one of ownerguard's
// webhooks whose message holds want.
func wantRefusedByOwnerguard(t *testing.T, err error, want string) {
	t.Helper()
	code, message, ok := isOwnerguardDenial(err)
	if !ok || !strings.Contains(message, want) {
		t.Fatalf("want a refusal by ownerguard saying %q, have %d %v", want, code, err)
	}
}
