package main

// The burst: what a cluster feels when a controller makes many labelled
// pods at once through ownerguard. A Deployment scaled from 0 to D pods and
// a Job of parallelism J, on a cluster that runs pods (kube-scheduler and a
// hollow node, kubemark's kubelet with a fake runtime), three variants
// interleaved round by round: ownerguard's webhooks; the same
// registrations pointed at the no-op webhook answering ownerguard's own
// answers (examples/ceiling.rs: ownerguard's TLS and HTTP stack, its patch
// and audit annotations, no decision); no webhooks. For each round: the
// time from the scale (or the Job's create) until every pod exists and
// until every pod runs, and each pod create's latency as the API server
// times it (its audit log: from receiving the request to its answer, the
// webhook calls inside it; the controller's own rate limiter is not).
// And ownerguard's CPU time and memory over its rounds.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"ownerguard.io/e2e/harness"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
)

// burstTune: the controller manager, the scheduler and the hollow node at
// a large cluster's client rates (500 a second), the hollow node with room
// for every pod of a burst. At the defaults (20 a second for the
// controller manager) the controllers' own limiters would set the pace and
// hide what the API server and its webhooks take.
func burstTune(pods int) func(*harness.Plane) {
	return func(p *harness.Plane) {
		p.KCMArgs = append(p.KCMArgs, "--kube-api-qps=500", "--kube-api-burst=1000")
		p.SchedulerQPS = 500
		p.HollowNodeArgs = append(p.HollowNodeArgs, "--max-pods="+strconv.Itoa(pods+100), "--kube-api-qps=500", "--kube-api-burst=1000")
	}
}

// A burst's pod template: the owner labels of the worker (on the pods, not
// on the Deployment or Job, so that every object ownerguard reviews
// already has its controller's reference and ownerguard's patch appends
// the worker's: the one answer the no-op webhook replays fits them all),
// run by the hollow node.
func burstTemplate(app string, owner map[string]string) corev1.PodTemplateSpec {
	l := map[string]string{"burst": app}
	for k, v := range owner {
		l[k] = v
	}
	zero := int64(0)
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: l},
		Spec: corev1.PodSpec{
			ServiceAccountName:            "bench",
			SchedulerName:                 harness.KubeletScheduler,
			Tolerations:                   []corev1.Toleration{{Key: harness.KubeletTaint.Key, Operator: corev1.TolerationOpExists}},
			TerminationGracePeriodSeconds: &zero,
			AutomountServiceAccountToken:  new(bool),
			Containers:                    []corev1.Container{{Name: "agent", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
}

// burstRound is one round of one workload in one variant.
type burstRound struct {
	exist, run time.Duration   // from the scale or create to every pod existing, running
	creates    []time.Duration // each pod create, as the API server timed it
}

// podWatch follows the pods of one burst (by its app label): when the
// last of want existed and ran.
type podWatch struct {
	mu          sync.Mutex
	want        int
	seen, run   map[string]bool
	start       time.Time
	exist, runs time.Duration
	done        chan struct{}
	stop        chan struct{}
}

func watchBurst(admin kubernetes.Interface, ns, app string, want int) *podWatch {
	w := &podWatch{want: want, seen: map[string]bool{}, run: map[string]bool{}, done: make(chan struct{}), stop: make(chan struct{})}
	factory := informers.NewSharedInformerFactoryWithOptions(admin, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.SelectorFromSet(labels.Set{"burst": app}).String()
		}))
	record := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.start.IsZero() {
			return
		}
		w.seen[pod.Name] = true
		if pod.Status.Phase == corev1.PodRunning {
			w.run[pod.Name] = true
		}
		if w.exist == 0 && len(w.seen) >= w.want {
			w.exist = time.Since(w.start)
		}
		if w.runs == 0 && len(w.run) >= w.want {
			w.runs = time.Since(w.start)
			close(w.done)
		}
	}
	informer := factory.Core().V1().Pods().Informer()
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, obj any) { record(obj) }})
	factory.Start(w.stop)
	factory.WaitForCacheSync(w.stop)
	return w
}

func (w *podWatch) begin() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.start = time.Now()
	return w.start
}

