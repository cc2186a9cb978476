// createbench: creates per second and latency percentiles of pod creates
// through the real API server, with ownerguard's webhooks registered and
// without, and with the same two registrations pointing at a no-op webhook
// (the ceiling of examples/ceiling.rs: ownerguard's TLS and HTTP stack,
// allowed, no patch), interleaved round by round in the same run. Run by
// bench/create.sh inside the network namespace it makes; a benchmark, never
// a test.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"ownerguard.io/e2e/harness"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

func main() {
	n := flag.Int("n", 400, "pods created per round")
	c := flag.Int("c", 8, "concurrent clients")
	rounds := flag.Int("rounds", 2, "rounds of each variant, interleaved")
	flag.Parse()
	if err := run(*n, *c, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "createbench:", err)
		os.Exit(1)
	}
}

// Who the webhook configurations send the API server to.
type registration int

const (
	none registration = iota
	toOwnerguard
	toCeiling
)

func (r registration) String() string {
	return [...]string{"none", "ownerguard", "the ceiling"}[r]
}

type variant struct {
	name     string
	to       registration
	labelled bool
}

// The ceiling listens beside ownerguard on the Service's ClusterIP, on a
// port added to the Service (the API server resolves a service webhook to
// ClusterIP:port and accepts only a port the Service has); its count of
// answered reviews on loopback.
const (
	ceilingPort  = 8444
	ceilingStats = "127.0.0.1:19444"
)

func run(n, c, rounds int) error {
	ctx := context.Background()
	cfg, err := harness.ConfigFromEnv()
	if err != nil {
		return err
	}
	cluster, err := harness.Up(ctx, cfg, os.Getenv("E2E_REPO"), "")
	if err != nil {
		return err
	}
	defer cluster.Down()
	admin := cluster.Admin
	const ns = "bench"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	owner, err := admin.CoreV1().Pods(ns).Create(ctx, pod("worker-0", nil), metav1.CreateOptions{})
	if err != nil {
		return err
	}
	m, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, harness.ReleaseName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	v, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, harness.ReleaseName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	ceiling, err := startCeiling(ctx, cluster)
	if err != nil {
		return err
	}
	defer ceiling.Stop(10 * time.Second)
	variants := []variant{
		{"webhooks registered, labelled pods (mutate + validate called)", toOwnerguard, true},
		{"webhooks registered, unlabelled pods (objectSelector: not called)", toOwnerguard, false},
		{"the same registrations to a no-op webhook (the ceiling), labelled pods", toCeiling, true},
		{"no webhooks, labelled pods", none, true},
	}
	results := map[string][]time.Duration{}
	perRound := map[string][]time.Duration{}
	walls := map[string]time.Duration{}
	registered := toOwnerguard
	fmt.Printf("createbench: %d pods per round, %d clients, %d rounds of each variant\n", n, c, rounds)
	for r := 0; r < rounds; r++ {
		for _, va := range variants {
			if va.to != registered {
				if err := setWebhooks(ctx, admin, registered, va.to, m, v, owner); err != nil {
					return err
				}
				registered = va.to
			}
			labels := map[string]string{"bench": "1"}
			if va.labelled {
				labels["ownerguard.io/owner-pod"] = owner.Name
				labels["ownerguard.io/owner-uid"] = string(owner.UID)
			}
			lat, wall, err := round(ctx, admin, ns, fmt.Sprintf("r%d-%d", r, len(results[va.name])), n, c, labels)
			if err != nil {
				return fmt.Errorf("%s: %w", va.name, err)
			}
			results[va.name] = append(results[va.name], lat...)
			sorted := append([]time.Duration(nil), lat...)
			sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
			perRound[va.name] = append(perRound[va.name], pct(sorted, 50))
			walls[va.name] += wall
			if err := cleanup(ctx, admin, ns); err != nil {
				return err
			}
		}
	}
	fmt.Printf("\n| variant | creates | creates/s | p50 | p90 | p99 | p50 of each round |\n|---|---|---|---|---|---|---|\n")
	for _, va := range variants {
		lat := results[va.name]
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		var rounds []string
		for _, d := range perRound[va.name] {
			rounds = append(rounds, strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64))
		}
		fmt.Printf("| %s | %d | %.0f | %s | %s | %s | %s |\n", va.name, len(lat),
			float64(len(lat))/walls[va.name].Seconds(), ms(pct(lat, 50)), ms(pct(lat, 90)), ms(pct(lat, 99)), strings.Join(rounds, ", "))
	}
	// ownerguard's cost over no webhook, as a multiple of what a webhook
	// that does nothing costs on the same registrations.
	og, noop, bare := results[variants[0].name], results[variants[2].name], results[variants[3].name]
	for _, p := range []int{50, 99} {
		added, noopAdded := pct(og, p)-pct(bare, p), pct(noop, p)-pct(bare, p)
		ratio := "undefined (the no-op webhook added nothing measurable)"
		if noopAdded > 0 {
			ratio = fmt.Sprintf("%.2fx", float64(added)/float64(noopAdded))
		}
		fmt.Printf("p%d: ownerguard adds %s over no webhook, the no-op webhook %s: %s\n", p, ms(added), ms(noopAdded), ratio)
	}
	answered, err := ceilingCount()
	if err != nil {
		return err
	}
	fmt.Printf("the no-op webhook answered %d reviews (its variant made %d creates, two webhooks each, plus the probes)\n",
		answered, len(noop))
	// What ownerguard itself spent on each review, from its decision log
	// lines (JSON, as the chart configures it).
	decisions, err := decisionDurations(cluster.Guard.Log)
	if err != nil {
		return err
	}
	sort.Slice(decisions, func(i, j int) bool { return decisions[i] < decisions[j] })
	fmt.Printf("\nownerguard's own time per review (its log, %d reviews): p50 %s, p90 %s, p99 %s\n",
		len(decisions), ms(pct(decisions, 50)), ms(pct(decisions, 90)), ms(pct(decisions, 99)))
	return nil
}

