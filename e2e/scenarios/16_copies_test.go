package scenarios

// Controllers that copy an object's own labels, and controllers that
// must never stall on ownerguard (issue 25, items 1 and 5; SPEC rule 16),
// against the real endpoints, endpointslice, endpointslice-mirroring and
// statefulset controllers.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// copyRules: a worker that also makes Services, Endpoints and claims.
func copyRules() []rbacv1.PolicyRule {
	return append(walkRules(),
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"services", "endpoints"}, Verbs: allVerbs})
}

func service(name string, labels, selector map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.ServiceSpec{Selector: selector,
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
}

func TestLabelCopies(t *testing.T) {
	_, err := plane.WaitStartedControllers(ctxFor(t, time.Minute), "endpoints-controller", "endpointslice-controller", "endpointslice-mirroring-controller")
	must(t, err, "the controller manager's endpoints controllers")

	// A Service labelled by the worker's name: the endpoints and
	// endpointslice controllers copy its labels onto the Endpoints and
	// the EndpointSlice they make (as themselves, no pod identity); both
	// are admitted with the worker's reference, and collected with it.
	t.Run("ServiceByNameGetsEndpointsAndSlicesCollectedWithTheWorker", func(t *testing.T) {
		ctx := ctxFor(t, 3*time.Minute)
		ns := newNamespace(t, "copies", copyRules())
		w := newWorker(t, ns, "worker-svc")
		_, err := w.Client.CoreV1().Services(ns).Create(ctx, service("agents", ownedLabels(w.Name(), ""), map[string]string{"app": "agent"}), metav1.CreateOptions{})
		must(t, err, "create the labelled Service as the worker")
		var endpoints *corev1.Endpoints
		var slice *discoveryv1.EndpointSlice
		must(t, untilUnrefused(ctx, ns, 60*time.Second, "the Service's Endpoints and EndpointSlice", func() error {
			var err error
			if endpoints, err = admin.CoreV1().Endpoints(ns).Get(ctx, "agents", metav1.GetOptions{}); err != nil {
				return err
			}
			slices, err := admin.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=agents"})
			if err != nil {
				return err
			}
			if len(slices.Items) == 0 {
				return errors.New("no EndpointSlice yet")
			}
			slice = &slices.Items[0]
			return nil
		}), "the controllers' copies")
		must(t, checkOwned(endpoints.ObjectMeta, w, false), "the Endpoints")
		must(t, checkOwned(slice.ObjectMeta, w, false), "the EndpointSlice")
		fmt.Printf("    copies: Endpoints %s %s, EndpointSlice %s %s\n", endpoints.Name, refsString(endpoints.OwnerReferences), slice.Name, refsString(slice.OwnerReferences))

		time.Sleep(time.Second) // the collector's informers see the new objects
		must(t, admin.CoreV1().Pods(ns).Delete(ctx, w.Name(), metav1.DeleteOptions{}), "delete the worker")
		for what, get := range map[string]func(context.Context) error{
			"the Service": func(ctx context.Context) error {
				_, err := admin.CoreV1().Services(ns).Get(ctx, "agents", metav1.GetOptions{})
				return err
			},
			"the Endpoints": func(ctx context.Context) error {
				_, err := admin.CoreV1().Endpoints(ns).Get(ctx, "agents", metav1.GetOptions{})
				return err
			},
			"the EndpointSlice": func(ctx context.Context) error {
				_, err := admin.DiscoveryV1().EndpointSlices(ns).Get(ctx, slice.Name, metav1.GetOptions{})
				return err
			},
		} {
			if _, err := gone(ctx, 60*time.Second, get); err != nil {
				t.Errorf("%s not collected with the worker: %v", what, err)
			}
		}
	})

	// Self on a Service: refused up front, with the form to use; never
	// admitted to have its controllers refused after.
	t.Run("ServiceBySelfRefusedUpFront", func(t *testing.T) {
		ctx := ctxFor(t, time.Minute)
		ns := newNamespace(t, "copies", copyRules())
		w := newWorker(t, ns, "worker-svc-self")
		_, err := w.Client.CoreV1().Services(ns).Create(ctx, service("agents", map[string]string{ownerPodLabel: selfOwner}, map[string]string{"app": "agent"}), metav1.CreateOptions{})
		wantRefusedByOwnerguard(t, err, ownerPodLabel+": "+w.Name())
	})

	// Endpoints a worker made (its reference on them), then a Service of
	// that name, unlabelled: the endpoints controller takes the Endpoints
	// over, relabelling them with the Service's labels and keeping their
	// references; never refused.
	t.Run("EndpointsAWorkerMadeTakenOverByTheController", func(t *testing.T) {
		ctx := ctxFor(t, 2*time.Minute)
		ns := newNamespace(t, "copies", copyRules())
		w := newWorker(t, ns, "worker-takeover")
		_, err := w.Client.CoreV1().Endpoints(ns).Create(ctx, &corev1.Endpoints{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: ownedLabels(w.Name(), "")},
		}, metav1.CreateOptions{})
		must(t, err, "create Endpoints as the worker")
		_, err = admin.CoreV1().Services(ns).Create(ctx, service("web", nil, map[string]string{"app": "web"}), metav1.CreateOptions{})
		must(t, err, "create the Service")
		must(t, untilUnrefused(ctx, ns, 60*time.Second, "the controller's takeover", func() error {
			e, err := admin.CoreV1().Endpoints(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if e.Labels["endpoints.kubernetes.io/managed-by"] != "endpoint-controller" {
				return fmt.Errorf("labels %v: not taken over yet", e.Labels)
			}
			return nil
		}), "the endpoints controller's update")
	})

	// A CronJob whose Job template has no labels and whose pod template
	// says Self: each Job would take the pod template's labels (batch/v1
	// defaulting), not its annotations, from the cronjob controller, and
	// be refused; so the CronJob is refused up front.
	t.Run("CronJobWhoseJobsTakeASelfPodTemplateRefusedUpFront", func(t *testing.T) {
		ctx := ctxFor(t, time.Minute)
		ns := newNamespace(t, "copies", copyRules())
		w := newWorker(t, ns, "worker-cron")
		job := agentPod("x", nil).Spec
		job.RestartPolicy = corev1.RestartPolicyNever
		cron := &batchv1.CronJob{
			ObjectMeta: metav1.ObjectMeta{Name: "nightly", Labels: ownedLabels(w.Name(), "")},
			Spec: batchv1.CronJobSpec{Schedule: "@daily", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{ownerPodLabel: selfOwner}}, Spec: job},
			}}},
		}
		_, err := w.Client.BatchV1().CronJobs(ns).Create(ctx, cron, metav1.CreateOptions{})
		wantRefusedByOwnerguard(t, err, "spec.jobTemplate.metadata has no labels")
		// Made with Job template labels, which an UPDATE then drops: the
		// chart's matchConditions send that update (it changes what the
		// Jobs are given), and it is refused as the create was.
		cron.Spec.JobTemplate.Labels = map[string]string{"team": "a"}
		_, err = w.Client.BatchV1().CronJobs(ns).Create(ctx, cron, metav1.CreateOptions{})
		must(t, err, "create the CronJob with Job template labels")
		must(t, harness.Until(ctx, 30*time.Second, 200*time.Millisecond, "drop the Job template's labels", func() error {
			c, err := w.Client.BatchV1().CronJobs(ns).Get(ctx, "nightly", metav1.GetOptions{})
			if err != nil {
				return err
			}
			c.Spec.JobTemplate.Labels = nil
			_, err = w.Client.BatchV1().CronJobs(ns).Update(ctx, c, metav1.UpdateOptions{})
			if err == nil {
				return errors.New("the update dropping the Job template's labels was stored")
			}
			if strings.Contains(err.Error(), "spec.jobTemplate.metadata has no labels") {
				return nil
			}
			return fmt.Errorf("not refused by ownerguard: %w", err)
		}), "the update dropping the Job template's labels refused")
	})

	// A selector-less Service with Endpoints the worker writes (Self, so
	// the name annotation is there): the mirroring controller copies the
	// Endpoints' labels and annotations onto an EndpointSlice, admitted
	// with the worker's reference.
	t.Run("MirroredEndpointsBySelfGetTheReference", func(t *testing.T) {
		ctx := ctxFor(t, 2*time.Minute)
		ns := newNamespace(t, "copies", copyRules())
		w := newWorker(t, ns, "worker-mirror")
		_, err := w.Client.CoreV1().Services(ns).Create(ctx, service("external", ownedLabels(w.Name(), ""), nil), metav1.CreateOptions{})
		must(t, err, "create the selector-less Service")
		_, err = w.Client.CoreV1().Endpoints(ns).Create(ctx, &corev1.Endpoints{
			ObjectMeta: metav1.ObjectMeta{Name: "external", Labels: map[string]string{ownerPodLabel: selfOwner}},
			Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "10.200.0.77"}},
				Ports: []corev1.EndpointPort{{Port: 8080}}}},
		}, metav1.CreateOptions{})
		must(t, err, "create the Endpoints as the worker, labelled Self")
		var slice *discoveryv1.EndpointSlice
		must(t, untilUnrefused(ctx, ns, 60*time.Second, "the mirrored EndpointSlice", func() error {
			slices, err := admin.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "endpointslice.kubernetes.io/managed-by=endpointslicemirroring-controller.k8s.io"})
			if err != nil {
				return err
			}
			if len(slices.Items) == 0 {
				return errors.New("no mirrored EndpointSlice yet")
			}
			slice = &slices.Items[0]
			return nil
		}), "the mirroring controller's copy")
		must(t, checkOwned(slice.ObjectMeta, w, false), "the mirrored EndpointSlice")
	})
}

