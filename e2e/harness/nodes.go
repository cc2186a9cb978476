package harness

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// A cluster that runs pods: the real kube-scheduler and kubemark's hollow
// nodes (the real kubelet, its container runtime a fake one that "runs"
// every container at once and keeps it running), both built from the
// pinned k8s.io/kubernetes. A pod is scheduled, its phases and status are
// written by a kubelet, and its graceful deletion is confirmed by the
// node, as in a cluster; no process of the pod runs, so nothing in it can
// be exec'd, logged or reached over the network.

// The users the bootstrap RBAC policy (and the Node authorizer) give the
// scheduler's and a kubelet's permissions.
const (
	SchedulerUser = "system:kube-scheduler"
	NodeGroup     = "system:nodes"
)

// NodeUser is the user of hollow node name: system:node:<name>, as the
// Node authorizer and the NodeRestriction admission plugin know it.
func NodeUser(name string) string { return "system:node:" + name }

// HollowNodeName is the name of the i-th hollow node.
func HollowNodeName(i int) string { return "hollow-node-" + strconv.Itoa(i) }

// NodeIdentities are the static tokens the scheduler and n hollow nodes
// call the API server with (Config.Identities).
func NodeIdentities(n int) (scheduler Identity, nodes []Identity) {
	scheduler = Identity{Token: RandomToken(), User: SchedulerUser}
	for i := 0; i < n; i++ {
		nodes = append(nodes, Identity{Token: RandomToken(), User: NodeUser(HollowNodeName(i)), Groups: []string{NodeGroup}})
	}
	return scheduler, nodes
}

// NodeAPIServerArgs: the Node authorizer before RBAC and the
// NodeRestriction admission plugin, as kubeadm sets them, so that each
// kubelet may touch only its own node and the pods bound to it.
var NodeAPIServerArgs = []string{
	"--authorization-mode=Node,RBAC",
	"--enable-admission-plugins=NodeRestriction,OwnerReferencesPermissionEnforcement",
	// Pods that ask for privileged containers are admitted, as on kubeadm's
	// clusters (nothing runs: the runtime is a fake one).
	"--allow-privileged=true",
}

// StorageKCMArgs: the controller manager's own host-path provisioner (for
// a single-machine cluster, as here), so that claims of the default
// StorageClass (DefaultStorageClass) are bound, a StatefulSet's among them.
var StorageKCMArgs = []string{"--enable-hostpath-provisioner=true"}

// DefaultStorageClass provisions volumes with the controller manager's
// host-path provisioner; the claims that name no class get it.
func DefaultStorageClass(ctx context.Context, c kubernetes.Interface) error {
	_, err := c.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta:  metav1.ObjectMeta{Name: "standard", Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner: "kubernetes.io/host-path",
	}, metav1.CreateOptions{})
	return err
}

