// createbench: creates per second and latency percentiles of pod creates
// through the real API server, with ownerguard's webhooks registered and
// without, and with the same two registrations pointing at a no-op webhook
// (the ceiling of examples/ceiling.rs: ownerguard's TLS and HTTP stack,
// allowed, no patch) or at the same no-op webhook answering ownerguard's
// own answers (its patch and audit annotations, as `ownerguard review`
// gives them), interleaved round by round in the same run. With them, the
// API server's own histograms of its webhook calls, etcd writes and whole
// requests per variant (apimetrics.go), and every create over 100 ms with
// its place in its round, so that a tail says where it is. Run by
// bench/create.sh inside the network namespace it makes; a benchmark, never
// a test.
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
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
	warmup := flag.Int("warmup", 50, "pods created per variant first, not counted (connections, caches)")
	burst := flag.Bool("burst", false, "the burst instead (burst.go): a Deployment scaled from 0 and a Job, pods made by the controllers and run by a hollow node")
	deployment := flag.Int("deployment", 1000, "the burst's Deployment: pods it is scaled to")
	job := flag.Int("job", 500, "the burst's Job: its parallelism")
	flag.Parse()
	var err error
	if *burst {
		err = runBurstBench(*deployment, *job, *rounds)
	} else {
		err = run(*n, *c, *rounds, *warmup)
	}
	if err != nil {
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
	toReplay
	// A MutatingAdmissionPolicy writes the reference (harness.InstallPolicy),
	// ownerguard's /validate judges the final object; no /mutate.
	toPolicy
)

func (r registration) String() string {
	return [...]string{"none", "ownerguard", "the no-op webhook", "the no-op webhook with ownerguard's answers", "a policy and ownerguard's /validate"}[r]
}

type variant struct {
	name     string
	to       registration
	labelled bool
}

// A ceiling (examples/ceiling.rs) listens beside ownerguard on the
// Service's ClusterIP, on a port added to the Service (the API server
// resolves a service webhook to ClusterIP:port and accepts only a port the
// Service has); its count of answered reviews on loopback.
type ceiling struct {
	port  int32
	stats string
	proc  *harness.Process
}

// count is how many reviews the ceiling has answered.
func (c *ceiling) count() (int, error) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + c.stats + "/count")
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

// The bench's cluster, namespace, worker pod and ownerguard's two webhook
// configurations as the chart made them.
type benchCluster struct {
	cluster *harness.Cluster
	ns      string
	owner   *corev1.Pod
	m       *admissionregistrationv1.MutatingWebhookConfiguration
	v       *admissionregistrationv1.ValidatingWebhookConfiguration
}

func upBench(ctx context.Context, tune func(*harness.Plane)) (*benchCluster, error) {
	cfg, err := harness.ConfigFromEnv()
	if err != nil {
		return nil, err
	}
	cfg.Tune = tune
	cluster, err := harness.Up(ctx, cfg, os.Getenv("E2E_REPO"), "")
	if err != nil {
		return nil, err
	}
	b := &benchCluster{cluster: cluster, ns: "bench"}
	admin := cluster.Admin
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: b.ns}}, metav1.CreateOptions{}); err != nil {
		return b, err
	}
	if _, err := admin.CoreV1().ServiceAccounts(b.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, metav1.CreateOptions{}); err != nil {
		return b, err
	}
	if b.owner, err = admin.CoreV1().Pods(b.ns).Create(ctx, pod("worker-0", nil), metav1.CreateOptions{}); err != nil {
		return b, err
	}
	if b.m, err = admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, harness.ReleaseName, metav1.GetOptions{}); err != nil {
		return b, err
	}
	b.v, err = admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, harness.ReleaseName, metav1.GetOptions{})
	return b, err
}

