package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// listTests asks e2e.test for every test it holds and keeps those whose
// full name matches focus and not skip (Go regular expressions, as
// Ginkgo's -focus and -skip).
func listTests(ctx context.Context, e2eTest, focus, within, skip string) (tests, leftOut []string, err error) {
	out, err := exec.CommandContext(ctx, e2eTest, "--list-tests").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("e2e.test --list-tests: %w", err)
	}
	focusRE, err := regexp.Compile(focus)
	if err != nil {
		return nil, nil, fmt.Errorf("the focus: %w", err)
	}
	withinRE, err := regexp.Compile(within)
	if err != nil {
		return nil, nil, fmt.Errorf("the set: %w", err)
	}
	var skipRE *regexp.Regexp
	if skip != "" {
		if skipRE, err = regexp.Compile(skip); err != nil {
			return nil, nil, fmt.Errorf("the skip: %w", err)
		}
	}
	line := regexp.MustCompile(`^\s*\S+\.go:\d+: (.+)$`)
	seen := map[string]bool{}
	scanner := bufio.NewScanner(bytes.NewReader(out))
	for scanner.Scan() {
		m := line.FindStringSubmatch(scanner.Text())
		if m == nil || seen[m[1]] || !focusRE.MatchString(m[1]) || !withinRE.MatchString(m[1]) {
			continue
		}
		seen[m[1]] = true
		if skipRE != nil && skipRE.MatchString(m[1]) {
			leftOut = append(leftOut, m[1])
			continue
		}
		tests = append(tests, m[1])
	}
	return tests, leftOut, nil
}

// runTests runs every test of the set, each in an e2e.test process of its
// own bounded by o.testTimeout (Kubernetes' framework waits up to 15
// minutes for what a fake runtime never does: a test past the bound is
// failed, not waited for), o.parallel at once, then the [Serial] ones
// alone. Each writes its JUnit report under o.out/tests/.
func runTests(ctx context.Context, o options, kubeconfig string) (tests map[string]string, runIDs map[string][]string, failures map[string]string, leftOut, flaky []string, err error) {
	names, leftOut, err := listTests(ctx, o.e2eTest, o.focus, o.within, o.skip)
	if err != nil {
		return nil, nil, nil, nil, nil, err
	}
	if len(names) == 0 {
		if o.run == "worker-gone" { // no explained test in this set
			return map[string]string{}, map[string][]string{}, map[string]string{}, leftOut, nil, nil
		}
		return nil, nil, nil, nil, nil, fmt.Errorf("no test matches the set")
	}
	var parallel, serial []string
	for _, t := range names {
		if strings.Contains(t, "[Serial]") {
			serial = append(serial, t)
		} else {
			parallel = append(parallel, t)
		}
	}
	log("%d tests (%d more left out by the skip rules): %d %d at a time, then %d [Serial] alone", len(names), len(leftOut), len(parallel), o.parallel, len(serial))
	tests, runIDs, failures = map[string]string{}, map[string][]string{}, map[string]string{}
	var mu sync.Mutex
	index := 0
	runOne := func(name string) {
		mu.Lock()
		index++
		n := index
		mu.Unlock()
		outcome, runID, failure := runTest(ctx, o, kubeconfig, n, name)
		// A test that fails is run again (up to o.retries times) unless
		// it is one expected to fail: Kubernetes' own tests have timing
		// flakes on a loaded 2-core machine. A refusal is judged from the
		// logs of every try, so a retry hides none.
		for try := 0; outcome == "failed" && try < o.retries && (o.expectFail == nil || !o.expectFail.MatchString(name)) && ctx.Err() == nil; try++ {
			mu.Lock()
			index++
			n = index
			flaky = append(flaky, name)
			runIDs[name] = append(runIDs[name], runID)
			mu.Unlock()
			log("retrying (%d): %s: %s", try+1, name, firstLine(failure))
			outcome, runID, failure = runTest(ctx, o, kubeconfig, n, name)
		}
		mu.Lock()
		tests[name], runIDs[name] = outcome, append(runIDs[name], runID)
		if failure != "" {
			failures[name] = failure
		}
		done := len(tests)
		mu.Unlock()
		log("%d/%d %s: %s", done, len(names), outcome, name)
	}
	queue := make(chan string)
	var wg sync.WaitGroup
	for i := 0; i < o.parallel; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range queue {
				runOne(name)
			}
		}()
	}
	for _, name := range parallel {
		queue <- name
	}
	close(queue)
	wg.Wait()
	for _, name := range serial {
		runOne(name)
	}
	return tests, runIDs, failures, leftOut, flaky, ctx.Err()
}

