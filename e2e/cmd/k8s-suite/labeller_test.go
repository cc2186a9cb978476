package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
)

// A labeller of the worker-gone run with one worker in namespace ns, and
// the objects its metadata client sees.
func testLabeller(t *testing.T, objects ...runtime.Object) (*workerLabeller, *corev1.Pod, *fake.Clientset) {
	t.Helper()
	worker := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "zz-ownerguard-worker-abcde", Namespace: "ns", UID: "u1"}}
	client := fake.NewSimpleClientset(worker)
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	l := &workerLabeller{client: client, meta: metadatafake.NewSimpleMetadataClient(scheme, objects...), effectWait: 300 * time.Millisecond,
		worker: map[string]*corev1.Pod{"ns": worker}, counts: map[string]int{}, workerGone: true, starting: map[string]*sync.Mutex{}}
	return l, worker, client
}

// A deletion of config map "obj" (uid u-obj) owned by the worker, its
// controller (when one) given by apiVersion and kind.
func deletion(t *testing.T, worker string, dryRun bool, controllerAPIVersion, controllerKind string) *admissionv1.AdmissionRequest {
	t.Helper()
	return deletionOf(t, worker, dryRun, controllerAPIVersion, controllerKind, nil)
}

// deletionOf is deletion, the old object's metadata with more fields.
func deletionOf(t *testing.T, worker string, dryRun bool, controllerAPIVersion, controllerKind string, more map[string]any) *admissionv1.AdmissionRequest {
	t.Helper()
	yes := true
	meta := map[string]any{"name": "obj", "uid": "u-obj", "labels": map[string]string{ownerPodLabel: worker}}
	for k, v := range more {
		meta[k] = v
	}
	if controllerKind != "" {
		meta["ownerReferences"] = []metav1.OwnerReference{{APIVersion: controllerAPIVersion, Kind: controllerKind, Name: "c", UID: "u2", Controller: &yes}}
	}
	old, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		t.Fatal(err)
	}
	return &admissionv1.AdmissionRequest{Namespace: "ns", Name: "obj", Operation: admissionv1.Delete, DryRun: &dryRun,
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		OldObject: runtime.RawExtension{Raw: old}}
}

func workerLeft(t *testing.T, client *fake.Clientset, worker *corev1.Pod) bool {
	t.Helper()
	_, err := client.CoreV1().Pods("ns").Get(context.Background(), worker.Name, metav1.GetOptions{})
	return err == nil
}

// The worker-gone run ends a worker when a test deletes what it owns, and
// not on a dry run of that deletion, which deletes nothing.
func TestEndWorkerOfSkipsDryRuns(t *testing.T) {
	for _, dryRun := range []bool{true, false} {
		l, worker, client := testLabeller(t) // the object is gone
		l.endWorkerOf(deletion(t, worker.Name, dryRun, "", ""))
		l.endings()
		if ended := !workerLeft(t, client, worker); ended == dryRun {
			t.Errorf("dry run %v: worker ended %v", dryRun, ended)
		}
	}
}

