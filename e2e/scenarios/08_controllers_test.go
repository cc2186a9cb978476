package scenarios

// Issue 14 against Kubernetes' own controllers: the controller manager
// runs the statefulset, daemonset, ephemeral-volume and resource-claim
// controllers (and the pvc-protection controller, which lets a collected
// claim go) beside the Job, CronJob, Deployment and ReplicaSet ones. What
// a controller makes from a workload a worker labelled is created as the
// controller (no pod identity), with the labels the controller copies:
// each scenario here is decided by the real controller, the real API
// server and the real garbage collector.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
)

// selfOwner is the owner-pod label value that means "the pod that sends
// this request" (README, names longer than 63 characters).
const selfOwner = "Self"

var allVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete"}

// walkRules: a worker that makes every kind of workload.
func walkRules() []rbacv1.PolicyRule {
	return append(append([]rbacv1.PolicyRule(nil), workerRules...),
		rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"statefulsets", "daemonsets"}, Verbs: allVerbs},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: allVerbs},
	)
}

// declared is what a worker writes as owner: Self, or its pod name.
func declared(w *Worker, self bool) string {
	if self {
		return selfOwner
	}
	return w.Name()
}

func declaredName(self bool) string {
	if self {
		return "Self"
	}
	return "ByName"
}

// walkLabels: the selector label app plus the owner label.
func walkLabels(app, owner string) map[string]string {
	return map[string]string{"app": app, ownerPodLabel: owner}
}

func walkPodSpec() corev1.PodSpec {
	return corev1.PodSpec{
		ServiceAccountName: "worker",
		RestartPolicy:      corev1.RestartPolicyNever,
		Containers:         []corev1.Container{{Name: "agent", Image: "e2e.invalid/agent:1"}},
	}
}

func claimSpec() corev1.PersistentVolumeClaimSpec {
	return corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}
}

// --- What controllers make, found by listing --------------------------------

// made is one kind of object a controller makes from a workload.
type made struct {
	what string
	want int
	list func(ctx context.Context) ([]metav1.ObjectMeta, error)
}

func replicaSetsMade(ns, selector string) made {
	return made{"ReplicaSet", 1, func(ctx context.Context) ([]metav1.ObjectMeta, error) {
		list, err := admin.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return nil, err
		}
		var out []metav1.ObjectMeta
		for _, o := range list.Items {
			out = append(out, o.ObjectMeta)
		}
		return out, nil
	}}
}

func podsMade(ns, selector string, want int) made {
	return made{"pod", want, func(ctx context.Context) ([]metav1.ObjectMeta, error) {
		list, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return nil, err
		}
		var out []metav1.ObjectMeta
		for _, o := range list.Items {
			out = append(out, o.ObjectMeta)
		}
		return out, nil
	}}
}

func jobsMade(ns, selector string) made {
	return made{"Job", 1, func(ctx context.Context) ([]metav1.ObjectMeta, error) {
		list, err := admin.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return nil, err
		}
		var out []metav1.ObjectMeta
		for _, o := range list.Items {
			out = append(out, o.ObjectMeta)
		}
		return out, nil
	}}
}

func revisionsMade(ns, selector string) made {
	return made{"ControllerRevision", 1, func(ctx context.Context) ([]metav1.ObjectMeta, error) {
		list, err := admin.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return nil, err
		}
		var out []metav1.ObjectMeta
		for _, o := range list.Items {
			out = append(out, o.ObjectMeta)
		}
		return out, nil
	}}
}

func claimsMade(ns, selector string) made {
	return made{"PersistentVolumeClaim", 1, func(ctx context.Context) ([]metav1.ObjectMeta, error) {
		list, err := admin.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return nil, err
		}
		var out []metav1.ObjectMeta
		for _, o := range list.Items {
			out = append(out, o.ObjectMeta)
		}
		return out, nil
	}}
}

// deniedEvents: the Warning events of the namespace that quote an
// admission denial (a controller's FailedCreate, the deployment
// controller's ReplicaSetCreateError, the ephemeral-volume controller's
// FailedBinding...).
func deniedEvents(ctx context.Context, ns string) []string {
	list, err := admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range list.Items {
		if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "denied the request") {
			out = append(out, fmt.Sprintf("%s %s/%s by %s: %s", e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Source.Component, e.Message))
		}
	}
	return out
}

// ownedBy: the object carries the worker's whole reference, non-blocking,
// and its uid label, beside whatever its controller put there.
func ownedBy(meta metav1.ObjectMeta, w *Worker) error {
	name := meta.Name
	if name == "" {
		name = meta.GenerateName
	}
	var mine []metav1.OwnerReference
	for _, ref := range meta.OwnerReferences {
		if ref.UID == w.Pod.UID || (ref.Kind == "Pod" && ref.Name == w.Name()) {
			mine = append(mine, ref)
		}
	}
	if len(mine) != 1 {
		return fmt.Errorf("%s: want one reference to the worker %s, have %s", name, w.Name(), refsString(meta.OwnerReferences))
	}
	ref := mine[0]
	if ref.APIVersion != "v1" || ref.Kind != "Pod" || ref.Name != w.Name() || ref.UID != w.Pod.UID ||
		ref.Controller == nil || *ref.Controller || ref.BlockOwnerDeletion == nil || *ref.BlockOwnerDeletion {
		return fmt.Errorf("%s: want {v1, Pod, %s, %s, controller: false, blockOwnerDeletion: false}, have %s",
			name, w.Name(), w.UID(), refsString(meta.OwnerReferences))
	}
	if meta.Labels[ownerUIDLabel] != w.UID() {
		return fmt.Errorf("%s: uid label %q, want the worker's %q", name, meta.Labels[ownerUIDLabel], w.UID())
	}
	return nil
}

