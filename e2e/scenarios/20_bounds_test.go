package scenarios

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
)

// TestTooManyEntries: a labelled object whose list ownerguard reads holds
// more entries than ownerguard keeps of one (131,072 ownerReferences,
// 10,000 volumes) reaches the mutating webhook before the API server
// validates it, as the API server encoded it (references of distinct uids:
// the API server keeps one entry per uid before admission; a 2 MB request,
// a 7 MB review); ownerguard refuses it
// 400 (too-many-entries) instead of judging a part of it, and the client
// sees that refusal, not a failed call.
func TestTooManyEntries(t *testing.T) {
	ns := newNamespace(t, "bounds", workerRules)
	w := newWorker(t, ns, "worker-bounds")
	labels := fmt.Sprintf(`{%q: %q}`, ownerPodLabel, w.Name())
	// The API server reads 131,073 references (its field manager tracks
	// each) before any webhook is called, within its own bound of a
	// create (34 s): the worker client waits as long as that, not its
	// usual 30 s.
	config := plane.RESTConfigToken(w.Token)
	config.Timeout = 2 * time.Minute
	client := kubernetes.NewForConfigOrDie(config)
	for _, c := range []struct {
		name, resource, body, field string
	}{
		{"OwnerReferences", "configmaps",
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"many-references","labels":` + labels +
				`,"ownerReferences":[` + uids(131073) + `]}}`,
			"holds more than 131072 entries"},
		{"Volumes", "pods",
			`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"many-volumes","labels":` + labels +
				`},"spec":{"serviceAccountName":"worker","containers":[{"name":"a","image":"a:1"}],"volumes":[` +
				repeated(`{"emptyDir":{}}`, 10001) + `]}}`,
			"holds more than 10000 entries"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := ctxFor(t, 2*time.Minute)
			err := client.CoreV1().RESTClient().Post().Namespace(ns).Resource(c.resource).
				Body([]byte(c.body)).SetHeader("Content-Type", "application/json").Do(ctx).Error()
			if status, ok := err.(errors.APIStatus); ok && status.Status().Code == 400 &&
				strings.Contains(err.Error(), "denied the request") && strings.Contains(err.Error(), c.field) {
				return
			}
			// The API server's own 504 at its 34 s bound, no webhook named:
			// it never got as far as admission on this machine (a slow
			// webhook fails the call at its timeoutSeconds, and names
			// itself). Nothing of ownerguard's is judged: say so.
			if errors.IsTimeout(err) && !strings.Contains(err.Error(), "webhook") {
				skipFor(t, fmt.Sprintf("the API server did not reach admission within its own bound of a create (34 s) on this machine: %v", err))
			}
			t.Fatalf("want ownerguard's 400 saying %q, have %v", c.field, err)
		})
	}
}

// uids is n references that hold only a uid each, all different.
func uids(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"uid":"u%d"}`, i)
	}
	return b.String()
}

// repeated is n copies of item, comma-separated.
func repeated(item string, n int) string {
	return strings.TrimSuffix(strings.Repeat(item+",", n), ",")
}