// runBurstBench: the burst (burst.go) with ownerguard, the no-op webhook
// answering ownerguard's answers, and no webhooks.
func runBurstBench(deployment, job, rounds int) error {
	ctx := context.Background()
	b, err := upBench(ctx, burstTune(max(deployment, job)))
	if b != nil && b.cluster != nil {
		defer b.cluster.Down()
	}
	if err != nil {
		return err
	}
	owner := map[string]string{"ownerguard.io/owner-pod": b.owner.Name, "ownerguard.io/owner-uid": string(b.owner.UID)}
	// ownerguard's answers for a pod its controller made: the patch
	// appends the worker's reference to the controller's.
	yes := true
	controller := &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "burst", UID: "00000000-0000-0000-0000-00000000b0b0", Controller: &yes, BlockOwnerDeletion: &yes}
	probeReferences = []metav1.OwnerReference{*controller}
	mutateAnswer, validateAnswer, err := ownerguardAnswers(b.ns, b.owner, owner, controller, filepath.Join(b.cluster.Plane.Work, "answers"))
	if err != nil {
		return err
	}
	for _, f := range []string{mutateAnswer, validateAnswer} {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		fmt.Printf("ownerguard's answer (%s): %s\n", filepath.Base(f), data)
	}
	ceilings := map[registration]*ceiling{toReplay: {port: 8445, stats: "127.0.0.1:19445"}}
	if err := startCeiling(ctx, b.cluster, "ceiling-replay", ceilings[toReplay], "--mutate-answer", mutateAnswer, "--validate-answer", validateAnswer); err != nil {
		return err
	}
	defer ceilings[toReplay].proc.Stop(10 * time.Second)
	if err := addServicePorts(ctx, b.cluster, ceilings); err != nil {
		return err
	}
	registered := toOwnerguard
	set := func(to registration) error {
		if to == registered {
			return nil
		}
		if err := setWebhooks(ctx, b.cluster.Admin, registered, to, b.m, b.v, b.owner, ceilings); err != nil {
			return err
		}
		registered = to
		return nil
	}
	return runBurst(ctx, b.cluster, b.ns, owner, set, deployment, job, rounds)
}