// checkMade: every made kind holds its count, each object the worker's.
func checkMade(ctx context.Context, w *Worker, mades []made) ([]string, error) {
	var summary []string
	for _, m := range mades {
		objects, err := m.list(ctx)
		if err != nil {
			return nil, err
		}
		if len(objects) < m.want {
			return nil, fmt.Errorf("%d of %d %s made", len(objects), m.want, m.what)
		}
		for _, o := range objects {
			if err := ownedBy(o, w); err != nil {
				return nil, fmt.Errorf("%s %v", m.what, err)
			}
		}
		summary = append(summary, fmt.Sprintf("%d %s", len(objects), m.what))
	}
	return summary, nil
}

// refusals: what says that a controller's create in ns was refused: the
// Warning events that quote a denial, and the controller manager's own
// errors that do (a refused ControllerRevision is logged, not evented).
func refusals(ctx context.Context, ns string) []string {
	out := deniedEvents(ctx, ns)
	for _, line := range strings.Split(harness.Grep(plane.KCM.Log, "denied the request", 1000), "\n") {
		if strings.Contains(line, ns+"/") || strings.Contains(line, "namespace '"+ns+"'") {
			if len(line) > 600 {
				line = line[:600] + "..."
			}
			out = append(out, "controller manager: "+line)
		}
	}
	if len(out) > 3 {
		out = out[:3]
	}
	return out
}

// deniedDecisions: ownerguard's decision log lines that refused a request
// in ns (at most 3).
func deniedDecisions(ns string) []string {
	var out []string
	for _, line := range strings.Split(harness.Grep(guard.Log, `"message":"decision"`, 100000), "\n") {
		if strings.Contains(line, `"namespace":"`+ns+`"`) && strings.Contains(line, `"result":"denied"`) && len(out) < 3 {
			out = append(out, "ownerguard: "+line)
		}
	}
	return out
}

// untilUnrefused calls check every 250 ms until it returns nil, at most
// d; a refusal of a controller's create in ns ends the wait at once.
func untilUnrefused(ctx context.Context, ns string, d time.Duration, what string, check func() error) error {
	deadline := time.Now().Add(d)
	for {
		if refused := refusals(ctx, ns); len(refused) > 0 {
			return fmt.Errorf("%s: a controller's create was refused: %s", what, strings.Join(refused, "; "))
		}
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: not after %s: %v; the controller manager on %s: %s", what, d, err, ns, harness.Grep(plane.KCM.Log, ns+"/", 3))
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitMade waits at most d until checkMade holds, failing at once on a
// refused controller create.
func waitMade(ctx context.Context, ns string, w *Worker, d time.Duration, mades []made) ([]string, error) {
	var summary []string
	err := untilUnrefused(ctx, ns, d, "what the controllers make", func() error {
		var err error
		summary, err = checkMade(ctx, w, mades)
		return err
	})
	return summary, err
}

// missingLabels: the entries of want that have lacks.
func missingLabels(have, want map[string]string) []string {
	var out []string
	for k, v := range want {
		if have[k] != v {
			out = append(out, k+"="+v)
		}
	}
	sort.Strings(out)
	return out
}

func ownerguardAnnotations(a map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		if strings.HasPrefix(k, "ownerguard.io/") {
			out[k] = v
		}
	}
	return out
}

// isOwnerguardDenial: a refused create, refused by ownerguard (either
// webhook), with a client error code.
func isOwnerguardDenial(err error) (int32, string, bool) {
	code, message := denial(err)
	// The webhooks of every mode (SPEC §3 rule 17): mutate.<prefix>,
	// mutate-warn.<prefix>, mutate-audit.<prefix>, the same for validate.
	for _, webhook := range []string{mutateWebhook, validateWebhook,
		"mutate-warn.ownerguard.io", "validate-warn.ownerguard.io",
		"mutate-audit.ownerguard.io", "validate-audit.ownerguard.io"} {
		if strings.HasPrefix(message, fmt.Sprintf("admission webhook %q denied the request: ", webhook)) && code >= 400 && code < 500 {
			return code, message, true
		}
	}
	return code, message, false
}

// --- Rule 12: denied up front, or everything its controller makes admitted --

// walkCase is one labelled workload and what its controllers make.
type walkCase struct {
	name string
	// mustAdmit: the README's documented shape (the worker's name
	// everywhere), which ownerguard may not refuse.
	mustAdmit bool
	wait      time.Duration
	create    func(ctx context.Context, ns string, w *Worker) error
	made      func(ns string) []made
	// facts: what the controller copied from the workload (APISERVER.md,
	// "What controllers make from a labelled object"), checked once made.
	facts func(ctx context.Context, ns string) error
}

func deploymentCase(objSelf, templateSelf bool) walkCase {
	const app = "dep"
	return walkCase{
		name:      "Deployment/" + declaredName(objSelf) + "Template" + declaredName(templateSelf),
		mustAdmit: !objSelf && !templateSelf,
		wait:      60 * time.Second,
		create: func(ctx context.Context, ns string, w *Worker) error {
			_, err := w.Client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: app, Labels: map[string]string{ownerPodLabel: declared(w, objSelf)}},
				Spec: appsv1.DeploymentSpec{
					Replicas: ptr(int32(1)),
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: walkLabels(app, declared(w, templateSelf))},
						Spec: corev1.PodSpec{ServiceAccountName: "worker", Containers: walkPodSpec().Containers}},
				},
			}, metav1.CreateOptions{})
			return err
		},
		made: func(ns string) []made {
			return []made{replicaSetsMade(ns, "app="+app), podsMade(ns, "app="+app, 1)}
		},
		// The ReplicaSet takes the template's labels and the Deployment's
		// annotations.
		facts: func(ctx context.Context, ns string) error {
			d, err := admin.AppsV1().Deployments(ns).Get(ctx, app, metav1.GetOptions{})
			if err != nil {
				return err
			}
			list, err := admin.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
			if err != nil {
				return err
			}
			for _, rs := range list.Items {
				if m := missingLabels(rs.Labels, d.Spec.Template.Labels); len(m) > 0 {
					return fmt.Errorf("ReplicaSet %s lacks the template's labels %v", rs.Name, m)
				}
				if m := missingLabels(rs.Annotations, ownerguardAnnotations(d.Annotations)); len(m) > 0 {
					return fmt.Errorf("ReplicaSet %s lacks the Deployment's annotations %v", rs.Name, m)
				}
			}
			return nil
		},
	}
}

