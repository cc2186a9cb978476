package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"ownerguard.io/e2e/harness"
)

// The owner labels (the chart's default key prefix) and the worker pods.
const (
	ownerPodLabel = "ownerguard.io/owner-pod"
	ownerUIDLabel = "ownerguard.io/owner-uid"
	// Every worker pod carries it; nothing the tests select has it.
	workerLabel = "e2e.ownerguard.io/worker"
	// The labeller's configuration: its name sorts before ownerguard's,
	// so the API server calls it first.
	labellerConfig = "e2e-k8s-suite-owner-labeller"
)

// workerLabeller plays the worker's client for every test of the suite:
// each object the tests create in a namespace of theirs (the framework
// labels them e2e-run) gets the owner labels of a worker pod running in
// that namespace, on its metadata and on every template a controller
// makes objects from; an update of a labelled object keeps them, as a
// worker writes every object it owns. The first labelled create of a
// namespace starts its worker (a pod of its own, scheduled and run by a
// hollow node); a worker that is gone (a test deleted every pod of its
// namespace) is replaced for the creates after it.
type workerLabeller struct {
	client kubernetes.Interface
	// What a deleted object has become (gone or being deleted), waited
	// for at most effectWait.
	meta       metadata.Interface
	effectWait time.Duration
	server     *http.Server
	// workerGone: a test's deletion of an object its namespace's worker
	// owns deletes that worker too, as a worker that ends with its step
	// (the worker-gone run, for the explained failures).
	workerGone bool

	mu      sync.Mutex
	worker  map[string]*corev1.Pod // by namespace: the live worker
	started int
	counts  map[string]int // labelled requests, by "OPERATION resource"
	// One namespace's first creates wait for its worker; others do not.
	starting map[string]*sync.Mutex
	// The workers a test's deletion ended, by namespace: what was
	// deleted, and whether the worker's own deletion was accepted (the
	// worker-gone run's evidence that a pass followed the worker's end).
	ended map[string][]string
	wg    sync.WaitGroup
}

// labellerWebhook is the labeller's webhook (its configuration's name
// sorts before ownerguard's, so it is called first).
const labellerWebhook = "worker-labeller.e2e.k8s-suite.test"

func startWorkerLabeller(ctx context.Context, c kubernetes.Interface, meta metadata.Interface, suiteUser string, workerGone bool) (*workerLabeller, error) {
	l := &workerLabeller{client: c, meta: meta, effectWait: 20 * time.Second, worker: map[string]*corev1.Pod{}, counts: map[string]int{}, workerGone: workerGone, starting: map[string]*sync.Mutex{}}
	operations := []admissionregistrationv1.OperationType{"CREATE", "UPDATE"}
	if workerGone {
		operations = append(operations, "DELETE")
	}
	server, url, caBundle, err := harness.ServeWebhook("worker-labeller", "/label", http.HandlerFunc(l.serve))
	if err != nil {
		return nil, err
	}
	l.server = server
	// It starts worker pods, but not for a dry run.
	none := admissionregistrationv1.SideEffectClassNoneOnDryRun
	fail := admissionregistrationv1.Fail
	never := admissionregistrationv1.NeverReinvocationPolicy
	scope := admissionregistrationv1.NamespacedScope
	timeout := int32(20)
	_, err = c.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: labellerConfig},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			// Not under ownerguard.io: the audit log names ownerguard's
			// webhooks by that suffix.
			Name:         labellerWebhook,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: operations,
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"}, Scope: &scope},
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "e2e-run", Operator: metav1.LabelSelectorOpExists}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{
				// The tests' own writes: what a worker's client writes.
				{Name: "the-tests", Expression: fmt.Sprintf("request.userInfo.username == %q", suiteUser)},
				// Requests that persist nothing a worker would own.
				{Name: "persisted", Expression: "!(request.resource.group in ['authorization.k8s.io', 'authentication.k8s.io']) && request.resource.resource != 'bindings'"},
			},
			SideEffects:             &none,
			FailurePolicy:           &fail,
			ReinvocationPolicy:      &never,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		_ = server.Close()
		return nil, err
	}
	return l, nil
}