func run(n, c, rounds, warmup int) error {
	ctx := context.Background()
	b, err := upBench(ctx, nil)
	if b != nil && b.cluster != nil {
		defer b.cluster.Down()
	}
	if err != nil {
		return err
	}
	cluster, admin, ns, owner, m, v := b.cluster, b.cluster.Admin, b.ns, b.owner, b.m, b.v
	labelled := map[string]string{"bench": "1", "ownerguard.io/owner-pod": owner.Name, "ownerguard.io/owner-uid": string(owner.UID)}
	mutateAnswer, validateAnswer, err := ownerguardAnswers(ns, owner, labelled, nil, filepath.Join(cluster.Plane.Work, "answers"))
	if err != nil {
		return err
	}
	for _, f := range []string{mutateAnswer, validateAnswer} {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		fmt.Printf("ownerguard's answer (%s, %d bytes without the envelope): %s\n", filepath.Base(f), len(data), data)
	}
	ceilings := map[registration]*ceiling{
		toCeiling: {port: 8444, stats: "127.0.0.1:19444"},
		toReplay:  {port: 8445, stats: "127.0.0.1:19445"},
	}
	if err := startCeiling(ctx, cluster, "ceiling", ceilings[toCeiling]); err != nil {
		return err
	}
	defer ceilings[toCeiling].proc.Stop(10 * time.Second)
	if err := startCeiling(ctx, cluster, "ceiling-replay", ceilings[toReplay],
		"--mutate-answer", mutateAnswer, "--validate-answer", validateAnswer); err != nil {
		return err
	}
	defer ceilings[toReplay].proc.Stop(10 * time.Second)
	if err := addServicePorts(ctx, cluster, ceilings); err != nil {
		return err
	}
	variants := []variant{
		{"webhooks registered, labelled pods (mutate + validate called)", toOwnerguard, true},
		{"webhooks registered, unlabelled pods (objectSelector: not called)", toOwnerguard, false},
		{"the same registrations to a no-op webhook (the ceiling), labelled pods", toCeiling, true},
		{"the same registrations to the no-op webhook answering ownerguard's answers, labelled pods", toReplay, true},
		{"no webhooks, labelled pods", none, true},
	}
	// Kubernetes 1.36+: the reference written by a MutatingAdmissionPolicy
	// inside the API server, /validate still called (issue 24, item 6).
	minor, err := harness.ServerMinor(admin)
	if err != nil {
		return err
	}
	if minor >= 36 {
		variants = append(variants, variant{"a MutatingAdmissionPolicy writes the reference, ownerguard's /validate only, labelled pods", toPolicy, true})
	} else {
		fmt.Printf("Kubernetes 1.%d: no MutatingAdmissionPolicy variant (GA from 1.36)\n", minor)
	}
	results := map[string][]time.Duration{}
	histograms := map[string]map[string]buckets{}
	perRound := map[string][]time.Duration{}
	walls := map[string]time.Duration{}
	registered := toOwnerguard
	fmt.Printf("createbench: %d pods per round, %d clients, %d rounds of each variant (after a round of %d, not counted)\n", n, c, rounds, warmup)
	for r := -1; r < rounds; r++ {
		size := n
		if r < 0 {
			size = warmup
		}
		for _, va := range variants {
			if va.to != registered {
				if err := setWebhooks(ctx, admin, registered, va.to, m, v, owner, ceilings); err != nil {
					return err
				}
				registered = va.to
			}
			labels := map[string]string{"bench": "1"}
			if va.labelled {
				labels = labelled
			}
			before, err := scrapeHistograms(ctx, admin)
			if err != nil {
				return err
			}
			lat, wall, err := round(ctx, admin, ns, fmt.Sprintf("r%d-%d", r+1, len(results[va.name])), size, c, labels)
			if err != nil {
				return fmt.Errorf("%s: %w", va.name, err)
			}
			after, err := scrapeHistograms(ctx, admin)
			if err != nil {
				return err
			}
			if r >= 0 {
				if histograms[va.name] == nil {
					histograms[va.name] = map[string]buckets{}
				}
				addDelta(histograms[va.name], before, after)
			}
			if err := cleanup(ctx, admin, ns); err != nil {
				return err
			}
			if r < 0 {
				continue
			}
			results[va.name] = append(results[va.name], lat...)
			sorted := append([]time.Duration(nil), lat...)
			sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
			perRound[va.name] = append(perRound[va.name], pct(sorted, 50), pct(sorted, 99))
			walls[va.name] += wall
		}
	}
	fmt.Printf("\n| variant | creates | creates/s | p50 | p90 | p99 | p50/p99 of each round |\n|---|---|---|---|---|---|---|\n")
	for _, va := range variants {
		lat := results[va.name]
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		var rounds []string
		for i := 0; i+1 < len(perRound[va.name]); i += 2 {
			p50, p99 := perRound[va.name][i], perRound[va.name][i+1]
			rounds = append(rounds, strconv.FormatFloat(float64(p50.Microseconds())/1000, 'f', 1, 64)+"/"+
				strconv.FormatFloat(float64(p99.Microseconds())/1000, 'f', 0, 64))
		}
		fmt.Printf("| %s | %d | %.0f | %s | %s | %s | %s |\n", va.name, len(lat),
			float64(len(lat))/walls[va.name].Seconds(), ms(pct(lat, 50)), ms(pct(lat, 90)), ms(pct(lat, 99)), strings.Join(rounds, ", "))
	}
	var order []string
	for _, va := range variants {
		order = append(order, va.name)
	}
	printHistograms(order, histograms)
	// ownerguard's cost over no webhook, as a multiple of what a webhook
	// that does nothing costs on the same registrations; and what the same
	// webhook costs when it answers what ownerguard answers.
	og, noop, replay, bare := results[variants[0].name], results[variants[2].name], results[variants[3].name], results[variants[4].name]
	fmt.Println()
	for _, p := range []int{50, 99} {
		added, noopAdded, replayAdded := pct(og, p)-pct(bare, p), pct(noop, p)-pct(bare, p), pct(replay, p)-pct(bare, p)
		ratio, replayRatio := "undefined (the no-op webhook added nothing measurable)", ratio(replayAdded, noopAdded)
		if noopAdded > 0 {
			ratio = fmt.Sprintf("%.2fx", float64(added)/float64(noopAdded))
		}
		fmt.Printf("p%d over no webhook: ownerguard adds %s, the no-op webhook %s (ownerguard: %s of it); the no-op webhook answering ownerguard's answers adds %s (%s)\n",
			p, ms(added), ms(noopAdded), ratio, ms(replayAdded), replayRatio)
	}
	if len(variants) > 5 {
		policy := results[variants[5].name]
		for _, p := range []int{50, 99} {
			fmt.Printf("p%d over no webhook: the policy and /validate add %s, ownerguard's /mutate and /validate %s: the policy saves %s a create\n",
				p, ms(pct(policy, p)-pct(bare, p)), ms(pct(og, p)-pct(bare, p)), ms(pct(og, p)-pct(policy, p)))
		}
	}
	for _, r := range []registration{toCeiling, toReplay} {
		answered, err := ceilings[r].count()
		if err != nil {
			return err
		}
		fmt.Printf("%s answered %d reviews (its variant made %d creates, two webhooks each, plus the warm-up and the probes)\n", r, answered, n*rounds)
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
	var slow []string
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
				if d > slowCreate {
					slow = append(slow, fmt.Sprintf("#%d at +%s: %s", i, ms(t.Sub(start)), ms(d)))
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if len(slow) > 0 {
		// Which creates of the round were slow, and when they started: a
		// tail at the start of every round is a cost of the switch of
		// registrations, one spread over the round is a cost per create.
		fmt.Printf("round %s: %d of %d creates over %s: %s\n", prefix, len(slow), n, slowCreate, strings.Join(slow, ", "))
	}
	return lat, time.Since(start), firstErr
}

// A create slower than this is named, with its place in its round.
const slowCreate = 100 * time.Millisecond

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

// ratio of two added latencies, as text.
func ratio(a, b time.Duration) string {
	if b <= 0 {
		return "undefined"
	}
	return fmt.Sprintf("%.2fx the no-op webhook's", float64(a)/float64(b))
}

// setWebhooks moves ownerguard's two configurations from one registration
// to another (removed, or pointing at ownerguard, or at a ceiling: the same
// configurations with the Service port of the ceiling) and waits until the
// API server acts on it: a labelled pod naming a missing owner is refused
// exactly while they point at ownerguard, and reaches a ceiling exactly
// while they point at it.
func setWebhooks(ctx context.Context, admin *kubernetes.Clientset, from, to registration, m *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration, owner *corev1.Pod, ceilings map[registration]*ceiling) error {
	if from == toPolicy {
		if err := harness.RemovePolicy(ctx, admin); err != nil {
			return err
		}
	}
	if from != none && from != toPolicy {
		if err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, m.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
	}
	if from != none {
		if err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, v.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
	}
	if to != none {
		m, v = m.DeepCopy(), v.DeepCopy()
		m.ResourceVersion, m.UID, m.ManagedFields = "", "", nil
		v.ResourceVersion, v.UID, v.ManagedFields = "", "", nil
		if c := ceilings[to]; c != nil {
			port := c.port
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
		if to == toPolicy {
			if err := harness.InstallPolicy(ctx, admin, "ownerguard.io", owner.Namespace, "pods"); err != nil {
				return err
			}
		} else if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil {
			return err
		}
		if _, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	counts := func() (map[registration]int, error) {
		out := map[registration]int{}
		for r, c := range ceilings {
			n, err := c.count()
			if err != nil {
				return nil, err
			}
			out[r] = n
		}
		return out, nil
	}
	probe := pod("probe", map[string]string{"ownerguard.io/owner-pod": "missing", "ownerguard.io/owner-uid": "00000000-0000-0000-0000-000000000000"})
	probe.OwnerReferences = probeReferences
	err := harness.Until(ctx, 30*time.Second, 200*time.Millisecond, fmt.Sprintf("webhooks registered to %v in force", to), func() error {
		before, err := counts()
		if err != nil {
			return err
		}
		_, err = admin.CoreV1().Pods(owner.Namespace).Create(ctx, probe.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		after, countErr := counts()
		if countErr != nil {
			return countErr
		}
		refused := err != nil
		reached := none
		for r := range ceilings {
			if after[r] > before[r] {
				if reached != none {
					return fmt.Errorf("probe reached two ceilings")
				}
				reached = r
			}
		}
		// Refused by ownerguard only; reaching the ceiling registered only.
		want := none
		if ceilings[to] != nil {
			want = to
		}
		if refused == (to == toOwnerguard || to == toPolicy) && reached == want {
			return nil
		}
		return fmt.Errorf("probe: refused %v (%v), reached %v", refused, err, reached)
	})
	if err != nil || to == none {
		return err
	}
	// Then one create every registration allows, both webhooks called: the
	// API server readies a registration's webhooks lazily, at their first
	// call, and the refused probe never reaches /validate (the mutating
	// webhook has already said no). Without this the first create of each
	// client after a switch to ownerguard waited 180 to 360 ms (none of it
	// in the webhook calls, by the API server's own histogram), while the
	// no-op webhook's allowed probe had already paid that for its rounds.
	// With the policy, the same probe also waits for the API server to
	// have loaded it (until then /validate refuses the probe: no
	// reference, or the policy answers 503).
	ready := pod("probe-allowed", map[string]string{"ownerguard.io/owner-pod": owner.Name, "ownerguard.io/owner-uid": string(owner.UID)})
	ready.OwnerReferences = probeReferences
	return harness.Until(ctx, 60*time.Second, 500*time.Millisecond, fmt.Sprintf("the allowed probe, registered to %v", to), func() error {
		_, err := admin.CoreV1().Pods(owner.Namespace).Create(ctx, ready.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
}

// startCeiling runs examples/ceiling.rs (CEILING_BIN) as NAME with the
// chart's serving certificate on the Service's ClusterIP at c.port.
func startCeiling(ctx context.Context, cluster *harness.Cluster, name string, c *ceiling, args ...string) error {
	bin := os.Getenv("CEILING_BIN")
	if bin == "" {
		return fmt.Errorf("CEILING_BIN is not set (run bench/create.sh)")
	}
	dir := filepath.Dir(cluster.Guard.CAFile)
	args = append([]string{
		"--addr", net.JoinHostPort(cluster.Inst.ClusterIP, strconv.Itoa(int(c.port))),
		"--stats-addr", c.stats,
		"--tls-cert", filepath.Join(dir, "tls.crt"), "--tls-key", filepath.Join(dir, "tls.key"),
	}, args...)
	proc, err := harness.Start(name, cluster.Plane.Logs, nil, bin, args...)
	if err != nil {
		return err
	}
	c.proc = proc
	return harness.Until(ctx, 30*time.Second, 100*time.Millisecond, name+" serving", func() error {
		if done, err := proc.Exited(); done {
			return fmt.Errorf("%s exited: %v: %s", name, err, proc.Tail(5))
		}
		_, err := c.count()
		return err
	})
}

// addServicePorts gives the Service a port for each ceiling.
func addServicePorts(ctx context.Context, cluster *harness.Cluster, ceilings map[registration]*ceiling) error {
	svc, err := cluster.Admin.CoreV1().Services(cluster.Inst.Namespace).Get(ctx, cluster.Inst.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for r, c := range ceilings {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("ceiling-%d", r), Port: c.port, Protocol: corev1.ProtocolTCP})
	}
	_, err = cluster.Admin.CoreV1().Services(cluster.Inst.Namespace).Update(ctx, svc, metav1.UpdateOptions{})
	return err
}

// probeReferences are the ownerReferences of the probes that tell a
// switch of registrations in force: none, or in a burst its controller's
// reference, as the pods the answers replayed were made for carry it (the
// replayed patch appends to the references; on a pod without any, the API
// server could not apply it).
var probeReferences []metav1.OwnerReference

// ownerguardAnswers asks the ownerguard binary (OWNERGUARD_BIN, `review`,
// offline, the owner in an inventory) what it answers on /mutate for a
// bench pod with labels, and on /validate for that pod once patched; it
// writes each response into dir and returns the two files.
func ownerguardAnswers(ns string, owner *corev1.Pod, labels map[string]string, controller *metav1.OwnerReference, dir string) (string, string, error) {
	bin := os.Getenv("OWNERGUARD_BIN")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	owners := map[string]any{"apiVersion": "v1", "kind": "PodList", "items": []any{
		map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": owner.Name, "namespace": owner.Namespace, "uid": string(owner.UID)}},
	}}
	agent := pod("answer-0", labels)
	agent.Namespace = ns
	if controller != nil {
		agent.OwnerReferences = []metav1.OwnerReference{*controller}
	}
	agent.APIVersion, agent.Kind = "v1", "Pod"
	var object map[string]any
	if err := roundTrip(agent, &object); err != nil {
		return "", "", err
	}
	ownersFile, objectFile := filepath.Join(dir, "owners.json"), filepath.Join(dir, "pod.json")
	if err := writeJSON(ownersFile, owners); err != nil {
		return "", "", err
	}
	if err := writeJSON(objectFile, object); err != nil {
		return "", "", err
	}
	review := func(webhook, file string) (map[string]any, error) {
		out, err := exec.Command(bin, "review", "--webhook", webhook, "--pods", ownersFile, file).Output()
		if err != nil {
			return nil, fmt.Errorf("ownerguard review --webhook %s %s: %v: %s", webhook, file, err, out)
		}
		var answer struct {
			Response map[string]any `json:"response"`
		}
		if err := json.Unmarshal(out, &answer); err != nil || answer.Response == nil || answer.Response["allowed"] != true {
			return nil, fmt.Errorf("ownerguard review --webhook %s: not an allowed review: %s", webhook, out)
		}
		delete(answer.Response, "uid")
		return answer.Response, nil
	}
	mutate, err := review("mutate", objectFile)
	if err != nil {
		return "", "", err
	}
	encoded, _ := mutate["patch"].(string)
	patchText, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil || encoded == "" {
		return "", "", fmt.Errorf("ownerguard's /mutate answer has no patch: %v", mutate)
	}
	var patch []struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	if err := json.Unmarshal(patchText, &patch); err != nil {
		return "", "", err
	}
	for _, op := range patch {
		if err := add(object, op.Op, op.Path, op.Value); err != nil {
			return "", "", err
		}
	}
	patchedFile := filepath.Join(dir, "patched.json")
	if err := writeJSON(patchedFile, object); err != nil {
		return "", "", err
	}
	validate, err := review("validate", patchedFile)
	if err != nil {
		return "", "", err
	}
	mutateFile, validateFile := filepath.Join(dir, "mutate-answer.json"), filepath.Join(dir, "validate-answer.json")
	if err := writeJSON(mutateFile, mutate); err != nil {
		return "", "", err
	}
	return mutateFile, validateFile, writeJSON(validateFile, validate)
}

// add applies one JSON patch "add" on objects (what ownerguard's patches
// are: members of metadata and its maps, or an entry appended to a list).
func add(object map[string]any, op, path string, value any) error {
	if op != "add" || !strings.HasPrefix(path, "/") {
		return fmt.Errorf("patch op %s %s: only add on an object member is applied here", op, path)
	}
	tokens := strings.Split(path[1:], "/")
	at := object
	for i, token := range tokens {
		token = strings.ReplaceAll(strings.ReplaceAll(token, "~1", "/"), "~0", "~")
		if i == len(tokens)-2 && tokens[i+1] == "-" {
			list, ok := at[token].([]any)
			if !ok {
				return fmt.Errorf("patch path %s: %s is not a list", path, token)
			}
			at[token] = append(list, value)
			return nil
		}
		if i == len(tokens)-1 {
			at[token] = value
			return nil
		}
		next, ok := at[token].(map[string]any)
		if !ok {
			return fmt.Errorf("patch path %s: %s is not an object", path, token)
		}
		at = next
	}
	return nil
}

func roundTrip(in, out any) error {
	data, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, out)
}

func writeJSON(path string, value any) error {
	data, err := json.Marshal(value)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
