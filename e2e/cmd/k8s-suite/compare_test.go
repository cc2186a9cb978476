package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The verdict is the suite's oracle: each way ownerguard can fail to hold
// must turn it red, and a run that held must stay green.

const (
	passes   = "[sig-apps] Job passes"
	listed   = "[sig-apps] Job needs a runtime"
	outlives = "[sig-apps] Job pods outlive it"
	counts   = "[sig-apps] Job counts the pods"
	// Left out of the baseline; run guarded, its outcome not judged.
	flakyTest = "[sig-apps] Job sometimes passes"
)

// held: a baseline and guarded run in which ownerguard held, with one
// failure explained by the worker-gone run and one by its own words.
func held() (baseline, guarded, gone *Result) {
	baseline = &Result{Run: "baseline", Tests: map[string]string{passes: "passed", listed: "failed", outlives: "passed", counts: "passed"}}
	guarded = &Result{
		Run:        "guarded",
		Tests:      map[string]string{passes: "passed", outlives: "failed", counts: "failed", flakyTest: "failed"},
		RunIDs:     map[string][]string{passes: {"run-1"}, outlives: {"run-2"}, counts: {"run-3"}},
		Namespaces: map[string]string{"job-1": "run-1", "job-2": "run-2", "job-3": "run-3"},
		Failures:   map[string]string{outlives: "timed out", counts: "[FAILED] expected 2 pods, got 3 pods"},
		Decisions: map[string]map[string]int{
			"kube-controller-manager (job-controller)": {"CREATE Pod allowed": 4},
			"the tests (e2e-k8s-suite)":                {"CREATE Job allowed": 3},
		},
		Workers:  3,
		Labelled: map[string]int{"CREATE Job": 3},
	}
	gone = &Result{
		Run:        "worker-gone",
		Tests:      map[string]string{outlives: "passed"},
		RunIDs:     map[string][]string{outlives: {"run-9"}},
		Namespaces: map[string]string{"job-9": "run-9"},
		WorkersEnded: map[string][]string{"job-9": {
			"deleted ReplicationController condition-test: worker zz-ownerguard-worker-abcde ended"}},
	}
	return baseline, guarded, gone
}

const explainedText = outlives + " || the pods are the worker's too\n" +
	counts + " || the test counts the worker pod || failure: expected 2 pods, got 3 pods\n"

func verdict(t *testing.T, explained string, runs ...*Result) int {
	t.Helper()
	return verdictIn(t, t.TempDir(), nil, explained, runs...)
}

// verdictIn is verdict with the reports in dir (files put there first)
// and more flags.
func verdictIn(t *testing.T, dir string, flags []string, explained string, runs ...*Result) int {
	t.Helper()
	for _, r := range runs {
		if r == nil {
			continue
		}
		// As this build writes it: each namespace's runs from the audit
		// log (here, the one run the test gives it).
		if r.NamespaceRuns == nil && r.Namespaces != nil {
			r.NamespaceRuns = map[string][]string{}
			for namespace, run := range r.Namespaces {
				r.NamespaceRuns[namespace] = []string{run}
			}
		}
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, r.Run), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, r.Run, "result.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("# comment\n\n"+text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	return compare(append([]string{"-reports", dir, "-set", "test",
		"-explained", write("explained", explained),
		"-baseline-failures", write("baseline-failures", listed+" || no container runtime\n"),
		"-flaky", write("flaky", flakyTest+" || passes or fails by chance\n")}, flags...))
}

