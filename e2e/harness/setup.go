package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

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
}

// Up starts etcd, the API server and the controller manager, installs the
// chart from repo/charts/ownerguard and runs ownerguard for it (recording
// into record when not empty). On an error, what started is stopped.
func Up(ctx context.Context, cfg Config, repo, record string) (*Cluster, error) {
	plane, err := NewPlane(cfg)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Plane: plane}
	if err := c.up(ctx, repo, record); err != nil {
		c.Down()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) up(ctx context.Context, repo, record string) error {
	plane := c.Plane
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
	args := append([]string{"install", ReleaseName, Chart(repo),
		"--namespace", ReleaseNamespace, "--create-namespace"}, ChartSettings(Chart(repo))...)
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
	kubeconfig := filepath.Join(c.Plane.Work, "ownerguard-sa.kubeconfig")
	if err := c.Plane.ServiceAccountKubeconfig(ctx, c.Admin, inst, pods[0], kubeconfig); err != nil {
		return err
	}
	opt := ServeOptions{Name: "ownerguard", Kubeconfig: kubeconfig}
	if record != "" {
		opt.ExtraArgs = []string{"--record=" + record}
	}
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

// ChartSettings are the values every install and render here sets: an
// image name that never resolves (the chart's pods never run: ownerguard
// runs in their place) and, when the chart has one, no post-install check
// Job (no kubelet runs it: helm install would wait for it in vain).
func ChartSettings(chart string) []string {
	settings := []string{"--set", "image.repository=e2e.invalid/ownerguard", "--set", "image.tag=e2e"}
	if chartHasValue(chart, "check", "afterInstall") {
		settings = append(settings, "--set", "check.afterInstall=false")
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