// TestStatefulSetClaimRetention: a labelled StatefulSet whose claims go
// with their pods on a scale-down (persistentVolumeClaimRetentionPolicy
// whenScaled: Delete). The statefulset controller puts each condemned
// pod on its claim as controller, by UPDATE, the pod running, being
// deleted, finished or already gone by then (its informer's cache), before
// it deletes any pod: a refusal would stall the set's sync. ownerguard admits it (rule 16) and keeps the worker's own
// reference, so such a claim goes once both its pod and the worker are
// gone (the collector deletes a dependent whose owners are all gone):
// with the worker at the latest, never leaked, and reused if its pod
// comes back first.
func TestStatefulSetClaimRetention(t *testing.T) {
	ctx := ctxFor(t, 4*time.Minute)
	_, err := plane.WaitStartedControllers(ctx, "statefulset-controller", "garbage-collector-controller", "persistentvolumeclaim-protection-controller")
	must(t, err, "the controller manager's statefulset controller")
	ns := newNamespace(t, "retention", copyRules())
	w := newWorker(t, ns, "worker-retention")
	_, err = w.Client.AppsV1().StatefulSets(ns).Create(ctx, retentionSet(w), metav1.CreateOptions{})
	must(t, err, "create the labelled StatefulSet")
	count := func(want int) func() error {
		return func() error {
			pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=db"})
			if err != nil {
				return err
			}
			claims, err := admin.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			if len(pods.Items) != want || len(claims.Items) != 3 {
				return fmt.Errorf("%d pods, %d claims; want %d pods, 3 claims", len(pods.Items), len(claims.Items), want)
			}
			return nil
		}
	}
	must(t, untilUnrefused(ctx, ns, 90*time.Second, "three pods and claims", count(3)), "the set at 3")
	condemned := map[string]*corev1.Pod{"data-db-1": getPod(t, ns, "db-1"), "data-db-2": getPod(t, ns, "db-2")}
	// One condemned pod finished (evicted, say) before the scale-down:
	// the controller puts it on its claim all the same.
	finish(t, condemned["data-db-2"], corev1.PodFailed)
	scale := func(n int32) {
		must(t, harness.Until(ctx, 30*time.Second, 200*time.Millisecond, "scale", func() error {
			s, err := w.Client.AppsV1().StatefulSets(ns).Get(ctx, "db", metav1.GetOptions{})
			if err != nil {
				return err
			}
			s.Spec.Replicas = ptr(n)
			_, err = w.Client.AppsV1().StatefulSets(ns).Update(ctx, s, metav1.UpdateOptions{})
			return err
		}), fmt.Sprintf("scale the set to %d", n))
	}
	// The controller's UPDATEs putting each condemned pod on its claim, as
	// /mutate answered them: admitted, the blocking reference made
	// non-blocking (patched). The collector then strips each reference once
	// its pod is gone (the claim keeps a live owner, the worker), so the
	// answers, not the claims, show them.
	unblocked := func() float64 {
		n, _ := guard.Metric("ownerguard_admission_requests_total", map[string]string{"webhook": "mutate", "operation": "UPDATE", "resource": "persistentvolumeclaims", "result": "patched"})
		return n
	}
	before := unblocked()
	scale(1)
	must(t, untilUnrefused(ctx, ns, 90*time.Second, "the scale-down", func() error {
		if err := count(1)(); err != nil {
			return err
		}
		// At least one: a condemned pod that finished may be replaced
		// before the scale-down reaches it (the controller recreates
		// failed pods, and on some minors removes them first).
		if n := unblocked() - before; n < 1 {
			return fmt.Errorf("%v claim updates putting a condemned pod on its claim admitted, want one at least", n)
		}
		for claim := range condemned {
			c, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if err := checkOwned(metav1.ObjectMeta{Name: c.Name, Labels: c.Labels, OwnerReferences: withoutController(c.OwnerReferences)}, w, false); err != nil {
				return err
			}
		}
		return nil
	}), "the scale-down: condemned pods deleted, their claims kept by the worker")
	scale(2)
	must(t, untilUnrefused(ctx, ns, 90*time.Second, "the scale-up", func() error {
		if err := count(2)(); err != nil {
			return err
		}
		c, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data-db-1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if metav1.GetControllerOf(&c.ObjectMeta) != nil {
			return fmt.Errorf("data-db-1 still has a controller %s", refsString(c.OwnerReferences))
		}
		return checkOwned(c.ObjectMeta, w, true)
	}), "the scale-up: pod db-1 back with its claim, the worker's alone again")
	if refused := refusals(ctx, ns); len(refused) > 0 {
		t.Fatalf("the controllers met refusals: %s", strings.Join(refused, "; "))
	}
	time.Sleep(time.Second) // the collector's informers see the latest objects
	must(t, admin.CoreV1().Pods(ns).Delete(ctx, w.Name(), metav1.DeleteOptions{}), "delete the worker")
	for _, claim := range []string{"data-db-0", "data-db-1", "data-db-2"} {
		if _, err := gone(ctx, 60*time.Second, func(ctx context.Context) error {
			_, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
			return err
		}); err != nil {
			t.Errorf("claim %s not collected with the worker: %v", claim, err)
		}
	}
}

