package scenarios

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// needsMinor skips t on a control plane older than Kubernetes 1.<minor>,
// saying why (skipFor).
func needsMinor(t *testing.T, minor int, why string) {
	t.Helper()
	if serverMinor >= minor {
		return
	}
	skipFor(t, fmt.Sprintf("needs Kubernetes 1.%d (this is 1.%d): %s", minor, serverMinor, why))
}

// skipFor skips t for a reason that is not a failure (an API this minor
// does not serve, a way of running ownerguard this run does not use) and
// records it in $E2E_WORK/skipped, so that e2e/run counts it as skipped
// with that reason (never as passed, never silently); a skip made any
// other way still fails the run.
func skipFor(t *testing.T, why string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.Getenv("E2E_WORK"), "skipped"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	must(t, err, "record the skip")
	_, err = fmt.Fprintf(f, "%s\t%s\n", t.Name(), strings.ReplaceAll(why, "\n", " "))
	must(t, errors.Join(err, f.Close()), "record the skip")
	t.Skip(why)
}

// must fails the test at once on an error.
func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// workerRules: what a worker's service account may do in its namespace,
// the README's release Role included.
var workerRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"pods", "configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
	{APIGroups: []string{"batch"}, Resources: []string{"jobs", "cronjobs"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
	{APIGroups: []string{"apps"}, Resources: []string{"deployments", "replicasets"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
}

// newNamespace makes a namespace for one scenario, with a "worker"
// ServiceAccount bound to rules; it is deleted when the test ends.
func newNamespace(t *testing.T, prefix string, rules []rbacv1.PolicyRule) string {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	name := "e2e-" + prefix + "-" + rand.String(5)
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: name, Labels: map[string]string{"e2e.ownerguard.io/scenario": prefix}}}, metav1.CreateOptions{})
	must(t, err, "create namespace")
	t.Cleanup(func() {
		_ = admin.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	_, err = admin.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "worker"}}, metav1.CreateOptions{})
	must(t, err, "create service account")
	if rules != nil {
		_, err = admin.RbacV1().Roles(name).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "worker"}, Rules: rules}, metav1.CreateOptions{})
		must(t, err, "create role")
		_, err = admin.RbacV1().RoleBindings(name).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "worker"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "worker"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "worker", Namespace: name}},
		}, metav1.CreateOptions{})
		must(t, err, "create role binding")
	}
	return name
}

// Worker is a worker pod and a client that acts as it: a token of its
// service account bound to the pod (TokenRequest with a Pod
// boundObjectRef), so that its requests carry the pod's name and uid.
type Worker struct {
	Pod    *corev1.Pod
	Client *kubernetes.Clientset
	Token  string
}

func (w *Worker) Name() string { return w.Pod.Name }
func (w *Worker) UID() string  { return string(w.Pod.UID) }
func (w *Worker) NS() string   { return w.Pod.Namespace }

// newPod creates an unlabelled pod (an owner); it stays Pending.
func newPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	pod, err := admin.CoreV1().Pods(ns).Create(ctxFor(t, 30*time.Second), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "worker"}},
		Spec: corev1.PodSpec{
			ServiceAccountName: "worker",
			Containers:         []corev1.Container{{Name: "worker", Image: "e2e.invalid/worker:1"}},
		},
	}, metav1.CreateOptions{})
	must(t, err, "create pod "+name)
	return pod
}

// newWorker creates the worker pod and its pod-bound client.
func newWorker(t *testing.T, ns, name string) *Worker {
	t.Helper()
	pod := newPod(t, ns, name)
	token := boundToken(t, ns, pod)
	return &Worker{Pod: pod, Token: token, Client: kubernetes.NewForConfigOrDie(plane.RESTConfigToken(token))}
}

func boundToken(t *testing.T, ns string, pod *corev1.Pod) string {
	t.Helper()
	expiry := int64(3600)
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctxFor(t, 30*time.Second), pod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &expiry,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	must(t, err, "token request bound to "+pod.Name)
	return tr.Status.Token
}

// ownedLabels: what a worker puts on what it creates; uid may be empty.
func ownedLabels(owner, uid string) map[string]string {
	l := map[string]string{ownerPodLabel: owner}
	if uid != "" {
		l[ownerUIDLabel] = uid
	}
	return l
}

func configMap(name string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Data:       map[string]string{"prompt": "summarise the logs of " + name},
	}
}

func agentPod(name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			ServiceAccountName: "worker",
			RestartPolicy:      corev1.RestartPolicyNever,
			Containers:         []corev1.Container{{Name: "agent", Image: "e2e.invalid/agent:1"}},
		},
	}
}

// job with its pod template labelled too, as a worker labels it.
func job(name string, labels map[string]string) *batchv1.Job {
	parallelism := int32(2)
	return &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: batchv1.JobSpec{
			Parallelism: &parallelism,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: copyLabels(labels)},
				Spec:       agentPod("", nil).Spec,
			},
		},
	}
}

func copyLabels(l map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range l {
		out[k] = v
	}
	return out
}

