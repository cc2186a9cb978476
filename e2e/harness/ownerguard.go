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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// Helm runs Helm 4 (the chart's primary Helm) as the admin; it returns
// standard output (standard error goes into the error, when there is one).
func (p *Plane) Helm(ctx context.Context, args ...string) (string, error) {
	return p.helm(ctx, "helm", args...)
}

// Helm3 runs Helm 3 (the newest 3.x: releases users installed with it)
// the same way, with the same Helm home: both read the same releases.
func (p *Plane) Helm3(ctx context.Context, args ...string) (string, error) {
	return p.helm(ctx, "helm3", args...)
}

func (p *Plane) helm(ctx context.Context, binary string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(p.Bin, binary), args...)
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
		return out.String(), fmt.Errorf("%s %s: %v\n%s%s", binary, strings.Join(args, " "), err, out.String(), stderr.String())
	}
	return out.String(), nil
}

// Ownerguard is `ownerguard serve` running in place of one of the chart's
// pods: the image in a container (E2E_OWNERGUARD=image, the default), or
// the binary as a process (E2E_OWNERGUARD=process).
type Ownerguard struct {
	*Process             // the container's `podman run`, or the process
	Addr        string   // where the API server calls it (ClusterIP:port, or a pod's address)
	MetricsAddr string   // its /metrics, /healthz and /readyz
	CAFile      string   // the chart's CA, which the caBundle holds (ca.crt of the serving Secret)
	ServerName  string   // <service>.<namespace>.svc
	Args        []string // as it runs
	Container   string   // the podman container, empty for a process
	Image       string   // the image it runs (pulled by digest or the suite's), empty for a process
	TLS         *Volume  // the serving Secret's volume, as the kubelet writes it
	tlsSource   *corev1.SecretVolumeSource
	mounts      []mount
}

// Installation is what `helm install` made, read back from the API server.
type Installation struct {
	Namespace, Name string // release namespace, full name of its objects
	ClusterIP       string
	Port            int32 // the Service's https port
	TargetPort      int32 // the container port it forwards to
	Args            []string
	Env             []string
	SecretName      string
	ServiceAccount  string
	Image           string            // the container's image
	Selector        map[string]string // the Deployment's pod selector
	Pod             corev1.PodSpec    // the Deployment's pod template
}

// ReadInstallation reads the Deployment and Service the chart made.
func ReadInstallation(ctx context.Context, c kubernetes.Interface, namespace, name string) (*Installation, error) {
	dep, err := c.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	svc, err := c.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	spec := dep.Spec.Template.Spec
	in := &Installation{Namespace: namespace, Name: name, ClusterIP: svc.Spec.ClusterIP,
		ServiceAccount: spec.ServiceAccountName, Selector: dep.Spec.Selector.MatchLabels, Pod: spec}
	if len(spec.Containers) != 1 {
		return nil, fmt.Errorf("deployment %s/%s has %d containers, want 1", namespace, name, len(spec.Containers))
	}
	container := spec.Containers[0]
	for _, port := range svc.Spec.Ports {
		if port.Name != "https" {
			continue
		}
		in.Port = port.Port
		in.TargetPort = port.TargetPort.IntVal
		for _, cp := range container.Ports {
			if port.TargetPort.Type == intstr.String && cp.Name == port.TargetPort.StrVal {
				in.TargetPort = cp.ContainerPort
			}
		}
	}
	if in.Port == 0 || in.TargetPort == 0 || in.ClusterIP == "" || in.ClusterIP == "None" {
		return nil, fmt.Errorf("service %s/%s has no ClusterIP and https port", namespace, name)
	}
	in.Image = container.Image
	in.Args = append(in.Args, container.Args...)
	for _, e := range container.Env {
		// The template has no pod yet: its name is the Deployment's
		// until a pod's own spec is read (ForPod).
		value, err := envValue(e, namespace, name)
		if err != nil {
			return nil, fmt.Errorf("deployment %s/%s: %w", namespace, name, err)
		}
		in.Env = append(in.Env, e.Name+"="+value)
	}
	if v := in.tlsVolume(); v != nil {
		in.SecretName = v.Secret.SecretName
	}
	if in.SecretName == "" {
		return nil, fmt.Errorf("deployment %s/%s mounts no serving Secret (--tls-cert)", namespace, name)
	}
	return in, nil
}

