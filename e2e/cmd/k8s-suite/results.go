package main

import (
	"bufio"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
)

// Result of one run, written to result.json.
type Result struct {
	Run        string `json:"run"`
	Kubernetes string `json:"kubernetes"`
	Seconds    int    `json:"seconds"`
	// Every test that ran: passed, failed or skipped (by e2e.test itself:
	// a test that needs what this cluster has not).
	Tests map[string]string `json:"tests"`
	// Each test's run (its e2e.test process), and the run each namespace
	// was made by (its e2e-run label): which refusals were whose.
	RunIDs map[string][]string `json:"runIDs"`
	// What each failed test said, as its report has it.
	Failures   map[string]string `json:"failures,omitempty"`
	Namespaces map[string]string `json:"namespaces"`
	// Every run that made a namespace of each name, in the order they
	// were made (the framework's names are a base and a number under
	// 10,000: a later test can get an earlier one's name once it is gone).
	NamespaceRuns map[string][]string `json:"namespaceRuns,omitempty"`
	// Namespaces the watch saw made whose creation the audit log does not
	// record: their runs are known by name only (the watch keeps a name's
	// last run), so nothing in them is anyone's evidence.
	UnauditedNamespaces []string `json:"unauditedNamespaces,omitempty"`
	// Guarded only: the reviews ownerguard decided, by requesting
	// identity (a component's users folded into one name), then by
	// "kind result"; its refusals whole.
	Decisions map[string]map[string]int `json:"decisions,omitempty"`
	Denied    []Denial                  `json:"denied,omitempty"`
	Workers   int                       `json:"workers,omitempty"`
	// Namespaces of the tests still there (or stuck) once the tests were
	// over and their deletion waited for.
	LeftNamespaces []string `json:"leftNamespaces,omitempty"`
	// Tests that failed and were tried again (their last try counts).
	Retried []string `json:"retried,omitempty"`
	// Tests the focus selected and the skip rules left out.
	LeftOut  []string       `json:"leftOut,omitempty"`
	Labelled map[string]int `json:"labelled,omitempty"`
	// The worker-gone run's: the workers a test's deletion ended, by
	// namespace (what was deleted, and whether the worker's deletion was
	// accepted).
	WorkersEnded map[string][]string `json:"workersEnded,omitempty"`
	// From the API server's audit log: every write refused by an
	// ownerguard webhook or failed calling one, whoever made it.
	Refused []Refusal `json:"refused"`
}

// Denial is one decision line with result "denied".
type Denial struct {
	User, Operation, Namespace, Kind, Name, Detail string
}

// Refusal is one audited write that an ownerguard webhook refused, or that
// failed because calling it failed.
type Refusal struct {
	User, Verb, Namespace, Resource, Name, Message string
	Code                                           int
	// The run whose namespace of that name existed then, from the audit
	// log's order ("" when none had been made).
	Run string `json:",omitempty"`
}

