package scenarios

// Modes (SPEC §3 rule 17, issue 26): a namespace labelled
// ownerguard.io/mode: warn or audit is routed by the chart's webhooks of
// that mode to /mutate/warn, /validate/warn... on the real API server.
// What a mode may soften is let through completed, the client hears it as
// a Warning header (client-go's warning handler, as kubectl prints it)
// under warn and not under audit, the audit log carries the violation;
// what the collector would delete at once or never collect stays refused;
// a namespace switched from warn to enforce while a worker creates is
// refused from then on.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

const modeLabel = "ownerguard.io/mode"

// heard collects the Warning headers a client receives.
type heard struct {
	mu    sync.Mutex
	lines []string
}

func (h *heard) HandleWarningHeader(_ int, _ string, text string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, text)
}

// take returns the warnings heard since the last take.
func (h *heard) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	lines := h.lines
	h.lines = nil
	return lines
}

// listening: a client acting as w whose warnings are collected.
func listening(w *Worker) (*kubernetes.Clientset, *heard) {
	h := &heard{}
	config := plane.RESTConfigToken(w.Token)
	config.WarningHandler = h
	return kubernetes.NewForConfigOrDie(config), h
}

// podEvent: ownerguard's event of reason on pod, through the events API;
// nil when there is none yet.
func podEvent(ctx context.Context, pod *corev1.Pod, reason string) (*eventsv1.Event, error) {
	list, err := admin.EventsV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: "regarding.name=" + pod.Name + ",reason=" + reason})
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		e := &list.Items[i]
		if e.Regarding.UID == pod.UID && strings.HasPrefix(e.ReportingController, "ownerguard") {
			return e, nil
		}
	}
	return nil, nil
}

// untilPodEvent waits for ownerguard's event of reason on pod.
func untilPodEvent(ctx context.Context, t *testing.T, pod *corev1.Pod, reason string) *eventsv1.Event {
	t.Helper()
	var event *eventsv1.Event
	must(t, harness.Until(ctx, 30*time.Second, 250*time.Millisecond, "an event "+reason, func() error {
		var err error
		if event, err = podEvent(ctx, pod, reason); err != nil {
			return err
		}
		if event == nil {
			return fmt.Errorf("no event %s on pod %s yet", reason, pod.Name)
		}
		return nil
	}), "the event "+reason+" on "+pod.Name)
	return event
}

