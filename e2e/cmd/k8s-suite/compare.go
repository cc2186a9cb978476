package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// compare reads the runs' result.json and says, in words and as a row of
// the docs' table, whether ownerguard held: no Kubernetes component
// refused, no test that passes in the baseline failing guarded unless
// explained, no baseline failure left unlisted. Exit 1 otherwise.
func compare(args []string) int {
	fs := flag.NewFlagSet("compare", flag.ExitOnError)
	reports := fs.String("reports", "", "the directory holding baseline/ and guarded/")
	set := fs.String("set", "", "the test set's name, for the table")
	explainedFile := fs.String("explained", "", "guarded-only failures and why (name || reason)")
	baselineFile := fs.String("baseline-failures", "", "tests left out because they fail without ownerguard (name || reason)")
	flakyFile := fs.String("flaky", "", "tests that pass or fail without ownerguard from one run to the next (name || reason): run guarded for what ownerguard decides of them, their outcomes not judged")
	reread := fs.Bool("reread-audit", false, "read each run's refusals and namespaces again from the API server's audit logs kept beside its result.json (kept reports judged with this build's reading)")
	_ = fs.Parse(args)

	runs := map[string]*Result{}
	for _, run := range []string{"baseline", "guarded", "worker-gone"} {
		data, err := os.ReadFile(filepath.Join(*reports, run, "result.json"))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		var r Result
		if err := json.Unmarshal(data, &r); err != nil {
			fmt.Fprintf(os.Stderr, "%s/result.json: %v\n", run, err)
			return 1
		}
		if *reread {
			audits, _ := filepath.Glob(filepath.Join(*reports, run, "audit-*.log"))
			if len(audits) == 0 {
				fmt.Fprintf(os.Stderr, "%s: no audit log kept beside result.json to read again\n", run)
				return 1
			}
			var audited *madeNamespaces
			if r.Refused, audited, err = readRefusals(audits); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			if len(audited.runs) == 0 && len(r.Namespaces) > 0 {
				fmt.Fprintf(os.Stderr, "%s: the audit logs record no namespace's creation (an audit policy before namespaces were recorded whole): its namespaces' runs are not known\n", run)
				return 1
			}
			r.mergeNamespaces(audited)
		} else if r.NamespaceRuns == nil && len(r.Namespaces) > 0 {
			// Written before the runs of a name were kept: its
			// namespaces are known by name only.
			fmt.Fprintf(os.Stderr, "%s/result.json: namespaces known by name only (an earlier build's report): judge it with -reread-audit\n", run)
			return 1
		}
		runs[run] = &r
	}
	if len(runs) == 0 {
		fmt.Fprintln(os.Stderr, "no run's result.json in", *reports)
		return 1
	}
	explained, err := readReasons(*explainedFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	listed, err := readReasons(*baselineFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	flaky, err := readReasons(*flakyFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	ok := true
	fail := func(format string, args ...any) {
		ok = false
		fmt.Printf("FAIL: "+format+"\n", args...)
	}
	baseline, guarded, gone := runs["baseline"], runs["guarded"], runs["worker-gone"]
	for _, r := range []*Result{baseline, guarded, gone} {
		for _, name := range r.retriedNames() {
			fmt.Printf("%s: failed once, tried again (now %s): %s\n", r.Run, r.Tests[name], name)
		}
		if r != nil && len(r.LeftOut) > 0 {
			fmt.Printf("%s: %d tests of the set left out by e2e/k8s-suite.d/skip (their names are in %s/result.json)\n", r.Run, len(r.LeftOut), r.Run)
		}
	}
	// The baseline runs the listed failures too: each must fail there.
	if baseline != nil {
		for _, name := range sorted(baseline.Tests) {
			_, isListed := listed[name]
			if _, isFlaky := flaky[name]; isFlaky {
				continue // left out of the baseline, or its outcome chance
			}
			switch {
			case baseline.Tests[name] == "failed" && !isListed:
				fail("fails without ownerguard and is not listed in e2e/k8s-suite.d/baseline-failures: %s: %s", name, firstLine(baseline.Failures[name]))
			case baseline.Tests[name] == "passed" && isListed:
				fail("listed in e2e/k8s-suite.d/baseline-failures but passes without ownerguard: %s", name)
			}
		}
		for _, name := range sorted(listed) {
			if _, ran := baseline.Tests[name]; !ran && slices.Contains(baseline.LeftOut, name) {
				fmt.Printf("note: listed in baseline-failures, left out by the skip rules: %s\n", name)
			}
		}
	}
	fmt.Printf("%d tests left out of the guarded runs: they fail without ownerguard (e2e/k8s-suite.d/baseline-failures)\n", len(listed))
	// Refusals in the namespaces of one test's run (its e2e-run id).
	refusedIn := func(r *Result, name string) int {
		ids := r.runsOf(name)
		if ids == nil {
			return -1
		}
		n := 0
		// Refused writes by (namespace, user): each matches one denial of
		// the decision log, which it stands for, judged by its own run.
		audited := map[[2]string]int{}
		for _, refusal := range r.Refused {
			audited[[2]string{refusal.Namespace, refusal.User}]++
			// By the run whose namespace it was then; without that, by
			// every run that made a namespace of that name.
			if refusal.Run != "" && ids[refusal.Run] || refusal.Run == "" && r.madeByAny(refusal.Namespace, ids) {
				n++
			}
		}
		// A denial no audited refusal matches counts against every run
		// that made its namespace's name.
		for _, d := range r.Denied {
			key := [2]string{d.Namespace, d.User}
			if audited[key] > 0 {
				audited[key]--
				continue
			}
			if r.madeByAny(d.Namespace, ids) {
				n++
			}
		}
		return n
	}
	guardedOnly, explainedFailures := 0, 0
	if guarded == nil {
		fmt.Println("no guarded run: nothing to compare")
	}
	if guarded != nil {
		if baseline != nil {
			for _, name := range sorted(baseline.Tests) {
				if baseline.Tests[name] != "passed" {
					continue
				}
				if outcome, ran := guarded.Tests[name]; !ran || outcome == "skipped" {
					fail("passes without ownerguard, did not run with it (%q): %s", outcome, name)
				}
			}
		}
		for _, name := range sorted(explained) {
			if guarded.Tests[name] == "passed" {
				fmt.Printf("note: explained in e2e/k8s-suite.d/explained, but passed with ownerguard (stale?): %s\n", name)
			}
		}
		for _, name := range sorted(guarded.Tests) {
			if _, isFlaky := flaky[name]; isFlaky {
				// Its refusals count with every other (Kubernetes'
				// components above all); its outcome is chance.
				fmt.Printf("flaky, outcome not judged: %s: %s\n", guarded.Tests[name], name)
				continue
			}
			if guarded.Tests[name] != "failed" {
				continue
			}
			if baseline != nil && baseline.Tests[name] == "failed" {
				continue // said above
			}
			guardedOnly++
			if why, found := explained[name]; found {
				reason, failure, counted := strings.Cut(why, "||")
				reason, failure = strings.TrimSpace(reason), strings.TrimSpace(failure)
				if counted && !strings.HasPrefix(failure, "failure:") {
					fail("explained with a second part that is not \"failure: REGULAR EXPRESSION\": %s", name)
					continue
				}
				failure = strings.TrimSpace(strings.TrimPrefix(failure, "failure:"))
				// An explanation holds only when nothing was refused in
				// the test's namespaces and either the test passes once
				// its worker is gone, or (a test that counts every pod of
				// its namespace, the worker among them) its failure says
				// exactly that.
				var said *regexp.Regexp
				if counted {
					var err error
					if said, err = regexp.Compile(failure); err != nil || failure == "" || said.MatchString("no report") {
						fail("explained with a failure that is empty, not a regular expression or matches a run that crashed (%v): %s", err, name)
						continue
					}
				}
				ended := endedIn(gone, name)
				switch refused := refusedIn(guarded, name); {
				case counted && strings.HasPrefix(guarded.Failures[name], "no report"):
					fail("explained by its failure, but its run left no report (it crashed): %s: %s", name, firstLine(guarded.Failures[name]))
				case refused < 0:
					fail("explained, but its run's namespaces are unknown (no e2e-run id in its log): %s", name)
				case refused > 0:
					fail("explained, but ownerguard refused %d writes in its namespaces: %s", refused, name)
				case counted && !said.MatchString(guarded.Failures[name]):
					fail("explained by its failure %q, but it failed otherwise: %s: %s", failure, name, firstLine(guarded.Failures[name]))
				case !counted && (gone == nil || gone.Tests[name] != "passed"):
					fail("explained, but does not pass once its worker is gone (the worker-gone run): %s", name)
				case !counted && ended == "":
					fail("explained, but no deletion of the test's ended its worker in the worker-gone run (its pass proves nothing of the worker's end): %s", name)
				case !counted && strings.Contains(ended, " not ended: "):
					fail("explained, but its worker's deletion failed in the worker-gone run (%s): %s", ended, name)
				case !counted && slices.Contains(gone.Retried, name):
					// A pass on a second try proves less than the
					// worker's end: it may be chance.
					fail("explained, but passes once its worker is gone only when tried again: %s", name)
				case !counted && refusedIn(gone, name) != 0:
					fail("explained, but ownerguard refused writes in its namespaces in the worker-gone run: %s", name)
				default:
					explainedFailures++
					if counted {
						fmt.Printf("explained: %s: %s\n", name, reason)
					} else {
						fmt.Printf("explained: %s: %s (worker-gone: %s)\n", name, reason, ended)
					}
				}
				continue
			}
			fail("passes without ownerguard, fails with it: %s: %s", name, firstLine(guarded.Failures[name]))
		}
		// A test tried again after a failed try: a refusal in any try's
		// namespaces is not hidden by a pass after it.
		for _, name := range guarded.Retried {
			if refused := refusedIn(guarded, name); refused != 0 {
				fail("tried again after a failure, and ownerguard refused writes in its namespaces (%d): %s", refused, name)
			}
		}
		// ownerguard must really have judged: workers started, writes
		// labelled, and Kubernetes' components' writes reviewed.
		components := 0
		for who, byKind := range guarded.Decisions {
			if componentIdentity(who) {
				components += total(byKind)
			}
		}
		if guarded.Workers == 0 || total(guarded.Labelled) == 0 || components == 0 {
			fail("the guarded run did not go through ownerguard: %d workers, %d writes labelled, %d reviews of Kubernetes components", guarded.Workers, total(guarded.Labelled), components)
		}
	}
	for _, r := range []*Result{guarded, gone} {
		if r == nil {
			continue
		}
		for _, refusal := range r.Refused {
			if kubernetesComponent(refusal.User) {
				fail("%s: ownerguard refused Kubernetes: %s %s %s/%s by %s (%d): %s", r.Run, refusal.Verb, refusal.Resource, refusal.Namespace, refusal.Name, refusal.User, refusal.Code, refusal.Message)
			}
		}
		for _, d := range r.Denied {
			if kubernetesComponent(d.User) {
				fail("%s: ownerguard's decision log: %s %s %s/%s by %s: %s", r.Run, d.Operation, d.Kind, d.Namespace, d.Name, d.User, d.Detail)
			}
		}
		// A refusal of a test's write counts against that test's
		// explanation, by its namespace's run: one in a namespace that no
		// run made is nobody's, so no explanation could see it.
		// What happened in a namespace whose runs the audit log does not
		// record is nobody's for certain.
		for _, refusal := range r.Refused {
			if !kubernetesComponent(refusal.User) && slices.Contains(r.UnauditedNamespaces, refusal.Namespace) {
				fail("%s: ownerguard refused a write in namespace %s, whose creation the audit log does not record (its run is not known): %s %s %s by %s (%d)", r.Run, refusal.Namespace, refusal.Verb, refusal.Resource, refusal.Name, refusal.User, refusal.Code)
			}
		}
		for _, d := range r.Denied {
			if !kubernetesComponent(d.User) && slices.Contains(r.UnauditedNamespaces, d.Namespace) {
				fail("%s: ownerguard's decision log, in namespace %s, whose creation the audit log does not record (its run is not known): %s %s %s by %s", r.Run, d.Namespace, d.Operation, d.Kind, d.Name, d.User)
			}
		}
		where := func(namespace string) string {
			if namespace == "" {
				return "of a cluster-scoped object"
			}
			return "in a namespace no test's run made"
		}
		for _, refusal := range r.Refused {
			if !kubernetesComponent(refusal.User) && len(r.runsMaking(refusal.Namespace)) == 0 {
				fail("%s: ownerguard refused a write %s (whose, unknown): %s %s %s/%s by %s (%d): %s", r.Run, where(refusal.Namespace), refusal.Verb, refusal.Resource, refusal.Namespace, refusal.Name, refusal.User, refusal.Code, refusal.Message)
			}
		}
		for _, d := range r.Denied {
			if !kubernetesComponent(d.User) && len(r.runsMaking(d.Namespace)) == 0 {
				fail("%s: ownerguard's decision log, %s (whose, unknown): %s %s %s/%s by %s: %s", r.Run, where(d.Namespace), d.Operation, d.Kind, d.Namespace, d.Name, d.User, d.Detail)
			}
		}
		// A namespace still there: a failure, unless the test that made
		// it failed for an explained cause, so that its own cleanup (a
		// finalizer it puts on its objects and takes off at its end)
		// never ran.
		var left []string
		for _, entry := range r.LeftNamespaces {
			namespace, _, _ := strings.Cut(entry, " (")
			test := testOf(r, namespace)
			_, isExplained := explained[test]
			if test != "" && isExplained && r.Tests[test] == "failed" {
				fmt.Printf("%s: namespace %s left by a test that failed, explained (its own cleanup never ran): %s\n", r.Run, entry, test)
				continue
			}
			left = append(left, entry)
		}
		if len(left) > 0 {
			fail("%s: the tests' namespaces not deleted 3 minutes after the tests: %s", r.Run, strings.Join(left, ", "))
		}
	}

	// The table: one row per run and the decisions by identity.
	fmt.Println()
	fmt.Printf("| run | Kubernetes | set | tests run | passed | failed | skipped by e2e.test | refusals of Kubernetes components | refusals of the tests | guarded-only failures (explained) | minutes |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, run := range []string{"baseline", "guarded", "worker-gone"} {
		r := runs[run]
		if r == nil {
			continue
		}
		counts := map[string]int{}
		for _, outcome := range r.Tests {
			counts[outcome]++
		}
		components, tests := 0, 0
		for _, refusal := range r.Refused {
			if kubernetesComponent(refusal.User) {
				components++
			} else {
				tests++
			}
		}
		only := "-"
		if run == "guarded" {
			only = fmt.Sprintf("%d (%d)", guardedOnly, explainedFailures)
		}
		fmt.Printf("| %s | %s | %s | %d | %d | %d | %d | %d | %d | %s | %.0f |\n", run, r.Kubernetes, *set,
			counts["passed"]+counts["failed"], counts["passed"], counts["failed"], counts["skipped"], components, tests, only, float64(r.Seconds)/60)
	}
	if guarded != nil {
		fmt.Println()
		fmt.Printf("Reviews ownerguard decided in the guarded run (%d workers started, %d writes labelled):\n\n", guarded.Workers, total(guarded.Labelled))
		fmt.Println("| requesting identity | reviews | kinds (operation kind result: count) |")
		fmt.Println("|---|---|---|")
		for _, who := range sorted(guarded.Decisions) {
			byKind := guarded.Decisions[who]
			var parts []string
			for _, k := range sorted(byKind) {
				parts = append(parts, fmt.Sprintf("%s: %d", k, byKind[k]))
			}
			fmt.Printf("| %s | %d | %s |\n", who, total(byKind), strings.Join(parts, ", "))
		}
	}
	fmt.Println()
	if !ok {
		fmt.Println("k8s-suite: ownerguard did not hold (the FAIL lines above)")
		return 1
	}
	if guarded == nil {
		fmt.Println("k8s-suite: the baseline's failures are all listed; no guarded run to judge")
		return 0
	}
	fmt.Println("k8s-suite: ownerguard held: no Kubernetes component refused, every guarded-only failure explained")
	return 0
}

// runsMaking is every run that made a namespace of that name.
func (r *Result) runsMaking(namespace string) []string {
	if runs := r.NamespaceRuns[namespace]; len(runs) > 0 {
		return runs
	}
	if id := r.Namespaces[namespace]; id != "" {
		return []string{id}
	}
	return nil
}

// madeByAny: one of the runs ids made a namespace of that name.
func (r *Result) madeByAny(namespace string, ids map[string]bool) bool {
	for _, run := range r.runsMaking(namespace) {
		if ids[run] {
			return true
		}
	}
	return false
}

// testOf is the test whose run made namespace last ("" when unknown).
func testOf(r *Result, namespace string) string {
	runs := r.runsMaking(namespace)
	if len(runs) == 0 {
		return ""
	}
	id := runs[len(runs)-1]
	for test, ids := range r.RunIDs {
		if slices.Contains(ids, id) {
			return test
		}
	}
	return ""
}

func firstLine(text string) string {
	text = strings.TrimSpace(text)
	if i := strings.Index(text, "\n"); i >= 0 {
		text = text[:i]
	}
	return text
}

// readReasons reads "name || reason" lines (# comments, blank lines); the
// reason keeps any further "|| ..." part.
func readReasons(path string) (map[string]string, error) {
	out := map[string]string{}
	if path == "" {
		return out, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, reason, found := strings.Cut(line, "||")
		if !found || strings.TrimSpace(reason) == "" {
			return nil, fmt.Errorf("%s: %q: want \"test name || why\"", path, line)
		}
		out[strings.TrimSpace(name)] = strings.TrimSpace(reason)
	}
	return out, scanner.Err()
}

func sorted[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func (r *Result) retriedNames() []string {
	if r == nil {
		return nil
	}
	return r.Retried
}

// endedIn is what ended the workers of a test's namespaces in run r
// ("deleted KIND NAME: worker POD ended", joined), or "" when no deletion
// of the test's ended one.
func endedIn(r *Result, test string) string {
	if r == nil {
		return ""
	}
	ids := r.runsOf(test)
	var out []string
	for namespace, endings := range r.WorkersEnded {
		// Only in a namespace that one run alone made, as the audit log
		// records: the labeller keeps its endings by name, and another
		// test's namespace of the same name would lend this one its
		// worker's end.
		if runs := r.runsMaking(namespace); len(runs) == 1 && ids[runs[0]] && !slices.Contains(r.UnauditedNamespaces, namespace) {
			out = append(out, endings...)
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// runsOf is the e2e-run ids of a test's tries in r, which name its
// namespaces (Namespaces), or nil when one of them is unknown.
func (r *Result) runsOf(test string) map[string]bool {
	ids := map[string]bool{}
	for _, id := range r.RunIDs[test] { // every try
		if id == "" {
			return nil
		}
		ids[id] = true
	}
	if len(ids) == 0 {
		return nil
	}
	return ids
}
