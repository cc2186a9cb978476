package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Gate is a mutating webhook that holds the first request it is sent
// until the scenario opens it, then lets every request through unchanged.
// Its configuration's name sorts before ownerguard's, so the API server
// calls it first: what a scenario does while a request is held (delete
// the pod a controller's update names, say) has happened before
// ownerguard sees that request. It orders two things a controller and a
// cluster do concurrently, instead of hoping for one order.
type Gate struct {
	Name     string
	URL      string
	CABundle []byte
	server   *http.Server
	arrived  chan admissionv1.AdmissionRequest
	open     chan struct{}
	once     sync.Once
	held     sync.Once
	mu       sync.Mutex
	bodies   [][]byte
	probes   int
}

// GateProbe is the annotation of a probe: a request the gate answers at
// once and counts, never holds nor keeps, so that a scenario knows the API
// server calls the gate before it relies on it.
const GateProbe = "e2e.ownerguard.io/gate-probe"

// StartGate serves on 127.0.0.1 (a url webhook: the API server runs in the
// same network namespace).
func StartGate(name string) (*Gate, error) {
	g := &Gate{Name: name, arrived: make(chan admissionv1.AdmissionRequest, 1), open: make(chan struct{})}
	server, url, caBundle, err := ServeWebhook("gate", "/gate", http.HandlerFunc(g.serve))
	if err != nil {
		return nil, err
	}
	g.server, g.URL, g.CABundle = server, url, caBundle
	return g, nil
}

// gateHold bounds how long one request is held: under the webhook's own
// timeout (30 s, the API server's most), so a scenario that fails to open
// the gate lets the request through instead of failing it.
const gateHold = 25 * time.Second

func (g *Gate) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, "bad review", http.StatusBadRequest)
		return
	}
	var object struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(review.Request.Object.Raw, &object)
	if review.Request.Operation == admissionv1.Delete {
		// A DELETE has no object: the one deleted is the old object.
		_ = json.Unmarshal(review.Request.OldObject.Raw, &object)
	}
	if _, probe := object.Metadata.Annotations[GateProbe]; probe {
		g.mu.Lock()
		g.probes++
		g.mu.Unlock()
		g.answer(w, review)
		return
	}
	g.mu.Lock()
	g.bodies = append(g.bodies, body)
	g.mu.Unlock()
	first := false
	g.held.Do(func() { first = true })
	if first {
		g.arrived <- *review.Request
		select {
		case <-g.open:
		case <-time.After(gateHold):
		case <-r.Context().Done():
		}
	}
	g.answer(w, review)
}

// answer allows the request unchanged.
func (g *Gate) answer(w http.ResponseWriter, review admissionv1.AdmissionReview) {
	review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}

// Ready waits (at most 30 s) until the API server calls the gate: probe
// sends a request the gate's rules take, carrying the GateProbe
// annotation (a dry run), until one reaches it. A configuration just made
// reaches the API server's webhook source a moment later, longer under
// load: waiting a fixed time is hoping.
func (g *Gate) Ready(ctx context.Context, probe func(ctx context.Context) error) error {
	return Until(ctx, 30*time.Second, 200*time.Millisecond, "the gate called", func() error {
		if err := probe(ctx); err != nil {
			return err
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.probes == 0 {
			return fmt.Errorf("the API server has not called the gate %s yet", g.Name)
		}
		return nil
	})
}

// Held waits at most d for the first request to arrive and be held.
func (g *Gate) Held(ctx context.Context, d time.Duration) (admissionv1.AdmissionRequest, error) {
	select {
	case req := <-g.arrived:
		return req, nil
	case <-time.After(d):
		return admissionv1.AdmissionRequest{}, fmt.Errorf("no request reached the gate %s in %s", g.Name, d)
	case <-ctx.Done():
		return admissionv1.AdmissionRequest{}, ctx.Err()
	}
}

// Bodies is every request body the gate was sent, byte for byte as the
// API server wrote it.
func (g *Gate) Bodies() [][]byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][]byte(nil), g.bodies...)
}

// Open lets the held request, and every later one, through.
func (g *Gate) Open() { g.once.Do(func() { close(g.open) }) }

// Register the gate for the UPDATEs of resource (core group) in namespace
// ns for which the CEL expression match holds (a matchCondition: the
// request's user, the object's name).
func (g *Gate) Register(ctx context.Context, c kubernetes.Interface, resource, ns, match string) error {
	return g.RegisterFor(ctx, c, admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{resource}}, "UPDATE", ns, match)
}

// RegisterFor registers the gate for operation on what rule names in
// namespace ns, where the CEL expression match holds (for a DELETE, the
// object deleted is oldObject; a probe of a DELETE is a dry-run delete of
// an object carrying the GateProbe annotation).
func (g *Gate) RegisterFor(ctx context.Context, c kubernetes.Interface, rule admissionregistrationv1.Rule, operation admissionregistrationv1.OperationType, ns, match string) error {
	none := admissionregistrationv1.SideEffectClassNone
	ignore := admissionregistrationv1.Ignore
	never := admissionregistrationv1.NeverReinvocationPolicy
	timeout := int32(30)
	_, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: g.Name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:              "gate.e2e.ownerguard.io",
			ClientConfig:      admissionregistrationv1.WebhookClientConfig{URL: &g.URL, CABundle: g.CABundle},
			Rules:             []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{operation}, Rule: rule}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "held", Expression: "(" + match + ") || " +
				"(request.operation != 'DELETE' && has(object.metadata.annotations) && '" + GateProbe + "' in object.metadata.annotations) || " +
				"(request.operation == 'DELETE' && has(oldObject.metadata.annotations) && '" + GateProbe + "' in oldObject.metadata.annotations)"}},
			SideEffects:             &none,
			FailurePolicy:           &ignore,
			ReinvocationPolicy:      &never,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}, metav1.CreateOptions{})
	return err
}

// Close opens the gate, unregisters it and stops its server.
func (g *Gate) Close(ctx context.Context, c kubernetes.Interface) {
	g.Open()
	_ = c.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, g.Name, metav1.DeleteOptions{})
	_ = g.server.Close()
}
