package harness

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// Helm runs the helm binary as the admin; it returns standard output
// (standard error goes into the error, when there is one).
func (p *Plane) Helm(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(p.Bin, "helm"), args...)
	home := filepath.Join(p.Work, "helm")
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+p.AdminKubeconfig,
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), stderr.String())
	}
	return out.String(), nil
}

// Ownerguard is `ownerguard serve` running in place of the chart's pods.
type Ownerguard struct {
	*Process
	Addr        string // ClusterIP:port, where the API server calls it
	MetricsAddr string
	CAFile      string // the chart's CA, which the caBundle holds
	ServerName  string // <service>.<namespace>.svc
	Args        []string
}

// Installation is what `helm install` made, read back from the API server.
type Installation struct {
	Namespace, Name string // release namespace, full name of its objects
	ClusterIP       string
	Port            int32 // the Service's https port
	Args            []string
	Env             []string
	SecretName      string
	ServiceAccount  string
}

// ReadInstallation reads the Deployment, Service and Secret the chart made.
func ReadInstallation(ctx context.Context, c kubernetes.Interface, namespace, name string) (*Installation, error) {
	dep, err := c.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	svc, err := c.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	in := &Installation{Namespace: namespace, Name: name, ClusterIP: svc.Spec.ClusterIP,
		ServiceAccount: dep.Spec.Template.Spec.ServiceAccountName}
	for _, port := range svc.Spec.Ports {
		if port.Name == "https" {
			in.Port = port.Port
		}
	}
	if in.Port == 0 || in.ClusterIP == "" || in.ClusterIP == "None" {
		return nil, fmt.Errorf("service %s/%s has no ClusterIP and https port", namespace, name)
	}
	container := dep.Spec.Template.Spec.Containers[0]
	in.Args = append(in.Args, container.Args...)
	for _, e := range container.Env {
		in.Env = append(in.Env, e.Name+"="+e.Value)
	}
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			in.SecretName = v.Secret.SecretName
		}
	}
	if in.SecretName == "" {
		return nil, fmt.Errorf("deployment %s/%s mounts no secret", namespace, name)
	}
	return in, nil
}

// AssignIP gives ip to the namespace's interface og0 (idempotent), so
// that what listens there is reached at the Service's ClusterIP.
func AssignIP(ip string) error {
	out, err := exec.Command("ip", "addr", "replace", ip+"/32", "dev", "og0").CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip addr replace %s/32 dev og0: %v: %s", ip, err, out)
	}
	return nil
}

// ServeOptions change how the chart's ownerguard is run.
type ServeOptions struct {
	Name        string   // process and log name
	Kubeconfig  string   // the identity it runs as
	ExtraArgs   []string // appended (e.g. --record DIR)
	MetricsPort int      // 9090 when 0
	Addr        string   // default: ClusterIP:port of the Service
}

