package harness

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The MutatingAdmissionPolicy that issue 24 measures against ownerguard's
// /mutate (Kubernetes 1.36+: admissionregistration.k8s.io/v1, GA, on by
// default). It does, inside the API server and with no lookup, what
// /mutate does for the simplest objects: the reference to the declared
// owner pod and the uid label. The uid is the uid label's, or, when the
// object has none, the requester's own pod-uid extra when the requester
// is the pod it declares (a pod-bound token: the API server signed it).
// It cannot look the pod up: a missing, finished or recreated owner, or a
// wrong uid label, are left to ownerguard's /validate, which judges the
// final object. The marker annotation says the policy ran (a test's
// proof; a real policy would not carry it).
const (
	PolicyName             = "ownerguard-e2e-owner-reference"
	PolicyMarkerAnnotation = "e2e.ownerguard.io/mutated-by"
)

// policyDefinition: the policy, for objects of resources labelled with
// keyPrefix/owner-pod.
func policyDefinition(keyPrefix string, resources []admissionregistrationv1.NamedRuleWithOperations) *admissionregistrationv1.MutatingAdmissionPolicy {
	ownerPod, ownerUID := keyPrefix+"/owner-pod", keyPrefix+"/owner-uid"
	fail := admissionregistrationv1.Fail
	return &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			FailurePolicy:      &fail,
			ReinvocationPolicy: admissionregistrationv1.IfNeededReinvocationPolicy,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: resources,
				ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: ownerPod, Operator: metav1.LabelSelectorOpExists}}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name: "uid-known",
				Expression: fmt.Sprintf(`%q in object.metadata.labels || (
  'authentication.kubernetes.io/pod-name' in request.userInfo.extra &&
  'authentication.kubernetes.io/pod-uid' in request.userInfo.extra &&
  request.userInfo.username.startsWith('system:serviceaccount:' + request.namespace + ':') &&
  request.userInfo.extra['authentication.kubernetes.io/pod-name'] == [object.metadata.labels[%q]])`, ownerUID, ownerPod),
			}},
			Variables: []admissionregistrationv1.Variable{
				{Name: "podName", Expression: fmt.Sprintf("object.metadata.labels[%q]", ownerPod)},
				{Name: "podUID", Expression: fmt.Sprintf(`%q in object.metadata.labels ? object.metadata.labels[%q] : request.userInfo.extra['authentication.kubernetes.io/pod-uid'][0]`, ownerUID, ownerUID)},
				{Name: "hasRef", Expression: "object.metadata.?ownerReferences.orValue([]).exists(r, r.uid == variables.podUID)"},
			},
			Mutations: []admissionregistrationv1.Mutation{{
				// A JSON patch: ownerReferences entries are atomic to
				// server-side apply, so an ApplyConfiguration may not
				// write one ("may not mutate atomic arrays, maps or
				// structs", seen on 1.37). The list may be absent: then
				// it is added whole. An entry with the uid already is
				// left as it is (/validate judges it). The Object types
				// exist in mutations only, not in variables. An absent list
				// is added empty, then the entry appended: an Object
				// initializer inside a list value panics the API server
				// before 1.37 (kubernetes/kubernetes#142181: a stream
				// INTERNAL_ERROR for every create the policy matched).
				PatchType: admissionregistrationv1.PatchTypeJSONPatch,
				JSONPatch: &admissionregistrationv1.JSONPatch{Expression: fmt.Sprintf(`(variables.hasRef ? [] :
  (has(object.metadata.ownerReferences) ? [] : [JSONPatch{op: "add", path: "/metadata/ownerReferences", value: []}])
  + [JSONPatch{op: "add", path: "/metadata/ownerReferences/-", value: Object.metadata.ownerReferences{apiVersion: "v1", kind: "Pod", name: variables.podName, uid: variables.podUID, controller: false, blockOwnerDeletion: false}}])
+ [JSONPatch{op: "add", path: "/metadata/labels/" + jsonpatch.escapeKey(%q), value: variables.podUID}]
+ (has(object.metadata.annotations)
    ? [JSONPatch{op: "add", path: "/metadata/annotations/" + jsonpatch.escapeKey(%q), value: "policy"}]
    : [JSONPatch{op: "add", path: "/metadata/annotations", value: {%q: "policy"}}])`,
					ownerUID, PolicyMarkerAnnotation, PolicyMarkerAnnotation)},
			}},
		},
	}
}

// InstallPolicy creates the policy (resources: the named resources of the
// core and batch groups) and a binding of it to namespace.
func InstallPolicy(ctx context.Context, c kubernetes.Interface, keyPrefix, namespace string, resources ...string) error {
	rules := []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"", "batch"}, APIVersions: []string{"v1"}, Resources: resources},
	}}}
	if _, err := c.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, policyDefinition(keyPrefix, rules), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("the MutatingAdmissionPolicy: %w", err)
	}
	binding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName},
		Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{
			PolicyName: PolicyName,
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": namespace}}},
		},
	}
	if _, err := c.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("the MutatingAdmissionPolicyBinding: %w", err)
	}
	return nil
}

// RemovePolicy deletes the binding and the policy.
func RemovePolicy(ctx context.Context, c kubernetes.Interface) error {
	if err := c.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Delete(ctx, PolicyName, metav1.DeleteOptions{}); err != nil {
		return err
	}
	return c.AdmissionregistrationV1().MutatingAdmissionPolicies().Delete(ctx, PolicyName, metav1.DeleteOptions{})
}