func decisionDurations(log string) ([]time.Duration, error) {
	data, err := os.ReadFile(log)
	if err != nil {
		return nil, err
	}
	var out []time.Duration
	for _, line := range strings.Split(string(data), "\n") {
		var d struct {
			Message    string  `json:"message"`
			DurationMS float64 `json:"duration_ms"`
		}
		if json.Unmarshal([]byte(line), &d) == nil && d.Message == "decision" {
			out = append(out, time.Duration(d.DurationMS*float64(time.Millisecond)))
		}
	}
	return out, nil
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	if i > 0 {
		i--
	}
	return sorted[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func pod(name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{ServiceAccountName: "bench", RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "agent", Image: "e2e.invalid/agent:1"}}},
	}
}

// round creates n pods with c clients; the latency of each create and the
// wall time of the round.
func round(ctx context.Context, admin *kubernetes.Clientset, ns, prefix string, n, c int, labels map[string]string) ([]time.Duration, time.Duration, error) {
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t := time.Now()
				_, err := admin.CoreV1().Pods(ns).Create(ctx, pod(fmt.Sprintf("%s-%d", prefix, i), labels), metav1.CreateOptions{})
				d := time.Since(t)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return lat, time.Since(start), firstErr
}

func cleanup(ctx context.Context, admin *kubernetes.Clientset, ns string) error {
	if err := admin.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "bench=1"}); err != nil {
		return err
	}
	return harness.Until(ctx, 2*time.Minute, 200*time.Millisecond, "pods deleted", func() error {
		list, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "bench=1"})
		if err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d left", len(list.Items))
		}
		return nil
	})
}

// setWebhooks moves ownerguard's two configurations from one registration
// to another (removed, or pointing at ownerguard, or at the ceiling: the
// same configurations with the Service port of the ceiling) and waits until
// the API server acts on it: a labelled pod naming a missing owner is
// refused exactly while they point at ownerguard, and reaches the ceiling
// exactly while they point at it.
func setWebhooks(ctx context.Context, admin *kubernetes.Clientset, from, to registration, m *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration, owner *corev1.Pod) error {
	if from != none {
		if err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, m.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		if err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, v.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
	}
	if to != none {
		m, v = m.DeepCopy(), v.DeepCopy()
		m.ResourceVersion, m.UID, m.ManagedFields = "", "", nil
		v.ResourceVersion, v.UID, v.ManagedFields = "", "", nil
		if to == toCeiling {
			port := int32(ceilingPort)
			for i := range m.Webhooks {
				if s := m.Webhooks[i].ClientConfig.Service; s != nil {
					s.Port = &port
				}
			}
			for i := range v.Webhooks {
				if s := v.Webhooks[i].ClientConfig.Service; s != nil {
					s.Port = &port
				}
			}
		}
		if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil {
			return err
		}
		if _, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	probe := pod("probe", map[string]string{"ownerguard.io/owner-pod": "missing", "ownerguard.io/owner-uid": "00000000-0000-0000-0000-000000000000"})
	return harness.Until(ctx, 30*time.Second, 200*time.Millisecond, fmt.Sprintf("webhooks registered to %v in force", to), func() error {
		before, err := ceilingCount()
		if err != nil {
			return err
		}
		_, err = admin.CoreV1().Pods(owner.Namespace).Create(ctx, probe.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		after, countErr := ceilingCount()
		if countErr != nil {
			return countErr
		}
		refused, reached := err != nil, after > before
		switch {
		case to == toOwnerguard && refused && !reached,
			to == toCeiling && !refused && reached,
			to == none && !refused && !reached:
			return nil
		}
		return fmt.Errorf("probe: refused %v (%v), reached the ceiling %v", refused, err, reached)
	})
}

// startCeiling runs examples/ceiling.rs (CEILING_BIN) with the chart's
// serving certificate on the Service's ClusterIP at ceilingPort, and adds
// that port to the Service.
func startCeiling(ctx context.Context, cluster *harness.Cluster) (*harness.Process, error) {
	bin := os.Getenv("CEILING_BIN")
	if bin == "" {
		return nil, fmt.Errorf("CEILING_BIN is not set (run bench/create.sh)")
	}
	dir := filepath.Dir(cluster.Guard.CAFile)
	proc, err := harness.Start("ceiling", cluster.Plane.Logs, nil, bin,
		"--addr", net.JoinHostPort(cluster.Inst.ClusterIP, strconv.Itoa(ceilingPort)),
		"--stats-addr", ceilingStats,
		"--tls-cert", filepath.Join(dir, "tls.crt"), "--tls-key", filepath.Join(dir, "tls.key"))
	if err != nil {
		return nil, err
	}
	if err := harness.Until(ctx, 30*time.Second, 100*time.Millisecond, "the ceiling serving", func() error {
		if done, err := proc.Exited(); done {
			return fmt.Errorf("the ceiling exited: %v: %s", err, proc.Tail(5))
		}
		_, err := ceilingCount()
		return err
	}); err != nil {
		proc.Stop(5 * time.Second)
		return nil, err
	}
	admin := cluster.Admin
	svc, err := admin.CoreV1().Services(cluster.Inst.Namespace).Get(ctx, cluster.Inst.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "ceiling", Port: ceilingPort, Protocol: corev1.ProtocolTCP})
	if _, err := admin.CoreV1().Services(cluster.Inst.Namespace).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		return nil, err
	}
	return proc, nil
}

// ceilingCount is how many reviews the ceiling has answered.
func ceilingCount() (int, error) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + ceilingStats + "/count")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(body)))
}