// wait until every pod runs, at most d.
func (w *podWatch) wait(d time.Duration) (exist, run time.Duration, err error) {
	defer close(w.stop)
	select {
	case <-w.done:
	case <-time.After(d):
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.runs == 0 {
		return 0, 0, fmt.Errorf("after %s: %d of %d pods exist, %d run", d, len(w.seen), w.want, len(w.run))
	}
	return w.exist, w.runs, nil
}

// deploymentBurst scales a Deployment of the burst's template from 0 to
// pods and waits until every pod runs.
func deploymentBurst(ctx context.Context, admin *kubernetes.Clientset, ns, app string, pods int, owner map[string]string) (time.Time, time.Duration, time.Duration, error) {
	zero := int32(0)
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{"burst": app}}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: app, Labels: map[string]string{"burst": app}},
		Spec: appsv1.DeploymentSpec{Replicas: &zero, Selector: selector, Template: burstTemplate(app, owner)}}
	if _, err := admin.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return time.Time{}, 0, 0, err
	}
	// Its ReplicaSet first (made at 0): the burst is the scale alone.
	if err := harness.Until(ctx, time.Minute, 100*time.Millisecond, app+"'s ReplicaSet", func() error {
		list, err := admin.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "burst=" + app})
		if err != nil || len(list.Items) == 0 {
			return fmt.Errorf("none yet (%v)", err)
		}
		return nil
	}); err != nil {
		return time.Time{}, 0, 0, err
	}
	w := watchBurst(admin, ns, app, pods)
	start := w.begin()
	// The deployment controller writes the new Deployment meanwhile: a
	// scale read before that conflicts, and is read again.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		scale, err := admin.AppsV1().Deployments(ns).GetScale(ctx, app, metav1.GetOptions{})
		if err != nil {
			return err
		}
		scale.Spec.Replicas = int32(pods)
		_, err = admin.AppsV1().Deployments(ns).UpdateScale(ctx, app, scale, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return start, 0, 0, err
	}
	exist, run, err := w.wait(5 * time.Minute)
	return start, exist, run, err
}

// jobBurst creates a Job of parallelism (and completions) pods and waits
// until every pod runs (the fake runtime's containers never exit).
func jobBurst(ctx context.Context, admin *kubernetes.Clientset, ns, app string, pods int, owner map[string]string) (time.Time, time.Duration, time.Duration, error) {
	n := int32(pods)
	template := burstTemplate(app, owner)
	template.Spec.RestartPolicy = corev1.RestartPolicyNever
	// Labels of its own: a Job without takes its template's (the owner
	// labels) by defaulting, and would be reviewed without a controller's
	// reference to append to.
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: app, Labels: map[string]string{"burst": app}},
		Spec: batchv1.JobSpec{Parallelism: &n, Completions: &n, Template: template}}
	w := watchBurst(admin, ns, app, pods)
	start := w.begin()
	if _, err := admin.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		return start, 0, 0, err
	}
	exist, run, err := w.wait(5 * time.Minute)
	return start, exist, run, err
}

// clearBurst deletes a burst's workload and pods and waits until no pod of
// it is left. The pods are the worker's too (the contract), so the
// collector keeps them after their controller: they are deleted by label.
func clearBurst(ctx context.Context, admin *kubernetes.Clientset, ns, app string) error {
	orphan := metav1.DeletePropagationOrphan
	byApp := metav1.ListOptions{LabelSelector: "burst=" + app}
	_ = admin.AppsV1().Deployments(ns).Delete(ctx, app, metav1.DeleteOptions{PropagationPolicy: &orphan})
	_ = admin.BatchV1().Jobs(ns).Delete(ctx, app, metav1.DeleteOptions{PropagationPolicy: &orphan})
	if err := admin.AppsV1().ReplicaSets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, byApp); err != nil {
		return err
	}
	return harness.Until(ctx, 3*time.Minute, time.Second, "the pods of "+app+" deleted", func() error {
		list, err := admin.CoreV1().Pods(ns).List(ctx, byApp)
		if err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return nil
		}
		// A Job's pods keep its tracking finalizer until its controller
		// sees the Job gone; they go once it is off.
		for _, pod := range list.Items {
			if len(pod.Finalizers) > 0 && pod.DeletionTimestamp != nil {
				patch := []byte(`{"metadata":{"finalizers":null}}`)
				_, _ = admin.CoreV1().Pods(ns).Patch(ctx, pod.Name, "application/merge-patch+json", patch, metav1.PatchOptions{})
			}
		}
		if err := admin.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, byApp); err != nil {
			return err
		}
		return fmt.Errorf("%d left", len(list.Items))
	})
}

// auditCreates reads the audit log from offset on: each pod create in ns
// answered, with when it was received and how long it took.
type auditReader struct {
	path   string
	offset int64
}

type timedCreate struct {
	at      time.Time
	took    time.Duration
	code    int
	user    string
	message string
}