func replicaSetCase() walkCase {
	const app = "rs"
	return walkCase{
		name:      "ReplicaSet/ByNameTemplateByName",
		mustAdmit: true,
		wait:      60 * time.Second,
		create: func(ctx context.Context, ns string, w *Worker) error {
			_, err := w.Client.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
				ObjectMeta: metav1.ObjectMeta{Name: app, Labels: map[string]string{ownerPodLabel: w.Name()}},
				Spec: appsv1.ReplicaSetSpec{
					Replicas: ptr(int32(1)),
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: walkLabels(app, w.Name())},
						Spec: corev1.PodSpec{ServiceAccountName: "worker", Containers: walkPodSpec().Containers}},
				},
			}, metav1.CreateOptions{})
			return err
		},
		made: func(ns string) []made { return []made{podsMade(ns, "app="+app, 1)} },
	}
}

func jobCase(objSelf, templateSelf bool) walkCase {
	const app = "job"
	return walkCase{
		name:      "Job/" + declaredName(objSelf) + "Template" + declaredName(templateSelf),
		mustAdmit: !objSelf && !templateSelf,
		wait:      60 * time.Second,
		create: func(ctx context.Context, ns string, w *Worker) error {
			_, err := w.Client.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
				ObjectMeta: metav1.ObjectMeta{Name: app, Labels: map[string]string{ownerPodLabel: declared(w, objSelf)}},
				Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: walkLabels(app, declared(w, templateSelf))}, Spec: walkPodSpec()}},
			}, metav1.CreateOptions{})
			return err
		},
		made: func(ns string) []made { return []made{podsMade(ns, "app="+app, 1)} },
	}
}

// cronJobCase: scheduled every minute, so the cronjob controller makes
// its Job within a minute, and the job controller its pod.
func cronJobCase(objSelf bool) walkCase {
	const app = "cron"
	return walkCase{
		name:      "CronJob/" + declaredName(objSelf) + "TemplatesByName",
		mustAdmit: !objSelf,
		wait:      100 * time.Second,
		create: func(ctx context.Context, ns string, w *Worker) error {
			_, err := w.Client.BatchV1().CronJobs(ns).Create(ctx, &batchv1.CronJob{
				ObjectMeta: metav1.ObjectMeta{Name: app, Labels: map[string]string{ownerPodLabel: declared(w, objSelf)}},
				Spec: batchv1.CronJobSpec{
					Schedule:          "* * * * *",
					ConcurrencyPolicy: batchv1.ForbidConcurrent,
					JobTemplate: batchv1.JobTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: walkLabels(app, w.Name())},
						Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
							ObjectMeta: metav1.ObjectMeta{Labels: walkLabels(app, w.Name())}, Spec: walkPodSpec()}},
					},
				},
			}, metav1.CreateOptions{})
			return err
		},
		made: func(ns string) []made {
			return []made{jobsMade(ns, "app="+app), podsMade(ns, "app="+app, 1)}
		},
		// The Job takes the job template's labels and annotations.
		facts: func(ctx context.Context, ns string) error {
			cj, err := admin.BatchV1().CronJobs(ns).Get(ctx, app, metav1.GetOptions{})
			if err != nil {
				return err
			}
			list, err := admin.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
			if err != nil {
				return err
			}
			for _, j := range list.Items {
				if m := missingLabels(j.Labels, cj.Spec.JobTemplate.Labels); len(m) > 0 {
					return fmt.Errorf("Job %s lacks the job template's labels %v", j.Name, m)
				}
				if m := missingLabels(j.Annotations, cj.Spec.JobTemplate.Annotations); len(m) > 0 {
					return fmt.Errorf("Job %s lacks the job template's annotations %v", j.Name, m)
				}
			}
			return nil
		},
	}
}

// statefulSet as kustomize's commonLabels writes it when the owner label
// is a common label: on the object, its selector, its pod template and
// its volumeClaimTemplates. With a Self object the selector keeps app
// only (a selector is immutable, and Self is not the pod's name).
func statefulSet(name string, w *Worker, objSelf bool) *appsv1.StatefulSet {
	labels := walkLabels(name, w.Name())
	selector := copyLabels(labels)
	if objSelf {
		selector = map[string]string{"app": name}
	}
	template := walkPodSpec()
	template.RestartPolicy = corev1.RestartPolicyAlways
	template.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: walkLabels(name, declared(w, objSelf))},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr(int32(1)),
			ServiceName: name,
			Selector:    &metav1.LabelSelector{MatchLabels: selector},
			Template:    corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: copyLabels(labels)}, Spec: template},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data", Labels: copyLabels(labels)},
				Spec:       claimSpec(),
			}},
		},
	}
}

