// k8s-suite runs Kubernetes' own end-to-end tests (e2e.test, built from
// the pinned k8s.io/kubernetes by e2e/k8s-suite) against a cluster that
// runs pods: etcd, kube-apiserver, kube-controller-manager with every
// default controller, kube-scheduler and kubemark's hollow nodes (the
// real kubelet with a fake container runtime).
//
// -run baseline: without ownerguard.
// -run guarded:  the chart installed as production runs it (enforce,
// failurePolicy Fail, the cluster-wide Pod-reference check on), and every
// object the tests create or update in their namespaces labelled with
// the owner label of a worker pod running in that namespace, by a
// labelling webhook ordered before ownerguard's, as a worker's client
// writes it (templates included). So ownerguard judges every create and
// update of every controller behind those objects.
// -run worker-gone: guarded, and a test's deletion of an object a worker
// owns ends that worker too (the explained failures: a test that waits
// for the collector passes once the worker, the objects' second owner,
// is gone).
//
// It runs in the network namespace e2e/k8s-suite made, writes into -out
// the tests' JUnit report, ownerguard's decision log, the API server's
// audit log and result.json (the tests' outcomes, the reviews ownerguard
// decided per requesting identity and kind, every refusal), and exits 0
// when the tests ran, whatever their outcome: e2e/k8s-suite compares the
// runs.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"syscall"
	"time"

	"k8s.io/client-go/metadata"

	"ownerguard.io/e2e/harness"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "compare" {
		os.Exit(compare(os.Args[2:]))
	}
	var o options
	flag.StringVar(&o.run, "run", "", "baseline or guarded")
	flag.StringVar(&o.e2eTest, "e2e-test", "", "the e2e.test binary")
	flag.StringVar(&o.focus, "focus", "", "the tests to run (a regular expression over their full names)")
	flag.StringVar(&o.skip, "skip", "", "the tests to leave out (a regular expression)")
	flag.StringVar(&o.within, "within", "", "a second focus a test must match too (the set, for a run of some of its tests)")
	flag.IntVar(&o.nodes, "nodes", 2, "hollow nodes")
	flag.StringVar(&o.out, "out", "", "where the reports go")
	flag.DurationVar(&o.timeout, "timeout", 90*time.Minute, "the whole run's bound")
	flag.DurationVar(&o.testTimeout, "test-timeout", 5*time.Minute, "one test's bound (a test past it counts as failed)")
	flag.IntVar(&o.parallel, "parallel", 4, "tests run at once (a [Serial] test runs alone, after them)")
	flag.IntVar(&o.retries, "retries", 1, "tries more for a test that failed")
	expectFail := flag.String("expect-fail", "", "the tests not tried again: those expected to fail (a regular expression)")
	flag.Parse()
	if *expectFail != "" {
		var err error
		if o.expectFail, err = regexp.Compile(*expectFail); err != nil {
			fmt.Fprintln(os.Stderr, "-expect-fail:", err)
			os.Exit(2)
		}
	}
	if (o.run != "baseline" && o.run != "guarded" && o.run != "worker-gone") || o.e2eTest == "" || o.out == "" {
		fmt.Fprintln(os.Stderr, "usage: k8s-suite -run baseline|guarded|worker-gone -e2e-test PATH -out DIR [-focus RE] [-skip RE] [-nodes N]")
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, o.timeout)
	defer cancelTimeout()
	if err := run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "k8s-suite (%s): %v\n", o.run, err)
		os.Exit(1)
	}
}

type options struct {
	run, e2eTest, focus, within, skip, out string
	nodes, parallel, retries               int
	expectFail                             *regexp.Regexp
	timeout, testTimeout                   time.Duration
}

// SuiteUser is the identity e2e.test calls the API server with: an admin
// of its own, so that the labeller and the counts tell the tests'
// requests from the components'.
const SuiteUser = "e2e-k8s-suite"