// The framework labels every namespace of a test with its process's run
// (e2e-run), which it logs first.
var runIDLine = regexp.MustCompile(`Starting e2e run "([0-9a-f-]+)"`)

// runTest runs one test, its output in o.out/tests/N.log, and reads its
// outcome from its JUnit report (none: it did not finish, failed) and its
// run's id from its log.
func runTest(ctx context.Context, o options, kubeconfig string, n int, name string) (outcome, runID, failure string) {
	outcome, log, failure := runTestLogged(ctx, o, kubeconfig, n, name)
	data, _ := os.ReadFile(log)
	if m := runIDLine.FindSubmatch(data); m != nil {
		runID = string(m[1])
	}
	if outcome == "failed" {
		if failure == "" {
			failure = "no report: see tests/" + fmt.Sprint(n) + ".log"
		}
		if len(failure) > 64<<10 {
			failure = failure[:64<<10] + "..."
		}
	}
	return outcome, runID, failure
}

// runTestLogged runs the test and reads its report once: its outcome, its
// log's path and, when it failed, what its report says.
func runTestLogged(ctx context.Context, o options, kubeconfig string, n int, name string) (string, string, string) {
	logPath := filepath.Join(o.out, "tests", fmt.Sprint(n)+".log")
	dir := filepath.Join(o.out, "tests", fmt.Sprint(n))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "failed", logPath, ""
	}
	ctx, cancel := context.WithTimeout(ctx, o.testTimeout+2*time.Minute)
	defer cancel()
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--provider=skeleton",
		"--report-dir=" + dir,
		"--ginkgo.no-color",
		"--ginkgo.timeout=" + o.testTimeout.String(),
		// Ginkgo matches the focus against the spec's text between
		// others (its labels after a space): the name whole.
		"--ginkgo.focus=(^|\\s)" + regexp.QuoteMeta(name) + `(\s|$)`,
		// Nothing to wait for in kube-system: no add-on runs here.
		"--minStartupPods=0",
		"--system-pods-startup-timeout=30s",
		"--node-schedulable-timeout=2m",
		"--dump-logs-on-failure=false",
	}
	cmd := exec.CommandContext(ctx, o.e2eTest, args...)
	logFile, err := os.Create(logPath)
	if err != nil {
		return "failed", logPath, ""
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "=== %s\n", name)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = dir
	cmd.WaitDelay = 30 * time.Second
	_ = cmd.Run()
	outcomes, failures, err := readJUnitFailures(filepath.Join(dir, "junit_01.xml"))
	if err != nil {
		fmt.Fprintf(logFile, "\n=== no report: %v\n", err)
		return "failed", logPath, ""
	}
	outcome, found := outcomes[name]
	if !found {
		return "failed", logPath, ""
	}
	for other, o := range outcomes {
		if other != name && o == "failed" && strings.HasPrefix(other, "[") { // the suite's set-up failed
			return "failed", logPath, failures[name]
		}
	}
	if outcome == "skipped" {
		// A test e2e.test skipped itself says why in its log; one the
		// focus missed ran nothing: that is the runner's fault, not a skip.
		if data, _ := os.ReadFile(logFile.Name()); strings.Contains(string(data), "Will run 0 of") {
			fmt.Fprintf(logFile, "\n=== the focus selected nothing\n")
			return "failed", logPath, ""
		}
	}
	return outcome, logPath, failures[name]
}
