package scenarios

// A worker container restarted in its pod, by its kubelet: with
// `serve --release-restarted`, what the earlier run made is released by
// the server and what the new run makes is kept; a worker that did not
// opt in keeps everything. The restart is the hollow node's real kubelet
// at work: a pod's container image is mutable, and a kubelet kills and
// starts again a container whose spec changed, whatever the restart
// policy, writing the new run's start, the restart count and the last
// termination into the pod's status as it does for a crash.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// restartByKubelet changes the worker container's image and waits until
// its kubelet reports the container restarted: the status of the new run.
func restartByKubelet(ctx context.Context, t *testing.T, w *Worker, image string) *corev1.Pod {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"containers":[{"name":"worker","image":%q}]}}`, image)
	_, err := admin.CoreV1().Pods(w.NS()).Patch(ctx, w.Name(), types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	must(t, err, "change the worker's image")
	var pod *corev1.Pod
	must(t, harness.Until(ctx, 60*time.Second, 100*time.Millisecond, w.Name()+" restarted by its kubelet", func() error {
		var err error
		if pod, err = admin.CoreV1().Pods(w.NS()).Get(ctx, w.Name(), metav1.GetOptions{}); err != nil {
			return err
		}
		for _, c := range pod.Status.ContainerStatuses {
			if c.Name == "worker" && c.RestartCount >= 1 && c.State.Running != nil {
				return nil
			}
		}
		return fmt.Errorf("container statuses %+v", pod.Status.ContainerStatuses)
	}), "the restart")
	return pod
}

func TestRestartRelease(t *testing.T) {
	ctx := ctxFor(t, 4*time.Minute)
	ns := newNamespace(t, "restart", workerRules)
	optedIn := runningWorker(t, ns, "worker-restarted", func(p *corev1.Pod) {
		p.Labels["ownerguard.io/release-on-restart"] = "worker"
	})
	control := runningWorker(t, ns, "worker-not-opted-in", nil)

	// One replica with the release of restarted workers on (its Lease in
	// the scenario's namespace).
	og, err := plane.Serve(ctx, admin, inst, harness.ServeOptions{
		Name: "ownerguard-restarts", Token: plane.PKI.OwnerguardAdminToken,
		Addr: "127.0.0.1:8480", MetricsPort: 9480,
		ExtraArgs: []string{"--release-restarted", "--restart-lease=e2e-restarts",
			"--reaper-lease-namespace=" + ns, "--reaper-identity=replica-0", "--events"}})
	must(t, err, "ownerguard with --release-restarted")
	defer og.Stop(30 * time.Second)
	must(t, harness.Until(ctx, 30*time.Second, 200*time.Millisecond, "the Lease", func() error {
		if v, err := og.Metric("ownerguard_restart_release_leader", nil); err != nil || v != 1 {
			return fmt.Errorf("leader %v (%v)", v, err)
		}
		return nil
	}), "the Lease")

	// What each worker's first run makes: a prompt, an agent, a Job.
	made := func(w *Worker, suffix string) {
		t.Helper()
		labels := ownedLabels(w.Name(), "")
		_, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("prompt-"+suffix, labels), metav1.CreateOptions{})
		must(t, err, "the worker's ConfigMap")
		_, err = w.Client.CoreV1().Pods(ns).Create(ctx, agentPod("agent-"+suffix, labels), metav1.CreateOptions{})
		must(t, err, "the worker's agent")
		_, err = w.Client.BatchV1().Jobs(ns).Create(ctx, job("step-"+suffix, labels), metav1.CreateOptions{})
		must(t, err, "the worker's Job")
	}
	made(optedIn, "first")
	made(control, "control")
	// The margin (2 s) and a second of each clock's truncation: what was
	// made before this is provably of the first run.
	time.Sleep(4 * time.Second)

	for _, w := range []*Worker{optedIn, control} {
		restartByKubelet(ctx, t, w, "e2e.invalid/worker:2")
	}
	restartedAt := time.Now()
	// The new run's first object, made the moment its kubelet reported it.
	_, err = optedIn.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("prompt-second", ownedLabels(optedIn.Name(), "")), metav1.CreateOptions{})
	must(t, err, "the new run's ConfigMap")

	exists := func(what string, get func(context.Context) error) bool {
		err := get(ctx)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("%s: %v", what, err)
		}
		return err == nil
	}
	for name, get := range map[string]func(context.Context) error{
		"ConfigMap prompt-first": func(ctx context.Context) error {
			_, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "prompt-first", metav1.GetOptions{})
			return err
		},
		"Pod agent-first": func(ctx context.Context) error {
			_, err := admin.CoreV1().Pods(ns).Get(ctx, "agent-first", metav1.GetOptions{})
			return err
		},
		"Job step-first": func(ctx context.Context) error {
			_, err := admin.BatchV1().Jobs(ns).Get(ctx, "step-first", metav1.GetOptions{})
			return err
		},
	} {
		_, err := gone(ctx, 30*time.Second, get)
		must(t, err, "the first run's "+name+" released")
	}
	released := time.Since(restartedAt)
	fmt.Printf("    restart: the first run's ConfigMap, agent and Job released %.2f s after the kubelet reported the restart\n", released.Seconds())
	// A pass or two later, the new run's and the other worker's are there.
	time.Sleep(6 * time.Second)
	for _, name := range []string{"prompt-second", "prompt-control"} {
		if !exists(name, func(ctx context.Context) error {
			_, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
			return err
		}) {
			t.Errorf("ConfigMap %s was released", name)
		}
	}
	for _, name := range []string{"agent-control"} {
		if !exists(name, func(ctx context.Context) error {
			_, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			return err
		}) {
			t.Errorf("Pod %s was released", name)
		}
	}
	// Told on the worker pod.
	must(t, harness.Until(ctx, 30*time.Second, 200*time.Millisecond, "the RestartReleased Event", func() error {
		events, err := admin.EventsV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + optedIn.Name()})
		if err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == "RestartReleased" {
				return nil
			}
		}
		return fmt.Errorf("%d events, none RestartReleased", len(events.Items))
	}), "the Event")
}