// readJUnitFailures reads e2e.test's JUnit report: each test case by
// name, with its outcome, and each failure's text (its log after it).
func readJUnitFailures(path string) (map[string]string, map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	type text struct {
		Text string `xml:",chardata"`
	}
	var suites struct {
		Suites []struct {
			Cases []struct {
				Name    string    `xml:"name,attr"`
				Status  string    `xml:"status,attr"`
				Failure *text     `xml:"failure"`
				Error   *text     `xml:"error"`
				Log     *text     `xml:"system-err"`
				Skipped *struct{} `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(data, &suites); err != nil {
		return nil, nil, err
	}
	tests, failures := map[string]string{}, map[string]string{}
	for _, suite := range suites.Suites {
		for _, c := range suite.Cases {
			// Ginkgo names a case by its node's type and the spec's text.
			c.Name = strings.TrimPrefix(c.Name, "[It] ")
			// The suite's own set-up and tear-down are not tests.
			if strings.HasPrefix(c.Name, "[SynchronizedBeforeSuite]") || strings.HasPrefix(c.Name, "[SynchronizedAfterSuite]") ||
				strings.HasPrefix(c.Name, "[ReportAfterSuite]") || strings.HasPrefix(c.Name, "[ReportBeforeSuite]") {
				if c.Failure != nil || c.Error != nil {
					tests[c.Name] = "failed"
				}
				continue
			}
			switch {
			case c.Failure != nil || c.Error != nil:
				tests[c.Name] = "failed"
				if c.Failure != nil {
					failures[c.Name] = c.Failure.Text
				} else {
					failures[c.Name] = c.Error.Text
				}
				// What the test logged (its steps, what it saw) after it.
				if c.Log != nil {
					failures[c.Name] += "\n--- its log ---\n" + c.Log.Text
				}
			case c.Skipped != nil:
				tests[c.Name] = "skipped"
			default:
				tests[c.Name] = "passed"
			}
		}
	}
	return tests, failures, nil
}

// identity folds a user into who it is: the controller manager's
// controllers (under their own service accounts or its own user), the
// scheduler, the kubelets, the API server, the tests, anyone else by name.
func identity(user string) string {
	switch {
	case user == "system:kube-controller-manager":
		return "kube-controller-manager"
	case strings.HasPrefix(user, "system:serviceaccount:kube-system:"):
		return "kube-controller-manager (" + strings.TrimPrefix(user, "system:serviceaccount:kube-system:") + ")"
	case user == "system:kube-scheduler":
		return "kube-scheduler"
	case strings.HasPrefix(user, "system:node:"):
		return "kubelet"
	case user == "system:apiserver":
		return "kube-apiserver"
	case user == SuiteUser:
		return "the tests (" + SuiteUser + ")"
	}
	return user
}

// kubernetesComponent: the user is one of Kubernetes' own components,
// which must never be refused: every system: user (the controller
// manager's, the scheduler's, the nodes', the API server's, and any a
// cluster adds: kube-proxy, a cloud controller manager) but the service
// accounts of other namespaces than kube-system (the tests' own pods).
func kubernetesComponent(user string) bool {
	if strings.HasPrefix(user, "system:serviceaccount:") {
		return strings.HasPrefix(user, "system:serviceaccount:kube-system:")
	}
	return strings.HasPrefix(user, "system:")
}

// componentIdentity: an identity, as identity folds users, that is one of
// Kubernetes' own components (those this cluster runs).
func componentIdentity(who string) bool {
	return strings.HasPrefix(who, "kube-controller-manager") || who == "kube-scheduler" || who == "kubelet" || who == "kube-apiserver"
}

// readDecisions counts ownerguard's decision lines (JSON log) by
// identity and "operation kind result", and keeps the denials and the
// warnings (a warning is what enforce would have refused). A decision
// line that does not parse, or names no user (a build from before the
// log named who asked), is an error: the count would be blind.
func readDecisions(path string) (map[string]map[string]int, []Denial, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	counts := map[string]map[string]int{}
	var denied []Denial
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 64<<20)
	for scanner.Scan() {
		line := scanner.Bytes()
		if !strings.Contains(string(line), `"decision"`) {
			continue
		}
		// ownerguard's JSON lines put the event's fields beside its
		// message.
		var d struct {
			Message, User, Operation, Namespace, Kind, Name, Result, Detail, Mode string
		}
		if err := json.Unmarshal(line, &d); err != nil {
			return nil, nil, fmt.Errorf("%s: a decision line that does not parse: %.300s", path, line)
		}
		if d.Message != "decision" {
			continue
		}
		if d.User == "" || d.Result == "" {
			return nil, nil, fmt.Errorf("%s: a decision line without its user or result (an ownerguard older than this suite?): %.300s", path, line)
		}
		who := identity(d.User)
		if counts[who] == nil {
			counts[who] = map[string]int{}
		}
		counts[who][d.Operation+" "+d.Kind+" "+d.Result]++
		if d.Result == "denied" || d.Result == "warned" {
			denied = append(denied, Denial{User: d.User, Operation: d.Operation, Namespace: d.Namespace, Kind: d.Kind, Name: d.Name, Detail: d.Result + ": " + d.Detail})
		}
	}
	return counts, denied, scanner.Err()
}

// readRefusals reads the API server's audit logs (JSON lines; every file
// of the run, rotated ones included): every write refused by an
// ownerguard webhook, failed because calling one failed, let through
// because calling one failed (failurePolicy Ignore: the API server
// records it as a failed-open annotation), refused before any call by
// a webhook's match condition, or failed in the API server once
// ownerguard had answered (a patch that does not apply). And the run
// (e2e-run label) of every namespace created: the record of which
// test's namespaces they were that no watch can miss.
func readRefusals(paths []string) ([]Refusal, *madeNamespaces, error) {
	var out []Refusal
	made := &madeNamespaces{runs: map[string][]string{}, current: map[string]string{}}
	for _, path := range paths {
		refused, err := readRefusalsOf(path, made)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, refused...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].User < out[j].User })
	return out, made, nil
}

// mergeNamespaces sets NamespaceRuns from the namespaces' creations as
// the audit log has them (made), Namespaces to each name's latest run,
// and UnauditedNamespaces to the names the watch saw (Namespaces before)
// that the audit log does not record: the watch keeps a name's last run
// only, so such a name's runs are not known.
func (r *Result) mergeNamespaces(made *madeNamespaces) {
	watched := r.Namespaces
	r.Namespaces = map[string]string{}
	r.NamespaceRuns = made.runs
	r.UnauditedNamespaces = nil
	for namespace, run := range made.current {
		r.Namespaces[namespace] = run
	}
	for namespace, run := range watched {
		if _, audited := made.runs[namespace]; !audited {
			r.Namespaces[namespace] = run
			r.UnauditedNamespaces = append(r.UnauditedNamespaces, namespace)
		}
	}
	slices.Sort(r.UnauditedNamespaces)
}

// madeNamespaces: the runs that made each namespace name, and the one
// whose namespace of that name is the latest made, as the audit log is
// read in order.
type madeNamespaces struct {
	runs    map[string][]string
	current map[string]string
}

func (m *madeNamespaces) made(name, run string) {
	m.current[name] = run
	if !slices.Contains(m.runs[name], run) {
		m.runs[name] = append(m.runs[name], run)
	}
}

func readRefusalsOf(path string, made *madeNamespaces) ([]Refusal, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Refusal
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 64<<20)
	for scanner.Scan() {
		var event struct {
			Stage string `json:"stage"`
			Verb  string `json:"verb"`
			User  struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef struct {
				Resource, Namespace, Name, Subresource string
			} `json:"objectRef"`
			ResponseStatus struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"responseStatus"`
			Annotations map[string]string `json:"annotations"`
			// A namespace's creation only (the audit policy's
			// RequestResponse rule): its name, generated or not, and
			// labels as made.
			ResponseObject struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name   string            `json:"name"`
					Labels map[string]string `json:"labels"`
				} `json:"metadata"`
			} `json:"responseObject"`
		}
		if err := json.Unmarshal(scanner.Bytes(), &event); err != nil {
			return nil, fmt.Errorf("%s: an audit event that does not parse: %w", path, err)
		}
		if event.Stage != "ResponseComplete" {
			continue
		}
		if object := event.ResponseObject; event.Verb == "create" && event.ObjectRef.Resource == "namespaces" &&
			object.Kind == "Namespace" && object.Metadata.Labels["e2e-run"] != "" {
			made.made(object.Metadata.Name, object.Metadata.Labels["e2e-run"])
		}
		message, code := event.ResponseStatus.Message, event.ResponseStatus.Code
		// ownerguard's annotations: a call that failed open, and a patch
		// it made (then a 422: what its patch made of the write was
		// invalid).
		failedOpen, mutated, touched := "", "", ""
		for key, value := range event.Annotations {
			if strings.Contains(key, "ownerguard.io") && touched == "" {
				touched = key + "=" + value
			}
			if !strings.Contains(value, "ownerguard.io") {
				continue
			}
			if touched == "" {
				touched = key + "=" + value
			}
			switch {
			case strings.HasPrefix(key, "failed-open."):
				failedOpen = key + "=" + value
			case strings.HasPrefix(key, "mutation.webhook.admission.k8s.io/") &&
				strings.Contains(strings.ReplaceAll(value, " ", ""), `"mutated":true`):
				mutated = key + "=" + value
			}
		}
		refused := code >= 400 && (strings.Contains(message, "ownerguard.io") ||
			// The suite's own labeller refusing is the harness failing,
			// not a test: counted where ownerguard's are.
			strings.Contains(message, labellerWebhook) ||
			// A match condition that fails to evaluate refuses under
			// failurePolicy Fail before any call, naming no webhook.
			strings.Contains(message, "matchCondition") || strings.Contains(message, "cost budget"))
		// Refused after ownerguard's patch, for what the patch made of
		// the write: invalid (422), or a reference its writer may not set
		// (403 from the owner-reference permission check). A quota's 403
		// and the like come whatever the patch did.
		invalid := mutated != "" && (code == 422 || code == 403 && strings.Contains(message, "ownerReference"))
		// A write that failed in the API server once ownerguard had
		// answered: its patch did not apply, or the patched object did
		// not decode. The API server answers a bare 500 that names no
		// webhook, and its mutation annotation says not mutated (the
		// patch never landed); only the annotations say ownerguard was
		// called.
		broken := code >= 500 && touched != ""
		if !refused && !invalid && !broken && failedOpen == "" {
			continue
		}
		if failedOpen != "" {
			message = "failed open: " + failedOpen + "; " + message
		}
		if invalid && !refused {
			message = "refused once ownerguard patched it: " + mutated + "; " + message
		}
		if broken && !refused && !invalid {
			message = "failed once ownerguard answered: " + touched + "; " + message
		}
		resource := event.ObjectRef.Resource
		if event.ObjectRef.Subresource != "" {
			resource += "/" + event.ObjectRef.Subresource
		}
		out = append(out, Refusal{User: event.User.Username, Verb: event.Verb, Namespace: event.ObjectRef.Namespace,
			Resource: resource, Name: event.ObjectRef.Name, Message: message, Code: code,
			Run: made.current[event.ObjectRef.Namespace]})
	}
	return out, scanner.Err()
}
