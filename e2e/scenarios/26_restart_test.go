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
	"strings"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// restartByKubelet changes the image of the worker pod's container and
// waits until its kubelet reports that container restarted at least
// restarts times: the status of the new run.
func restartByKubelet(ctx context.Context, t *testing.T, w *Worker, container, image string, restarts int32) *corev1.Pod {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"containers":[{"name":%q,"image":%q}]}}`, container, image)
	_, err := admin.CoreV1().Pods(w.NS()).Patch(ctx, w.Name(), types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	must(t, err, "change the image of "+container)
	return restartedByKubelet(ctx, t, w, container, restarts)
}

// restartedByKubelet waits until the kubelet reports the container
// restarted at least restarts times and running.
func restartedByKubelet(ctx context.Context, t *testing.T, w *Worker, container string, restarts int32) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	must(t, harness.Until(ctx, 60*time.Second, 100*time.Millisecond, fmt.Sprintf("%s's %s restarted by its kubelet", w.Name(), container), func() error {
		var err error
		if pod, err = admin.CoreV1().Pods(w.NS()).Get(ctx, w.Name(), metav1.GetOptions{}); err != nil {
			return err
		}
		for _, c := range pod.Status.ContainerStatuses {
			if c.Name == container && c.RestartCount >= restarts && c.State.Running != nil {
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

	// One object made while the restart is under way (the image changed,
	// the kubelet not yet reporting): which run made it cannot be told
	// from the clocks, so it is kept and counted.
	for _, w := range []*Worker{optedIn, control} {
		patch := `{"spec":{"containers":[{"name":"worker","image":"e2e.invalid/worker:2"}]}}`
		_, err := admin.CoreV1().Pods(ns).Patch(ctx, w.Name(), types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		must(t, err, "change the worker's image")
	}
	_, err = optedIn.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("prompt-during", ownedLabels(optedIn.Name(), "")), metav1.CreateOptions{})
	must(t, err, "the ConfigMap made during the restart")
	for _, w := range []*Worker{optedIn, control} {
		restartedByKubelet(ctx, t, w, "worker", 1)
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
	for _, name := range []string{"prompt-second", "prompt-during", "prompt-control"} {
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
	if kept, err := og.Metric("ownerguard_restart_children_kept_total", map[string]string{"reason": "unproven"}); err != nil || kept < 1 {
		t.Errorf("ownerguard_restart_children_kept_total{reason=\"unproven\"} %v (%v), want the ConfigMap made during the restart counted", kept, err)
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

// The edges on the real kubelet: restarts ownerguard did not see (it was
// down across two of them), a second opted-in container's restart, and a
// label naming no container.
func TestRestartReleaseEdges(t *testing.T) {
	ctx := ctxFor(t, 5*time.Minute)
	ns := newNamespace(t, "restart-edges", workerRules)
	serve := func() *harness.Ownerguard {
		t.Helper()
		og, err := plane.Serve(ctx, admin, inst, harness.ServeOptions{
			Name: "ownerguard-restart-edges", Token: plane.PKI.OwnerguardAdminToken,
			Addr: "127.0.0.1:8481", MetricsPort: 9481,
			ExtraArgs: []string{"--release-restarted", "--restart-lease=e2e-restart-edges",
				"--reaper-lease-namespace=" + ns, "--reaper-identity=replica-0", "--events"}})
		must(t, err, "ownerguard with --release-restarted")
		return og
	}
	configMapOf := func(w *Worker, name string) {
		t.Helper()
		_, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap(name, ownedLabels(w.Name(), "")), metav1.CreateOptions{})
		must(t, err, "ConfigMap "+name)
	}
	there := func(name string) bool {
		_, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("ConfigMap %s: %v", name, err)
		}
		return err == nil
	}
	waitGone := func(name string) {
		t.Helper()
		_, err := gone(ctx, 30*time.Second, func(ctx context.Context) error {
			_, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
			return err
		})
		must(t, err, "ConfigMap "+name+" released")
	}

	missed := runningWorker(t, ns, "worker-missed", func(p *corev1.Pod) {
		p.Labels["ownerguard.io/release-on-restart"] = "worker"
	})
	// Two containers opted in; only the second one restarts.
	pair := runningWorker(t, ns, "worker-pair", func(p *corev1.Pod) {
		p.Labels["ownerguard.io/release-on-restart"] = "worker.helper"
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "helper", Image: "e2e.invalid/helper:1"})
	})
	// A label that names no container of the pod.
	typo := runningWorker(t, ns, "worker-typo", func(p *corev1.Pod) {
		p.Labels["ownerguard.io/release-on-restart"] = "wroker"
	})

	// ownerguard down across two restarts of worker-missed: its first
	// and second runs' objects go once it is back, its third run's stay.
	configMapOf(missed, "missed-run-1")
	time.Sleep(4 * time.Second)
	restartByKubelet(ctx, t, missed, "worker", "e2e.invalid/worker:2", 1)
	configMapOf(missed, "missed-run-2")
	time.Sleep(4 * time.Second)
	restartByKubelet(ctx, t, missed, "worker", "e2e.invalid/worker:3", 2)
	configMapOf(missed, "missed-run-3")

	configMapOf(pair, "pair-before")
	configMapOf(typo, "typo-before")
	time.Sleep(4 * time.Second)
	restartByKubelet(ctx, t, pair, "helper", "e2e.invalid/helper:2", 1)
	configMapOf(pair, "pair-after")
	restartByKubelet(ctx, t, typo, "worker", "e2e.invalid/worker:2", 1)

	// Now ownerguard starts: it learns every restart from the list.
	og := serve()
	defer og.Stop(30 * time.Second)
	waitGone("missed-run-1")
	waitGone("missed-run-2")
	waitGone("pair-before")
	time.Sleep(6 * time.Second)
	for _, name := range []string{"missed-run-3", "pair-after", "typo-before"} {
		if !there(name) {
			t.Errorf("ConfigMap %s was released", name)
		}
	}
	must(t, harness.Until(ctx, 30*time.Second, 200*time.Millisecond, "the RestartReleaseNotConfigured Event", func() error {
		events, err := admin.EventsV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + typo.Name()})
		if err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == "RestartReleaseNotConfigured" && strings.Contains(e.Note, "wroker") {
				return nil
			}
		}
		return fmt.Errorf("%d events, none RestartReleaseNotConfigured", len(events.Items))
	}), "the Event")
}

// Two replicas, as the chart runs them: one holds the Lease and releases;
// when it is gone, the other takes the Lease over and releases what a
// restart that came meanwhile left, within the Lease's 15 s and a renewal.
func TestRestartReleaseTakeover(t *testing.T) {
	ctx := ctxFor(t, 4*time.Minute)
	ns := newNamespace(t, "restart-takeover", workerRules)
	w := runningWorker(t, ns, "worker-takeover", func(p *corev1.Pod) {
		p.Labels["ownerguard.io/release-on-restart"] = "worker"
	})
	replicas := make([]*harness.Ownerguard, 2)
	for i := range replicas {
		og, err := plane.Serve(ctx, admin, inst, harness.ServeOptions{
			Name: fmt.Sprintf("ownerguard-takeover-%d", i), Token: plane.PKI.OwnerguardAdminToken,
			Addr: fmt.Sprintf("127.0.0.1:%d", 8482+i), MetricsPort: 9482 + i,
			ExtraArgs: []string{"--release-restarted", "--restart-lease=e2e-takeover",
				"--reaper-lease-namespace=" + ns, fmt.Sprintf("--reaper-identity=replica-%d", i)}})
		must(t, err, "a replica")
		defer og.Stop(30 * time.Second)
		replicas[i] = og
	}
	leader := -1
	must(t, harness.Until(ctx, 30*time.Second, 200*time.Millisecond, "one leader", func() error {
		n := 0
		for i, og := range replicas {
			if v, err := og.Metric("ownerguard_restart_release_leader", nil); err == nil && v == 1 {
				n++
				leader = i
			}
		}
		if n != 1 {
			return fmt.Errorf("%d replicas lead", n)
		}
		return nil
	}), "the Lease")

	_, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("prompt-before", ownedLabels(w.Name(), "")), metav1.CreateOptions{})
	must(t, err, "the first run's ConfigMap")
	time.Sleep(4 * time.Second)
	// The holder goes (as a pod killed), then the worker restarts.
	replicas[leader].Stop(0)
	restartByKubelet(ctx, t, w, "worker", "e2e.invalid/worker:2", 1)
	reported := time.Now()
	_, err = w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("prompt-after", ownedLabels(w.Name(), "")), metav1.CreateOptions{})
	must(t, err, "the new run's ConfigMap")
	took, err := gone(ctx, 60*time.Second, func(ctx context.Context) error {
		_, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "prompt-before", metav1.GetOptions{})
		return err
	})
	must(t, err, "the other replica releases the first run's ConfigMap")
	took = time.Since(reported)
	fmt.Printf("    restart: released by the replica that took the Lease over %.2f s after the kubelet reported the restart\n", took.Seconds())
	if took > 25*time.Second {
		t.Errorf("released %.1f s after the report, past the Lease's 15 s, a renewal and a pass", took.Seconds())
	}
	other := replicas[1-leader]
	if v, err := other.Metric("ownerguard_restart_release_leader", nil); err != nil || v != 1 {
		t.Errorf("the other replica does not lead: %v (%v)", v, err)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "prompt-after", metav1.GetOptions{}); err != nil {
		t.Errorf("the new run's ConfigMap: %v", err)
	}
}
