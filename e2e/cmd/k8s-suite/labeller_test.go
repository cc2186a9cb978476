package main

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// The worker-gone run ends a worker when a test deletes what it owns, and
// not on a dry run of that deletion, which deletes nothing.
func TestEndWorkerOfSkipsDryRuns(t *testing.T) {
	for _, dryRun := range []bool{true, false} {
		worker := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "zz-ownerguard-worker-abcde", Namespace: "ns", UID: "u1"}}
		client := fake.NewSimpleClientset(worker)
		l := &workerLabeller{client: client, worker: map[string]*corev1.Pod{"ns": worker}, counts: map[string]int{},
			workerGone: true, starting: map[string]*sync.Mutex{}}
		old, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{ownerPodLabel: worker.Name}}})
		if err != nil {
			t.Fatal(err)
		}
		l.endWorkerOf(&admissionv1.AdmissionRequest{Namespace: "ns", Operation: admissionv1.Delete, DryRun: &dryRun,
			OldObject: runtime.RawExtension{Raw: old}})
		// The worker is deleted 100 ms after the answer: a real deletion
		// is waited for, a dry run given ten times that to do harm.
		wait := 5 * time.Second
		if dryRun {
			time.Sleep(time.Second)
			wait = 0
		}
		gone := false
		for deadline := time.Now().Add(wait); !gone; time.Sleep(50 * time.Millisecond) {
			_, err := client.CoreV1().Pods("ns").Get(context.Background(), worker.Name, metav1.GetOptions{})
			gone = err != nil
			if time.Now().After(deadline) {
				break
			}
		}
		if gone == dryRun {
			t.Errorf("dry run %v: worker ended %v", dryRun, gone)
		}
	}
}

// What ends a worker, and the record the worker-gone run keeps of it:
// a deleted object the worker owns ends it, unless the object's
// controller is of a kind that makes it again.
func TestEndWorkerOfRecordsEndings(t *testing.T) {
	yes := true
	for name, tc := range map[string]struct {
		controller string
		want       int
	}{
		"no controller":                   {"", 1},
		"controlled by a ReplicaSet":      {"ReplicaSet", 0},
		"controlled by another pod":       {"Pod", 1},
		"controlled by a DaemonSet":       {"DaemonSet", 0},
		"controlled by a custom kind Foo": {"Foo", 1},
	} {
		t.Run(name, func(t *testing.T) {
			worker := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "zz-ownerguard-worker-abcde", Namespace: "ns", UID: "u1"}}
			client := fake.NewSimpleClientset(worker)
			l := &workerLabeller{client: client, worker: map[string]*corev1.Pod{"ns": worker}, counts: map[string]int{},
				workerGone: true, starting: map[string]*sync.Mutex{}}
			meta := map[string]any{"labels": map[string]string{ownerPodLabel: worker.Name}}
			if tc.controller != "" {
				meta["ownerReferences"] = []metav1.OwnerReference{{APIVersion: "v1", Kind: tc.controller, Name: "c", UID: "u2", Controller: &yes}}
			}
			old, err := json.Marshal(map[string]any{"metadata": meta})
			if err != nil {
				t.Fatal(err)
			}
			l.endWorkerOf(&admissionv1.AdmissionRequest{Namespace: "ns", Name: "obj", Operation: admissionv1.Delete,
				Kind: metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, OldObject: runtime.RawExtension{Raw: old}})
			endings := l.endings()["ns"]
			if len(endings) != tc.want {
				t.Fatalf("endings %q, want %d", endings, tc.want)
			}
			if tc.want == 1 && endings[0] != "deleted ConfigMap obj: worker zz-ownerguard-worker-abcde ended" {
				t.Fatalf("ending %q", endings[0])
			}
			_, err = client.CoreV1().Pods("ns").Get(context.Background(), worker.Name, metav1.GetOptions{})
			if ended := err != nil; ended != (tc.want == 1) {
				t.Fatalf("worker ended: %v, want %v", ended, tc.want == 1)
			}
		})
	}
}