// Kept reports judged again from their audit logs: a refusal the
// result.json did not hold is found, and judged by the namespace's run.
func TestVerdictRereadsTheAuditLog(t *testing.T) {
	for _, withRefusal := range []bool{false, true} {
		baseline, guarded, gone := held()
		dir := t.TempDir()
		lines := []string{}
		for _, made := range [][2]string{{"job-1", "run-1"}, {"job-2", "run-2"}, {"job-3", "run-3"}} {
			lines = append(lines, `{"stage":"ResponseComplete","verb":"create","objectRef":{"resource":"namespaces","name":"`+made[0]+`"},"responseStatus":{"code":201},"responseObject":{"kind":"Namespace","metadata":{"name":"`+made[0]+`","labels":{"e2e-run":"`+made[1]+`"}}}}`)
		}
		if withRefusal {
			lines = append(lines, `{"stage":"ResponseComplete","verb":"create","user":{"username":"e2e-k8s-suite"},"objectRef":{"resource":"pods","namespace":"job-2"},"responseStatus":{"code":403,"message":"admission webhook \"mutate.ownerguard.io\" denied the request"}}`)
		}
		for _, run := range []string{"guarded", "worker-gone"} {
			if err := os.MkdirAll(filepath.Join(dir, run), 0o755); err != nil {
				t.Fatal(err)
			}
			log := lines
			if run == "worker-gone" {
				log = []string{`{"stage":"ResponseComplete","verb":"create","objectRef":{"resource":"namespaces","name":"job-9"},"responseStatus":{"code":201},"responseObject":{"kind":"Namespace","metadata":{"name":"job-9","labels":{"e2e-run":"run-9"}}}}`}
			}
			if err := os.WriteFile(filepath.Join(dir, run, "audit-6443.log"), []byte(strings.Join(log, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(filepath.Join(dir, "baseline"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "baseline", "audit-6443.log"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		want := 0
		if withRefusal {
			want = 1
		}
		if got := verdictIn(t, dir, []string{"-reread-audit"}, explainedText, baseline, guarded, gone); got != want {
			t.Fatalf("a refusal in the explained test's namespace, in the audit log only (%v): exit %d, want %d", withRefusal, got, want)
		}
	}
}

func TestVerdictHeld(t *testing.T) {
	baseline, guarded, gone := held()
	if got := verdict(t, explainedText, baseline, guarded, gone); got != 0 {
		t.Fatalf("a run in which ownerguard held: exit %d, want 0", got)
	}
}

func TestVerdictFails(t *testing.T) {
	for name, spoil := range map[string]func(baseline, guarded, gone *Result) string{
		"a controller refused, in the audit log": func(_, g, _ *Result) string {
			g.Refused = append(g.Refused, Refusal{User: "system:serviceaccount:kube-system:endpointslice-controller", Verb: "update", Namespace: "elsewhere", Code: 400})
			return explainedText
		},
		"the controller manager's own user refused": func(_, g, _ *Result) string {
			g.Refused = append(g.Refused, Refusal{User: "system:kube-controller-manager", Verb: "create", Namespace: "elsewhere", Code: 403})
			return explainedText
		},
		"a kubelet denied, in the decision log": func(_, g, _ *Result) string {
			g.Denied = append(g.Denied, Denial{User: "system:node:hollow-node-0", Operation: "UPDATE", Kind: "Pod", Namespace: "elsewhere"})
			return explainedText
		},
		"a controller refused in the worker-gone run": func(_, _, gone *Result) string {
			gone.Refused = append(gone.Refused, Refusal{User: "system:serviceaccount:kube-system:generic-garbage-collector", Namespace: "elsewhere"})
			return explainedText
		},
		"a guarded-only failure not explained": func(_, _, _ *Result) string {
			return counts + " || the test counts the worker pod || failure: expected 2 pods, got 3 pods\n"
		},
		"explained, but failed otherwise": func(_, g, _ *Result) string {
			g.Failures[counts] = "[FAILED] the quota was never calculated"
			return explainedText
		},
		"explained by a failure that matches a crash": func(_, g, _ *Result) string {
			return outlives + " || the pods are the worker's too\n" + counts + " || why || failure: .*\n"
		},
		"explained by its failure, but its run crashed": func(_, g, _ *Result) string {
			g.Failures[counts] = "no report: see tests/3.log\n[FAILED] expected 2 pods, got 3 pods"
			return explainedText
		},
		"explained, but no deletion of the test's ended its worker": func(_, _, gone *Result) string {
			gone.WorkersEnded = map[string][]string{"job-8": {"deleted Pod p: worker w ended"}}
			return explainedText
		},
		"explained, but its worker's deletion failed": func(_, _, gone *Result) string {
			gone.WorkersEnded["job-9"] = []string{"deleted ReplicationController rc: worker w not ended: the server was unable to return a response"}
			return explainedText
		},
		"explained, but passes once the worker is gone only when tried again": func(_, _, gone *Result) string {
			gone.Retried = []string{outlives}
			return explainedText
		},
		"explained, but does not pass once the worker is gone": func(_, _, gone *Result) string {
			gone.Tests[outlives] = "failed"
			return explainedText
		},
		"explained, but no worker-gone run": func(_, _, gone *Result) string {
			gone.Tests = map[string]string{}
			return explainedText
		},
		"explained, but the test's own write refused in its namespace": func(_, g, _ *Result) string {
			g.Refused = append(g.Refused, Refusal{User: SuiteUser, Verb: "create", Namespace: "job-2", Code: 403})
			return explainedText
		},
		"explained, but its namespace unknown": func(_, g, _ *Result) string {
			g.RunIDs[outlives] = []string{""}
			return explainedText
		},
		"a baseline failure not listed": func(b, _, _ *Result) string {
			b.Tests["[sig-apps] Job new failure"] = "failed"
			return explainedText
		},
		"a listed baseline failure that passes": func(b, _, _ *Result) string {
			b.Tests[listed] = "passed"
			return explainedText
		},
		"a baseline pass that did not run guarded": func(_, g, _ *Result) string {
			delete(g.Tests, passes)
			return explainedText
		},
		"a baseline pass skipped guarded": func(_, g, _ *Result) string {
			g.Tests[passes] = "skipped"
			return explainedText
		},
		"no review of a Kubernetes component": func(_, g, _ *Result) string {
			delete(g.Decisions, "kube-controller-manager (job-controller)")
			return explainedText
		},
		"no worker started": func(_, g, _ *Result) string {
			g.Workers = 0
			return explainedText
		},
		"a test refused, then passed when tried again": func(_, g, _ *Result) string {
			g.Retried = []string{passes}
			g.RunIDs[passes] = []string{"run-0", "run-1"}
			g.Namespaces["job-0"] = "run-0"
			g.Refused = append(g.Refused, Refusal{User: SuiteUser, Verb: "create", Namespace: "job-0", Code: 403})
			return explainedText
		},
		"a second part that is not a failure": func(_, _, _ *Result) string {
			return outlives + " || the pods are the worker's too\n" + counts + " || why || expected 2 pods, got 3 pods\n"
		},
		"kube-proxy refused": func(_, g, _ *Result) string {
			g.Refused = append(g.Refused, Refusal{User: "system:kube-proxy", Verb: "update", Namespace: "elsewhere", Code: 403})
			return explainedText
		},
		"a flaky test's run refused a controller": func(_, g, _ *Result) string {
			g.RunIDs[flakyTest] = []string{"run-4"}
			g.Namespaces["job-4"] = "run-4"
			g.Refused = append(g.Refused, Refusal{User: "system:serviceaccount:kube-system:job-controller", Verb: "create", Namespace: "job-4", Code: 403})
			return explainedText
		},
		"a test's write refused in a namespace no run made": func(_, g, _ *Result) string {
			g.Refused = append(g.Refused, Refusal{User: SuiteUser, Verb: "create", Namespace: "job-unknown", Code: 403})
			return explainedText
		},
		"a test's write denied in a namespace no run made, worker-gone": func(_, _, gone *Result) string {
			gone.Denied = append(gone.Denied, Denial{User: SuiteUser, Operation: "CREATE", Namespace: "job-unknown", Kind: "Pod"})
			return explainedText
		},
		"a refusal in the explained test's namespace, whose name a later test made again": func(_, g, _ *Result) string {
			// job-2 was run-2's (the explained test), then run-1's: the
			// refusal happened while it was run-2's.
			g.Namespaces["job-2"] = "run-1"
			g.NamespaceRuns = map[string][]string{"job-2": {"run-2", "run-1"}}
			g.Refused = append(g.Refused, Refusal{User: SuiteUser, Verb: "create", Namespace: "job-2", Code: 403, Run: "run-2"})
			return explainedText
		},
		"a denial in a namespace name two runs made, the explained test's one of them": func(_, g, _ *Result) string {
			g.NamespaceRuns = map[string][]string{"job-1": {"run-1", "run-2"}}
			g.Denied = append(g.Denied, Denial{User: SuiteUser, Operation: "CREATE", Namespace: "job-1", Kind: "Pod"})
			return explainedText
		},
		"a worker ended in a namespace name another run made too": func(_, _, gone *Result) string {
			gone.NamespaceRuns = map[string][]string{"job-9": {"run-7", "run-9"}}
			return explainedText
		},
		"a test's write refused of a cluster-scoped object": func(_, g, _ *Result) string {
			g.Refused = append(g.Refused, Refusal{User: SuiteUser, Verb: "create", Resource: "namespaces", Code: 403})
			return explainedText
		},
		"a refusal in a namespace whose creation the audit log does not record": func(_, g, _ *Result) string {
			g.UnauditedNamespaces = []string{"job-1"}
			g.Refused = append(g.Refused, Refusal{User: SuiteUser, Verb: "create", Namespace: "job-1", Code: 403, Run: "run-1"})
			return explainedText
		},
		"a worker ended in a namespace whose creation the audit log does not record": func(_, _, gone *Result) string {
			gone.UnauditedNamespaces = []string{"job-9"}
			return explainedText
		},
		"a test's namespace left behind": func(_, g, _ *Result) string {
			g.LeftNamespaces = []string{"job-1 (Terminating)"}
			return explainedText
		},
	} {
		t.Run(name, func(t *testing.T) {
			baseline, guarded, gone := held()
			explained := spoil(baseline, guarded, gone)
			if got := verdict(t, explained, baseline, guarded, gone); got != 1 {
				t.Fatalf("exit %d, want 1", got)
			}
		})
	}
}

// A namespace left by a test that failed for an explained cause (its
// own cleanup never ran) is said, not a failure; one left by a test that
// passed is (TestVerdictFails).
func TestVerdictNamespaceOfAnExplainedFailure(t *testing.T) {
	baseline, guarded, gone := held()
	guarded.LeftNamespaces = []string{"job-2 (Terminating)"}
	if got := verdict(t, explainedText, baseline, guarded, gone); got != 0 {
		t.Fatalf("exit %d, want 0", got)
	}
}

// The tests' own refusals elsewhere (a test that asks for a refusal) do
// not fail the verdict; they are counted in the table.
func TestVerdictTestsRefusedElsewhere(t *testing.T) {
	baseline, guarded, gone := held()
	guarded.Refused = append(guarded.Refused, Refusal{User: SuiteUser, Verb: "create", Namespace: "job-1", Code: 403})
	if got := verdict(t, explainedText, baseline, guarded, gone); got != 0 {
		t.Fatalf("exit %d, want 0", got)
	}
}

func TestIdentity(t *testing.T) {
	for user, want := range map[string]struct {
		who       string
		component bool
	}{
		"system:kube-controller-manager":                           {"kube-controller-manager", true},
		"system:serviceaccount:kube-system:statefulset-controller": {"kube-controller-manager (statefulset-controller)", true},
		"system:kube-scheduler":                                    {"kube-scheduler", true},
		"system:node:hollow-node-1":                                {"kubelet", true},
		"system:apiserver":                                         {"kube-apiserver", true},
		SuiteUser:                                                  {"the tests (" + SuiteUser + ")", false},
		"system:serviceaccount:e2e-run-1:default":                  {"system:serviceaccount:e2e-run-1:default", false},
		"system:serviceaccount:ownerguard:ownerguard":              {"system:serviceaccount:ownerguard:ownerguard", false},
		"system:kube-proxy":                                        {"system:kube-proxy", true},
		"system:serviceaccount:kube-system:cloud-node-manager":     {"kube-controller-manager (cloud-node-manager)", true},
	} {
		if who := identity(user); who != want.who || kubernetesComponent(user) != want.component {
			t.Errorf("%s: identity %q, component %v; want %q, %v", user, who, kubernetesComponent(user), want.who, want.component)
		}
	}
	if !strings.HasPrefix(identity("system:serviceaccount:kube-system:x"), "kube-controller-manager") {
		t.Error("a kube-system service account is the controller manager's")
	}
}

// The audit log's refusals: ownerguard's, the labeller's, a match
// condition's, a call that failed open, a write ownerguard's patch
// made invalid, and one whose patch did not apply; not another
// webhook's, nor an invalid or failed write it did not touch.
func TestReadRefusals(t *testing.T) {
	event := func(code int, message string, annotations map[string]string) string {
		data, _ := json.Marshal(map[string]any{
			"stage": "ResponseComplete", "verb": "update",
			"user":           map[string]any{"username": "system:serviceaccount:kube-system:statefulset-controller"},
			"objectRef":      map[string]any{"resource": "persistentvolumeclaims", "namespace": "ns", "name": "data-0"},
			"responseStatus": map[string]any{"code": code, "message": message},
			"annotations":    annotations,
		})
		return string(data)
	}
	mutated := map[string]string{"mutation.webhook.admission.k8s.io/round_0_index_1": `{"configuration":"ownerguard","webhook":"mutate.ownerguard.io","mutated":true}`}
	untouched := map[string]string{"mutation.webhook.admission.k8s.io/round_0_index_1": `{"configuration":"ownerguard","webhook":"mutate.ownerguard.io","mutated":false}`}
	lines := []string{
		event(403, `admission webhook "mutate.ownerguard.io" denied the request: no`, nil),
		event(400, `admission webhook "`+labellerWebhook+`" denied the request: e2e worker labeller: no worker`, nil),
		event(500, `failed to evaluate matchCondition "labelled"`, nil),
		event(200, "", map[string]string{"failed-open.validating.webhook.admission.k8s.io/round_0_index_0": "validate.ownerguard.io"}),
		event(422, `PersistentVolumeClaim "data-0" is invalid`, mutated),
		event(403, `persistentvolumeclaims "data-0" is forbidden: cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on`, mutated),
		// ownerguard's patch that does not apply: a bare 500, not mutated.
		event(500, `Internal error occurred: add operation does not apply: doc is missing path`, untouched),
		event(500, `Internal error occurred: json: cannot unmarshal string into Go struct field`,
			map[string]string{"mutate.ownerguard.io/owner": "ns/zz-ownerguard-worker-abcde/1234"}),
		// Not ownerguard's doing:
		event(500, `Internal error occurred: etcdserver: request timed out`, nil),
		event(422, `PersistentVolumeClaim "data-0" is invalid`, untouched),
		event(409, `Operation cannot be fulfilled: the object has been modified`, mutated),
		event(403, `persistentvolumeclaims "data-1" is forbidden: exceeded quota: q, requested: persistentvolumeclaims=1`, mutated),
		event(403, `admission webhook "other.example.com" denied the request: no`, nil),
		`{"stage":"RequestReceived","verb":"update","responseStatus":{"code":403,"message":"ownerguard.io"}}`,
		// Namespaces made: a test's (generated name), another's, and
		// one of nobody's run.
		`{"stage":"ResponseComplete","verb":"create","objectRef":{"resource":"namespaces"},"responseStatus":{"code":201},"responseObject":{"kind":"Namespace","metadata":{"name":"job-7x2","generateName":"job-","labels":{"e2e-run":"run-7"}}}}`,
		`{"stage":"ResponseComplete","verb":"create","objectRef":{"resource":"namespaces","name":"gc-1"},"responseStatus":{"code":201},"responseObject":{"kind":"Namespace","metadata":{"name":"gc-1","labels":{"e2e-run":"run-8"}}}}`,
		`{"stage":"ResponseComplete","verb":"create","objectRef":{"resource":"namespaces","name":"plain"},"responseStatus":{"code":201},"responseObject":{"kind":"Namespace","metadata":{"name":"plain"}}}`,
		`{"stage":"ResponseComplete","verb":"create","objectRef":{"resource":"namespaces","name":"gone"},"responseStatus":{"code":409},"responseObject":{"kind":"Status","metadata":{}}}`,
	}
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	refused, namespaces, err := readRefusals([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range refused {
		if r.Run != "" {
			t.Errorf("a refusal in namespace %q stamped with run %q, made by none", r.Namespace, r.Run)
		}
	}
	if len(namespaces.runs) != 2 || !slices.Equal(namespaces.runs["job-7x2"], []string{"run-7"}) || !slices.Equal(namespaces.runs["gc-1"], []string{"run-8"}) {
		t.Fatalf("namespaces' runs from the audit log: %v", namespaces)
	}
	var messages []string
	for _, r := range refused {
		messages = append(messages, r.Message)
	}
	got := strings.Join(messages, "\n")
	if len(refused) != 8 || strings.Count(got, "refused once ownerguard patched it") != 2 || !strings.Contains(got, "failed open") ||
		!strings.Contains(got, labellerWebhook) || !strings.Contains(got, "matchCondition") ||
		strings.Count(got, "failed once ownerguard answered") != 2 {
		t.Fatalf("%d refusals, want ownerguard's, the labeller's, the match condition's, the failed-open call, the invalid patch, the patched reference refused and the two patches that did not apply:\n%s", len(refused), got)
	}
}

// A namespace name made twice: each refusal belongs to the run whose
// namespace of that name existed then, and the name keeps both runs.
func TestReadRefusalsNameMadeAgain(t *testing.T) {
	made := func(run string) string {
		return `{"stage":"ResponseComplete","verb":"create","objectRef":{"resource":"namespaces","name":"job-5"},"responseStatus":{"code":201},"responseObject":{"kind":"Namespace","metadata":{"name":"job-5","labels":{"e2e-run":"` + run + `"}}}}`
	}
	refusal := `{"stage":"ResponseComplete","verb":"create","user":{"username":"e2e-k8s-suite"},"objectRef":{"resource":"pods","namespace":"job-5"},"responseStatus":{"code":403,"message":"admission webhook \"mutate.ownerguard.io\" denied the request"}}`
	path := filepath.Join(t.TempDir(), "audit.log")
	lines := []string{made("run-a"), refusal, made("run-b"), refusal}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	refused, namespaces, err := readRefusals([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	if len(refused) != 2 || refused[0].Run != "run-a" || refused[1].Run != "run-b" {
		t.Fatalf("refusals %+v, want run-a's then run-b's", refused)
	}
	if !slices.Equal(namespaces.runs["job-5"], []string{"run-a", "run-b"}) {
		t.Fatalf("job-5 made by %v, want run-a then run-b", namespaces.runs["job-5"])
	}
}

// A denial of the decision log that an audited refusal stands for is
// judged by that refusal's run, not by every run that made the name.
func TestVerdictDenialMatchedByItsRefusal(t *testing.T) {
	baseline, guarded, gone := held()
	// job-2: the explained test's (run-2), then the passing test's (run-1),
	// which asked for a refusal there.
	guarded.Namespaces["job-2"] = "run-1"
	guarded.NamespaceRuns = map[string][]string{"job-1": {"run-1"}, "job-2": {"run-2", "run-1"}, "job-3": {"run-3"}}
	guarded.Refused = append(guarded.Refused, Refusal{User: SuiteUser, Verb: "create", Namespace: "job-2", Code: 403, Run: "run-1"})
	guarded.Denied = append(guarded.Denied, Denial{User: SuiteUser, Operation: "CREATE", Namespace: "job-2", Kind: "Pod"})
	if got := verdict(t, explainedText, baseline, guarded, gone); got != 0 {
		t.Fatalf("exit %d, want 0", got)
	}
}

// A result.json of an earlier build (no namespaceRuns) is refused unless
// its audit logs are read again.
func TestVerdictRefusesNamespacesKnownByNameOnly(t *testing.T) {
	baseline, guarded, gone := held()
	dir := t.TempDir()
	old, err := json.Marshal(guarded)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "guarded"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Written first; verdictIn writes the others and, for guarded, this
	// same result with namespaceRuns: write it again after, as it was.
	code := verdictIn(t, dir, nil, explainedText, baseline, nil, gone)
	_ = code
	if err := os.WriteFile(filepath.Join(dir, "guarded", "result.json"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := compare([]string{"-reports", dir, "-set", "test", "-explained", filepath.Join(dir, "explained"),
		"-baseline-failures", filepath.Join(dir, "baseline-failures"), "-flaky", filepath.Join(dir, "flaky")}); got != 1 {
		t.Fatalf("exit %d, want 1", got)
	}
}