func statefulSetCase(objSelf bool) walkCase {
	const app = "sts"
	return walkCase{
		name:      "StatefulSet/" + declaredName(objSelf) + "TemplatesByName",
		mustAdmit: !objSelf,
		wait:      60 * time.Second,
		create: func(ctx context.Context, ns string, w *Worker) error {
			_, err := w.Client.AppsV1().StatefulSets(ns).Create(ctx, statefulSet(app, w, objSelf), metav1.CreateOptions{})
			return err
		},
		made: func(ns string) []made {
			return []made{revisionsMade(ns, "app="+app), claimsMade(ns, "app="+app), podsMade(ns, "app="+app, 1)}
		},
		facts: statefulSetFacts(app),
	}
}

// statefulSetFacts: its ControllerRevisions take the pod template's
// labels; its claims take the claim template's labels and the selector's.
func statefulSetFacts(name string) func(ctx context.Context, ns string) error {
	return func(ctx context.Context, ns string) error {
		sts, err := admin.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		revisions, err := admin.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return err
		}
		for _, r := range revisions.Items {
			if m := missingLabels(r.Labels, sts.Spec.Template.Labels); len(m) > 0 {
				return fmt.Errorf("ControllerRevision %s lacks the pod template's labels %v", r.Name, m)
			}
		}
		claims, err := admin.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return err
		}
		want := copyLabels(sts.Spec.VolumeClaimTemplates[0].Labels)
		for k, v := range sts.Spec.Selector.MatchLabels {
			want[k] = v
		}
		for _, c := range claims.Items {
			if m := missingLabels(c.Labels, want); len(m) > 0 {
				return fmt.Errorf("claim %s lacks the claim template's and the selector's labels %v", c.Name, m)
			}
		}
		return nil
	}
}

func daemonSetCase(objSelf bool) walkCase {
	const app = "ds"
	return walkCase{
		name:      "DaemonSet/" + declaredName(objSelf) + "TemplateByName",
		mustAdmit: !objSelf,
		wait:      60 * time.Second,
		create: func(ctx context.Context, ns string, w *Worker) error {
			spec := walkPodSpec()
			spec.RestartPolicy = corev1.RestartPolicyAlways
			// The Node has the not-ready taint the API server puts on a
			// new Node (no kubelet ever reports it ready).
			spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
			_, err := w.Client.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{
				ObjectMeta: metav1.ObjectMeta{Name: app, Labels: map[string]string{ownerPodLabel: declared(w, objSelf)}},
				Spec: appsv1.DaemonSetSpec{
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: walkLabels(app, w.Name())}, Spec: spec},
				},
			}, metav1.CreateOptions{})
			return err
		},
		made: func(ns string) []made {
			return []made{revisionsMade(ns, "app="+app), podsMade(ns, "app="+app, 1)}
		},
		// Its ControllerRevisions take the pod template's labels.
		facts: func(ctx context.Context, ns string) error {
			ds, err := admin.AppsV1().DaemonSets(ns).Get(ctx, app, metav1.GetOptions{})
			if err != nil {
				return err
			}
			revisions, err := admin.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
			if err != nil {
				return err
			}
			for _, r := range revisions.Items {
				if m := missingLabels(r.Labels, ds.Spec.Template.Labels); len(m) > 0 {
					return fmt.Errorf("ControllerRevision %s lacks the pod template's labels %v", r.Name, m)
				}
			}
			return nil
		},
	}
}

// ephemeralAgent: an agent pod with a generic ephemeral volume whose
// claim template is labelled for the worker.
func ephemeralAgent(name string, w *Worker, objSelf bool) *corev1.Pod {
	pod := agentPod(name, map[string]string{ownerPodLabel: declared(w, objSelf)})
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
		VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Labels: walkLabels(name, w.Name())},
			Spec:       claimSpec(),
		},
	}}}}
	return pod
}

func ephemeralCase(objSelf bool) walkCase {
	const app = "eph"
	return walkCase{
		name:      "Pod/" + declaredName(objSelf) + "EphemeralClaimTemplateByName",
		mustAdmit: !objSelf,
		wait:      60 * time.Second,
		create: func(ctx context.Context, ns string, w *Worker) error {
			_, err := w.Client.CoreV1().Pods(ns).Create(ctx, ephemeralAgent(app, w, objSelf), metav1.CreateOptions{})
			return err
		},
		made:  func(ns string) []made { return []made{claimsMade(ns, "app="+app)} },
		facts: ephemeralFacts(app),
	}
}

// ephemeralFacts: the claim <pod>-<volume> takes the claim template's
// labels and a controller reference to the pod.
func ephemeralFacts(podName string) func(ctx context.Context, ns string) error {
	return func(ctx context.Context, ns string) error {
		pod, err := admin.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		claim, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, podName+"-scratch", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if m := missingLabels(claim.Labels, pod.Spec.Volumes[0].Ephemeral.VolumeClaimTemplate.Labels); len(m) > 0 {
			return fmt.Errorf("claim %s lacks the claim template's labels %v", claim.Name, m)
		}
		if c := metav1.GetControllerOf(claim); c == nil || c.Kind != "Pod" || c.Name != pod.Name || c.UID != pod.UID {
			return fmt.Errorf("claim %s: controller %v, want the pod %s", claim.Name, c, pod.Name)
		}
		return nil
	}
}

