package scenarios

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// One trace from the API server to the decision: kube-apiserver traces
// every request (its tracing configuration, sampled always) and passes the
// trace context to the webhooks it calls; ownerguard (--tracing, by the
// chart's tracing values) joins it. A real OpenTelemetry Collector takes
// both exports. One labelled create gives one trace in which ownerguard's
// review span is the child of the API server's call to it, under its "Call
// mutating webhook" span, with the owner lookup under it; no span of
// ownerguard names the object, the owner or a uid. The same create through
// an API server that does not trace gives no span of ownerguard.
func TestTraces(t *testing.T) {
	ctx := ctxFor(t, 5*time.Minute)
	sink, err := harness.StartSpanSink()
	must(t, err, "the span sink")
	defer sink.Close()
	collector, err := plane.StartCollector(ctx, sink)
	must(t, err, "the OpenTelemetry Collector")
	defer collector.Stop(10 * time.Second)
	config, err := plane.TracingConfig()
	must(t, err, "the API server's tracing configuration")
	const tracedPort = 6445
	must(t, plane.StartAPIServerWith(ctx, tracedPort, "--tracing-config-file="+config), "an API server that traces")
	defer plane.StopAPIServer(tracedPort)

	setTracing(t, true)
	t.Cleanup(func() { setTracing(t, false) })

	ns := newNamespace(t, "traces", workerRules)
	worker := newWorker(t, ns, "worker")
	via := func(port int) *kubernetes.Clientset {
		cfg := plane.RESTConfigToken(worker.Token)
		cfg.Host = harness.APIURL(port)
		return kubernetes.NewForConfigOrDie(cfg)
	}
	ours := func() []harness.Span {
		var out []harness.Span
		for _, s := range sink.Spans() {
			if s.Service == "ownerguard" {
				out = append(out, s)
			}
		}
		return out
	}

	const object = "traced-prompt-7f3a"
	created, err := via(tracedPort).CoreV1().ConfigMaps(ns).Create(ctx, configMap(object, ownedLabels(worker.Name(), worker.UID())), metav1.CreateOptions{})
	must(t, err, "the labelled create through the tracing API server")
	if len(created.OwnerReferences) != 1 {
		t.Fatalf("the create was not patched: %+v", created.OwnerReferences)
	}
	var review, call, webhookCall harness.Span
	must(t, harness.Until(ctx, 60*time.Second, 500*time.Millisecond, "ownerguard's mutate span and the API server's above it", func() error {
		all := sink.Spans()
		byID := map[string]harness.Span{}
		for _, s := range all {
			byID[s.TraceID+"/"+s.SpanID] = s
		}
		var found []harness.Span
		for _, s := range ours() {
			if s.Name == "POST /mutate" {
				found = append(found, s)
			}
		}
		if len(found) != 1 {
			return fmt.Errorf("%d mutate spans of ownerguard, want 1", len(found))
		}
		review = found[0]
		var ok bool
		if call, ok = byID[review.TraceID+"/"+review.ParentSpanID]; !ok {
			return fmt.Errorf("the parent %s of ownerguard's span is not in the trace yet", review.ParentSpanID)
		}
		if webhookCall, ok = byID[call.TraceID+"/"+call.ParentSpanID]; !ok {
			return fmt.Errorf("the grandparent of ownerguard's span is not in the trace yet")
		}
		return nil
	}), "one trace across the API server and ownerguard")
	// The API server names its service "apiserver" (k8s.io/apiserver's tracing options).
	if call.Service != "apiserver" || webhookCall.Service != "apiserver" {
		t.Fatalf("ownerguard's span's parent %q (%s) and its parent %q (%s): want the API server's", call.Name, call.Service, webhookCall.Name, webhookCall.Service)
	}
	if webhookCall.Name != "Call mutating webhook" || webhookCall.Attributes["webhook"] != mutateWebhook {
		t.Fatalf("the API server's span above its HTTP call: %q %v, want \"Call mutating webhook\" of %s", webhookCall.Name, webhookCall.Attributes, mutateWebhook)
	}
	for key, want := range map[string]string{"ownerguard.webhook": "mutate", "ownerguard.operation": "CREATE",
		"ownerguard.resource": "/v1/configmaps", "k8s.namespace.name": ns, "ownerguard.result": "patched"} {
		if got := review.Attributes[key]; got != want {
			t.Errorf("ownerguard's span: %s=%q, want %q", key, got, want)
		}
	}
	lookups := 0
	for _, s := range ours() {
		if s.TraceID == review.TraceID && s.ParentSpanID == review.SpanID && s.Name == "owner lookup" {
			lookups++
		}
		for key, value := range s.Attributes {
			for _, secret := range []string{object, worker.Name(), worker.UID(), string(created.UID)} {
				if strings.Contains(value, secret) {
					t.Errorf("ownerguard's span %q: %s=%q names %q", s.Name, key, value, secret)
				}
			}
		}
	}
	if lookups != 1 {
		t.Errorf("%d owner lookup spans under ownerguard's review span, want 1", lookups)
	}

	// The control: an API server that does not trace sends no trace
	// context, and ownerguard makes no span.
	before := len(ours())
	_, err = via(harness.APIPort).CoreV1().ConfigMaps(ns).Create(ctx, configMap(object+"-untraced", ownedLabels(worker.Name(), worker.UID())), metav1.CreateOptions{})
	must(t, err, "the labelled create through the API server that does not trace")
	// Longer than the batch's 5 s delay.
	time.Sleep(8 * time.Second)
	if after := len(ours()); after != before {
		t.Fatalf("ownerguard made %d spans for a review without a trace", after-before)
	}
}

// setTracing turns the chart's tracing on (to the suite's collector) or
// off on the installed release, and restarts ownerguard with it.
func setTracing(t *testing.T, on bool) {
	t.Helper()
	ctx := ctxFor(t, 3*time.Minute)
	// --force-conflicts: earlier scenarios edit the Deployment's args
	// under a field manager of their own, as an operator's hand would.
	_, err := plane.Helm(ctx, "upgrade", releaseName, chartDir(), "--namespace", releaseNamespace, "--reuse-values", "--force-conflicts",
		"--set", fmt.Sprintf("tracing.enabled=%v", on), "--set", "tracing.endpoint=http://"+harness.CollectorHTTP)
	must(t, err, "helm upgrade --set tracing.enabled")
	guard.Stop(30 * time.Second)
	restartGuard(t)
	args := strings.Join(guard.Args, " ")
	if strings.Contains(args, "--tracing") != on {
		t.Fatalf("ownerguard runs with %q, tracing wanted %v", args, on)
	}
}