// TestStatefulSetClaimRetentionOrder: the statefulset controller works
// from its informers' caches, so its update putting a condemned pod on
// that pod's claim may reach ownerguard after the pod is gone, or gone
// and replaced by another pod of its name. A mutating webhook sorted
// before ownerguard's (harness.Gate) holds that update while the scenario
// deletes the pod, so each order happens every run instead of under load
// only. Whatever the order the update is admitted (a refusal stalls the
// set's sync), the collector drops the reference to a pod that is gone,
// and the claim goes with the worker.
func TestStatefulSetClaimRetentionOrder(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	_, err := plane.WaitStartedControllers(ctx, "statefulset-controller", "garbage-collector-controller", "persistentvolumeclaim-protection-controller")
	must(t, err, "the controller manager's statefulset controller")
	for _, order := range []struct {
		name string
		// meanwhile runs while the controller's update is held, before
		// ownerguard sees it.
		meanwhile func(t *testing.T, ctx context.Context, ns string, condemned *corev1.Pod)
	}{
		{"PodDeletedAfterTheClaimUpdate", nil},
		{"PodDeletedBeforeTheClaimUpdate", func(t *testing.T, ctx context.Context, ns string, condemned *corev1.Pod) {
			deletePodNow(t, ctx, ns, "db-2")
			ownerguardSees(t, ctx, ns, condemned, "not found")
		}},
		{"PodReplacedBeforeTheClaimUpdate", func(t *testing.T, ctx context.Context, ns string, condemned *corev1.Pod) {
			deletePodNow(t, ctx, ns, "db-2")
			// Not the set's (no selector labels): the controller leaves it be.
			spec := walkPodSpec()
			_, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-2"}, Spec: spec}, metav1.CreateOptions{})
			must(t, err, "create another pod named db-2")
			ownerguardSees(t, ctx, ns, condemned, "does not have uid")
		}},
	} {
		t.Run(order.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxFor(t, 4*time.Minute)
			ns := newNamespace(t, "retention-order", copyRules())
			w := newWorker(t, ns, "worker-retention")
			_, err := w.Client.AppsV1().StatefulSets(ns).Create(ctx, retentionSet(w), metav1.CreateOptions{})
			must(t, err, "create the labelled StatefulSet")
			must(t, untilUnrefused(ctx, ns, 90*time.Second, "three pods and claims", func() error {
				pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=db"})
				if err != nil {
					return err
				}
				claims, err := admin.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
				if err != nil {
					return err
				}
				if len(pods.Items) != 3 || len(claims.Items) != 3 {
					return fmt.Errorf("%d pods, %d claims; want 3 and 3", len(pods.Items), len(claims.Items))
				}
				return nil
			}), "the set at 3")
			condemned := getPod(t, ns, "db-2")

			gate, err := harness.StartGate("aa-e2e-gate-" + ns)
			must(t, err, "start the gate")
			t.Cleanup(func() { gate.Close(context.Background(), admin) })
			must(t, gate.Register(ctx, admin, "persistentvolumeclaims", ns,
				"request.userInfo.username == 'system:serviceaccount:kube-system:statefulset-controller' && object.metadata.name == 'data-db-2'"),
				"register the gate")
			// Scale down only once the API server calls the gate: a dry
			// run of the statefulset controller's own kind of update
			// (impersonated), marked as a probe.
			must(t, gate.Ready(ctx, func(ctx context.Context) error {
				return probeClaimUpdate(ctx, ns, "data-db-0")
			}), "the gate registered")
			must(t, harness.Until(ctx, 30*time.Second, 200*time.Millisecond, "scale", func() error {
				s, err := w.Client.AppsV1().StatefulSets(ns).Get(ctx, "db", metav1.GetOptions{})
				if err != nil {
					return err
				}
				s.Spec.Replicas = ptr(int32(2))
				_, err = w.Client.AppsV1().StatefulSets(ns).Update(ctx, s, metav1.UpdateOptions{})
				return err
			}), "scale the set to 2")
			held, err := gate.Held(ctx, 60*time.Second)
			must(t, err, "the controller's claim update")
			var claim corev1.PersistentVolumeClaim
			must(t, json.Unmarshal(held.Object.Raw, &claim), "decode the held claim")
			if c := metav1.GetControllerOf(&claim); c == nil || c.Kind != "Pod" || c.Name != "db-2" || c.UID != condemned.UID {
				t.Fatalf("the held update of %s does not put pod db-2 (%s) on it as controller: %s", claim.Name, condemned.UID, refsString(claim.OwnerReferences))
			}
			if order.meanwhile != nil {
				order.meanwhile(t, ctx, ns, condemned)
			}
			gate.Open()
			// ownerguard's answer to that update, from its decision log:
			// what the controller met, whatever the controller manager
			// has logged by now.
			decided, err := decisionsOn(ctx, ns, "PersistentVolumeClaim", "data-db-2", "UPDATE", "mutate")
			must(t, err, "ownerguard's decision on the held update")
			for _, line := range decided {
				if strings.Contains(line, `"result":"denied"`) {
					t.Fatalf("ownerguard refused the statefulset controller's update: %s", line)
				}
			}

			must(t, untilUnrefused(ctx, ns, 90*time.Second, "the scale-down", func() error {
				pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=db"})
				if err != nil {
					return err
				}
				if len(pods.Items) != 2 {
					return fmt.Errorf("%d pods of the set, want 2", len(pods.Items))
				}
				c, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data-db-2", metav1.GetOptions{})
				if err != nil {
					return err
				}
				// The reference to a pod that is gone, or to the pod of
				// another uid, is the collector's to drop: the claim keeps
				// the worker's.
				return checkOwned(metav1.ObjectMeta{Name: c.Name, Labels: c.Labels, OwnerReferences: withoutController(c.OwnerReferences)}, w, false)
			}), "the scale-down admitted, the claim kept by the worker")
			if refused := refusals(ctx, ns); len(refused) > 0 {
				t.Fatalf("the controllers met refusals: %s", strings.Join(refused, "; "))
			}
			must(t, admin.CoreV1().Pods(ns).Delete(ctx, w.Name(), metav1.DeleteOptions{}), "delete the worker")
			if _, err := gone(ctx, 60*time.Second, func(ctx context.Context) error {
				_, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data-db-2", metav1.GetOptions{})
				return err
			}); err != nil {
				t.Errorf("claim data-db-2 not collected with the worker: %v", err)
			}
		})
	}
}

