package scenarios

// The restart edges a kubelet of the fake runtime cannot make: a node
// whose clock is ahead of the API server's, a container in a crash loop,
// a restart count the kubelet reset. They run on a Node no kubelet runs,
// whose Lease and pods' status the scenario writes as a kubelet writes
// them: under the node's identity (system:node:<name>, through the Node
// authorizer and NodeRestriction), its Lease in kube-node-lease renewed
// from the node's clock, and each status written with the kubelet's own
// patch (k8s.io/kubernetes/pkg/util/pod.PatchPodStatus, its status
// manager's call), the container statuses shaped as the kubelet's
// convertToAPIContainerStatuses shapes them.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	podutil "k8s.io/kubernetes/pkg/util/pod"
)

// statusNodeTaint keeps every scheduled pod off the nodes no kubelet runs.
var statusNodeTaint = corev1.Taint{Key: "e2e.ownerguard.io/no-kubelet", Effect: corev1.TaintEffectNoSchedule}

// statusNode is a Node no kubelet runs: the scenario is its kubelet.
type statusNode struct {
	name   string
	uid    string
	client kubernetes.Interface
	// skew is the node's clock minus the API server's.
	skew time.Duration
}

// now is the node's clock.
func (n *statusNode) now() time.Time { return time.Now().Add(n.skew) }

// newStatusNode registers the Node as its kubelet does, under its own
// identity; with lease, its Lease too.
func newStatusNode(ctx context.Context, t *testing.T, name string, skew time.Duration, lease bool) *statusNode {
	t.Helper()
	cfg := rest.CopyConfig(plane.RESTConfig())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: harness.NodeUser(name), Groups: []string{harness.NodeGroup, "system:authenticated"}}
	// The field manager the kubelet's writes carry.
	cfg.UserAgent = "kubelet/v1.37.2 (linux/amd64) kubernetes/e2e"
	n := &statusNode{name: name, client: kubernetes.NewForConfigOrDie(cfg), skew: skew}
	node, err := n.client.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{statusNodeTaint}},
	}, metav1.CreateOptions{})
	must(t, err, "register node "+name+" as its kubelet")
	n.uid = string(node.UID)
	t.Cleanup(func() {
		_ = admin.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if lease {
		n.renew(ctx, t)
	}
	return n
}

// renew writes the node's Lease as the kubelet's lease controller does:
// renewTime from the node's clock, owned by the Node.
func (n *statusNode) renew(ctx context.Context, t *testing.T) {
	t.Helper()
	leases := n.client.CoordinationV1().Leases("kube-node-lease")
	renewed := metav1.NewMicroTime(n.now())
	current, err := leases.Get(ctx, n.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		duration := int32(40)
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: n.name, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: n.name, UID: types.UID(n.uid)}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &n.name, LeaseDurationSeconds: &duration, RenewTime: &renewed},
		}, metav1.CreateOptions{})
		must(t, err, "the node's Lease")
		return
	}
	must(t, err, "read the node's Lease")
	current.Spec.RenewTime = &renewed
	_, err = leases.Update(ctx, current, metav1.UpdateOptions{})
	must(t, err, "renew the node's Lease")
}

// worker creates an opted-in worker pod bound to the node (no scheduler
// places it: its nodeName is set, as a DaemonSet's pods are), reports its
// container running since the node's now, and gives it a worker's client.
func (n *statusNode) worker(ctx context.Context, t *testing.T, ns, name string) (*Worker, time.Time) {
	t.Helper()
	pod, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "worker", "ownerguard.io/release-on-restart": "worker"}},
		Spec: corev1.PodSpec{
			NodeName:           n.name,
			ServiceAccountName: "worker",
			// As a DaemonSet's pods: a node that posts no Ready condition
			// does not get them evicted while the scenario runs.
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
			},
			Containers: []corev1.Container{{Name: "worker", Image: "e2e.invalid/worker:1"}},
		},
	}, metav1.CreateOptions{})
	must(t, err, "create worker "+name)
	started := n.now()
	n.report(ctx, t, pod, runningSince(0, started, nil))
	token := boundToken(t, ns, pod)
	return &Worker{Pod: pod, Token: token, Client: kubernetes.NewForConfigOrDie(plane.RESTConfigToken(token))}, started
}

