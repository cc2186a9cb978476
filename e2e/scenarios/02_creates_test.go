package scenarios

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// Creates as a worker does: with a token bound to its pod, labelling what
// it creates with its pod name only. The Job's and the Deployment's pods
// are created by the controller manager, through the webhook.
func TestCreatesAsWorker(t *testing.T) {
	ns := newNamespace(t, "creates", workerRules)
	w := newWorker(t, ns, "worker-0")
	labels := ownedLabels(w.Name(), "")

	t.Run("AgentPod", func(t *testing.T) {
		ctx := ctxFor(t, 30*time.Second)
		pod, err := w.Client.CoreV1().Pods(ns).Create(ctx, agentPod("agent-0", labels), metav1.CreateOptions{})
		must(t, err, "create agent pod as the worker")
		must(t, checkOwned(pod.ObjectMeta, w, true), "stored agent pod")
	})

	t.Run("ConfigMap", func(t *testing.T) {
		ctx := ctxFor(t, 30*time.Second)
		cm, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("prompt-0", labels), metav1.CreateOptions{})
		must(t, err, "create configmap as the worker")
		must(t, checkOwned(cm.ObjectMeta, w, true), "stored configmap")
	})

	t.Run("JobAndItsPods", func(t *testing.T) {
		ctx := ctxFor(t, 90*time.Second)
		j, err := w.Client.BatchV1().Jobs(ns).Create(ctx, job("agents-0", labels), metav1.CreateOptions{})
		must(t, err, "create job as the worker")
		must(t, checkOwned(j.ObjectMeta, w, true), "stored job")
		// The pods are the job controller's creates, from the template: no
		// pod identity, only the labels the template carries.
		must(t, waitControllerPods(ctx, t, ns, "batch.kubernetes.io/job-name="+j.Name, 2, w, "Job", j.UID), "the job's pods")
	})

	t.Run("DeploymentReplicaSetPods", func(t *testing.T) {
		ctx := ctxFor(t, 90*time.Second)
		replicas := int32(2)
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "agents", Labels: copyLabels(labels)},
			Spec: appsv1.DeploymentSpec{
				Replicas: &replicas,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agents"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agents", ownerPodLabel: w.Name()}},
					Spec:       corev1.PodSpec{ServiceAccountName: "worker", Containers: []corev1.Container{{Name: "agent", Image: "e2e.invalid/agent:1"}}},
				},
			},
		}
		_, err := w.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
		must(t, err, "create deployment as the worker")
		must(t, waitControllerPods(ctx, t, ns, "app=agents", 2, w, "ReplicaSet", ""), "the deployment's pods")
	})

	t.Run("ReplaceOriginalManifest", func(t *testing.T) {
		// kubectl replace of the manifest the worker created: no uid label,
		// no reference. The API server sends ownerguard an UPDATE that
		// omits what it added; /mutate restores it.
		ctx := ctxFor(t, 30*time.Second)
		original := configMap("prompt-replaced", labels)
		_, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, original.DeepCopy(), metav1.CreateOptions{})
		must(t, err, "create")
		replaced := original.DeepCopy()
		replaced.Data["prompt"] = "a new prompt"
		cm, err := w.Client.CoreV1().ConfigMaps(ns).Update(ctx, replaced, metav1.UpdateOptions{})
		must(t, err, "PUT of the original manifest (kubectl replace)")
		must(t, checkOwned(cm.ObjectMeta, w, true), "replaced configmap")
		if cm.Data["prompt"] != "a new prompt" {
			t.Fatalf("the update was not applied: %v", cm.Data)
		}
	})

	other := newNamespace(t, "creates-other", nil)
	denials := []struct {
		name   string
		ns     string
		as     *Worker // nil: the admin, no pod identity
		object *corev1.ConfigMap
	}{
		{"WrongUIDDenied", ns, w, configMap("wrong-uid", ownedLabels(w.Name(), string(uuid.NewUUID())))},
		{"OwnerInAnotherNamespaceDenied", other, nil, configMap("elsewhere", ownedLabels(w.Name(), w.UID()))},
		{"MissingOwnerDenied", ns, nil, configMap("orphan", ownedLabels("worker-gone", string(uuid.NewUUID())))},
	}
	for _, d := range denials {
		t.Run(d.name, func(t *testing.T) {
			ctx := ctxFor(t, 30*time.Second)
			code, message := expectedDenial(t, mutateWebhook, d.ns, d.as, []*corev1.Pod{w.Pod}, d.object)
			client := admin
			if d.as != nil {
				client = d.as.Client
			}
			_, err := client.CoreV1().ConfigMaps(d.ns).Create(ctx, d.object.DeepCopy(), metav1.CreateOptions{})
			checkDenied(t, err, code, message)
			// dryRun=All is decided the same.
			_, err = client.CoreV1().ConfigMaps(d.ns).Create(ctx, d.object.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			checkDenied(t, err, code, message)
		})
	}

	t.Run("DryRunAllowedLikeReal", func(t *testing.T) {
		ctx := ctxFor(t, 30*time.Second)
		cm, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("dry", labels), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		must(t, err, "dry-run create")
		must(t, checkOwned(cm.ObjectMeta, w, true), "dry-run answer")
		if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("a dry run stored the object: %v", err)
		}
	})

	t.Run("ReinvokedAfterAnotherMutatingWebhook", func(t *testing.T) {
		// A second mutating webhook, registered after ownerguard's, adds a
		// label: reinvocationPolicy IfNeeded makes the API server call
		// ownerguard again on the changed object, which must yield no
		// second reference.
		ctx := ctxFor(t, 60*time.Second)
		const label = "e2e.ownerguard.io/labelled"
		l, err := harness.StartLabeller("zz-e2e-labeller", label, "yes")
		must(t, err, "start the labeller")
		must(t, l.Register(ctx, admin, ownerPodLabel, "e2e.ownerguard.io/scenario", "creates"), "register the labeller")
		defer l.Close(context.Background(), admin)
		var cm *corev1.ConfigMap
		// The API server picks a new configuration up within a moment.
		must(t, harness.Until(ctx, 20*time.Second, 200*time.Millisecond, "the labeller called", func() error {
			var err error
			cm, err = w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("reinvoked-"+rand.String(5), labels), metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if cm.Labels[label] != "yes" {
				return fmt.Errorf("%s stored without the label", cm.Name)
			}
			return nil
		}), "a create through both webhooks")
		must(t, checkOwned(cm.ObjectMeta, w, true), "stored configmap")
		// ownerguard was called twice for it: first as sent, then once
		// more with the label and its own reference already there.
		var calls []recordedCase
		must(t, harness.Until(ctx, 10*time.Second, 100*time.Millisecond, "two recorded reviews", func() error {
			calls = recordedFor(t, "mutate", "CREATE", ns, cm.Name)
			if len(calls) != 2 {
				return fmt.Errorf("%d mutate reviews of %s recorded", len(calls), cm.Name)
			}
			return nil
		}), "ownerguard reinvoked")
		second := calls[1].object()
		if second.Labels[label] != "yes" || len(second.OwnerReferences) != 1 {
			t.Fatalf("the second call's object: labels %v, references %s", second.Labels, refsString(second.OwnerReferences))
		}
		if calls[1].Request["uid"] == calls[0].Request["uid"] {
			t.Fatalf("the reinvocation reused request.uid %v", calls[0].Request["uid"])
		}
		if calls[1].Response["patch"] != nil {
			t.Fatalf("the reinvocation was answered with a patch: %v", calls[1].Response["patch"])
		}
	})
}