// StartScheduler starts kube-scheduler with token and waits for its
// /healthz. With a schedulerName, its one profile has that name: it
// schedules only the pods that ask for it (spec.schedulerName), and leaves
// every other pod as it is (no status written, no event).
func (p *Plane) StartScheduler(ctx context.Context, token, schedulerName string) error {
	kubeconfig := filepath.Join(p.Work, "scheduler.kubeconfig")
	if err := Kubeconfig(kubeconfig, APIURL(APIPort), p.PKI.CAFile, token); err != nil {
		return err
	}
	args := []string{
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=10259",
		"--profiling=false",
	}
	qps := ""
	if p.SchedulerQPS > 0 {
		qps = fmt.Sprintf("\n  qps: %d\n  burst: %d", p.SchedulerQPS, 2*p.SchedulerQPS)
	}
	if schedulerName == "" {
		args = append(args, "--kubeconfig="+kubeconfig, "--leader-elect=false")
		if p.SchedulerQPS > 0 {
			args = append(args, fmt.Sprintf("--kube-api-qps=%d", p.SchedulerQPS), fmt.Sprintf("--kube-api-burst=%d", 2*p.SchedulerQPS))
		}
	} else {
		// With --config, the client and leader election come from it.
		config := filepath.Join(p.Work, "scheduler.yaml")
		data := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q%s
leaderElection:
  leaderElect: false
profiles:
- schedulerName: %q
`, kubeconfig, qps, schedulerName)
		if err := os.WriteFile(config, []byte(data), 0o600); err != nil {
			return err
		}
		args = append(args, "--config="+config)
	}
	proc, err := Start("kube-scheduler", p.Logs, nil, filepath.Join(p.PlaneBin, "kube-scheduler"), args...)
	if err != nil {
		return err
	}
	p.Scheduler = proc
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 5 * time.Second}
	return WaitHTTP(ctx, proc, insecure, "https://127.0.0.1:10259/healthz", "", 120*time.Second)
}

// StartHollowNodes starts one hollow kubelet per identity (NodeIdentities)
// and waits until every node is Ready. Its Node carries taints from the
// start (as a provisioner registers it): only the pods that tolerate them
// run there.
func (p *Plane) StartHollowNodes(ctx context.Context, nodes []Identity, taints ...corev1.Taint) error {
	admin := p.Admin()
	for i, id := range nodes {
		name := HollowNodeName(i)
		// The Node object first, as a cloud's node controller or a
		// provisioner writes it: the kubelet's CSINode set-up reads it at
		// once and, finding none, retries only after 140 s, with the
		// node NotReady until then. The kubelet registers into it.
		_, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
			Spec: corev1.NodeSpec{Taints: taints}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		kubeconfig := filepath.Join(p.Work, name+".kubeconfig")
		if err := Kubeconfig(kubeconfig, APIURL(APIPort), p.PKI.CAFile, id.Token); err != nil {
			return err
		}
		proc, err := Start(name, p.Logs, nil, filepath.Join(p.PlaneBin, "kubemark"), append([]string{
			"--morph=kubelet",
			"--name=" + name,
			"--kubeconfig=" + kubeconfig,
			// Each kubelet of this one network namespace on ports of its own.
			"--kubelet-port=" + strconv.Itoa(10250+10*i),
			"--kubelet-read-only-port=0",
			// The fake runtime's images: nothing to pull.
			"--use-host-image-service=false",
			"--max-pods=110",
			"--kube-api-qps=50",
			"--kube-api-burst=100",
			"--kube-api-content-type=application/vnd.kubernetes.protobuf",
		}, p.HollowNodeArgs...)...)
		if err != nil {
			return err
		}
		p.HollowNodes = append(p.HollowNodes, proc)
	}
	err := Until(ctx, 120*time.Second, 500*time.Millisecond, "every hollow node Ready", func() error {
		for i := range nodes {
			node, err := admin.CoreV1().Nodes().Get(ctx, HollowNodeName(i), metav1.GetOptions{})
			if err != nil {
				return err
			}
			why := "no Ready condition"
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady {
					why = fmt.Sprintf("Ready %s: %s: %s", c.Status, c.Reason, c.Message)
					if c.Status == corev1.ConditionTrue {
						why = ""
					}
				}
			}
			if why != "" {
				return fmt.Errorf("node %s: %s", node.Name, why)
			}
		}
		return nil
	})
	if err != nil || len(taints) == 0 {
		return err
	}
	// The API server tainted each new Node not-ready; the node-lifecycle
	// controller lifts that once the node is Ready, where it runs. Where
	// it does not (e2e/run: it would evict the stand-in node's pods), the
	// node's own taints are set back here, as it would leave them.
	for i := range nodes {
		node, err := admin.CoreV1().Nodes().Get(ctx, HollowNodeName(i), metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Spec.Taints = taints
		if _, err := admin.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("node %s: its taints: %w", node.Name, err)
		}
	}
	return nil
}