// newNode is a Node object (no kubelet behind it) for daemon pods.
func newNode(t *testing.T, name string) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	_, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}}}, metav1.CreateOptions{})
	must(t, err, "create the Node "+name)
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// TestControllerWalk: every built-in controller's create from a workload
// a worker labelled (SPEC rule 12). Either the workload is refused up
// front by ownerguard, or everything its controllers make is admitted,
// owned by the worker, and no controller records a refused create.
func TestControllerWalk(t *testing.T) {
	_, err := plane.WaitStartedControllers(ctxFor(t, time.Minute), "statefulset-controller", "daemonset-controller", "ephemeral-volume-controller",
		"persistentvolumeclaim-protection-controller", "cronjob-controller", "deployment-controller", "job-controller")
	must(t, err, "the controller manager's controllers")
	newNode(t, "e2e-node-walk")

	cases := []walkCase{
		deploymentCase(true, false),
		deploymentCase(false, true),
		deploymentCase(true, true),
		deploymentCase(false, false),
		replicaSetCase(),
		jobCase(false, false),
		jobCase(true, true),
		cronJobCase(false),
		cronJobCase(true),
		statefulSetCase(false),
		statefulSetCase(true),
		daemonSetCase(false),
		daemonSetCase(true),
		ephemeralCase(false),
		ephemeralCase(true),
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxFor(t, c.wait+time.Minute)
			ns := newNamespace(t, "walk", walkRules())
			w := newWorker(t, ns, "worker")
			err := c.create(ctx, ns, w)
			if err != nil {
				code, message, ok := isOwnerguardDenial(err)
				if !ok {
					t.Fatalf("the workload's create failed, and not by ownerguard: %d %s", code, message)
				}
				if c.mustAdmit {
					t.Fatalf("the README's shape (the worker's name everywhere) refused %d: %s", code, message)
				}
				t.Logf("denied up front %d: %s", code, message)
				fmt.Printf("    walk: %s denied up front (%d): %s\n", c.name, code, message)
				return
			}
			summary, err := waitMade(ctx, ns, w, c.wait, c.made(ns))
			if err != nil {
				t.Fatalf("the workload was admitted, and what its controllers make was not: %v", err)
			}
			if c.facts != nil {
				must(t, c.facts(ctx, ns), "what the controller copied")
			}
			// Once the workload was admitted only its controllers create
			// in ns: any refusal there is theirs. ownerguard's decision
			// log has it before the controller's retry that succeeded
			// (written within milliseconds of the answer), where an Event
			// or the controller manager's log may come later.
			refused := append(deniedDecisions(ns), refusals(ctx, ns)...)
			if len(refused) > 0 {
				t.Fatalf("everything was made, but a controller's create was refused on the way: %s", strings.Join(refused, "; "))
			}
			fmt.Printf("    walk: %s admitted; its controllers made %s, all the worker's\n", c.name, strings.Join(summary, ", "))
		})
	}
}

// --- Item 3: templates beyond pod templates, and the collector ----------------

