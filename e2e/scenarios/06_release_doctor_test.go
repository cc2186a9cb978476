package scenarios

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// releaseRules is the README's Role for `release`, and what the worker
// needs to create its objects.
var releaseRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "delete", "create"}},
	{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list", "delete", "create"}},
	{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"list", "delete", "create"}},
}

func ownerguardCmd(ctx context.Context, kubeconfig string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, os.Getenv("OWNERGUARD_BIN"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "OWNERGUARD_LOG=info")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// `release` run as the worker, with its bound token and the README's Role.
func TestRelease(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	ns := newNamespace(t, "release", releaseRules)
	w := newWorker(t, ns, "worker-rel")
	other := newWorker(t, ns, "worker-other")
	mine, theirs := ownedLabels(w.Name(), ""), ownedLabels(other.Name(), "")
	for i := 0; i < 2; i++ {
		_, err := w.Client.CoreV1().Pods(ns).Create(ctx, agentPod(fmt.Sprintf("mine-%d", i), mine), metav1.CreateOptions{})
		must(t, err, "agent pod")
	}
	_, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("mine-prompt", mine), metav1.CreateOptions{})
	must(t, err, "configmap")
	j, err := w.Client.BatchV1().Jobs(ns).Create(ctx, job("mine-job", mine), metav1.CreateOptions{})
	must(t, err, "job")
	_, err = other.Client.CoreV1().Pods(ns).Create(ctx, agentPod("theirs", theirs), metav1.CreateOptions{})
	must(t, err, "another worker's pod")
	_, err = other.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("theirs-prompt", theirs), metav1.CreateOptions{})
	must(t, err, "another worker's configmap")
	_, err = admin.CoreV1().ConfigMaps(ns).Create(ctx, configMap("unowned", nil), metav1.CreateOptions{})
	must(t, err, "an unowned configmap")
	_, err = admin.CoreV1().Pods(ns).Create(ctx, agentPod("unowned-pod", nil), metav1.CreateOptions{})
	must(t, err, "an unowned pod")
	// The Job's pods, made by the job controller (owned through the Job
	// and through the template's labels).
	jobPods := "batch.kubernetes.io/job-name=" + j.Name
	_ = harness.Until(ctx, 30*time.Second, 250*time.Millisecond, "job pods", func() error {
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: jobPods})
		if err != nil || len(pods.Items) == 0 {
			return fmt.Errorf("no job pods yet (%v)", err)
		}
		return nil
	})

	kubeconfig := filepath.Join(t.TempDir(), "worker.kubeconfig")
	must(t, harness.Kubeconfig(kubeconfig, harness.APIURL(harness.APIPort), plane.PKI.CAFile, w.Token), "worker kubeconfig")
	out, err := ownerguardCmd(ctx, kubeconfig, "release", "--namespace", ns, "--owner-pod", w.Name(), "--owner-uid", w.UID(), "--timeout", "60s")
	t.Logf("ownerguard release:\n%s", out)
	must(t, err, "ownerguard release as the worker")

	for _, name := range []string{"mine-0", "mine-1"} {
		if _, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("pod %s not released (%v)", name, err)
		}
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "mine-prompt", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("configmap mine-prompt not released (%v)", err)
	}
	if _, err := admin.BatchV1().Jobs(ns).Get(ctx, j.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		// Released with background propagation: the Job may linger a
		// moment as the collector works, but not with its deletion unset.
		job, err2 := admin.BatchV1().Jobs(ns).Get(ctx, j.Name, metav1.GetOptions{})
		if err2 == nil && job.DeletionTimestamp == nil {
			t.Errorf("job %s not released", j.Name)
		}
	}
	if pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: jobPods}); err == nil && len(pods.Items) > 0 {
		t.Errorf("release returned with %d pods of its job left", len(pods.Items))
	}
	for _, name := range []string{"theirs", "unowned-pod", w.Name(), other.Name()} {
		if _, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("pod %s was not the worker's to release: %v", name, err)
		}
	}
	for _, name := range []string{"theirs-prompt", "unowned"} {
		if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("configmap %s was not the worker's to release: %v", name, err)
		}
	}
}

