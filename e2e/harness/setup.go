package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// The installation the suite and the benchmark use: release "ownerguard"
// of the chart with default values, in namespace "ownerguard".
const (
	ReleaseNamespace = "ownerguard"
	ReleaseName      = "ownerguard"
)

// Cluster is a running control plane with ownerguard installed by Helm
// and serving in place of the chart's pods.
type Cluster struct {
	Plane *Plane
	Admin *kubernetes.Clientset
	Inst  *Installation
	Guard *Ownerguard

	// The scenarios' kubelet: the credentials of the scheduler and the
	// hollow node Up starts.
	scheduler Identity
	nodes     []Identity
}

// The scenarios that need a kubelet (a worker whose phase the kubelet
// writes, a graceful deletion its node confirms) ask for it: their pods
// name KubeletScheduler, the real kube-scheduler's one profile, and
// tolerate KubeletTaint, the taint of the one hollow node (kubemark: the
// real kubelet with a fake container runtime). Every other pod stays as
// the scenarios make it: unscheduled, its status theirs to write, and
// the chart's pods run by the Node stand-in.
const KubeletScheduler = "ownerguard-e2e-kubelet"

// KubeletTaint keeps every pod that does not tolerate it, a DaemonSet's
// among them, off the hollow node.
var KubeletTaint = corev1.Taint{Key: "e2e.ownerguard.io/kubelet", Effect: corev1.TaintEffectNoSchedule}

// Up starts etcd, the API server and the controller manager, installs the
// chart from repo/charts/ownerguard and runs ownerguard for it (recording
// into record when not empty). On an error, what started is stopped.
func Up(ctx context.Context, cfg Config, repo, record string) (*Cluster, error) {
	scheduler, nodes := NodeIdentities(1)
	cfg.Identities = append(append(cfg.Identities, scheduler), nodes...)
	plane, err := NewPlane(cfg)
	if err != nil {
		return nil, err
	}
	plane.APIServerArgs = append(plane.APIServerArgs, NodeAPIServerArgs...)
	if cfg.Tune != nil {
		cfg.Tune(plane)
	}
	c := &Cluster{Plane: plane, scheduler: scheduler, nodes: nodes}
	if err := c.up(ctx, repo, record); err != nil {
		c.Down()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) up(ctx context.Context, repo, record string) error {
	plane := c.Plane
	if Mode() == "image" {
		// Before anything starts: the image must hold this very build.
		if err := CheckImage(ctx, Image(), os.Getenv("OWNERGUARD_BIN")); err != nil {
			return err
		}
	}
	if err := plane.StartEtcd(ctx); err != nil {
		return err
	}
	if err := plane.StartAPIServer(ctx, APIPort); err != nil {
		return err
	}
	c.Admin = plane.Admin()
	if err := plane.StartKCM(ctx); err != nil {
		return err
	}
	if err := plane.StartScheduler(ctx, c.scheduler.Token, KubeletScheduler); err != nil {
		return err
	}
	if err := plane.StartHollowNodes(ctx, c.nodes, KubeletTaint); err != nil {
		return err
	}
	args := append([]string{"install", ReleaseName, Chart(repo),
		"--namespace", ReleaseNamespace, "--create-namespace"}, ChartSettings(Chart(repo))...)
	// E2E_HELM_SET: more values for this install, space-separated
	// key=value pairs (for a benchmark's variant, e.g. replicaCount=1).
	for _, set := range strings.Fields(os.Getenv("E2E_HELM_SET")) {
		args = append(args, "--set", set)
	}
	out, err := plane.Helm(ctx, args...)
	if err != nil {
		return err
	}
	fmt.Print(out)
	return c.StartGuard(ctx, record)
}

// StartGuard runs the chart's ownerguard as the chart's ServiceAccount
// (a token bound to one of its pods, as the kubelet would project it), at
// the Service's ClusterIP, and marks the chart's pods ready.
func (c *Cluster) StartGuard(ctx context.Context, record string) error {
	inst, err := ReadInstallation(ctx, c.Admin, ReleaseNamespace, ReleaseName)
	if err != nil {
		return err
	}
	c.Inst = inst
	pods, err := ChartPods(ctx, c.Admin, inst, 0)
	if err != nil {
		return err
	}
	token, err := PodToken(ctx, c.Admin, inst, pods[0])
	if err != nil {
		return err
	}
	opt := ServeOptions{Name: "ownerguard", Token: token, Record: record, Hostname: pods[0].Name}
	c.Guard, err = c.Plane.Serve(ctx, c.Admin, inst, opt)
	if err != nil {
		return err
	}
	return MarkReady(ctx, c.Admin, pods, inst.ClusterIP)
}

// Down stops ownerguard and the plane.
func (c *Cluster) Down() {
	if c.Guard != nil {
		c.Guard.Stop(30 * time.Second)
	}
	c.Plane.Stop()
}

// Chart is the chart the suite installs: repo/charts/ownerguard, or
// E2E_CHART (to try another branch's chart against this suite).
func Chart(repo string) string {
	if chart := os.Getenv("E2E_CHART"); chart != "" {
		return chart
	}
	return filepath.Join(repo, "charts", "ownerguard")
}

// ChartSettings are the values every install and render here sets: the
// image the suite runs in place of the chart's pods (OWNERGUARD_IMAGE;
// with E2E_OWNERGUARD=process, a name that never resolves) and, when the
// chart has one, no post-install check Job (no kubelet runs it: helm
// install would wait for it in vain).
func ChartSettings(chart string) []string {
	repository, tag := "e2e.invalid/ownerguard", "e2e"
	if Mode() == "image" {
		repository, tag = splitImage(Image())
	}
	settings := []string{"--set", "image.repository=" + repository, "--set", "image.tag=" + tag}
	if chartHasValue(chart, "check", "afterInstall") {
		settings = append(settings, "--set", "check.afterInstall=false")
	}
	// Events on the worker pods (off by default): the suite proves them.
	if chartHasValue(chart, "events", "enabled") {
		settings = append(settings, "--set", "events.enabled=true")
	}
	return settings
}

// chartHasValue: the chart's values.yaml defines key.sub.
func chartHasValue(chart, key, sub string) bool {
	data, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		return false
	}
	var values map[string]any
	if yaml.Unmarshal(data, &values) != nil {
		return false
	}
	m, ok := values[key].(map[string]any)
	if !ok {
		return false
	}
	_, ok = m[sub]
	return ok
}

// splitImage splits name:tag (a port in the registry's host is not a tag).
func splitImage(image string) (repository, tag string) {
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return image, "latest"
	}
	return image[:i], image[i+1:]
}