// TestClaimTemplates: a StatefulSet labelled as kustomize's commonLabels
// labels it gets its claim and its pod, and deleting the worker collects
// all three; an agent pod's labelled ephemeral claim template gets its
// claim.
func TestClaimTemplates(t *testing.T) {
	t.Run("StatefulSetGetsItsClaimAndPodAllCollectedWithTheWorker", func(t *testing.T) {
		ctx := ctxFor(t, 3*time.Minute)
		ns := newNamespace(t, "claims", walkRules())
		w := newWorker(t, ns, "worker-sts")
		_, err := w.Client.AppsV1().StatefulSets(ns).Create(ctx, statefulSet("db", w, false), metav1.CreateOptions{})
		must(t, err, "create the labelled StatefulSet as the worker")
		summary, err := waitMade(ctx, ns, w, 60*time.Second, []made{claimsMade(ns, "app=db"), podsMade(ns, "app=db", 1)})
		must(t, err, "the StatefulSet's claim and pod")
		must(t, statefulSetFacts("db")(ctx, ns), "what the statefulset controller copied")
		claim, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data-db-0", metav1.GetOptions{})
		must(t, err, "the claim data-db-0")
		fmt.Printf("    claims: StatefulSet db made %s (claim %s, finalizers %v)\n", strings.Join(summary, ", "), claim.Name, claim.Finalizers)

		time.Sleep(time.Second) // the collector's informers see the new objects
		start := time.Now()
		must(t, admin.CoreV1().Pods(ns).Delete(ctx, w.Name(), metav1.DeleteOptions{}), "delete the worker")
		gets := []struct {
			what string
			get  func(context.Context) error
		}{
			{"pod db-0", func(ctx context.Context) error {
				_, err := admin.CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{})
				return err
			}},
			{"claim data-db-0", func(ctx context.Context) error {
				_, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data-db-0", metav1.GetOptions{})
				return err
			}},
			{"StatefulSet db", func(ctx context.Context) error {
				_, err := admin.AppsV1().StatefulSets(ns).Get(ctx, "db", metav1.GetOptions{})
				return err
			}},
		}
		for _, g := range gets {
			if _, err := gone(ctx, 60*time.Second, g.get); err != nil {
				state := "claim gone"
				if claim, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data-db-0", metav1.GetOptions{}); err == nil {
					state = fmt.Sprintf("claim finalizers %v, deletion %v", claim.Finalizers, claim.DeletionTimestamp)
				}
				t.Errorf("%s not collected 60 s after the worker's deletion: %v (%s); the controller manager: %s",
					g.what, err, state, harness.Grep(plane.KCM.Log, ns+"/", 5))
				continue
			}
			fmt.Printf("    claims: %s collected %.2f s after the worker's deletion\n", g.what, time.Since(start).Seconds())
		}
	})

	// The statefulset controller copies a claim template's metadata whole
	// onto each claim, ownerReferences included (shown here on a
	// StatefulSet ownerguard never sees): a labelled StatefulSet whose
	// claim template names another worker is therefore refused up front,
	// or each of its claims would be owned by that worker too.
	t.Run("AClaimTemplateCarryingAPodReferenceIsRefused", func(t *testing.T) {
		ctx := ctxFor(t, 2*time.Minute)
		ns := newNamespace(t, "claims", walkRules())
		w := newWorker(t, ns, "worker-sts-ref")
		other := newPod(t, ns, "worker-other")
		toOther := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: other.Name, UID: other.UID,
			Controller: ptr(false), BlockOwnerDeletion: ptr(false)}}

		unlabelled := statefulSet("plain", w, false)
		unlabelled.Labels = map[string]string{"app": "plain"}
		unlabelled.Spec.Selector.MatchLabels = map[string]string{"app": "plain"}
		unlabelled.Spec.Template.Labels = map[string]string{"app": "plain"}
		unlabelled.Spec.VolumeClaimTemplates[0].Labels = map[string]string{"app": "plain"}
		unlabelled.Spec.VolumeClaimTemplates[0].OwnerReferences = toOther
		_, err := admin.AppsV1().StatefulSets(ns).Create(ctx, unlabelled, metav1.CreateOptions{})
		must(t, err, "create an unlabelled StatefulSet whose claim template names a pod")
		must(t, harness.Until(ctx, 60*time.Second, 250*time.Millisecond, "the claim of the unlabelled StatefulSet", func() error {
			claim, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data-plain-0", metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, ref := range claim.OwnerReferences {
				if ref.Kind == "Pod" && ref.UID == other.UID {
					return nil
				}
			}
			return fmt.Errorf("claim data-plain-0 has ownerReferences %v, not the template's", claim.OwnerReferences)
		}), "the statefulset controller copies the claim template's references")

		labelled := statefulSet("db", w, false)
		labelled.Spec.VolumeClaimTemplates[0].OwnerReferences = toOther
		_, err = w.Client.AppsV1().StatefulSets(ns).Create(ctx, labelled, metav1.CreateOptions{})
		code, message := denial(err)
		if code != 400 || !strings.Contains(message, "spec.volumeClaimTemplates[0] carries ownerReferences[0] naming Pod '"+other.Name+"'") ||
			!strings.Contains(message, "remove ownerReferences from spec.volumeClaimTemplates[0].metadata") {
			t.Fatalf("the labelled StatefulSet whose claim template names %s: %v, want refused 400 naming the template's reference", other.Name, err)
		}
	})

	t.Run("AgentPodGetsItsEphemeralClaim", func(t *testing.T) {
		ctx := ctxFor(t, 2*time.Minute)
		ns := newNamespace(t, "claims", walkRules())
		w := newWorker(t, ns, "worker-eph")
		_, err := w.Client.CoreV1().Pods(ns).Create(ctx, ephemeralAgent("scratch-agent", w, false), metav1.CreateOptions{})
		must(t, err, "create the agent pod with a labelled ephemeral claim template as the worker")
		_, err = waitMade(ctx, ns, w, 60*time.Second, []made{claimsMade(ns, "app=scratch-agent")})
		must(t, err, "the agent's ephemeral claim")
		must(t, ephemeralFacts("scratch-agent")(ctx, ns), "what the ephemeral-volume controller copied")
	})
}

// --- Item 2: the cluster-wide switch never refuses Kubernetes itself ---------

// setClusterWide turns the chart's validation.allPodOwnerReferences on or
// off on the installed release (helm upgrade --reuse-values) and waits
// until the API server acts on it: a create with a Pod reference the
// collector cannot resolve (a pod that does not exist) is refused by
// /validate-all when on, admitted when off.
func setClusterWide(t *testing.T, on bool) {
	t.Helper()
	ctx := ctxFor(t, 3*time.Minute)
	_, err := plane.Helm(ctx, "upgrade", releaseName, chartDir(), "--namespace", releaseNamespace, "--reuse-values",
		"--set", fmt.Sprintf("validation.allPodOwnerReferences.enabled=%v", on))
	must(t, err, "helm upgrade --set validation.allPodOwnerReferences.enabled")
	probe := configMap("", nil)
	probe.GenerateName = "cluster-wide-probe-"
	probe.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "no-such-pod",
		UID: types.UID(uuid.NewUUID()), Controller: ptr(false), BlockOwnerDeletion: ptr(false)}}
	prefix := fmt.Sprintf("admission webhook %q denied the request: ", "validate-all.ownerguard.io")
	must(t, harness.Until(ctx, 30*time.Second, 250*time.Millisecond, "the switch in force", func() error {
		cm, err := admin.CoreV1().ConfigMaps("default").Create(ctx, probe.DeepCopy(), metav1.CreateOptions{})
		if err == nil {
			_ = admin.CoreV1().ConfigMaps("default").Delete(ctx, cm.Name, metav1.DeleteOptions{})
		}
		_, message := denial(err)
		refused := err != nil && strings.HasPrefix(message, prefix)
		if refused != on {
			return fmt.Errorf("a reference to a missing pod: %v, want refused by /validate-all: %v", err, on)
		}
		return nil
	}), "the cluster-wide switch")
}