func (l *workerLabeller) close(ctx context.Context, c kubernetes.Interface) {
	_ = c.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, labellerConfig, metav1.DeleteOptions{})
	_ = l.server.Close()
}

func (l *workerLabeller) workers() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.started
}

// endings is what endWorkerOf did, once every worker's deletion it
// started has been answered: by namespace, "deleted KIND NAME: worker
// POD ended" or "... not ended: ERROR".
func (l *workerLabeller) endings() map[string][]string {
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]string{}
	for k, v := range l.ended {
		out[k] = append([]string(nil), v...)
	}
	return out
}

func (l *workerLabeller) labelled() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for k, v := range l.counts {
		out[k] = v
	}
	return out
}

func (l *workerLabeller) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, "bad review", http.StatusBadRequest)
		return
	}
	req := review.Request
	response := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	var patch []op
	var err error
	if req.Operation == admissionv1.Delete {
		l.endWorkerOf(req) // a deletion carries no object to label
	} else {
		patch, err = l.patch(r.Context(), req)
	}
	if err != nil {
		response.Allowed = false
		response.Result = &metav1.Status{Code: http.StatusInternalServerError, Message: "e2e worker labeller: " + err.Error()}
	} else if len(patch) > 0 {
		response.Patch, _ = json.Marshal(patch)
		pt := admissionv1.PatchTypeJSONPatch
		response.PatchType = &pt
		l.mu.Lock()
		l.counts[string(req.Operation)+" "+req.Resource.Resource]++
		l.mu.Unlock()
	}
	review.Response = response
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}

type op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// patch labels the object of a create with the namespace's worker; an
// update only when the object it replaces was labelled, with that
// object's own owner (a worker labels what it owns, not what it finds).
func (l *workerLabeller) patch(ctx context.Context, req *admissionv1.AdmissionRequest) ([]op, error) {
	var object map[string]any
	if err := json.Unmarshal(req.Object.Raw, &object); err != nil {
		return nil, fmt.Errorf("the object: %w", err)
	}
	var owner map[string]string
	switch req.Operation {
	case admissionv1.Create:
		if meta, _ := object["metadata"].(map[string]any); meta != nil {
			if labels, _ := meta["labels"].(map[string]any); labels != nil && labels[ownerPodLabel] != nil {
				return nil, nil // labelled by the test itself
			}
		}
		worker, err := l.workerOf(ctx, req.Namespace, req.DryRun != nil && *req.DryRun)
		if err != nil {
			return nil, err
		}
		if worker == nil {
			return nil, nil // a dry run before the namespace's worker
		}
		owner = map[string]string{ownerPodLabel: worker.Name, ownerUIDLabel: string(worker.UID)}
	case admissionv1.Update:
		var old map[string]any
		if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
			return nil, fmt.Errorf("the old object: %w", err)
		}
		meta, _ := old["metadata"].(map[string]any)
		labels, _ := meta["labels"].(map[string]any)
		name, _ := labels[ownerPodLabel].(string)
		if name == "" {
			return nil, nil
		}
		owner = map[string]string{ownerPodLabel: name}
		if uid, _ := labels[ownerUIDLabel].(string); uid != "" {
			owner[ownerUIDLabel] = uid
		}
	default:
		return nil, nil
	}
	var ops []op
	for _, path := range labelledMetadata(object) {
		ops = append(ops, labelOps(object, path, owner)...)
	}
	return ops, nil
}

