// createbench: creates per second and latency percentiles of pod creates
// through the real API server, with ownerguard's webhooks registered and
// without, in the same run. Run by bench/create.sh inside the network
// namespace it makes; a benchmark, never a test.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
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

type variant struct {
	name     string
	webhooks bool
	labelled bool
}

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
	variants := []variant{
		{"webhooks registered, labelled pods (mutate + validate called)", true, true},
		{"webhooks registered, unlabelled pods (objectSelector: not called)", true, false},
		{"no webhooks, labelled pods", false, true},
	}
	results := map[string][]time.Duration{}
	walls := map[string]time.Duration{}
	registered := true
	fmt.Printf("createbench: %d pods per round, %d clients, %d rounds of each variant\n", n, c, rounds)
	for r := 0; r < rounds; r++ {
		for _, va := range variants {
			if va.webhooks != registered {
				if err := setWebhooks(ctx, admin, va.webhooks, m, v, owner); err != nil {
					return err
				}
				registered = va.webhooks
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
			walls[va.name] += wall
			if err := cleanup(ctx, admin, ns); err != nil {
				return err
			}
		}
	}
	fmt.Printf("\n| variant | creates | creates/s | p50 | p90 | p99 |\n|---|---|---|---|---|---|\n")
	for _, va := range variants {
		lat := results[va.name]
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		fmt.Printf("| %s | %d | %.0f | %s | %s | %s |\n", va.name, len(lat),
			float64(len(lat))/walls[va.name].Seconds(), ms(pct(lat, 50)), ms(pct(lat, 90)), ms(pct(lat, 99)))
	}
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

// setWebhooks registers or removes ownerguard's two configurations and
// waits until the API server acts on it: a labelled pod naming a
// missing owner is refused exactly while they are registered.
func setWebhooks(ctx context.Context, admin *kubernetes.Clientset, on bool, m *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration, owner *corev1.Pod) error {
	if on {
		m, v = m.DeepCopy(), v.DeepCopy()
		m.ResourceVersion, m.UID, m.ManagedFields = "", "", nil
		v.ResourceVersion, v.UID, v.ManagedFields = "", "", nil
		if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil {
			return err
		}
		if _, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{}); err != nil {
			return err
		}
	} else {
		if err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, m.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		if err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, v.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
	}
	probe := pod("probe", map[string]string{"ownerguard.io/owner-pod": "missing", "ownerguard.io/owner-uid": "00000000-0000-0000-0000-000000000000"})
	return harness.Until(ctx, 30*time.Second, 200*time.Millisecond, fmt.Sprintf("webhooks registered=%v in force", on), func() error {
		_, err := admin.CoreV1().Pods(owner.Namespace).Create(ctx, probe.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if on == (err != nil) {
			return nil
		}
		return fmt.Errorf("probe: %v", err)
	})
}