// resourceV1Served: the API server serves resource.k8s.io/v1 resourceclaims.
func resourceV1Served() error {
	list, err := admin.Discovery().ServerResourcesForGroupVersion("resource.k8s.io/v1")
	if err != nil {
		return err
	}
	for _, r := range list.APIResources {
		if r.Name == "resourceclaims" {
			return nil
		}
	}
	return errors.New("resource.k8s.io/v1 serves no resourceclaims")
}

// TestClusterWideSwitch: with validation.allPodOwnerReferences on, the
// claims that the ephemeral-volume and resource-claim controllers make
// (controller: true, blockOwnerDeletion: true, a reference the API
// server's permission check judges) are admitted by /validate-all, and
// the pods get their claims.
func TestClusterWideSwitch(t *testing.T) {
	setClusterWide(t, true)
	t.Cleanup(func() { setClusterWide(t, false) })
	// calls: the creates of resource /validate-all answered so far.
	calls := func(resource string) float64 {
		n, _ := guard.Metric("ownerguard_admission_requests_total", map[string]string{"webhook": "validate-all", "operation": "CREATE", "resource": resource})
		return n
	}
	// checkControllerClaim: the claim holds the controller's own reference
	// to the pod, blocking as that controller writes it on this minor,
	// untouched (/validate-all never patches), and the template's labels
	// verbatim; ownerguard was asked.
	checkControllerClaim := func(t *testing.T, meta metav1.ObjectMeta, pod *corev1.Pod, labels map[string]string, resource string, blocking bool, before float64) {
		t.Helper()
		c := metav1.GetControllerOf(&meta)
		if len(meta.OwnerReferences) != 1 || c == nil || c.APIVersion != "v1" || c.Kind != "Pod" || c.Name != pod.Name ||
			c.UID != pod.UID || (c.BlockOwnerDeletion != nil && *c.BlockOwnerDeletion) != blocking {
			t.Fatalf("%s: want the controller's one reference {v1, Pod, %s, controller: true, blockOwnerDeletion: %v}, have %s",
				meta.Name, pod.Name, blocking, refsString(meta.OwnerReferences))
		}
		for k, v := range labels {
			if meta.Labels[k] != v {
				t.Fatalf("%s: labels %v, want the template's %v", meta.Name, meta.Labels, labels)
			}
		}
		if after := calls(resource); after <= before {
			t.Fatalf("/validate-all answered no create (%v before, %v after): the claim never reached ownerguard", before, after)
		}
	}

	t.Run("EphemeralVolumeClaimOfAPodAdmitted", func(t *testing.T) {
		ctx := ctxFor(t, 2*time.Minute)
		ns := newNamespace(t, "clusterwide", nil)
		before := calls("persistentvolumeclaims")
		labels := map[string]string{"app": "scratch"}
		pod := agentPod("scratch", nil)
		pod.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
			VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: claimSpec()},
		}}}}
		pod, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		must(t, err, "create a pod with a generic ephemeral volume")
		var claim *corev1.PersistentVolumeClaim
		must(t, untilUnrefused(ctx, ns, 60*time.Second, "the ephemeral claim", func() error {
			claim, err = admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "scratch-scratch", metav1.GetOptions{})
			return err
		}), "the ephemeral-volume controller's claim")
		// The ephemeral-volume controller writes a blocking reference on
		// every minor.
		checkControllerClaim(t, claim.ObjectMeta, pod, labels, "persistentvolumeclaims", true, before)
		fmt.Printf("    cluster-wide: ephemeral claim %s admitted with %s\n", claim.Name, refsString(claim.OwnerReferences))
	})

	t.Run("ResourceClaimFromTemplateAdmitted", func(t *testing.T) {
		ctx := ctxFor(t, 2*time.Minute)
		needsMinor(t, 34, "1.33 serves no resource.k8s.io version by default (DRA is beta and off); resource.k8s.io/v1 is GA from 1.34")
		ns := newNamespace(t, "clusterwide", nil)
		must(t, resourceV1Served(), "resource.k8s.io/v1 (DRA, GA in Kubernetes 1.34)")
		started, err := plane.StartedControllers()
		must(t, err, "ask the controller manager which controllers it started")
		if !started["resourceclaim-controller"] {
			t.Fatalf("the controller manager did not start resourceclaim-controller: %s", harness.Grep(plane.KCM.Log, "resourceclaim", 3))
		}
		before := calls("resourceclaims")
		labels := map[string]string{"app": "accel"}
		_, err = admin.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, &resourcev1.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: "accel"},
			Spec: resourcev1.ResourceClaimTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
					Name: "accel", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "accel.e2e.ownerguard.io"},
				}}}},
			},
		}, metav1.CreateOptions{})
		must(t, err, "create a ResourceClaimTemplate")
		pod := agentPod("accel", nil)
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "accel", ResourceClaimTemplateName: ptr("accel")}}
		pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "accel"}}
		pod, err = admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		must(t, err, "create a pod with a templated resource claim")
		var claim *resourcev1.ResourceClaim
		must(t, untilUnrefused(ctx, ns, 60*time.Second, "the resource claim", func() error {
			list, err := admin.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			if len(list.Items) == 0 {
				return errors.New("no ResourceClaim yet")
			}
			claim = &list.Items[0]
			return nil
		}), "the resource-claim controller's claim")
		// The resource-claim controller's reference blocks up to 1.34 and
		// no longer from 1.35 (kubernetes#134956).
		checkControllerClaim(t, claim.ObjectMeta, pod, labels, "resourceclaims", serverMinor < 35, before)
		fmt.Printf("    cluster-wide: resource claim %s admitted with %s\n", claim.Name, refsString(claim.OwnerReferences))
	})
}