// decisionsOn waits (at most 30 s) until ownerguard's decision log holds
// a decision of webhook on operation of kind name in namespace ns, and
// returns every such line.
func decisionsOn(ctx context.Context, ns, kind, name, operation, webhook string) ([]string, error) {
	var lines []string
	err := harness.Until(ctx, 30*time.Second, 100*time.Millisecond, "a decision on "+name, func() error {
		lines = nil
		for _, line := range strings.Split(harness.Grep(guard.Log, `"message":"decision"`, 100000), "\n") {
			if strings.Contains(line, `"namespace":"`+ns+`"`) && strings.Contains(line, `"kind":"`+kind+`"`) &&
				strings.Contains(line, `"name":"`+name+`"`) && strings.Contains(line, `"operation":"`+operation+`"`) &&
				strings.Contains(line, `"webhook":"`+webhook+`"`) {
				lines = append(lines, line)
			}
		}
		if len(lines) == 0 {
			return fmt.Errorf("no %s decision on %s %s/%s in %s", webhook, operation, kind, name, guard.Log)
		}
		return nil
	})
	return lines, err
}

// ownerguardSees waits until ownerguard's own view of the cluster (its
// watch cache) has caught up with pod's deletion: a dry-run create of a
// ConfigMap naming pod as owner, with its uid, is refused with want in the
// message. The API server answering first is not enough: ownerguard's
// watch may lag it by a moment.
func ownerguardSees(t *testing.T, ctx context.Context, ns string, pod *corev1.Pod, want string) {
	t.Helper()
	must(t, harness.Until(ctx, 30*time.Second, 100*time.Millisecond, "ownerguard sees pod "+pod.Name+" gone", func() error {
		_, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, configMap("probe-"+pod.Name, ownedLabels(pod.Name, string(pod.UID))),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil || !strings.Contains(err.Error(), want) {
			return fmt.Errorf("a dry-run create owned by %s: %v", pod.Name, err)
		}
		return nil
	}), "ownerguard's view of pod "+pod.Name)
}

