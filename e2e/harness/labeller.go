package harness

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Labeller is a second mutating webhook: it adds one label to what it
// sees, so that the API server reinvokes the webhooks before it
// (reinvocationPolicy IfNeeded). It records the objects it was sent.
type Labeller struct {
	Name, Label, Value string
	URL                string
	CABundle           []byte
	server             *http.Server
	mu                 sync.Mutex
	seen               []map[string]any
}

// StartLabeller serves on 127.0.0.1 (a url webhook: the API server runs in
// the same network namespace).
func StartLabeller(name, label, value string) (*Labeller, error) {
	l := &Labeller{Name: name, Label: label, Value: value}
	server, url, caBundle, err := ServeWebhook("labeller", "/label", http.HandlerFunc(l.serve))
	if err != nil {
		return nil, err
	}
	l.server, l.URL, l.CABundle = server, url, caBundle
	return l, nil
}

// ServeWebhook serves h over HTTPS on a port of 127.0.0.1 with a
// certificate of a CA of its own, and returns the server, the URL of path
// and the CA bundle a webhook configuration gives the API server.
func ServeWebhook(cn, path string, h http.Handler) (*http.Server, string, []byte, error) {
	ca, err := NewCA("e2e-" + cn + "-ca")
	if err != nil {
		return nil, "", nil, err
	}
	certPEM, keyPEM, err := ca.Serving(cn, nil, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		return nil, "", nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, "", nil, err
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		return nil, "", nil, err
	}
	server := &http.Server{Handler: h}
	go func() { _ = server.Serve(ln) }()
	return server, "https://" + ln.Addr().String() + path, ca.CertPEM, nil
}

func (l *Labeller) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, "bad review", http.StatusBadRequest)
		return
	}
	var object map[string]any
	_ = json.Unmarshal(review.Request.Object.Raw, &object)
	l.mu.Lock()
	l.seen = append(l.seen, object)
	l.mu.Unlock()
	meta, _ := object["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	response := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	if labels[l.Label] != l.Value {
		patch := []map[string]any{{"op": "add", "path": "/metadata/labels/" + escapePointer(l.Label), "value": l.Value}}
		response.Patch, _ = json.Marshal(patch)
		pt := admissionv1.PatchTypeJSONPatch
		response.PatchType = &pt
	}
	review.Response = response
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}

func escapePointer(s string) string {
	out := ""
	for _, c := range s {
		switch c {
		case '~':
			out += "~0"
		case '/':
			out += "~1"
		default:
			out += string(c)
		}
	}
	return out
}

// Seen is every object the labeller was sent.
func (l *Labeller) Seen() []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]map[string]any(nil), l.seen...)
}

// Register the labeller for labelled pods and configmaps of the
// namespaces carrying nsLabel=nsValue. Its configuration's name sorts
// after ownerguard's, so it runs after it: the API server must then call
// ownerguard again.
func (l *Labeller) Register(ctx context.Context, c kubernetes.Interface, objectLabel, nsLabel, nsValue string) error {
	none := admissionregistrationv1.SideEffectClassNone
	fail := admissionregistrationv1.Fail
	never := admissionregistrationv1.NeverReinvocationPolicy
	timeout := int32(5)
	_, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: l.Name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "label.e2e.ownerguard.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &l.URL, CABundle: l.CABundle},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{"CREATE"}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods", "configmaps"}}}},
			ObjectSelector:          &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: objectLabel, Operator: metav1.LabelSelectorOpExists}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{nsLabel: nsValue}},
			SideEffects:             &none,
			FailurePolicy:           &fail,
			ReinvocationPolicy:      &never,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}, metav1.CreateOptions{})
	return err
}

// Unregister and stop.
func (l *Labeller) Close(ctx context.Context, c kubernetes.Interface) {
	_ = c.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, l.Name, metav1.DeleteOptions{})
	_ = l.server.Close()
}