// Which controller makes a deleted kind again: by group and kind both, so
// that a kind of another group with a workload's name is nobody's.
func TestMakesAgain(t *testing.T) {
	pod := metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	for _, tc := range []struct {
		apiVersion, kind string
		deleted          metav1.GroupVersionKind
		want             bool
	}{
		{"apps/v1", "ReplicaSet", pod, true},
		{"apps/v1", "ReplicaSet", metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, false},
		{"example.com/v1", "ReplicaSet", pod, false},
		{"v1", "ReplicaSet", pod, false},
		{"v1", "ReplicationController", pod, true},
		{"batch/v1", "Job", pod, true},
		{"batch/v1", "CronJob", metav1.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}, false},
		{"apps/v1", "Deployment", metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ReplicaSet"}, true},
		{"apps/v1", "Deployment", pod, false},
		{"apps/v1", "DaemonSet", metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ControllerRevision"}, true},
		{"apps/v1", "StatefulSet", metav1.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"}, true},
		{"v1", "Service", metav1.GroupVersionKind{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice"}, true},
		{"v1", "Service", pod, false},
		{"v1", "Pod", pod, false},
		{"v1", "Endpoints", metav1.GroupVersionKind{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice"}, true},
		{"v1", "Pod", metav1.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"}, true},
		{"v1", "Pod", metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, false},
	} {
		if got := makesAgain(metav1.OwnerReference{APIVersion: tc.apiVersion, Kind: tc.kind}, tc.deleted); got != tc.want {
			t.Errorf("%s %s makes %s again: %v, want %v", tc.apiVersion, tc.kind, tc.deleted.Kind, got, tc.want)
		}
	}
}

// What ends a worker, and the record the worker-gone run keeps of it: a
// deleted object the worker owns ends it once the deletion took effect,
// unless its controller makes it again.
func TestEndWorkerOfRecordsEndings(t *testing.T) {
	at := metav1.Now()
	object := func(uid types.UID, deleting bool) runtime.Object {
		o := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: "obj", Namespace: "ns", UID: uid}}
		if deleting {
			o.DeletionTimestamp = &at
		}
		return o
	}
	for name, tc := range map[string]struct {
		controllerAPIVersion, controller string
		left                             []runtime.Object // what the deletion left
		want                             string           // the ending, "" for none
	}{
		"gone, no controller":               {want: "deleted ConfigMap obj: worker zz-ownerguard-worker-abcde ended"},
		"gone, controlled by another pod":   {controllerAPIVersion: "v1", controller: "Pod", want: "ended"},
		"gone, controlled by a ReplicaSet":  {controllerAPIVersion: "apps/v1", controller: "ReplicaSet", want: "ended"},
		"gone, controlled by a custom kind": {controllerAPIVersion: "example.com/v1", controller: "Foo", want: "ended"},
		"being deleted (a finalizer)":       {left: []runtime.Object{object("u-obj", true)}, want: "ended"},
		"made again under another uid":      {left: []runtime.Object{object("u-new", false)}, want: "ended"},
		"still there: the deletion failed":  {left: []runtime.Object{object("u-obj", false)}, want: "not ended: the deletion did not take effect"},
	} {
		t.Run(name, func(t *testing.T) {
			l, worker, client := testLabeller(t, tc.left...)
			l.endWorkerOf(deletion(t, worker.Name, false, tc.controllerAPIVersion, tc.controller))
			endings := l.endings()["ns"]
			if len(endings) != 1 || !strings.Contains(endings[0], tc.want) {
				t.Fatalf("endings %q, want one with %q", endings, tc.want)
			}
			if ended := !workerLeft(t, client, worker); ended != !strings.Contains(tc.want, "not ended") {
				t.Fatalf("worker ended: %v, want it ended: %v", ended, !strings.Contains(tc.want, "not ended"))
			}
			// Either way, the namespace's next create gets a worker of its own.
			if l.worker["ns"] != nil {
				t.Fatalf("the deleted object's worker still labels the namespace's creates")
			}
		})
	}
	// A pod its controller makes again ends nothing.
	l, worker, client := testLabeller(t)
	request := deletion(t, worker.Name, false, "apps/v1", "DaemonSet")
	request.Kind, request.Resource = metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, metav1.GroupVersionResource{Version: "v1", Resource: "pods"}
	l.endWorkerOf(request)
	if endings := l.endings()["ns"]; len(endings) != 0 || !workerLeft(t, client, worker) || l.worker["ns"] == nil {
		t.Fatalf("a daemon pod's deletion ended its worker: %q", endings)
	}
}

// A deletion of a collection is admitted item by item with no name in the
// request; an object that was being deleted already proves its deletion
// only by going.
func TestEndWorkerOfCollectionsAndObjectsBeingDeleted(t *testing.T) {
	at := metav1.Now()
	object := func(deleting bool) runtime.Object {
		o := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: "obj", Namespace: "ns", UID: "u-obj"}}
		if deleting {
			o.DeletionTimestamp = &at
		}
		return o
	}
	for name, tc := range map[string]struct {
		collection, wasDeleting bool
		left                    []runtime.Object
		want                    string
	}{
		"an item of a collection, gone":             {collection: true, want: "deleted ConfigMap obj: worker zz-ownerguard-worker-abcde ended"},
		"an item of a collection, still there":      {collection: true, left: []runtime.Object{object(false)}, want: "deleted ConfigMap obj: worker zz-ownerguard-worker-abcde not ended"},
		"being deleted before, still being deleted": {wasDeleting: true, left: []runtime.Object{object(true)}, want: "not ended: the deletion did not take effect"},
		"being deleted before, gone":                {wasDeleting: true, want: "ended"},
		"being deleted only since the deletion":     {left: []runtime.Object{object(true)}, want: "ended"},
	} {
		t.Run(name, func(t *testing.T) {
			l, worker, client := testLabeller(t, tc.left...)
			more := map[string]any{}
			if tc.wasDeleting {
				more["deletionTimestamp"] = at
			}
			request := deletionOf(t, worker.Name, false, "", "", more)
			if tc.collection {
				request.Name = ""
			}
			l.endWorkerOf(request)
			endings := l.endings()["ns"]
			if len(endings) != 1 || !strings.Contains(endings[0], tc.want) {
				t.Fatalf("endings %q, want one with %q", endings, tc.want)
			}
			if ended := !workerLeft(t, client, worker); ended == strings.Contains(tc.want, "not ended") {
				t.Fatalf("worker ended: %v (%q)", ended, endings)
			}
		})
	}
}
