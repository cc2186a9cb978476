// chart-cel evaluates the matchConditions of the chart's rendered webhooks
// with the Kubernetes API server's own code (k8s.io/apiserver's
// matchconditions matcher and CEL environment, at the version the e2e
// control plane runs), against a table of admission requests, and fails
// when a condition does not compile, errors on a request (under
// failurePolicy Fail the API server then refuses that request) or decides
// otherwise than the table says.
//
//	helm template ... > rendered.yaml
//	go run . rendered.yaml ../../tests/chart/match-conditions.yaml
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"
)

// A webhook's role, from its name: validate-all.<prefix> is the
// cluster-wide switch, observe.<prefix> the observe-only view of unlabelled
// creates, every other one serves labelled objects.
func role(webhook string) string {
	switch {
	case strings.HasPrefix(webhook, "validate-all."):
		return "podReferences"
	case strings.HasPrefix(webhook, "observe."):
		return "observe"
	}
	return "labelled"
}

// The requester of a case: a service account of agents, unless it says.
type requester struct {
	Name  string              `json:"name"`
	Extra map[string][]string `json:"extra"`
}

type webhook struct {
	name       string
	conditions []admissionregistrationv1.MatchCondition
	policy     *admissionregistrationv1.FailurePolicyType
}

type testCase struct {
	Name      string                 `json:"name"`
	Webhooks  string                 `json:"webhooks"`
	Operation string                 `json:"operation"`
	Group     string                 `json:"group"`
	Version   string                 `json:"version"`
	Kind      string                 `json:"kind"`
	Resource  string                 `json:"resource"`
	Object    map[string]interface{} `json:"object"`
	OldObject map[string]interface{} `json:"oldObject"`
	User      *requester             `json:"user"`
	Expect    bool                   `json:"expect"`
}

func readWebhooks(path string) ([]webhook, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	decoder := utilyaml.NewYAMLOrJSONDecoder(file, 4096)
	var webhooks []webhook
	for {
		var doc map[string]interface{}
		if err := decoder.Decode(&doc); err != nil {
			if err == io.EOF {
				break
			}
			return nil, err
		}
		kind, _ := doc["kind"].(string)
		raw, _ := yaml.Marshal(doc)
		switch kind {
		case "MutatingWebhookConfiguration":
			var config admissionregistrationv1.MutatingWebhookConfiguration
			if err := yaml.UnmarshalStrict(raw, &config); err != nil {
				return nil, err
			}
			for _, w := range config.Webhooks {
				webhooks = append(webhooks, webhook{w.Name, w.MatchConditions, w.FailurePolicy})
			}
		case "ValidatingWebhookConfiguration":
			var config admissionregistrationv1.ValidatingWebhookConfiguration
			if err := yaml.UnmarshalStrict(raw, &config); err != nil {
				return nil, err
			}
			for _, w := range config.Webhooks {
				webhooks = append(webhooks, webhook{w.Name, w.MatchConditions, w.FailurePolicy})
			}
		}
	}
	return webhooks, nil
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: chart-cel RENDERED.yaml CASES.yaml")
		os.Exit(2)
	}
	webhooks, err := readWebhooks(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", os.Args[1], err)
		os.Exit(2)
	}
	data, err := os.ReadFile(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var cases []testCase
	if err := yaml.UnmarshalStrict(data, &cases); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", os.Args[2], err)
		os.Exit(2)
	}

	// As the API server compiles a stored webhook's conditions (and, with
	// NewExpressions, as it validates a new configuration).
	envs := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion(), true)
	compiler := cel.NewConditionCompiler(envs)
	failed := false
	tested := map[string]int{}
	for _, w := range webhooks {
		if len(w.conditions) == 0 {
			fmt.Printf("FAIL %s: no matchConditions\n", w.name)
			failed = true
			continue
		}
		accessors := make([]cel.ExpressionAccessor, len(w.conditions))
		for i, c := range w.conditions {
			accessors[i] = &matchconditions.MatchCondition{Name: c.Name, Expression: c.Expression}
		}
		for _, mode := range []environment.Type{environment.NewExpressions, environment.StoredExpressions} {
			evaluator := compiler.CompileCondition(accessors, cel.OptionalVariableDeclarations{HasAuthorizer: true, StrictCost: true}, mode)
			for _, e := range evaluator.CompilationErrors() {
				fmt.Printf("FAIL %s: does not compile: %v\n", w.name, e)
				failed = true
			}
		}
		fail := admissionregistrationv1.Fail
		matcher := matchconditions.NewMatcher(compiler.CompileCondition(accessors,
			cel.OptionalVariableDeclarations{HasAuthorizer: true, StrictCost: true}, environment.StoredExpressions),
			&fail, "webhook", "admit", w.name)
		for _, c := range cases {
			if c.Webhooks != role(w.name) {
				continue
			}
			tested[c.Webhooks]++
			gvk := schema.GroupVersionKind{Group: c.Group, Version: c.Version, Kind: c.Kind}
			var object, oldObject *unstructured.Unstructured
			if c.Object != nil {
				object = &unstructured.Unstructured{Object: c.Object}
			}
			if c.OldObject != nil {
				oldObject = &unstructured.Unstructured{Object: c.OldObject}
			}
			who := &user.DefaultInfo{Name: "system:serviceaccount:agents:worker"}
			if c.User != nil {
				who = &user.DefaultInfo{Name: c.User.Name, Extra: c.User.Extra}
			}
			attributes := admission.NewAttributesRecord(object, oldObject, gvk, "agents", "x",
				gvk.GroupVersion().WithResource(c.Resource), "", admission.Operation(c.Operation),
				nil, false, who)
			versioned := &admission.VersionedAttributes{Attributes: attributes, VersionedKind: gvk}
			if object != nil {
				versioned.VersionedObject = object
			}
			if oldObject != nil {
				versioned.VersionedOldObject = oldObject
			}
			result := matcher.Match(context.Background(), versioned, nil, nil)
			switch {
			case result.Error != nil:
				fmt.Printf("FAIL %s / %s: the condition errors, so the API server would refuse the request: %v\n", w.name, c.Name, result.Error)
				failed = true
			case result.Matches != c.Expect:
				fmt.Printf("FAIL %s / %s: sent to the webhook: %v, expected %v\n", w.name, c.Name, result.Matches, c.Expect)
				failed = true
			default:
				fmt.Printf("ok   %s / %s: sent: %v\n", w.name, c.Name, result.Matches)
			}
		}
	}
	// Every role the cases ask for has a webhook to answer them.
	wanted := map[string]bool{}
	for _, c := range cases {
		wanted[c.Webhooks] = true
	}
	for r := range wanted {
		if tested[r] == 0 {
			fmt.Printf("FAIL no %s webhook in %s to test (render with validation.allPodOwnerReferences.enabled=true and observe.unlabelled.enabled=true)\n", r, os.Args[1])
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}