// runningSince is the worker container's status while its run number
// restarts runs, started at started (node clock), after the run last.
func runningSince(restarts int32, started time.Time, last *corev1.ContainerStateTerminated) corev1.ContainerStatus {
	status := corev1.ContainerStatus{
		Name: "worker", Image: "e2e.invalid/worker:1", ImageID: "e2e.invalid/worker@sha256:" + strings.Repeat("1", 64),
		ContainerID:  runID(restarts),
		RestartCount: restarts, Ready: true, Started: ptr(true),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}},
	}
	if last != nil {
		status.LastTerminationState.Terminated = last
	}
	return status
}

// backingOff is the worker container's status after its run number
// restarts crashed: waiting in CrashLoopBackOff, that run in its last
// state, the count not yet raised (the next run is not there).
func backingOff(restarts int32, run *corev1.ContainerStateTerminated) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name: "worker", Image: "e2e.invalid/worker:1", ImageID: "e2e.invalid/worker@sha256:" + strings.Repeat("1", 64),
		ContainerID: run.ContainerID, RestartCount: restarts, Ready: false, Started: ptr(false),
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
			Message: "back-off 10s restarting failed container=worker"}},
		LastTerminationState: corev1.ContainerState{Terminated: run},
	}
}

// crashed is run number restarts as its last state records it.
func crashed(restarts int32, started, finished time.Time) *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", StartedAt: metav1.NewTime(started),
		FinishedAt: metav1.NewTime(finished), ContainerID: runID(restarts)}
}

func runID(restarts int32) string {
	return fmt.Sprintf("containerd://%064x", 0xc0ffee00+int(restarts))
}

// report writes the pod's status with the worker container's status as
// its kubelet does (phase Running: a container restarting still runs the
// pod), under the node's identity. The Node authorizer learns the pod's
// binding from its informer a moment after the create: the first write
// is retried until it is allowed.
func (n *statusNode) report(ctx context.Context, t *testing.T, pod *corev1.Pod, container corev1.ContainerStatus) {
	t.Helper()
	must(t, harness.Until(ctx, 20*time.Second, 100*time.Millisecond, "the kubelet's status write", func() error {
		current, err := admin.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		status := current.Status.DeepCopy()
		status.Phase = corev1.PodRunning
		status.HostIP, status.PodIP = "10.99.0.1", "10.99.0.2"
		if status.StartTime == nil {
			status.StartTime = &metav1.Time{Time: n.now()}
		}
		ready := corev1.ConditionFalse
		if container.Ready {
			ready = corev1.ConditionTrue
		}
		// A condition's transition time moves only when its status does.
		condition := func(kind corev1.PodConditionType, to corev1.ConditionStatus) corev1.PodCondition {
			for _, c := range current.Status.Conditions {
				if c.Type == kind && c.Status == to {
					return c
				}
			}
			return corev1.PodCondition{Type: kind, Status: to, LastTransitionTime: metav1.NewTime(n.now())}
		}
		status.Conditions = []corev1.PodCondition{
			condition(corev1.PodReadyToStartContainers, corev1.ConditionTrue),
			condition(corev1.PodInitialized, corev1.ConditionTrue),
			condition(corev1.PodReady, ready),
			condition(corev1.ContainersReady, ready),
			condition(corev1.PodScheduled, corev1.ConditionTrue),
		}
		status.ObservedGeneration = current.Generation
		status.ContainerStatuses = []corev1.ContainerStatus{container}
		_, _, _, err = podutil.PatchPodStatus(ctx, n.client, pod.Namespace, pod.Name, current.UID, current.Status, *status)
		return err
	}), "the status of "+pod.Name)
}

