package scenarios

import (
	"fmt"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestObserveUnlabelled: the chart's observe webhook (observe.unlabelled)
// on the real API server. A pod of a Deployment creates ConfigMaps
// without the owner label with its own pod-bound token: each is admitted
// unchanged, and ownerguard counts it under the pod's workload (the
// Deployment, read through its ReplicaSet), so a team sees which workers
// leak before it labels any. A labelled create, and a create by a person,
// are not counted.
func TestObserveUnlabelled(t *testing.T) {
	setObserve(t, true)
	t.Cleanup(func() { setObserve(t, false) })
	ns := newNamespace(t, "observe", workerRules)
	ctx := ctxFor(t, 2*time.Minute)

	// A real Deployment: its ReplicaSet and pod made by the controllers.
	replicas := int32(1)
	labels := map[string]string{"app": "web"}
	_, err := admin.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{ServiceAccountName: "worker",
					Containers: []corev1.Container{{Name: "web", Image: "e2e.invalid/web:1"}}},
			},
		},
	}, metav1.CreateOptions{})
	must(t, err, "create Deployment web")
	var pod *corev1.Pod
	must(t, harness.Until(ctx, 60*time.Second, 250*time.Millisecond, "the Deployment's pod", func() error {
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return fmt.Errorf("no pod yet")
		}
		pod = &pods.Items[0]
		return nil
	}), "the Deployment's pod")
	web := kubernetes.NewForConfigOrDie(plane.RESTConfigToken(boundToken(t, ns, pod)))

	counted := func(kind, workload string) map[string]string {
		return map[string]string{"pod_namespace": ns, "workload_kind": kind, "workload": workload,
			"resource": "configmaps", "referenced": "false"}
	}
	waitCount := func(what string, labels map[string]string, want float64) {
		t.Helper()
		must(t, harness.Until(ctx, 30*time.Second, 250*time.Millisecond, what, func() error {
			n, err := guard.Metric("ownerguard_unlabelled_creates_total", labels)
			if err != nil {
				return err
			}
			if n != want {
				return fmt.Errorf("%v counted, want %v", n, want)
			}
			return nil
		}), what)
	}

	// The pod's unlabelled creates: admitted as sent, counted under web,
	// once the API server calls the new webhook (its configuration cache
	// follows within a second or so: creates until one is counted).
	must(t, harness.Until(ctx, 30*time.Second, 500*time.Millisecond, "a create counted", func() error {
		probe := configMap("", map[string]string{"step": "1"})
		probe.GenerateName = "prompt-"
		cm, err := web.CoreV1().ConfigMaps(ns).Create(ctx, probe, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if len(cm.OwnerReferences) != 0 || len(cm.Labels) != 1 {
			t.Fatalf("the observe webhook changed the object: labels %v, references %s", cm.Labels, refsString(cm.OwnerReferences))
		}
		_, err = guard.Metric("ownerguard_unlabelled_creates_total", counted("Deployment", "web"))
		return err
	}), "the pod's unlabelled create counted under Deployment web")
	// Not counted: a labelled create and a person's. A pod no controller
	// owns then creates one without the label: once that is counted
	// (under Pod adhoc), every create before it was handled (one queue,
	// in order), and the namespace's total says those two were not.
	adhoc := newWorker(t, ns, "adhoc")
	_, err = adhoc.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("labelled", ownedLabels(adhoc.Name(), "")), metav1.CreateOptions{})
	must(t, err, "a labelled create")
	_, err = admin.CoreV1().ConfigMaps(ns).Create(ctx, configMap("by-a-person", nil), metav1.CreateOptions{})
	must(t, err, "a person's create")
	_, err = adhoc.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("adhoc-prompt", nil), metav1.CreateOptions{})
	must(t, err, "the bare pod's unlabelled create")
	adhocCount := counted("Pod", "adhoc")
	waitCount("the bare pod's create counted under Pod adhoc", adhocCount, 1)
	webCount, err := guard.Metric("ownerguard_unlabelled_creates_total", counted("Deployment", "web"))
	must(t, err, "web's creates")
	total, err := guard.Metric("ownerguard_unlabelled_creates_total", map[string]string{"pod_namespace": ns})
	must(t, err, "the namespace's unlabelled creates")
	if total != webCount+1 {
		t.Fatalf("%v unlabelled creates counted in %s, want %v (web's and adhoc's): the labelled or the person's create was counted", total, ns, webCount+1)
	}
}

// setObserve turns the chart's observe.unlabelled on or off on the
// installed release and waits until the API server has the webhook
// configuration (or no longer has it).
func setObserve(t *testing.T, on bool) {
	t.Helper()
	ctx := ctxFor(t, 3*time.Minute)
	_, err := plane.Helm(ctx, "upgrade", releaseName, chartDir(), "--namespace", releaseNamespace, "--reuse-values",
		"--set", fmt.Sprintf("observe.unlabelled.enabled=%v", on))
	must(t, err, "helm upgrade --set observe.unlabelled.enabled")
	must(t, harness.Until(ctx, 30*time.Second, 250*time.Millisecond, "the observe webhook's configuration", func() error {
		_, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, releaseName+"-observe", metav1.GetOptions{})
		if (err == nil) != on {
			return fmt.Errorf("configuration %s-observe present: %v, want %v", releaseName, err == nil, on)
		}
		return nil
	}), "the observe webhook's configuration")
}