func run(ctx context.Context, o options) error {
	cfg, err := harness.ConfigFromEnv()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	scheduler, nodes := harness.NodeIdentities(o.nodes)
	suite := harness.Identity{Token: harness.RandomToken(), User: SuiteUser, Groups: []string{"system:masters"}}
	cfg.Identities = append([]harness.Identity{scheduler, suite}, nodes...)
	cfg.AuditPolicy = auditPolicy
	plane, err := harness.NewPlane(cfg)
	if err != nil {
		return err
	}
	plane.KCMControllers = []string{"*"}
	plane.APIServerArgs = harness.NodeAPIServerArgs
	plane.KCMArgs = harness.StorageKCMArgs
	cluster := &harness.Cluster{Plane: plane}
	defer cluster.Down()

	step := func(what string, f func() error) error {
		start := time.Now()
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		log("%s (%.1f s)", what, time.Since(start).Seconds())
		return nil
	}
	if err := step("etcd", func() error { return plane.StartEtcd(ctx) }); err != nil {
		return err
	}
	if err := step("kube-apiserver", func() error { return plane.StartAPIServer(ctx, harness.APIPort) }); err != nil {
		return err
	}
	cluster.Admin = plane.Admin()
	if err := step("kube-controller-manager, every default controller", func() error { return plane.StartKCM(ctx) }); err != nil {
		return err
	}
	if err := step("a default StorageClass (the host-path provisioner)", func() error { return harness.DefaultStorageClass(ctx, cluster.Admin) }); err != nil {
		return err
	}
	if err := step("kube-scheduler", func() error { return plane.StartScheduler(ctx, scheduler.Token, "") }); err != nil {
		return err
	}
	if err := step(fmt.Sprintf("%d hollow nodes Ready", o.nodes), func() error { return plane.StartHollowNodes(ctx, nodes) }); err != nil {
		return err
	}
	var labeller *workerLabeller
	if o.run != "baseline" {
		if err := step("ownerguard installed by its chart and serving", func() error { return installGuard(ctx, cluster) }); err != nil {
			return err
		}
		if err := step("the worker labeller registered before ownerguard", func() error {
			meta, err := metadata.NewForConfig(plane.RESTConfig())
			if err != nil {
				return err
			}
			labeller, err = startWorkerLabeller(ctx, cluster.Admin, meta, SuiteUser, o.run == "worker-gone")
			return err
		}); err != nil {
			return err
		}
	}

	kubeconfig := filepath.Join(cfg.Work, "suite.kubeconfig")
	if err := harness.Kubeconfig(kubeconfig, harness.APIURL(harness.APIPort), plane.PKI.CAFile, suite.Token); err != nil {
		return err
	}
	start := time.Now()
	namespaces := watchNamespaces(ctx, cluster.Admin)
	tests, runIDs, failures, leftOut, flaky, err := runTests(ctx, o, kubeconfig)
	if err != nil {
		return err
	}
	log("%d tests ran in %.0f s", len(tests), time.Since(start).Seconds())
	result := Result{Run: o.run, Kubernetes: os.Getenv("E2E_KUBE_VERSION"), Seconds: int(time.Since(start).Seconds()),
		Tests: tests, RunIDs: runIDs, Failures: failures, LeftOut: leftOut, Retried: flaky}
	// The framework deletes a test's namespaces without waiting: their
	// teardown (the namespace controller, the collector) is part of what
	// ownerguard must not refuse. Waited for, bounded; one that stays is
	// reported.
	result.LeftNamespaces = waitNamespacesGone(ctx, cluster.Admin, 3*time.Minute)
	result.Namespaces = namespaces.byName()
	if cluster.Guard != nil {
		// No webhook may be left to call once its server stops: the
		// configurations go first.
		labeller.close(ctx, cluster.Admin)
		removeWebhooks(ctx, cluster.Admin)
		// Then ownerguard stops: every review in flight answered and its
		// decision line written before the log is read, whole.
		guardLog := cluster.Guard.Log
		cluster.Guard.Stop(30 * time.Second)
		cluster.Guard = nil
		if err := copyFile(guardLog, filepath.Join(o.out, "ownerguard.log")); err != nil {
			return err
		}
		result.Decisions, result.Denied, err = readDecisions(guardLog)
		if err != nil {
			return err
		}
		result.Workers = labeller.workers()
		result.Labelled = labeller.labelled()
		result.WorkersEnded = labeller.endings()
	}
	// The audit log is complete once the API server has stopped.
	cluster.Down()
	audits, _ := filepath.Glob(filepath.Join(plane.Logs, fmt.Sprintf("audit-%d*.log", harness.APIPort)))
	if len(audits) == 0 {
		return fmt.Errorf("no audit log in %s", plane.Logs)
	}
	for _, a := range audits {
		if err := copyFile(a, filepath.Join(o.out, filepath.Base(a))); err != nil {
			return err
		}
	}
	var audited *madeNamespaces
	if result.Refused, audited, err = readRefusals(audits); err != nil {
		return err
	}
	result.mergeNamespaces(audited)
	data, _ := json.MarshalIndent(result, "", "  ")
	return os.WriteFile(filepath.Join(o.out, "result.json"), append(data, '\n'), 0o644)
}

// installGuard installs the chart as production runs it and serves
// ownerguard for it (harness.Cluster.StartGuard: as the chart's
// ServiceAccount, at the Service's ClusterIP). The chart's own pods are
// kept off the hollow nodes (a node selector no node matches): ownerguard
// runs in their place, as in e2e/run.
func installGuard(ctx context.Context, c *harness.Cluster) error {
	repo := os.Getenv("E2E_REPO")
	chart := harness.Chart(repo)
	if harness.Mode() == "image" {
		// The image must hold this very build (its decision log names
		// the user the counts are made by).
		if err := harness.CheckImage(ctx, harness.Image(), os.Getenv("OWNERGUARD_BIN")); err != nil {
			return err
		}
	}
	args := append([]string{"install", harness.ReleaseName, chart,
		"--namespace", harness.ReleaseNamespace, "--create-namespace",
		"--set", "webhook.mode=enforce",
		"--set", "webhook.failurePolicy=Fail",
		"--set", "validation.allPodOwnerReferences.enabled=true",
		"--set-string", "nodeSelector.e2e\\.ownerguard\\.io/no-such-node=true",
	}, harness.ChartSettings(chart)...)
	// Production's default (the scenarios turn Events on to prove them).
	args = append(args, "--set", "events.enabled=false")
	out, err := c.Plane.Helm(ctx, args...)
	if err != nil {
		return err
	}
	fmt.Print(out)
	return c.StartGuard(ctx, "")
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o644)
}

func log(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[k8s-suite %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// What the API server writes to its audit log: every write, whoever
// makes it, at the Metadata level (its response's status says whether a
// webhook refused it), and a namespace's creation with the namespace as
// made. Reads are left out.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  # A namespace's creation whole: its e2e-run label ties it to a test.
  - level: RequestResponse
    verbs: ["create"]
    resources: [{group: "", resources: ["namespaces"]}]
  - level: Metadata
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
  - level: None
`
