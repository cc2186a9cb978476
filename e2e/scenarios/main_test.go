// Package scenarios is the end-to-end suite: every Test* is a scenario of
// issue 9 run against a real kube-apiserver, kube-controller-manager and
// etcd, with ownerguard installed by its Helm chart. Run it with e2e/run,
// which builds everything and makes the network namespace it needs.
//
// The tests run in the order of the files (01_…, 02_…) and share one
// cluster; each works in namespaces of its own.
package scenarios

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	"k8s.io/client-go/kubernetes"
)

const (
	releaseNamespace = harness.ReleaseNamespace
	releaseName      = harness.ReleaseName
	mutateWebhook    = "mutate.ownerguard.io"
	validateWebhook  = "validate.ownerguard.io"
	ownerPodLabel    = "ownerguard.io/owner-pod"
	ownerUIDLabel    = "ownerguard.io/owner-uid"
)

var (
	cluster   *harness.Cluster
	plane     *harness.Plane
	admin     *kubernetes.Clientset
	inst      *harness.Installation
	guard     *harness.Ownerguard // the chart's ownerguard, at the Service's ClusterIP
	recordDir string
	repo      string
	// serverMinor: the API server's minor version (37 for v1.37.2).
	serverMinor int
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	cfg, err := harness.ConfigFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
		return 1
	}
	repo = os.Getenv("E2E_REPO")
	recordDir = filepath.Join(cfg.Work, "record")
	start := time.Now()
	cluster, err = harness.Up(ctx, cfg, repo, recordDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
		return 1
	}
	defer cluster.Down()
	plane, admin, inst, guard = cluster.Plane, cluster.Admin, cluster.Inst, cluster.Guard
	if serverMinor, err = harness.ServerMinor(admin); err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
		return 1
	}
	fmt.Printf("setup: Kubernetes %s control plane up and ownerguard installed in %.1f s\n", os.Getenv("E2E_KUBE_VERSION"), time.Since(start).Seconds())
	return m.Run()
}