// probeClaimUpdate: a dry-run UPDATE of claim name as the statefulset
// controller (impersonated), carrying harness.GateProbe: what a gate on
// that controller's claim updates is called for, and answers at once.
func probeClaimUpdate(ctx context.Context, ns, name string) error {
	config := plane.RESTConfig()
	config.Impersonate.UserName = "system:serviceaccount:kube-system:statefulset-controller"
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	claim, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if claim.Annotations == nil {
		claim.Annotations = map[string]string{}
	}
	claim.Annotations[harness.GateProbe] = "yes"
	_, err = client.CoreV1().PersistentVolumeClaims(ns).Update(ctx, claim, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

// deletePodNow deletes a pod at once and waits until the API server no
// longer has it.
func deletePodNow(t *testing.T, ctx context.Context, ns, name string) {
	t.Helper()
	must(t, admin.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}), "delete pod "+name)
	_, err := gone(ctx, 30*time.Second, func(ctx context.Context) error {
		_, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err
	})
	must(t, err, "pod "+name+" gone")
}

// retentionSet: the labelled StatefulSet "db" of 3 pods whose claims go
// with their pods on a scale-down (whenScaled: Delete), its pods made in
// parallel (no kubelet: pods stay Pending, so an ordered set would wait
// for each one to be ready).
func retentionSet(w *Worker) *appsv1.StatefulSet {
	set := statefulSet("db", w, false)
	set.Spec.Replicas = ptr(int32(3))
	set.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
	set.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
		WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
		WhenScaled:  appsv1.DeletePersistentVolumeClaimRetentionPolicyType,
	}
	return set
}

// withoutController: the references but the controller's.
func withoutController(refs []metav1.OwnerReference) []metav1.OwnerReference {
	var out []metav1.OwnerReference
	for _, r := range refs {
		if r.Controller == nil || !*r.Controller {
			out = append(out, r)
		}
	}
	return out
}

func getPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	pod, err := admin.CoreV1().Pods(ns).Get(ctxFor(t, 30*time.Second), name, metav1.GetOptions{})
	must(t, err, "pod "+name)
	return pod
}
