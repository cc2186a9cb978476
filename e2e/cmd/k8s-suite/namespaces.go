package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"ownerguard.io/e2e/harness"
)

// namespaceRuns records the e2e-run label of every namespace the tests
// make, while they run (a namespace is gone once its test is over).
type namespaceRuns struct {
	mu   sync.Mutex
	runs map[string]string
}

func watchNamespaces(ctx context.Context, c kubernetes.Interface) *namespaceRuns {
	n := &namespaceRuns{runs: map[string]string{}}
	factory := informers.NewSharedInformerFactory(c, 10*time.Minute)
	informer := factory.Core().V1().Namespaces().Informer()
	record := func(obj any) {
		if ns, ok := obj.(*corev1.Namespace); ok && ns.Labels["e2e-run"] != "" {
			n.mu.Lock()
			n.runs[ns.Name] = ns.Labels["e2e-run"]
			n.mu.Unlock()
		}
	}
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, obj any) { record(obj) }})
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	return n
}

func (n *namespaceRuns) byName() map[string]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]string, len(n.runs))
	for k, v := range n.runs {
		out[k] = v
	}
	return out
}

// waitNamespacesGone waits, at most d, until no namespace of the tests
// (labelled e2e-run) is left, and returns those that are.
func waitNamespacesGone(ctx context.Context, c kubernetes.Interface, d time.Duration) []string {
	var left []string
	_ = harness.Until(ctx, d, time.Second, "the tests' namespaces deleted", func() error {
		list, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: "e2e-run"})
		if err != nil {
			return err
		}
		left = left[:0]
		for _, ns := range list.Items {
			left = append(left, ns.Name+" ("+string(ns.Status.Phase)+")")
		}
		if len(left) > 0 {
			return fmt.Errorf("%d left", len(left))
		}
		return nil
	})
	return left
}

// removeWebhooks deletes ownerguard's webhook configurations (the
// release's, by its chart's instance label).
func removeWebhooks(ctx context.Context, c kubernetes.Interface) {
	selector := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + harness.ReleaseName}
	_ = c.AdmissionregistrationV1().MutatingWebhookConfigurations().DeleteCollection(ctx, metav1.DeleteOptions{}, selector)
	_ = c.AdmissionregistrationV1().ValidatingWebhookConfigurations().DeleteCollection(ctx, metav1.DeleteOptions{}, selector)
}