// labelledMetadata are the paths of the object's metadata and of every
// template in it a controller makes objects from: pod templates (a
// workload's, a PodTemplate's, a CronJob's Job template and its pod
// template), a StatefulSet's claim templates and every generic ephemeral
// volume's claim template (a pod's and its templates').
func labelledMetadata(object map[string]any) [][]string {
	paths := [][]string{{"metadata"}}
	// Templates are those of Kubernetes' own kinds: a custom resource's
	// spec.template is its own business.
	apiVersion, _ := object["apiVersion"].(string)
	if group, _, found := strings.Cut(apiVersion, "/"); found && group != "apps" && group != "batch" {
		return paths
	}
	var podSpec func(spec map[string]any, at []string)
	podSpec = func(spec map[string]any, at []string) {
		volumes, _ := spec["volumes"].([]any)
		for i, v := range volumes {
			volume, _ := v.(map[string]any)
			ephemeral, _ := volume["ephemeral"].(map[string]any)
			if template, _ := ephemeral["volumeClaimTemplate"].(map[string]any); template != nil {
				paths = append(paths, appendPath(at, "volumes", fmt.Sprint(i), "ephemeral", "volumeClaimTemplate", "metadata"))
			}
		}
	}
	podTemplate := func(template map[string]any, at []string) {
		if template == nil {
			return
		}
		paths = append(paths, appendPath(at, "metadata"))
		if spec, _ := template["spec"].(map[string]any); spec != nil {
			podSpec(spec, appendPath(at, "spec"))
		}
	}
	if template, _ := object["template"].(map[string]any); template != nil && object["kind"] == "PodTemplate" {
		podTemplate(template, []string{"template"})
	}
	spec, _ := object["spec"].(map[string]any)
	if spec == nil {
		return paths
	}
	if object["kind"] == "Pod" && object["apiVersion"] == "v1" {
		podSpec(spec, []string{"spec"})
	}
	if template, _ := spec["template"].(map[string]any); template != nil {
		podTemplate(template, []string{"spec", "template"})
	}
	if job, _ := spec["jobTemplate"].(map[string]any); job != nil {
		paths = append(paths, []string{"spec", "jobTemplate", "metadata"})
		if jobSpec, _ := job["spec"].(map[string]any); jobSpec != nil {
			template, _ := jobSpec["template"].(map[string]any)
			podTemplate(template, []string{"spec", "jobTemplate", "spec", "template"})
		}
	}
	claims, _ := spec["volumeClaimTemplates"].([]any)
	for i := range claims {
		paths = append(paths, []string{"spec", "volumeClaimTemplates", fmt.Sprint(i), "metadata"})
	}
	return paths
}

func appendPath(at []string, more ...string) []string {
	return append(append([]string(nil), at...), more...)
}

// labelOps adds the owner labels at the metadata of path, making the
// metadata or its labels when missing; nothing when they are there.
func labelOps(object map[string]any, path []string, owner map[string]string) []op {
	var node any = object
	for _, key := range path {
		switch n := node.(type) {
		case map[string]any:
			node = n[key]
		case []any:
			var i int
			fmt.Sscan(key, &i)
			node = n[i]
		}
	}
	pointer := "/" + strings.Join(path, "/")
	meta, _ := node.(map[string]any)
	if meta == nil {
		labels := map[string]any{}
		for k, v := range owner {
			labels[k] = v
		}
		return []op{{Op: "add", Path: pointer, Value: map[string]any{"labels": labels}}}
	}
	labels, _ := meta["labels"].(map[string]any)
	if labels == nil {
		labels = map[string]any{}
		for k, v := range owner {
			labels[k] = v
		}
		return []op{{Op: "add", Path: pointer + "/labels", Value: labels}}
	}
	var ops []op
	for k, v := range owner {
		if labels[k] != v {
			ops = append(ops, op{Op: "add", Path: pointer + "/labels/" + strings.ReplaceAll(k, "/", "~1"), Value: v})
		}
	}
	return ops
}