// envValue is what the kubelet gives an env var: its value, or the pod's
// own namespace or name from the downward API (the only references the
// chart makes).
func envValue(e corev1.EnvVar, namespace, pod string) (string, error) {
	if e.ValueFrom == nil {
		return e.Value, nil
	}
	if f := e.ValueFrom.FieldRef; f != nil {
		switch f.FieldPath {
		case "metadata.namespace":
			return namespace, nil
		case "metadata.name":
			return pod, nil
		}
	}
	return "", fmt.Errorf("env %s from a reference the suite does not resolve", e.Name)
}

// ForPod is the installation as one of its pods runs it: the pod's own
// spec (after a rollout, the new template's), args and env.
func (in *Installation) ForPod(pod *corev1.Pod) (*Installation, error) {
	out := *in
	out.Pod = pod.Spec
	if len(pod.Spec.Containers) != 1 {
		return nil, fmt.Errorf("pod %s has %d containers, want 1", pod.Name, len(pod.Spec.Containers))
	}
	container := pod.Spec.Containers[0]
	out.Image, out.Args, out.Env = container.Image, append([]string(nil), container.Args...), nil
	for _, e := range container.Env {
		value, err := envValue(e, pod.Namespace, pod.Name)
		if err != nil {
			return nil, fmt.Errorf("pod %s: %w", pod.Name, err)
		}
		out.Env = append(out.Env, e.Name+"="+value)
	}
	v := out.tlsVolume()
	if v == nil {
		return nil, fmt.Errorf("pod %s mounts no serving Secret (--tls-cert)", pod.Name)
	}
	out.SecretName = v.Secret.SecretName
	return &out, nil
}

// ArgPort is the port of the flag's address (--addr=0.0.0.0:8443: 8443).
func (in *Installation) ArgPort(flag string) (string, error) {
	for _, a := range in.Args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			_, port, err := net.SplitHostPort(v)
			return port, err
		}
	}
	return "", fmt.Errorf("the container has no %s", flag)
}

// tlsVolume is the Secret volume mounted where --tls-cert points.
func (in *Installation) tlsVolume() *corev1.Volume {
	var certDir string
	for _, a := range in.Args {
		if v, ok := strings.CutPrefix(a, "--tls-cert="); ok {
			certDir = filepath.Dir(v)
		}
	}
	for _, m := range in.Pod.Containers[0].VolumeMounts {
		if filepath.Clean(m.MountPath) != certDir {
			continue
		}
		for i, v := range in.Pod.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				return &in.Pod.Volumes[i]
			}
		}
	}
	return nil
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
	Name string // container or process, and log, name
	// The bearer token it runs with: a token of the chart's
	// ServiceAccount bound to one of its pods (what the kubelet projects),
	// or an admin's.
	Token string
	// The API server it talks to (host:port): the real one when empty (at
	// the node address from a container, as a pod reaches it; on loopback
	// for a process), or a proxy of the test.
	APIServer   string
	ExtraArgs   []string // appended (a repeated flag overrides an earlier one)
	Record      string   // a host directory it records reviews into (--record)
	MetricsPort int      // 127.0.0.1:9090 when 0 and MetricsAddr is empty
	MetricsAddr string   // host:port of --metrics-addr
	Addr        string   // default: ClusterIP:port of the Service
	Hostname    string   // the pod's name, when it stands in for one
}

// Serve runs ownerguard as the chart's Deployment runs it: its args and
// env, its Secret (and ConfigMap) volumes written as the kubelet writes
// them and, from the image, mounted where the chart mounts them, under its
// securityContext, its resources, and a service-account volume holding
// opt.Token; it listens on the Service's ClusterIP and port (kube-proxy
// would forward that to the pod's 8443; here the container is the pod),
// the one flag changed with --metrics-addr. It waits for /readyz.
func (p *Plane) Serve(ctx context.Context, c kubernetes.Interface, in *Installation, opt ServeOptions) (*Ownerguard, error) {
	og, err := p.Launch(ctx, c, in, opt)
	if err != nil {
		return nil, err
	}
	if err := WaitHTTP(ctx, og.Process, &http.Client{Timeout: 2 * time.Second}, "http://"+og.MetricsAddr+"/readyz", "", 60*time.Second); err != nil {
		og.Stop(5 * time.Second)
		return nil, err
	}
	return og, nil
}