// --- Item 6: a finished owner is no owner ----------------------------------

// finish writes the phase the kubelet would write once the pod's
// containers have ended, through the status subresource.
func finish(t *testing.T, pod *corev1.Pod, phase corev1.PodPhase) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	current, err := admin.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	must(t, err, "get "+pod.Name)
	current.Status.Phase = phase
	if phase == corev1.PodFailed {
		current.Status.Reason, current.Status.Message = "Evicted", "The node was low on resource: memory."
	}
	_, err = admin.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, current, metav1.UpdateOptions{})
	must(t, err, fmt.Sprintf("set %s to phase %s", pod.Name, phase))
}

// refusedAsFinished: err is ownerguard's 403 that names the owner and
// says it has finished.
func refusedAsFinished(err error, owner string) error {
	if err == nil {
		return errors.New("admitted")
	}
	code, message, ok := isOwnerguardDenial(err)
	if !ok || code != 403 || !strings.Contains(message, "'"+owner+"'") || !strings.Contains(strings.ToLower(message), "finished") {
		return fmt.Errorf("refused %d %q; want ownerguard's 403 naming %s and saying it has finished", code, message, owner)
	}
	return nil
}

// untilRefusedAsFinished creates agents (generateName) with client until
// one is refused as finished, at most 10 s: ownerguard may learn the
// phase from a watch a moment after the status update. Agents admitted
// meanwhile are deleted and counted; the refusal's message is returned.
func untilRefusedAsFinished(ctx context.Context, t *testing.T, client *kubernetes.Clientset, ns, owner string, labels map[string]string) (string, int) {
	t.Helper()
	admitted, message := 0, ""
	must(t, harness.Until(ctx, 10*time.Second, 200*time.Millisecond, "refused as finished", func() error {
		agent := agentPod("", labels)
		agent.GenerateName = "agent-of-" + owner + "-"
		created, err := client.CoreV1().Pods(ns).Create(ctx, agent, metav1.CreateOptions{})
		if err == nil {
			admitted++
			_ = admin.CoreV1().Pods(ns).Delete(ctx, created.Name, metav1.DeleteOptions{})
		}
		_, message, _ = isOwnerguardDenial(err)
		return refusedAsFinished(err, owner)
	}), "an agent for the finished "+owner)
	return message, admitted
}

// TestFinishedOwner: a pod in phase Failed or Succeeded owns nothing new
// (SPEC rule 11): an agent created for it is refused 403 with a message
// that says the owner has finished, whether the pod finished a moment
// before the create, while ownerguard's watch ran (the owner already
// cached as running), or before ownerguard started (its first list).
func TestFinishedOwner(t *testing.T) {
	ns := newNamespace(t, "finished", workerRules)
	report := func(t *testing.T, what, message string, admitted int) {
		t.Logf("%s: refused (%d admitted before): %s", what, admitted, message)
		fmt.Printf("    finished: %s refused, %d admitted before: %s\n", what, admitted, message)
	}

	for _, phase := range []corev1.PodPhase{corev1.PodFailed, corev1.PodSucceeded} {
		t.Run(string(phase)+"OwnerRefused", func(t *testing.T) {
			ctx := ctxFor(t, time.Minute)
			w := newWorker(t, ns, "worker-"+strings.ToLower(string(phase)))
			finish(t, w.Pod, phase)
			// By a user naming the uid, and by the finished worker itself
			// (its pod-bound token still works while its object exists).
			message, admitted := untilRefusedAsFinished(ctx, t, admin, ns, w.Name(), ownedLabels(w.Name(), w.UID()))
			report(t, string(phase)+" owner, by a user", message, admitted)
			message, admitted = untilRefusedAsFinished(ctx, t, w.Client, ns, w.Name(), ownedLabels(w.Name(), ""))
			report(t, string(phase)+" owner, by itself", message, admitted)
		})
	}

	t.Run("FinishedWhileTheWatchRanRefused", func(t *testing.T) {
		ctx := ctxFor(t, time.Minute)
		w := newWorker(t, ns, "worker-watched")
		_, err := w.Client.CoreV1().Pods(ns).Create(ctx, agentPod("while-running", ownedLabels(w.Name(), "")), metav1.CreateOptions{})
		must(t, err, "an agent while the owner runs")
		finish(t, w.Pod, corev1.PodSucceeded)
		message, admitted := untilRefusedAsFinished(ctx, t, admin, ns, w.Name(), ownedLabels(w.Name(), w.UID()))
		report(t, "owner that finished under the watch", message, admitted)
	})

	t.Run("FinishedBeforeOwnerguardStartedRefused", func(t *testing.T) {
		ctx := ctxFor(t, 3*time.Minute)
		w := newWorker(t, ns, "worker-before-start")
		restart := stopGuard(t)
		finish(t, w.Pod, corev1.PodFailed)
		restart()
		message, admitted := untilRefusedAsFinished(ctx, t, admin, ns, w.Name(), ownedLabels(w.Name(), w.UID()))
		report(t, "owner that failed before ownerguard started", message, admitted)
	})
}