// TestRestartReleaseByStatus: ownerguard's release of restarted workers
// against what a kubelet writes on the edges.
func TestRestartReleaseByStatus(t *testing.T) {
	ctx := ctxFor(t, 6*time.Minute)
	ns := newNamespace(t, "restart-status", workerRules)
	serve := func(t *testing.T) *harness.Ownerguard {
		t.Helper()
		og, err := plane.Serve(ctx, admin, inst, harness.ServeOptions{
			Name: "ownerguard-restart-status", Token: plane.PKI.OwnerguardAdminToken,
			Addr: "127.0.0.1:8486", MetricsPort: 9486,
			ExtraArgs: []string{"--release-restarted", "--restart-lease=e2e-restart-status",
				"--reaper-lease-namespace=" + ns, "--reaper-identity=replica-0", "--events"}})
		must(t, err, "ownerguard with --release-restarted")
		must(t, harness.Until(ctx, 30*time.Second, 200*time.Millisecond, "the Lease", func() error {
			if v, err := og.Metric("ownerguard_restart_release_leader", nil); err != nil || v != 1 {
				return fmt.Errorf("leader %v (%v)", v, err)
			}
			return nil
		}), "the Lease")
		return og
	}
	og := serve(t)
	defer func() { og.Stop(30 * time.Second) }()

	made := func(t *testing.T, w *Worker, name string) {
		t.Helper()
		_, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap(name, ownedLabels(w.Name(), "")), metav1.CreateOptions{})
		must(t, err, "ConfigMap "+name)
	}
	there := func(t *testing.T, name string) bool {
		t.Helper()
		_, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("ConfigMap %s: %v", name, err)
		}
		return err == nil
	}
	kept := func(t *testing.T, names ...string) {
		t.Helper()
		for _, name := range names {
			if !there(t, name) {
				t.Errorf("ConfigMap %s was released", name)
			}
		}
	}
	released := func(t *testing.T, names ...string) {
		t.Helper()
		for _, name := range names {
			_, err := gone(ctx, 30*time.Second, func(ctx context.Context) error {
				_, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
				return err
			})
			must(t, err, "ConfigMap "+name+" released")
		}
	}
	keptFor := func(reason string) float64 {
		v, err := og.Metric("ownerguard_restart_children_kept_total", map[string]string{"reason": reason})
		if err != nil {
			return 0 // not counted yet: the series appears with its first count
		}
		return v
	}
	event := func(t *testing.T, w *Worker, reason, says string) {
		t.Helper()
		must(t, harness.Until(ctx, 30*time.Second, 200*time.Millisecond, "the "+reason+" Event", func() error {
			events, err := admin.EventsV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + w.Name()})
			if err != nil {
				return err
			}
			for _, e := range events.Items {
				if e.Reason == reason && strings.Contains(e.Note, says) {
					return nil
				}
			}
			return fmt.Errorf("%d events, none %s saying %q", len(events.Items), reason, says)
		}), "the Event")
	}
	// Past the margin (2 s) and a second of each clock's truncation: what
	// was made before a pause this long is provably of the earlier run.
	const provably = 4 * time.Second
	// Longer than a Lease renewal (5 s): a pass has looked at what is due.
	const aPass = 6 * time.Second

	// A node whose clock runs 10 s ahead and that has no Lease (as a
	// virtual kubelet's; every kubelet since 1.17 renews one): its report
	// of the new run's start is 10 s later than the API server's time of
	// that very write, so the pod is held and nothing of it released, the
	// new run's object least of all. Then the node's clock is set right,
	// its kubelet writes the status again (the pod no longer ready) and
	// ownerguard starts again: that write no longer shows the skew, and
	// the hold it remembered in its Lease keeps the pod held. The next
	// restart releases what every earlier run made.
	t.Run("NodeClockAheadInItsReport", func(t *testing.T) {
		node := newStatusNode(ctx, t, "status-node-ahead", 10*time.Second, false)
		w, first := node.worker(ctx, t, ns, "worker-clock-ahead")
		made(t, w, "ahead-run-0")
		time.Sleep(provably)
		held := keptFor("clock")
		restart := node.now()
		node.report(ctx, t, w.Pod, runningSince(1, restart, crashed(0, first, restart)))
		made(t, w, "ahead-run-1")
		event(t, w, "RestartReleaseHeld", "ahead of the API server's clock")
		kept(t, "ahead-run-0", "ahead-run-1")
		if got := keptFor("clock"); got < held+1 {
			t.Errorf("ownerguard_restart_children_kept_total{reason=\"clock\"} %v, want it counted (was %v)", got, held)
		}

		og.Stop(30 * time.Second)
		node.skew = 0
		// The kubelet writes again 9 s after the restart (the node's
		// clock said restart, 10 s ahead of the API server's).
		time.Sleep(time.Until(restart.Add(-10 * time.Second).Add(9 * time.Second)))
		unready := runningSince(1, restart, crashed(0, first, restart))
		unready.Ready = false
		node.report(ctx, t, w.Pod, unready)
		og = serve(t)
		time.Sleep(aPass)
		kept(t, "ahead-run-0", "ahead-run-1")

		time.Sleep(provably)
		node.report(ctx, t, w.Pod, runningSince(2, node.now(), crashed(1, restart, node.now())))
		made(t, w, "ahead-run-2")
		released(t, "ahead-run-0", "ahead-run-1")
		time.Sleep(aPass)
		kept(t, "ahead-run-2")
	})

	// A node 10 s ahead that reports the restart 9 s late: the report's
	// start is within the margin of the API server's time of that write,
	// and only the node's Lease (renewTime from the node's clock, against
	// the API server's time of that renewal) shows the skew. Without it,
	// what the new run made in those 9 s would look 10 s older than it is
	// and be released.
	t.Run("NodeClockAheadByItsLease", func(t *testing.T) {
		node := newStatusNode(ctx, t, "status-node-lease", 10*time.Second, true)
		w, first := node.worker(ctx, t, ns, "worker-lease-ahead")
		made(t, w, "lease-run-0")
		time.Sleep(provably)
		restart := node.now()
		made(t, w, "lease-run-1")
		time.Sleep(9 * time.Second)
		node.renew(ctx, t)
		node.report(ctx, t, w.Pod, runningSince(1, restart, crashed(0, first, restart)))
		event(t, w, "RestartReleaseHeld", "ahead of the API server's clock")
		kept(t, "lease-run-0", "lease-run-1")
	})

	// A crash loop: the container crashes, waits in back-off, runs again,
	// crashes at once and runs a third time before ownerguard's pass for
	// the second could release anything. Nothing is released while the
	// container waits (no run has started since the objects were made);
	// the first run's object goes with the second run's start; what the
	// second run made in the moment before the third started cannot be
	// told from the third's and is kept and counted; a later restart
	// releases it.
	t.Run("CrashLoop", func(t *testing.T) {
		node := newStatusNode(ctx, t, "status-node-crash", 0, true)
		w, first := node.worker(ctx, t, ns, "worker-crash-loop")
		made(t, w, "loop-run-0")
		time.Sleep(provably)
		run0 := crashed(0, first, node.now())
		before := keptFor("unproven")
		node.report(ctx, t, w.Pod, backingOff(0, run0))
		time.Sleep(aPass)
		kept(t, "loop-run-0")
		// The first run's crash is no restart yet: nothing looked at, so
		// its object, made at the pod's start, is not counted either.
		if got := keptFor("unproven"); got != before {
			t.Errorf("ownerguard_restart_children_kept_total{reason=\"unproven\"} %v during the first back-off, want %v", got, before)
		}

		start1 := node.now()
		node.report(ctx, t, w.Pod, runningSince(1, start1, run0))
		made(t, w, "loop-run-1")
		unproven := keptFor("unproven")
		run1 := crashed(1, start1, node.now())
		node.report(ctx, t, w.Pod, backingOff(1, run1))
		start2 := node.now()
		node.report(ctx, t, w.Pod, runningSince(2, start2, run1))
		released(t, "loop-run-0")
		time.Sleep(aPass)
		kept(t, "loop-run-1")
		if got := keptFor("unproven"); got < unproven+1 {
			t.Errorf("ownerguard_restart_children_kept_total{reason=\"unproven\"} %v, want the second run's object counted (was %v)", got, unproven)
		}
		event(t, w, "RestartChildrenKept", "loop-run-1")

		made(t, w, "loop-run-2")
		time.Sleep(provably)
		start3 := node.now()
		node.report(ctx, t, w.Pod, runningSince(3, start3, crashed(2, start2, start3)))
		made(t, w, "loop-run-3")
		released(t, "loop-run-1", "loop-run-2")
		time.Sleep(aPass)
		kept(t, "loop-run-3")
	})

	// A restart during a pass: ownerguard's pass for the first restart is
	// in flight (its delete of the first run's ConfigMap held in the API
	// server by a gate) when the worker restarts again. The pass finishes
	// as it began, with the first restart's start: the second run's
	// ConfigMap, made in the moment after that start, is not its to
	// release. The next pass, with the second restart's start, releases
	// it; the third run's stays.
	t.Run("RestartDuringAPass", func(t *testing.T) {
		node := newStatusNode(ctx, t, "status-node-pass", 0, true)
		w, first := node.worker(ctx, t, ns, "worker-pass")
		made(t, w, "pass-run-0")
		gate, err := harness.StartGate("aa-e2e-gate-restart-pass")
		must(t, err, "the gate")
		defer gate.Close(ctx, admin)
		must(t, gate.RegisterFor(ctx, admin, admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			admissionregistrationv1.Delete, ns, "oldObject.metadata.name == 'pass-run-0'"), "register the gate")
		_, err = admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: "gate-probe", Annotations: map[string]string{harness.GateProbe: "yes"}}}, metav1.CreateOptions{})
		must(t, err, "the gate's probe object")
		must(t, gate.Ready(ctx, func(ctx context.Context) error {
			return admin.CoreV1().ConfigMaps(ns).Delete(ctx, "gate-probe", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		}), "the gate called")
		time.Sleep(provably)

		// The second run starts and makes its ConfigMap; its kubelet
		// reports the start a little later, as under load.
		start1 := node.now()
		made(t, w, "pass-run-1")
		time.Sleep(provably)
		node.report(ctx, t, w.Pod, runningSince(1, start1, crashed(0, first, start1)))
		held, err := gate.Held(ctx, 15*time.Second)
		must(t, err, "the pass's delete of pass-run-0")
		if held.OldObject.Raw == nil || !strings.Contains(string(held.OldObject.Raw), `"pass-run-0"`) {
			t.Fatalf("the gate held %s %s, not the delete of pass-run-0", held.Operation, held.Name)
		}
		// The pass in flight: the worker restarts again.
		start2 := node.now()
		node.report(ctx, t, w.Pod, runningSince(2, start2, crashed(1, start1, start2)))
		made(t, w, "pass-run-2")
		gate.Open()
		released(t, "pass-run-0", "pass-run-1")
		time.Sleep(aPass)
		kept(t, "pass-run-2")
	})

	// A pod replaced under its name (deleted, made again, as a
	// StatefulSet's): nothing of what ownerguard knew of the old one
	// carries over. The new pod's container runs report the same ids and
	// counts as the old one's did, so only the uid tells them apart; its
	// restart releases what its first run made.
	t.Run("PodReplacedUnderItsName", func(t *testing.T) {
		node := newStatusNode(ctx, t, "status-node-replaced", 0, true)
		old, first := node.worker(ctx, t, ns, "worker-replaced")
		made(t, old, "replaced-old-run-0")
		time.Sleep(provably)
		restart := node.now()
		node.report(ctx, t, old.Pod, runningSince(1, restart, crashed(0, first, restart)))
		released(t, "replaced-old-run-0")

		must(t, admin.CoreV1().Pods(ns).Delete(ctx, old.Name(), metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}), "delete the old pod")
		_, err := gone(ctx, 30*time.Second, func(ctx context.Context) error {
			_, err := admin.CoreV1().Pods(ns).Get(ctx, old.Name(), metav1.GetOptions{})
			return err
		})
		must(t, err, "the old pod gone")
		w, first := node.worker(ctx, t, ns, "worker-replaced")
		if w.UID() == old.UID() {
			t.Fatalf("the new pod has the old one's uid %s", w.UID())
		}
		made(t, w, "replaced-new-run-0")
		time.Sleep(provably)
		restart = node.now()
		node.report(ctx, t, w.Pod, runningSince(1, restart, crashed(0, first, restart)))
		made(t, w, "replaced-new-run-1")
		released(t, "replaced-new-run-0")
		time.Sleep(aPass)
		kept(t, "replaced-new-run-1")
	})

	// A node rebooted: its runtime lost the container. The kubelet (1.36
	// and later: RestartAllContainersOnContainerExits) first writes the
	// lost run as terminated with ContainerStatusUnknown and no times, the
	// count raised, the container waiting to be created; nothing is
	// released while no run has started since. Then the new run starts,
	// the lost run still its last state: what the run before the reboot
	// made goes, the new run's stays. A kubelet before 1.36 counts from
	// the runtime: after a reboot the count is back to 0 and no last state
	// shows, so no restart can be seen and nothing is released.
	t.Run("NodeRebooted", func(t *testing.T) {
		node := newStatusNode(ctx, t, "status-node-reboot", 0, true)
		w, _ := node.worker(ctx, t, ns, "worker-rebooted")
		made(t, w, "reboot-run-0")
		time.Sleep(provably)
		lost := &corev1.ContainerStateTerminated{Reason: "ContainerStatusUnknown", ExitCode: 137,
			Message: "The container could not be located when the pod was deleted.  The container used to be Running"}
		node.report(ctx, t, w.Pod, corev1.ContainerStatus{
			Name: "worker", Image: "e2e.invalid/worker:1", RestartCount: 1, Ready: false, Started: ptr(false),
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}},
			LastTerminationState: corev1.ContainerState{Terminated: lost},
		})
		time.Sleep(aPass)
		kept(t, "reboot-run-0")
		node.report(ctx, t, w.Pod, runningSince(1, node.now(), lost))
		made(t, w, "reboot-run-1")
		released(t, "reboot-run-0")
		time.Sleep(aPass)
		kept(t, "reboot-run-1")

		time.Sleep(provably)
		counted := runningSince(0, node.now(), nil)
		counted.ContainerID = runID(100)
		node.report(ctx, t, w.Pod, counted)
		time.Sleep(aPass)
		kept(t, "reboot-run-1")
	})
}