func (a *auditReader) podCreates(ns string) ([]timedCreate, error) {
	f, err := os.Open(a.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(a.offset, io.SeekStart); err != nil {
		return nil, err
	}
	var out []timedCreate
	reader := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := reader.ReadBytes('\n')
		if err == io.EOF {
			break // a line being written: read from its start next time
		}
		if err != nil {
			return nil, err
		}
		a.offset += int64(len(line))
		var event struct {
			Stage      string `json:"stage"`
			Verb       string `json:"verb"`
			RequestURI string `json:"requestURI"`
			User       struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef struct {
				Resource, Namespace, Subresource string
			} `json:"objectRef"`
			ResponseStatus struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"responseStatus"`
			Received metav1.MicroTime `json:"requestReceivedTimestamp"`
			Answered metav1.MicroTime `json:"stageTimestamp"`
		}
		if json.Unmarshal(line, &event) != nil || event.Stage != "ResponseComplete" || event.Verb != "create" ||
			event.ObjectRef.Resource != "pods" || event.ObjectRef.Subresource != "" || event.ObjectRef.Namespace != ns ||
			// The probes of a switch of registrations: dry runs, one of
			// them refused on purpose.
			strings.Contains(event.RequestURI, "dryRun=") {
			continue
		}
		out = append(out, timedCreate{at: event.Received.Time, took: event.Answered.Sub(event.Received.Time),
			code: event.ResponseStatus.Code, user: event.User.Username, message: event.ResponseStatus.Message})
	}
	return out, nil
}

// processCost is a process's CPU time (user and system) and its resident
// and peak memory, from /proc.
func processCost(pid int) (cpu time.Duration, rss, peak int64, err error) {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, 0, err
	}
	// After the command's closing parenthesis: state is field 3, utime 14, stime 15.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(fields) < 13 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: %q", pid, stat)
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	const ticks = 100 // USER_HZ on Linux
	cpu = time.Duration(utime+stime) * time.Second / ticks
	status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, 0, 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		key, value, _ := strings.Cut(line, ":")
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		switch key {
		case "VmRSS":
			rss = kb << 10
		case "VmHWM":
			peak = kb << 10
		}
	}
	return cpu, rss, peak, nil
}

// runBurst runs the burst's rounds and prints them.
func runBurst(ctx context.Context, cluster *harness.Cluster, ns string, labelled map[string]string,
	set func(to registration) error, deployment, job, rounds int) error {
	admin := cluster.Admin
	if cluster.Guard.Container != "" {
		return fmt.Errorf("the burst reads ownerguard's CPU time from /proc: run it as a process (E2E_OWNERGUARD=process)")
	}
	audits, _ := filepath.Glob(filepath.Join(cluster.Plane.Logs, fmt.Sprintf("audit-%d.log", harness.APIPort)))
	if len(audits) != 1 {
		return fmt.Errorf("the API server's audit log: %v", audits)
	}
	audit := &auditReader{path: audits[0]}
	if _, err := audit.podCreates(ns); err != nil { // what came before
		return err
	}
	variants := []registration{toOwnerguard, toReplay, none}
	type workload struct {
		name string
		pods int
		run  func(context.Context, *kubernetes.Clientset, string, string, int, map[string]string) (time.Time, time.Duration, time.Duration, error)
	}
	workloads := []workload{
		{fmt.Sprintf("Deployment scaled 0 to %d", deployment), deployment, deploymentBurst},
		{fmt.Sprintf("Job of parallelism %d", job), job, jobBurst},
	}
	results := map[string]map[registration][]burstRound{}
	var guardCPU time.Duration
	guardCreates := 0
	var peak int64
	fmt.Printf("burst: %d rounds (after one not counted), variants interleaved: %s\n", rounds, "ownerguard, the no-op webhook with ownerguard's answers, no webhooks")
	for r := -1; r < rounds; r++ {
		for _, wl := range workloads {
			for _, to := range variants {
				if err := set(to); err != nil {
					return err
				}
				app := fmt.Sprintf("b%d-%s-%d", r+1, strings.ToLower(wl.name[:3]), to)
				cpuBefore, _, _, err := processCost(cluster.Guard.Pid())
				if err != nil {
					return err
				}
				start, exist, run, err := wl.run(ctx, admin, ns, app, wl.pods, labelled)
				if err != nil {
					return fmt.Errorf("%s, %v: %w (ownerguard's connections so far: %s)", wl.name, to, err, connectionCounts(cluster.Guard))
				}
				cpuAfter, _, hwm, err := processCost(cluster.Guard.Pid())
				if err != nil {
					return err
				}
				creates, err := audit.podCreates(ns)
				if err != nil {
					return err
				}
				var took []time.Duration
				for _, c := range creates {
					if c.code >= 300 {
						return fmt.Errorf("%s, %v: a pod create by %s answered %d: %s (ownerguard's connections so far: %s)", wl.name, to, c.user, c.code, c.message, connectionCounts(cluster.Guard))
					}
					if !c.at.Before(start) && !c.at.After(start.Add(run)) {
						took = append(took, c.took)
					}
				}
				fmt.Printf("round %d, %s, %v: every pod existed after %s, ran after %s; %d creates, p50 %s, p99 %s\n",
					r+1, wl.name, to, secs(exist), secs(run), len(took), ms(pctOf(took, 50)), ms(pctOf(took, 99)))
				if to == toOwnerguard {
					fmt.Printf("  ownerguard's connections so far: %s\n", connectionCounts(cluster.Guard))
				}
				if err := clearBurst(ctx, admin, ns, app); err != nil {
					return err
				}
				if r < 0 {
					continue
				}
				if to == toOwnerguard {
					guardCPU += cpuAfter - cpuBefore
					guardCreates += len(took)
					peak = max(peak, hwm)
				}
				if results[wl.name] == nil {
					results[wl.name] = map[registration][]burstRound{}
				}
				results[wl.name][to] = append(results[wl.name][to], burstRound{exist: exist, run: run, creates: took})
			}
		}
	}
	fmt.Printf("\n| workload | variant | every pod exists (each round) | every pod runs (each round) | creates | p50 | p99 | p50/p99 of each round |\n|---|---|---|---|---|---|---|---|\n")
	for _, wl := range workloads {
		for _, to := range variants {
			var exist, run, each []string
			var all []time.Duration
			for _, round := range results[wl.name][to] {
				exist = append(exist, secs(round.exist))
				run = append(run, secs(round.run))
				all = append(all, round.creates...)
				each = append(each, fmt.Sprintf("%.1f/%.0f", msf(pctOf(round.creates, 50)), msf(pctOf(round.creates, 99))))
			}
			fmt.Printf("| %s | %v | %s | %s | %d | %s | %s | %s |\n", wl.name, to, strings.Join(exist, ", "), strings.Join(run, ", "),
				len(all), ms(pctOf(all, 50)), ms(pctOf(all, 99)), strings.Join(each, ", "))
		}
		var og, noop []time.Duration
		for _, round := range results[wl.name][toOwnerguard] {
			og = append(og, round.creates...)
		}
		var noopP99s []float64
		for _, round := range results[wl.name][toReplay] {
			noop = append(noop, round.creates...)
			noopP99s = append(noopP99s, msf(pctOf(round.creates, 99)))
		}
		sort.Float64s(noopP99s)
		if len(og) > 0 && len(noop) > 0 && len(noopP99s) > 0 {
			fmt.Printf("%s: ownerguard's p50 is %.3fx the no-op webhook's; its p99 %.1f ms against the no-op webhook's rounds' p99 from %.1f to %.1f ms\n",
				wl.name, float64(pctOf(og, 50))/float64(pctOf(noop, 50)), msf(pctOf(og, 99)), noopP99s[0], noopP99s[len(noopP99s)-1])
		}
	}
	_, rss, _, err := processCost(cluster.Guard.Pid())
	if err != nil {
		return err
	}
	if guardCreates > 0 {
		fmt.Printf("\nownerguard over its counted rounds: %d pod creates (and its other reviews: ReplicaSets, Jobs' status), CPU %s (%.0f µs a pod create), resident memory %d MiB now, %d MiB at its peak\n",
			guardCreates, secs(guardCPU), float64(guardCPU.Microseconds())/float64(guardCreates), rss>>20, peak>>20)
	}
	return nil
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pctOf is pct of a copy, sorted.
func pctOf(d []time.Duration, p int) time.Duration {
	sorted := append([]time.Duration(nil), d...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	return pct(sorted, p)
}

// connectionCounts is what ownerguard has shed and refused of its HTTPS
// connections so far, by reason: a count of source_share in a burst is
// the API server's own connections past its share of the cap.
func connectionCounts(og *harness.Ownerguard) string {
	var parts []string
	for _, name := range []string{"ownerguard_connections_shed_total", "ownerguard_connections_refused_total"} {
		for _, reason := range []string{"source_share", "cap"} {
			v, err := og.Metric(name, map[string]string{"reason": reason})
			if err != nil {
				v = 0 // the series appears with its first count
			}
			parts = append(parts, fmt.Sprintf("%s{%s} %.0f", strings.TrimPrefix(name, "ownerguard_"), reason, v))
		}
	}
	if open, err := og.Metric("ownerguard_connections", nil); err == nil {
		parts = append(parts, fmt.Sprintf("open now %.0f", open))
	}
	return strings.Join(parts, ", ")
}