// waitControllerPods waits until the controller has made want pods
// matching selector, each owned by the worker and controlled by a
// controllerKind (with controllerUID when given).
func waitControllerPods(ctx context.Context, t *testing.T, ns, selector string, want int, w *Worker, controllerKind string, controllerUID any) error {
	return harness.Until(ctx, 60*time.Second, 250*time.Millisecond, fmt.Sprintf("%d pods %s", want, selector), func() error {
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}
		if len(pods.Items) < want {
			return fmt.Errorf("%d of %d pods; the controller's events: %s", len(pods.Items), want, events(ctx, ns))
		}
		for _, pod := range pods.Items {
			if err := checkOwned(pod.ObjectMeta, w, false); err != nil {
				return err
			}
			controller := metav1.GetControllerOf(&pod)
			if controller == nil || controller.Kind != controllerKind {
				return fmt.Errorf("%s: controller %v, want a %s", pod.Name, controller, controllerKind)
			}
		}
		return nil
	})
}

// events of the namespace, for the failure messages: a controller whose
// creates are denied says so there.
func events(ctx context.Context, ns string) string {
	list, err := admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, e := range list.Items {
		if e.Type == corev1.EventTypeWarning {
			lines = append(lines, fmt.Sprintf("%s %s/%s: %s", e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message))
		}
	}
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return "[" + strings.Join(lines, "; ") + "]"
}
