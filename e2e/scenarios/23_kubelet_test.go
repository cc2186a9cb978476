package scenarios

// What a kubelet does to a worker, done by a kubelet: the worker and its
// agents are scheduled by the real kube-scheduler onto a hollow node
// (kubemark: the real kubelet, a fake container runtime), which writes
// their phases and confirms their graceful deletion. The other scenarios
// write a pod's phase themselves and let the API server delete a pod at
// once; these check that what ownerguard decides from a kubelet's doing
// is the same.

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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// onKubelet makes pod one the scenarios' kubelet runs.
func onKubelet(pod *corev1.Pod) *corev1.Pod {
	pod.Spec.SchedulerName = harness.KubeletScheduler
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{
		Key: harness.KubeletTaint.Key, Operator: corev1.TolerationOpExists, Effect: harness.KubeletTaint.Effect})
	return pod
}

// runningWorker creates a worker pod on the kubelet, waits until the
// kubelet says it runs, and gives it a client as the scenarios' workers
// have (a token bound to the pod: what the kubelet itself requests).
func runningWorker(t *testing.T, ns, name string, edit func(*corev1.Pod)) *Worker {
	t.Helper()
	ctx := ctxFor(t, 2*time.Minute)
	pod := onKubelet(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "worker"}},
		Spec: corev1.PodSpec{
			ServiceAccountName: "worker",
			Containers:         []corev1.Container{{Name: "worker", Image: "e2e.invalid/worker:1"}},
		},
	})
	if edit != nil {
		edit(pod)
	}
	pod, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	must(t, err, "create worker "+name)
	pod = waitPhase(ctx, t, admin, ns, name, corev1.PodRunning)
	if pod.Spec.NodeName == "" || !strings.HasPrefix(pod.Spec.NodeName, "hollow-node-") {
		t.Fatalf("worker %s runs on %q, not on the hollow node", name, pod.Spec.NodeName)
	}
	token := boundToken(t, ns, pod)
	return &Worker{Pod: pod, Token: token, Client: kubernetes.NewForConfigOrDie(plane.RESTConfigToken(token))}
}

// waitPhase waits until the pod's phase is phase (written by its kubelet).
func waitPhase(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name string, phase corev1.PodPhase) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	must(t, harness.Until(ctx, 90*time.Second, 200*time.Millisecond, fmt.Sprintf("pod %s %s", name, phase), func() error {
		var err error
		if pod, err = c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		if pod.Status.Phase != phase {
			return fmt.Errorf("phase %q (%s) on node %q, conditions %v", pod.Status.Phase, pod.Status.Reason, pod.Spec.NodeName, pod.Status.Conditions)
		}
		return nil
	}), "the kubelet's phase")
	return pod
}

// agentOnKubelet: a labelled agent pod the worker creates, run by the
// kubelet too.
func agentOnKubelet(t *testing.T, w *Worker, name string) *corev1.Pod {
	t.Helper()
	ctx := ctxFor(t, 2*time.Minute)
	agent, err := w.Client.CoreV1().Pods(w.NS()).Create(ctx, onKubelet(agentPod(name, ownedLabels(w.Name(), ""))), metav1.CreateOptions{})
	must(t, err, "the worker creates agent "+name)
	must(t, checkOwned(agent.ObjectMeta, w, true), "agent "+name)
	waitPhase(ctx, t, admin, w.NS(), name, corev1.PodRunning)
	return agent
}