// setMode labels namespace ns with mode ("" removes the label).
func setMode(t *testing.T, ns, mode string) {
	t.Helper()
	value := "null"
	if mode != "" {
		value = fmt.Sprintf("%q", mode)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, modeLabel, value)
	_, err := admin.CoreV1().Namespaces().Patch(ctxFor(t, 30*time.Second), ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	must(t, err, "set the mode of "+ns+" to "+mode)
}

// refusedIn: err is a refusal by ownerguard's webhook of mode (the
// enforce webhooks are named without a mode).
func refusedIn(err error, mode string) (string, bool) {
	code, message := denial(err)
	name := func(word string) string {
		if mode == "enforce" {
			return word + ".ownerguard.io"
		}
		return word + "-" + mode + ".ownerguard.io"
	}
	for _, webhook := range []string{name("mutate"), name("validate")} {
		if strings.HasPrefix(message, fmt.Sprintf("admission webhook %q denied the request: ", webhook)) && code >= 400 && code < 500 {
			return message, true
		}
	}
	return message, false
}

func TestModes(t *testing.T) {
	ns := newNamespace(t, "modes", workerRules)
	w := newWorker(t, ns, "worker-modes")
	other := newWorker(t, ns, "worker-other")
	client, warnings := listening(w)
	ctx := ctxFor(t, 4*time.Minute)
	warned := func(mode, rule string) float64 {
		n, _ := guard.Metric("ownerguard_warned_decisions_total", map[string]string{"webhook": "validate", "mode": mode, "object_namespace": ns, "rule": rule})
		return n
	}
	// The worker declares another worker as owner: the requester check,
	// a rule a mode may soften (the reference is the other worker's
	// whole tuple, looked up: the collector resolves it).
	forOther := func(name string) *corev1.ConfigMap {
		return configMap(name, ownedLabels(other.Name(), other.UID()))
	}
	_, err := client.CoreV1().ConfigMaps(ns).Create(ctx, forOther("in-enforce"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if _, ok := refusedIn(err, "enforce"); !ok {
		t.Fatalf("in enforce (no label), a worker declaring another worker: %v, want ownerguard's refusal", err)
	}

	t.Run("WarnCompletesAndTellsTheClient", func(t *testing.T) {
		setMode(t, ns, "warn")
		before := warned("warn", "requester-not-owner")
		var cm *corev1.ConfigMap
		// The API server learns the label from its namespace informer a
		// moment after the patch: until then the create is refused by the
		// enforce webhook.
		must(t, harness.Until(ctx, 20*time.Second, 200*time.Millisecond, "the namespace in warn", func() error {
			warnings.take()
			var err error
			cm, err = client.CoreV1().ConfigMaps(ns).Create(ctx, forOther("in-warn"), metav1.CreateOptions{})
			return err
		}), "a create in warn")
		must(t, checkOwned(cm.ObjectMeta, other, true), "the stored ConfigMap")
		said := strings.Join(warnings.take(), "\n")
		if !strings.Contains(said, "ownerguard warn mode: would refuse:") || !strings.Contains(said, "declares pod '"+other.Name()+"'") {
			t.Fatalf("the client heard %q; want ownerguard's warning carrying the refusal", said)
		}
		if after := warned("warn", "requester-not-owner"); after <= before {
			t.Fatalf("ownerguard_warned_decisions_total{mode=warn,rule=requester-not-owner} %v -> %v", before, after)
		}
		must(t, harness.Until(ctx, 10*time.Second, 100*time.Millisecond, "audit annotations", func() error {
			for _, a := range auditAnnotations(t, "create", "configmaps", ns, "in-warn") {
				if strings.Contains(a["mutate-warn.ownerguard.io/violation"], "declares pod") && a["validate-warn.ownerguard.io/mode"] == "warn" {
					return nil
				}
			}
			return fmt.Errorf("no audit event of the create with the warn webhooks' violation")
		}), "the audit log")
		fmt.Printf("    modes: warn stored %s with %s; the client heard %d warning line(s)\n", cm.Name, refsString(cm.OwnerReferences), strings.Count(said, "\n")+1)

		// An Event on the worker that sent it (kubectl describe pod).
		event := untilPodEvent(ctx, t, w.Pod, "OwnershipWouldBeRefused")
		if event.Type != corev1.EventTypeWarning || !strings.Contains(event.Note, "declares pod '"+other.Name()+"'") {
			t.Fatalf("the event: %s %q", event.Type, event.Note)
		}
	})

	t.Run("EventsOfALoopAreRateLimited", func(t *testing.T) {
		// A worker that keeps making the same mistake: its creates are
		// let through, its events stop at the per-pod burst (25, the
		// first create above included), one series, not one per create.
		spam := func() float64 {
			n, _ := guard.Metric("ownerguard_events_total", map[string]string{"result": "spam"})
			return n
		}
		before := spam()
		for i := 0; i < 40; i++ {
			cm := forOther("")
			cm.GenerateName = "loop-"
			_, err := client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
			must(t, err, "a warned create in a loop")
		}
		var count int32
		must(t, harness.Until(ctx, 30*time.Second, 250*time.Millisecond, "the burst recorded", func() error {
			event, err := podEvent(ctx, w.Pod, "OwnershipWouldBeRefused")
			if err != nil || event == nil {
				return fmt.Errorf("no event: %v", err)
			}
			count = 1
			if event.Series != nil {
				count = event.Series.Count
			}
			if count < 25 {
				return fmt.Errorf("series count %d", count)
			}
			return nil
		}), "the event series")
		if count != 25 {
			t.Fatalf("41 warned creates made an event series of %d, want the burst of 25", count)
		}
		if after := spam(); after-before < 16 {
			t.Fatalf("ownerguard_events_total{result=spam} %v -> %v, want 16 more", before, after)
		}
		fmt.Printf("    modes: 41 warned creates, one event series of %d, %v filtered\n", count, spam()-before)
	})

	t.Run("WhatEnforceRefusesIsLetThroughAsSent", func(t *testing.T) {
		// An owner that is not there: enforce refuses; warn lets the
		// object through as it was sent (no owner proven to complete it
		// with), telling the client what enforce would refuse and what
		// the collector will do with it.
		warnings.take()
		cm, err := client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("for-nobody", ownedLabels("nobody", "00000000-0000-4000-8000-000000000001")), metav1.CreateOptions{})
		must(t, err, "a create for a pod that is not there, in warn")
		if len(cm.OwnerReferences) != 0 {
			t.Fatalf("stored with references %s, want as sent", refsString(cm.OwnerReferences))
		}
		// The warnings say one text in parts, the later ones starting "... ".
		heard := strings.ReplaceAll(strings.Join(warnings.take(), " "), " ... ", " ")
		if !strings.Contains(heard, "not found") || !strings.Contains(heard, "never delete it with a worker") {
			t.Fatalf("the client heard %q; want the refusal and what the collector will do", heard)
		}
	})

	t.Run("AuditCompletesAndTellsTheClientNothing", func(t *testing.T) {
		setMode(t, ns, "audit")
		before := warned("audit", "requester-not-owner")
		must(t, harness.Until(ctx, 20*time.Second, 200*time.Millisecond, "the namespace in audit", func() error {
			warnings.take()
			if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, forOther("in-audit-probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
				return err
			}
			if warned("audit", "requester-not-owner") <= before {
				return fmt.Errorf("not decided in audit yet")
			}
			return nil
		}), "a create in audit")
		warnings.take()
		cm, err := client.CoreV1().ConfigMaps(ns).Create(ctx, forOther("in-audit"), metav1.CreateOptions{})
		must(t, err, "create in audit")
		must(t, checkOwned(cm.ObjectMeta, other, true), "the stored ConfigMap")
		for _, line := range warnings.take() {
			if strings.Contains(line, "ownerguard") {
				t.Fatalf("in audit the client heard %q", line)
			}
		}
	})

	t.Run("SwitchedToEnforceWhileCreatesRun", func(t *testing.T) {
		setMode(t, ns, "warn")
		must(t, harness.Until(ctx, 20*time.Second, 200*time.Millisecond, "the namespace in warn", func() error {
			_, err := client.CoreV1().ConfigMaps(ns).Create(ctx, forOther("switch-probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}), "back in warn")
		// A worker creates without pause; the namespace is switched to
		// enforce meanwhile. Creates are allowed until the API server
		// routes the namespace to the enforce webhooks, refused from then
		// on: never one allowed after a refusal.
		type result struct {
			allowed bool
			err     error
		}
		results := make(chan result, 1000)
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; runCtx.Err() == nil; i++ {
				_, err := client.CoreV1().ConfigMaps(ns).Create(runCtx, forOther(fmt.Sprintf("run-%d", i)), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				if runCtx.Err() != nil {
					return
				}
				results <- result{allowed: err == nil, err: err}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		time.Sleep(500 * time.Millisecond)
		setMode(t, ns, "enforce")
		deadline := time.After(30 * time.Second)
		allowedBefore, refused := 0, 0
	collect:
		for {
			select {
			case r := <-results:
				switch {
				case r.allowed && refused > 0:
					stop()
					t.Fatalf("a create allowed after %d refusals in enforce", refused)
				case r.allowed:
					allowedBefore++
				default:
					if _, ok := refusedIn(r.err, "enforce"); !ok {
						stop()
						t.Fatalf("a create refused otherwise than by the enforce webhook: %v", r.err)
					}
					refused++
					if refused == 20 {
						break collect
					}
				}
			case <-deadline:
				stop()
				t.Fatalf("after 30 s: %d allowed, %d refused; want the switch to enforce to take", allowedBefore, refused)
			}
		}
		stop()
		<-done
		if allowedBefore == 0 {
			t.Fatal("no create ran in warn before the switch")
		}
		fmt.Printf("    modes: switched to enforce while creating: %d allowed before, then %d refused in a row\n", allowedBefore, refused)
	})

	t.Run("TheCompletedObjectsAreCollectedWithTheirOwner", func(t *testing.T) {
		// What warn and audit stored holds the other worker's reference:
		// deleted with it.
		must(t, admin.CoreV1().Pods(ns).Delete(ctx, other.Name(), metav1.DeleteOptions{}), "delete the other worker")
		must(t, harness.Until(ctx, 60*time.Second, 250*time.Millisecond, "collected", func() error {
			for _, name := range []string{"in-warn", "in-audit"} {
				if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
					return fmt.Errorf("%s still there", name)
				}
			}
			return nil
		}), "the collector")
	})
}

// TestIgnoredNamespace: a namespace labelled <keyPrefix>/ignore is sent to
// no ownerguard webhook, without a helm upgrade: a create enforce refuses
// (an owner that is not there) is stored as sent there, once the API
// server has seen the label.
func TestIgnoredNamespace(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	ns := newNamespace(t, "ignored", workerRules)
	w := newWorker(t, ns, "worker-ignored")
	orphan := func(name string) *corev1.ConfigMap {
		return configMap(name, ownedLabels("nobody", "00000000-0000-4000-8000-000000000001"))
	}
	_, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, orphan("before"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if _, ok := refusedIn(err, "enforce"); !ok {
		t.Fatalf("before the label: %v, want ownerguard's refusal", err)
	}
	patch := `{"metadata":{"labels":{"ownerguard.io/ignore":"true"}}}`
	_, err = admin.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	must(t, err, "label the namespace ignore")
	must(t, harness.Until(ctx, 20*time.Second, 200*time.Millisecond, "the namespace ignored", func() error {
		_, err := w.Client.CoreV1().ConfigMaps(ns).Create(ctx, orphan("ignored"), metav1.CreateOptions{})
		return err
	}), "a create enforce refuses, stored in an ignored namespace")
}