// endWorkerOf ends the worker that owns the object a test deletes (its
// owner label names the namespace's current worker), once the deletion
// has taken effect (the object gone or being deleted: an admitted
// deletion may still fail, on a precondition or a conflict): the objects
// it owns alone are then collected with it. Creates after the deletion's
// admission already get a worker of their own. Not for an object that
// its controller makes again (a daemon pod, a Deployment's ReplicaSet):
// a test that deletes one waits for another, which the worker's end
// would take away with the controller. (A pod whose controller is
// another pod, as in the collector's dependency-circle test, is
// nobody's to make again.) An eviction (a create of pods/eviction) ends
// no worker: it is the cluster's disruption, not the end of a step.
func (l *workerLabeller) endWorkerOf(req *admissionv1.AdmissionRequest) {
	// A dry run deletes nothing: the API server calls the hook for it too.
	if req.DryRun != nil && *req.DryRun {
		return
	}
	var old struct {
		Metadata struct {
			Name              string                  `json:"name"`
			UID               types.UID               `json:"uid"`
			DeletionTimestamp *metav1.Time            `json:"deletionTimestamp"`
			Labels            map[string]string       `json:"labels"`
			OwnerReferences   []metav1.OwnerReference `json:"ownerReferences"`
		} `json:"metadata"`
	}
	if json.Unmarshal(req.OldObject.Raw, &old) != nil {
		return
	}
	for _, ref := range old.Metadata.OwnerReferences {
		if ref.Controller != nil && *ref.Controller && makesAgain(ref, req.Kind) {
			return
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	worker := l.worker[req.Namespace]
	if worker == nil || old.Metadata.Labels[ownerPodLabel] != worker.Name {
		return
	}
	delete(l.worker, req.Namespace)
	// A deletion of a collection is admitted item by item, with no name
	// in the request: the item's own is in the old object.
	name := req.Name
	if name == "" {
		name = old.Metadata.Name
	}
	deleted := "deleted " + req.Kind.Kind + " " + name
	resource := schema.GroupVersionResource{Group: req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource}
	// An object already being deleted proves nothing by being deleted
	// still: only its end (or another in its place) does.
	alreadyDeleting := old.Metadata.DeletionTimestamp != nil
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var ending string
		if err := l.deletionTookEffect(ctx, resource, req.Namespace, name, old.Metadata.UID, alreadyDeleting); err != nil {
			ending = deleted + ": worker " + worker.Name + " not ended: the deletion did not take effect: " + err.Error()
		} else {
			err := l.client.CoreV1().Pods(worker.Namespace).Delete(ctx, worker.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &worker.UID}})
			ending = deleted + ": worker " + worker.Name + " ended"
			if err != nil && !apierrors.IsNotFound(err) {
				ending = deleted + ": worker " + worker.Name + " not ended: " + err.Error()
			}
		}
		l.mu.Lock()
		if l.ended == nil {
			l.ended = map[string][]string{}
		}
		l.ended[worker.Namespace] = append(l.ended[worker.Namespace], ending)
		l.mu.Unlock()
	}()
}

// deletionTookEffect waits until the object a deletion was admitted for
// (by its uid) is gone or being deleted (gone, when it was being deleted
// already).
func (l *workerLabeller) deletionTookEffect(ctx context.Context, resource schema.GroupVersionResource, namespace, name string, uid types.UID, alreadyDeleting bool) error {
	if l.meta == nil {
		return fmt.Errorf("no client to see %s %s/%s with", resource.Resource, namespace, name)
	}
	if name == "" {
		return fmt.Errorf("no name for the deleted %s in %s", resource.Resource, namespace)
	}
	return harness.Until(ctx, l.effectWait, 50*time.Millisecond, "the deletion of "+resource.Resource+" "+namespace+"/"+name, func() error {
		current, err := l.meta.Resource(resource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		case uid == "" || current.UID != uid:
			return nil
		case current.DeletionTimestamp != nil && !alreadyDeleting:
			return nil
		}
		return fmt.Errorf("still there, not being deleted")
	})
}

// groupKind is an API group and kind ("" for the core group).
type groupKind struct{ group, kind string }

// madeAgain: the kinds each workload controller makes again when one it
// controls is deleted (from their sync loops: a missing replica, daemon
// pod, claim of a pending pod or revision is created anew). A CronJob
// does not make a deleted Job again: its next one comes on schedule.
var madeAgain = map[groupKind][]groupKind{
	{"apps", "ReplicaSet"}:        {{"", "Pod"}},
	{"", "ReplicationController"}: {{"", "Pod"}},
	{"batch", "Job"}:              {{"", "Pod"}},
	{"apps", "DaemonSet"}:         {{"", "Pod"}, {"apps", "ControllerRevision"}},
	{"apps", "StatefulSet"}:       {{"", "Pod"}, {"", "PersistentVolumeClaim"}, {"apps", "ControllerRevision"}},
	{"apps", "Deployment"}:        {{"apps", "ReplicaSet"}},
	{"", "Service"}:               {{"discovery.k8s.io", "EndpointSlice"}},
	// The mirroring controller's slices of an Endpoints without a Service
	// selector; a pod's generic ephemeral volume's claim and its
	// resource claims, made for the pod while it has none.
	{"", "Endpoints"}: {{"discovery.k8s.io", "EndpointSlice"}},
	{"", "Pod"}:       {{"", "PersistentVolumeClaim"}, {"resource.k8s.io", "ResourceClaim"}},
}