// Serve runs ownerguard with the chart's args and env, the certificate
// from the chart's Secret, listening on the Service's ClusterIP and port
// (kube-proxy would forward that to the pod's 8443; here the process is
// the pod). It waits for /readyz.
func (p *Plane) Serve(ctx context.Context, c kubernetes.Interface, in *Installation, opt ServeOptions) (*Ownerguard, error) {
	secret, err := c.CoreV1().Secrets(in.Namespace).Get(ctx, in.SecretName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(p.Work, "ownerguard", opt.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	for _, f := range []string{"tls.crt", "tls.key", "ca.crt"} {
		if data, ok := secret.Data[f]; ok {
			if err := os.WriteFile(filepath.Join(dir, f), data, 0o600); err != nil {
				return nil, err
			}
		}
	}
	addr := opt.Addr
	if addr == "" {
		if err := AssignIP(in.ClusterIP); err != nil {
			return nil, err
		}
		addr = net.JoinHostPort(in.ClusterIP, strconv.Itoa(int(in.Port)))
	}
	metricsPort := opt.MetricsPort
	if metricsPort == 0 {
		metricsPort = 9090
	}
	metrics := "127.0.0.1:" + strconv.Itoa(metricsPort)
	var args []string
	for _, a := range in.Args {
		switch {
		case strings.HasPrefix(a, "--addr="):
			a = "--addr=" + addr
		case strings.HasPrefix(a, "--metrics-addr="):
			a = "--metrics-addr=" + metrics
		case strings.HasPrefix(a, "--tls-cert="):
			a = "--tls-cert=" + filepath.Join(dir, "tls.crt")
		case strings.HasPrefix(a, "--tls-key="):
			a = "--tls-key=" + filepath.Join(dir, "tls.key")
		}
		args = append(args, a)
	}
	args = append(args, opt.ExtraArgs...)
	env := append([]string{"KUBECONFIG=" + opt.Kubeconfig}, in.Env...)
	bin := os.Getenv("OWNERGUARD_BIN")
	if bin == "" {
		return nil, fmt.Errorf("OWNERGUARD_BIN is not set (run e2e/run)")
	}
	proc, err := Start(opt.Name, p.Logs, env, bin, args...)
	if err != nil {
		return nil, err
	}
	og := &Ownerguard{Process: proc, Addr: addr, MetricsAddr: metrics, CAFile: filepath.Join(dir, "ca.crt"),
		ServerName: in.Name + "." + in.Namespace + ".svc", Args: args}
	if err := WaitHTTP(ctx, proc, &http.Client{Timeout: 2 * time.Second}, "http://"+metrics+"/readyz", "", 60*time.Second); err != nil {
		proc.Stop(5 * time.Second)
		return nil, err
	}
	return og, nil
}

// ChartPods are the pods the Deployment's ReplicaSet made for the chart;
// they never run (no kubelet, no scheduler). want 0: the Deployment's replicas.
func ChartPods(ctx context.Context, c kubernetes.Interface, in *Installation, want int) ([]corev1.Pod, error) {
	dep, err := c.AppsV1().Deployments(in.Namespace).Get(ctx, in.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if want == 0 && dep.Spec.Replicas != nil {
		want = int(*dep.Spec.Replicas)
	}
	selector := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels).String()
	var pods []corev1.Pod
	err = Until(ctx, 60*time.Second, 250*time.Millisecond, "the chart's pods", func() error {
		list, err := c.CoreV1().Pods(in.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}
		pods = pods[:0]
		for _, pod := range list.Items {
			if pod.DeletionTimestamp == nil {
				pods = append(pods, pod)
			}
		}
		if len(pods) < want {
			return fmt.Errorf("%d of %d", len(pods), want)
		}
		return nil
	})
	return pods, err
}

// ServiceAccountKubeconfig writes a kubeconfig with a token of the
// chart's ServiceAccount bound to one of its pods, as the kubelet projects
// it into the pod: ownerguard then runs with exactly the chart's RBAC.
func (p *Plane) ServiceAccountKubeconfig(ctx context.Context, c kubernetes.Interface, in *Installation, pod corev1.Pod, path string) error {
	expiry := int64(4 * 3600)
	tr, err := c.CoreV1().ServiceAccounts(in.Namespace).CreateToken(ctx, in.ServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &expiry,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	return Kubeconfig(path, APIURL(APIPort), p.PKI.CAFile, tr.Status.Token)
}

// MarkReady writes the status the kubelet would write once the readiness
// probe (/readyz) passes: ownerguard stands in for the chart's pods, so
// their readiness is its readiness. The ReplicaSet and Deployment
// controllers then count them ready, as in a cluster.
func MarkReady(ctx context.Context, c kubernetes.Interface, pods []corev1.Pod, podIP string) error {
	now := metav1.Now()
	for _, pod := range pods {
		pod.Status.Phase = corev1.PodRunning
		pod.Status.PodIP = podIP
		pod.Status.PodIPs = []corev1.PodIP{{IP: podIP}}
		pod.Status.StartTime = &now
		pod.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
		if _, err := c.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, &pod, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("status of %s: %w", pod.Name, err)
		}
	}
	return nil
}

// Metric sums the samples of ownerguard's /metrics named name whose
// labels include every pair of labels.
func (og *Ownerguard) Metric(name string, labels map[string]string) (float64, error) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + og.MetricsAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return 0, err
	}
	sum, found := 0.0, false
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		metric, labelText, _ := strings.Cut(strings.TrimSuffix(series, "}"), "{")
		if metric != name {
			continue
		}
		match := true
		for k, v := range labels {
			if !strings.Contains(","+labelText+",", ","+k+"=\""+v+"\",") {
				match = false
			}
		}
		if !match {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", line, err)
		}
		sum, found = sum+f, true
	}
	if !found {
		return 0, fmt.Errorf("no %s%v in /metrics", name, labels)
	}
	return sum, nil
}