// Launch starts ownerguard as Serve does, without waiting for it.
func (p *Plane) Launch(ctx context.Context, c kubernetes.Interface, in *Installation, opt ServeOptions) (*Ownerguard, error) {
	if opt.Token == "" {
		return nil, fmt.Errorf("serve %s: no token", opt.Name)
	}
	dir := filepath.Join(p.Work, "ownerguard", opt.Name)
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	og := &Ownerguard{ServerName: in.Name + "." + in.Namespace + ".svc"}
	if err := og.projectVolumes(ctx, c, in, dir, opt.Token); err != nil {
		return nil, err
	}
	og.Addr = opt.Addr
	if og.Addr == "" {
		if err := AssignIP(in.ClusterIP); err != nil {
			return nil, err
		}
		og.Addr = net.JoinHostPort(in.ClusterIP, strconv.Itoa(int(in.Port)))
	}
	og.MetricsAddr = opt.MetricsAddr
	if og.MetricsAddr == "" {
		port := opt.MetricsPort
		if port == 0 {
			port = 9090
		}
		og.MetricsAddr = "127.0.0.1:" + strconv.Itoa(port)
	}
	for _, a := range in.Args {
		switch {
		case strings.HasPrefix(a, "--addr="):
			a = "--addr=" + og.Addr
		case strings.HasPrefix(a, "--metrics-addr="):
			a = "--metrics-addr=" + og.MetricsAddr
		}
		og.Args = append(og.Args, a)
	}
	var err error
	switch mode := Mode(); mode {
	case "image":
		err = p.runContainer(ctx, c, in, opt, og, dir)
	case "process":
		err = p.runProcess(in, opt, og, dir)
	default:
		err = fmt.Errorf("E2E_OWNERGUARD=%s: want image or process", mode)
	}
	if err != nil {
		return nil, err
	}
	return og, nil
}

// Mode is how the suite runs ownerguard: "image" (E2E_OWNERGUARD unset)
// or "process".
func Mode() string {
	if m := os.Getenv("E2E_OWNERGUARD"); m != "" {
		return m
	}
	return "image"
}

// A volume of the pod: its host directory and where the container has it.
type mount struct {
	host, path string
	readOnly   bool
}