// `doctor` against the Helm installation, ownerguard in place of its pods.
func TestDoctor(t *testing.T) {
	doctor := func(t *testing.T) (string, error) {
		ctx := ctxFor(t, time.Minute)
		out, err := ownerguardCmd(ctx, plane.AdminKubeconfig, "doctor", "--namespace", releaseNamespace, "--name", releaseName)
		t.Logf("ownerguard doctor:\n%s", out)
		return out, err
	}
	t.Run("PassesOnTheInstallation", func(t *testing.T) {
		// The chart's pods never run; ownerguard runs in their place and
		// its readiness was written into their status (harness.MarkReady),
		// as the kubelet would after the /readyz probe: the ReplicaSet and
		// Deployment controllers then report them ready, as in a cluster.
		ctx := ctxFor(t, time.Minute)
		waitDeploymentReady(ctx, t)
		_, err := doctor(t)
		must(t, err, "doctor")
	})
	t.Run("JudgesTheServedCertificate", func(t *testing.T) {
		// The certificate the Service serves, read by a handshake with its
		// ClusterIP (doctor outside the cluster would port-forward), is
		// what each caBundle is judged against; the Secret is not read.
		ctx := ctxFor(t, time.Minute)
		svc, err := admin.CoreV1().Services(releaseNamespace).Get(ctx, releaseName, metav1.GetOptions{})
		must(t, err, "the Service")
		address := net.JoinHostPort(svc.Spec.ClusterIP, "443")
		out, err := ownerguardCmd(ctx, plane.AdminKubeconfig, "doctor", "--namespace", releaseNamespace,
			"--name", releaseName, "--serving-address", address)
		t.Logf("ownerguard doctor --serving-address %s:\n%s", address, out)
		must(t, err, "doctor")
		if !strings.Contains(out, "served at "+address) {
			t.Fatalf("doctor did not judge the certificate served at %s", address)
		}
	})
	t.Run("FailsOnBrokenCABundle", func(t *testing.T) {
		ctx := ctxFor(t, time.Minute)
		m, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, releaseName, metav1.GetOptions{})
		must(t, err, "get")
		original := m.DeepCopy()
		ca, err := harness.NewCA("not-the-chart-ca")
		must(t, err, "ca")
		m.Webhooks[0].ClientConfig.CABundle = ca.CertPEM
		_, err = admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{})
		must(t, err, "break the caBundle")
		defer func() {
			cur, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), releaseName, metav1.GetOptions{})
			if err == nil {
				cur.Webhooks = original.Webhooks
				_, err = admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(context.Background(), cur, metav1.UpdateOptions{})
			}
			if err != nil {
				t.Errorf("restore the caBundle: %v", err)
			}
		}()
		out, err := doctor(t)
		if err == nil || !hasLine(out, "FAIL caBundle of mutating "+mutateWebhook+":") {
			t.Fatalf("doctor with a caBundle of another CA: %v, want exit 1 and a FAIL line for it", err)
		}
	})
	t.Run("FailsOnMissingPodDisruptionBudget", func(t *testing.T) {
		ctx := ctxFor(t, time.Minute)
		pdb, err := admin.PolicyV1().PodDisruptionBudgets(releaseNamespace).Get(ctx, releaseName, metav1.GetOptions{})
		must(t, err, "get the PodDisruptionBudget")
		must(t, admin.PolicyV1().PodDisruptionBudgets(releaseNamespace).Delete(ctx, releaseName, metav1.DeleteOptions{}), "delete it")
		defer func() {
			pdb.ResourceVersion, pdb.UID, pdb.ManagedFields = "", "", nil
			if _, err := admin.PolicyV1().PodDisruptionBudgets(releaseNamespace).Create(context.Background(), pdb, metav1.CreateOptions{}); err != nil {
				t.Errorf("restore the PodDisruptionBudget: %v", err)
			}
		}()
		out, err := doctor(t)
		if err == nil || !hasLine(out, "FAIL PodDisruptionBudget:") {
			t.Fatalf("doctor without a PodDisruptionBudget: %v, want exit 1 and a FAIL line for it", err)
		}
	})
}

// hasLine: some line of out starts with prefix.
func hasLine(out, prefix string) bool {
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}