// checkOwned: the object carries exactly one Pod reference, the worker's
// whole tuple, non-blocking, and the uid label. With only, that
// reference is the object's only one.
func checkOwned(meta metav1.ObjectMeta, w *Worker, only bool) error {
	var pods []metav1.OwnerReference
	for _, ref := range meta.OwnerReferences {
		if ref.Kind == "Pod" || ref.UID == w.Pod.UID {
			pods = append(pods, ref)
		}
	}
	if only && len(meta.OwnerReferences) != 1 {
		return fmt.Errorf("%s: want exactly one ownerReference, have %s", meta.Name, refsString(meta.OwnerReferences))
	}
	if len(pods) != 1 {
		return fmt.Errorf("%s: want exactly one Pod ownerReference, have %s", meta.Name, refsString(meta.OwnerReferences))
	}
	ref := pods[0]
	if ref.APIVersion != "v1" || ref.Kind != "Pod" || ref.Name != w.Name() || ref.UID != w.Pod.UID ||
		ref.Controller == nil || *ref.Controller || ref.BlockOwnerDeletion == nil || *ref.BlockOwnerDeletion {
		return fmt.Errorf("%s: want {v1, Pod, %s, %s, controller: false, blockOwnerDeletion: false}, have %s",
			meta.Name, w.Name(), w.UID(), refsString(meta.OwnerReferences))
	}
	if meta.Labels[ownerUIDLabel] != w.UID() {
		return fmt.Errorf("%s: uid label %q, want %q", meta.Name, meta.Labels[ownerUIDLabel], w.UID())
	}
	return nil
}

func refsString(refs []metav1.OwnerReference) string {
	b, _ := json.Marshal(refs)
	return string(b)
}

// denial: the API error of a denied request, as the client sees it.
func denial(err error) (int32, string) {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Code, status.Status().Message
	}
	return 0, fmt.Sprint(err)
}

// expectedDenial is what ownerguard itself says of the object, decided
// offline by `ownerguard review` with the same owners and requester: the
// client must see exactly that, prefixed by the API server.
func expectedDenial(t *testing.T, webhook, ns string, as *Worker, pods []*corev1.Pod, object any) (int32, string) {
	t.Helper()
	dir := t.TempDir()
	var docs [][]byte
	for _, p := range pods {
		doc, err := yaml.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{
			"name": p.Name, "namespace": p.Namespace, "uid": string(p.UID)}})
		must(t, err, "pods yaml")
		docs = append(docs, doc)
	}
	podsFile := filepath.Join(dir, "pods.yaml")
	must(t, os.WriteFile(podsFile, bytes.Join(docs, []byte("---\n")), 0o600), "write pods")
	manifest, err := json.Marshal(object)
	must(t, err, "manifest")
	objFile := filepath.Join(dir, "object.json")
	must(t, os.WriteFile(objFile, manifest, 0o600), "write object")
	args := []string{"review", "--pods", podsFile, "--webhook", "mutate", "--namespace", ns}
	if as != nil {
		args = append(args, "--as-pod", as.Name()+"/"+as.UID())
	}
	args = append(args, objFile)
	out, err := exec.Command(os.Getenv("OWNERGUARD_BIN"), args...).Output()
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
		t.Fatalf("ownerguard review: %v", err)
	}
	var review struct {
		Response struct {
			Allowed bool `json:"allowed"`
			Status  struct {
				Code    int32  `json:"code"`
				Message string `json:"message"`
			} `json:"status"`
		} `json:"response"`
	}
	must(t, json.Unmarshal(out, &review), "review output")
	if review.Response.Allowed {
		t.Fatalf("ownerguard review allows the object offline; the scenario expects a denial: %s", out)
	}
	return review.Response.Status.Code, fmt.Sprintf("admission webhook %q denied the request: %s", webhook, review.Response.Status.Message)
}

// checkDenied: err is the denial ownerguard gives offline, verbatim.
func checkDenied(t *testing.T, err error, wantCode int32, wantMessage string) {
	t.Helper()
	if err == nil {
		t.Fatalf("created; want denied %d: %s", wantCode, wantMessage)
	}
	code, message := denial(err)
	if code != wantCode || message != wantMessage {
		t.Fatalf("denied %d %q\nwant   %d %q", code, message, wantCode, wantMessage)
	}
}

// gone waits until get reports NotFound, at most d; it returns how long
// that took.
func gone(ctx context.Context, d time.Duration, get func(context.Context) error) (time.Duration, error) {
	start := time.Now()
	err := harness.Until(ctx, d, 50*time.Millisecond, "deleted", func() error {
		err := get(ctx)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return errors.New("still there")
	})
	return time.Since(start), err
}

func ptr[T any](v T) *T { return &v }

func joinLines(lines []string) string { return strings.Join(lines, "\n") }

// auditAnnotations: the annotations of the main API server's audit events
// for verb on one object (the API server stores a webhook's audit
// annotations as "<webhook name>/<key>").
func auditAnnotations(t *testing.T, verb, resource, ns, name string) []map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(plane.Logs, fmt.Sprintf("audit-%d.log", harness.APIPort)))
	must(t, err, "read the audit log")
	var out []map[string]string
	for _, line := range bytes.Split(data, []byte("\n")) {
		var event struct {
			Verb      string `json:"verb"`
			Stage     string `json:"stage"`
			ObjectRef struct {
				Resource, Namespace, Name string
			} `json:"objectRef"`
			Annotations map[string]string `json:"annotations"`
		}
		if json.Unmarshal(line, &event) != nil {
			continue
		}
		if event.Verb == verb && event.Stage == "ResponseComplete" && event.ObjectRef.Resource == resource &&
			event.ObjectRef.Namespace == ns && event.ObjectRef.Name == name {
			out = append(out, event.Annotations)
		}
	}
	return out
}

// waitDeploymentReady waits until the release's Deployment reports every
// replica ready (its pods' readiness is written by harness.MarkReady in
// place of a kubelet; the controllers then count them as in a cluster).
func waitDeploymentReady(ctx context.Context, t *testing.T) {
	t.Helper()
	must(t, harness.Until(ctx, 30*time.Second, 250*time.Millisecond, "deployment ready", func() error {
		d, err := admin.AppsV1().Deployments(releaseNamespace).Get(ctx, releaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ReadyReplicas != *d.Spec.Replicas {
			return fmt.Errorf("%d of %d ready", d.Status.ReadyReplicas, *d.Spec.Replicas)
		}
		return nil
	}), "the Deployment's status")
}