// projectVolumes writes each Secret, ConfigMap and projected volume the
// container mounts, as the kubelet would (a pod's kube-api-access volume,
// which the ServiceAccount admission plugin adds, holds token); any other
// kind of volume is refused (the suite would not run what the chart
// deploys).
func (og *Ownerguard) projectVolumes(ctx context.Context, c kubernetes.Interface, in *Installation, dir, token string) error {
	fsGroup := in.Pod.SecurityContext.FSGroup
	tls := in.tlsVolume()
	for _, m := range in.Pod.Containers[0].VolumeMounts {
		var volume *corev1.Volume
		for i := range in.Pod.Volumes {
			if in.Pod.Volumes[i].Name == m.Name {
				volume = &in.Pod.Volumes[i]
			}
		}
		if volume == nil || m.SubPath != "" {
			return fmt.Errorf("volume mount %s: no such volume, or a subPath", m.Name)
		}
		host, err := NewVolume(filepath.Join(dir, "volumes", m.Name), fsGroup)
		if err != nil {
			return err
		}
		switch {
		case volume.Secret != nil:
			s, err := c.CoreV1().Secrets(in.Namespace).Get(ctx, volume.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			payload, err := SecretPayload(volume.Secret, s)
			if err != nil {
				return err
			}
			if err := host.Write(payload); err != nil {
				return err
			}
			if volume == tls {
				og.TLS, og.tlsSource = host, volume.Secret
				og.CAFile = filepath.Join(host.Dir, "ca.crt")
			}
		case volume.ConfigMap != nil:
			cm, err := c.CoreV1().ConfigMaps(in.Namespace).Get(ctx, volume.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			payload, err := ConfigMapPayload(volume.ConfigMap, cm)
			if err != nil {
				return err
			}
			if err := host.Write(payload); err != nil {
				return err
			}
		case volume.Projected != nil:
			payload, err := projectedPayload(ctx, c, in.Namespace, volume.Projected, token, fsGroup)
			if err != nil {
				return fmt.Errorf("volume %s: %w", m.Name, err)
			}
			if err := host.Write(payload); err != nil {
				return err
			}
		default:
			return fmt.Errorf("volume %s: only Secret, ConfigMap and projected volumes are written here", m.Name)
		}
		og.mounts = append(og.mounts, mount{host: host.Dir, path: m.MountPath, readOnly: m.ReadOnly})
	}
	if og.TLS == nil {
		return fmt.Errorf("no serving Secret volume")
	}
	return nil
}

// ProjectSecret writes s into the serving Secret's volume, as the kubelet
// does when the Secret changes: one atomic swap of ..data.
func (og *Ownerguard) ProjectSecret(s *corev1.Secret) error {
	payload, err := SecretPayload(og.tlsSource, s)
	if err != nil {
		return err
	}
	return og.TLS.Write(payload)
}

// runProcess: the binary, with a kubeconfig of the token and the mounts'
// paths replaced by their host directories.
func (p *Plane) runProcess(in *Installation, opt ServeOptions, og *Ownerguard, dir string) error {
	server := opt.APIServer
	if server == "" {
		server = net.JoinHostPort("127.0.0.1", strconv.Itoa(APIPort))
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := Kubeconfig(kubeconfig, "https://"+server, p.PKI.CAFile, opt.Token); err != nil {
		return err
	}
	var args []string
	for _, a := range og.Args {
		for _, m := range og.mounts {
			a = strings.ReplaceAll(a, "="+strings.TrimSuffix(m.path, "/")+"/", "="+m.host+"/")
		}
		args = append(args, a)
	}
	if opt.Record != "" {
		args = append(args, "--record="+opt.Record)
	}
	og.Args = append(args, opt.ExtraArgs...)
	bin := os.Getenv("OWNERGUARD_BIN")
	if bin == "" {
		return fmt.Errorf("OWNERGUARD_BIN is not set (run e2e/run)")
	}
	proc, err := Start(opt.Name, p.Logs, append([]string{"KUBECONFIG=" + kubeconfig}, in.Env...), bin, og.Args...)
	if err != nil {
		return err
	}
	og.Process = proc
	return nil
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

// PodToken is a token of the chart's ServiceAccount bound to one of its
// pods, as the kubelet requests it for the pod's service-account volume:
// ownerguard then runs with exactly the chart's RBAC, for as long as the
// pod exists.
func PodToken(ctx context.Context, c kubernetes.Interface, in *Installation, pod corev1.Pod) (string, error) {
	expiry := int64(4 * 3600)
	tr, err := c.CoreV1().ServiceAccounts(in.Namespace).CreateToken(ctx, in.ServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &expiry,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}

// MarkReady writes the status the kubelet would write once the readiness
// probe (/readyz) passes: ownerguard stands in for the chart's pods, so
// their readiness is its readiness. The ReplicaSet and Deployment
// controllers then count them ready, as in a cluster. Each pod is read
// again and written on a conflict, as the kubelet's status manager does:
// the pods listed may have changed since (a controller's update). A pod
// gone since (the old ReplicaSet's, in a rollout) is skipped, as the
// kubelet drops a deleted pod's status.
func MarkReady(ctx context.Context, c kubernetes.Interface, pods []corev1.Pod, podIP string) error {
	for _, listed := range pods {
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			var pod *corev1.Pod
			if pod, err = c.CoreV1().Pods(listed.Namespace).Get(ctx, listed.Name, metav1.GetOptions{}); err != nil {
				break
			}
			markReady(pod, podIP)
			if _, err = c.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
				break
			}
		}
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("status of %s: %w", listed.Name, err)
		}
	}
	return nil
}

// markReady sets the status fields of a running, ready pod.
func markReady(pod *corev1.Pod, podIP string) {
	now := metav1.Now()
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
	samples, err := ParseSamples(buf.String())
	if err != nil {
		return 0, err
	}
	sum, found := 0.0, false
	for _, s := range samples {
		if s.Name == name && s.Has(labels) {
			sum, found = sum+s.Value, true
		}
	}
	if !found {
		return 0, fmt.Errorf("no %s%v in /metrics", name, labels)
	}
	return sum, nil
}