func TestKubelet(t *testing.T) {
	// A worker whose deadline passes is failed by its kubelet
	// (DeadlineExceeded): it has finished, and names no new object; what
	// it made is kept until its pod object goes.
	t.Run("WorkerFinishedByItsKubelet", func(t *testing.T) {
		ns := newNamespace(t, "kubelet-finish", workerRules)
		w := runningWorker(t, ns, "worker-deadline", func(pod *corev1.Pod) { pod.Spec.ActiveDeadlineSeconds = ptr(int64(20)) })
		ctx := ctxFor(t, 3*time.Minute)
		agent := agentOnKubelet(t, w, "agent-deadline")
		prompt, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("prompt-deadline", ownedLabels(w.Name(), "")), metav1.CreateOptions{})
		must(t, err, "the worker creates its prompt")
		must(t, checkOwned(prompt.ObjectMeta, w, true), "prompt")

		failed := waitPhase(ctx, t, admin, ns, w.Name(), corev1.PodFailed)
		if failed.Status.Reason != "DeadlineExceeded" {
			t.Fatalf("worker failed for %q, want the kubelet's DeadlineExceeded", failed.Status.Reason)
		}
		_, err = w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("prompt-late", ownedLabels(w.Name(), "")), metav1.CreateOptions{})
		code, message := denial(err)
		if err == nil || code != 403 || !strings.Contains(message, "has finished (phase Failed)") {
			t.Fatalf("a create naming the failed worker: want 403 'has finished (phase Failed)', got %d %q", code, message)
		}
		// A finished worker's objects stay until its pod object goes.
		if _, err := admin.CoreV1().Pods(ns).Get(ctx, agent.Name, metav1.GetOptions{}); err != nil {
			t.Fatalf("agent: %v", err)
		}
		if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, prompt.Name, metav1.GetOptions{}); err != nil {
			t.Fatalf("prompt: %v", err)
		}
	})

	// A worker deleted with a grace period: its kubelet stops it and
	// confirms the deletion; while it terminates it names no new object;
	// once its object is gone the collector deletes what it owns, the
	// agent's own graceful deletion confirmed by its kubelet.
	t.Run("GracefulDeletionConfirmedByTheNode", func(t *testing.T) {
		const hold = "e2e.ownerguard.io/hold"
		ns := newNamespace(t, "kubelet-grace", workerRules)
		// A finalizer holds the object once the node has confirmed, so
		// that the window between the two is the scenario's, not luck.
		w := runningWorker(t, ns, "worker-grace", func(pod *corev1.Pod) { pod.Finalizers = []string{hold} })
		ctx := ctxFor(t, 4*time.Minute)
		agent := agentOnKubelet(t, w, "agent-grace")
		prompt, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("prompt-grace", ownedLabels(w.Name(), "")), metav1.CreateOptions{})
		must(t, err, "the worker creates its prompt")

		must(t, admin.CoreV1().Pods(ns).Delete(ctx, w.Name(), metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(60))}), "delete the worker, 60 s of grace")
		// The node confirms (its final delete, grace 0) long before the
		// 60 s: the fake runtime stops a container at once.
		must(t, harness.Until(ctx, 45*time.Second, 200*time.Millisecond, "the node confirmed the deletion", func() error {
			pod, err := admin.CoreV1().Pods(ns).Get(ctx, w.Name(), metav1.GetOptions{})
			if err != nil {
				return err
			}
			if pod.DeletionGracePeriodSeconds == nil || *pod.DeletionGracePeriodSeconds != 0 {
				return fmt.Errorf("grace %v, phase %s", pod.DeletionGracePeriodSeconds, pod.Status.Phase)
			}
			return nil
		}), "the kubelet's confirmation")
		_, err = w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("prompt-terminating", ownedLabels(w.Name(), "")), metav1.CreateOptions{})
		if code, message := denial(err); err == nil || code != 403 || !strings.Contains(message, "is being deleted") {
			t.Fatalf("a create naming the terminating worker: want 403, got %d %q", code, message)
		}

		patch := fmt.Sprintf(`{"metadata":{"$deleteFromPrimitiveList/finalizers":[%q]}}`, hold)
		_, err = admin.CoreV1().Pods(ns).Patch(ctx, w.Name(), types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		must(t, err, "release the worker's finalizer")
		start := time.Now()
		for _, get := range []func(context.Context) error{
			func(ctx context.Context) error {
				_, err := admin.CoreV1().Pods(ns).Get(ctx, agent.Name, metav1.GetOptions{})
				return err
			},
			func(ctx context.Context) error {
				_, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, prompt.Name, metav1.GetOptions{})
				return err
			},
		} {
			_, err := gone(ctx, 90*time.Second, get)
			must(t, err, "collected with the worker")
		}
		// The collector deletes the agent with its default 30 s of grace:
		// gone sooner, its node confirmed it.
		if took := time.Since(start); took >= 30*time.Second {
			t.Fatalf("the agent took %s to go: its node did not confirm its deletion", took)
		}
		if _, err := admin.CoreV1().Pods(ns).Get(ctx, w.Name(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the worker's object: %v, want gone", err)
		}
	})
}