// makesAgain: the controller ref's kind makes the deleted kind again.
func makesAgain(controller metav1.OwnerReference, deleted metav1.GroupVersionKind) bool {
	group := ""
	if g, _, found := strings.Cut(controller.APIVersion, "/"); found {
		group = g
	}
	return slices.Contains(madeAgain[groupKind{group, controller.Kind}], groupKind{deleted.Group, deleted.Kind})
}

// workerOf is the namespace's live worker, started on first use: a pod
// the hollow nodes run, created by the suite's runner (not the tests, so
// not labelled), and replaced when gone, being deleted or finished.
func (l *workerLabeller) workerOf(ctx context.Context, namespace string, dryRun bool) (*corev1.Pod, error) {
	l.mu.Lock()
	start := l.starting[namespace]
	if start == nil {
		start = &sync.Mutex{}
		l.starting[namespace] = start
	}
	l.mu.Unlock()
	start.Lock()
	defer start.Unlock()
	l.mu.Lock()
	pod := l.worker[namespace]
	l.mu.Unlock()
	if pod != nil {
		current, err := l.client.CoreV1().Pods(namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err == nil && current.UID == pod.UID && current.DeletionTimestamp == nil &&
			current.Status.Phase != corev1.PodSucceeded && current.Status.Phase != corev1.PodFailed {
			return pod, nil
		}
	}
	if dryRun {
		// A dry run changes nothing: it starts no worker.
		return nil, nil
	}
	zero := int64(0)
	automount := false
	pod = &corev1.Pod{
		// Named to sort after the tests' own pods, and never Ready (a
		// readiness gate nothing sets): tests that take "the first
		// ready pod of the namespace" (the disruption tests evict it,
		// write it into a budget's status) or count the namespace's ready
		// pods mean theirs, and the worker evicted would take the test's
		// objects with it, the controllers' next creates refused, as the
		// contract asks. ownerguard judges an owner by its uid and
		// phase, never by its readiness.
		ObjectMeta: metav1.ObjectMeta{GenerateName: "zz-ownerguard-worker-", Labels: map[string]string{workerLabel: "true"}},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{{Name: "worker", Image: "registry.k8s.io/pause:3.10"}},
			TerminationGracePeriodSeconds: &zero,
			AutomountServiceAccountToken:  &automount,
			ReadinessGates:                []corev1.PodReadinessGate{{ConditionType: "e2e.ownerguard.io/never"}},
		},
	}
	// The namespace's default ServiceAccount may be a moment behind it.
	var created *corev1.Pod
	err := harness.Until(ctx, 15*time.Second, 200*time.Millisecond, "the worker of "+namespace, func() error {
		var err error
		created, err = l.client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return nil, err
	}
	// Not to be evicted by a test: the disruption tests evict "the first
	// running pod of the namespace", which before their own pods run is
	// the worker, and a worker evicted takes the test's objects with it
	// while their controllers still make more (refused: their owner is
	// gone). A budget of its own makes such an eviction fail as one under
	// a budget does (a production worker may well have one too).
	zeroUnavailable := intstr.FromInt32(0)
	budget := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "zz-ownerguard-worker"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: &zeroUnavailable,
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{workerLabel: "true"}},
		},
	}
	if _, err := l.client.PolicyV1().PodDisruptionBudgets(namespace).Create(ctx, budget, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("the worker's disruption budget in %s: %w", namespace, err)
	}
	l.mu.Lock()
	l.worker[namespace] = created
	l.started++
	l.mu.Unlock()
	return created, nil
}
