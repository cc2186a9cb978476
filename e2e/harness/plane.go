package harness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Config of a control plane, from the environment e2e/run sets.
type Config struct {
	Bin         string // helm, helm3, chartcheck, ownerguard
	PlaneBin    string // etcd, kube-apiserver, kube-controller-manager of the minor under test
	Work        string // pki/, logs/, etcd data, kubeconfigs
	NodeIP      net.IP // the advertise address, on the network namespace's dummy interface
	ServiceCIDR string
	ServiceIP   net.IP // the first address of ServiceCIDR: the kubernetes Service
	// More static tokens, and the audit policy in place of the scenarios'
	// one (both empty for e2e/run).
	Identities  []Identity
	AuditPolicy string
	// Tune, when set, changes the plane before anything starts (Up).
	Tune func(*Plane)
}

// ConfigFromEnv reads E2E_BIN, E2E_PLANE_BIN, E2E_WORK, E2E_NODE_IP and
// E2E_SERVICE_CIDR.
func ConfigFromEnv() (Config, error) {
	c := Config{Bin: os.Getenv("E2E_BIN"), PlaneBin: os.Getenv("E2E_PLANE_BIN"), Work: os.Getenv("E2E_WORK"), ServiceCIDR: os.Getenv("E2E_SERVICE_CIDR")}
	c.NodeIP = net.ParseIP(os.Getenv("E2E_NODE_IP"))
	if c.Bin == "" || c.PlaneBin == "" || c.Work == "" || c.NodeIP == nil || c.ServiceCIDR == "" {
		return c, fmt.Errorf("E2E_BIN, E2E_PLANE_BIN, E2E_WORK, E2E_NODE_IP and E2E_SERVICE_CIDR must be set (run e2e/run)")
	}
	_, cidr, err := net.ParseCIDR(c.ServiceCIDR)
	if err != nil {
		return c, err
	}
	ip := cidr.IP.To4()
	c.ServiceIP = net.IPv4(ip[0], ip[1], ip[2], ip[3]+1)
	return c, nil
}

const (
	EtcdClientURL = "http://127.0.0.1:2379"
	APIPort       = 6443
)

// Plane is etcd, the API server(s) and the controller manager.
type Plane struct {
	Config
	PKI             *PKI
	Logs            string
	AdminKubeconfig string
	// An admin (system:masters) of its own, for an ownerguard to serve with.
	OwnerguardAdminKubeconfig string
	Etcd                      *Process
	APIServer                 *Process
	KCM                       *Process
	extraAPI                  map[int]*Process
	// SharedKCMCredentials: the controller manager runs without
	// --use-service-account-credentials (the flag's default, not
	// kubeadm's): every controller, the collector included, calls the API
	// server as the controller manager's own user.
	SharedKCMCredentials bool
	// Controllers the controller manager runs, when not the scenarios'
	// list (Controllers): "*" runs every one enabled by default.
	KCMControllers []string
	// More controller manager flags.
	KCMArgs []string
	// API server flags in place of the scenarios' own of the same name,
	// or added.
	APIServerArgs []string
	// More hollow kubelet flags (after the defaults: a flag given again
	// wins), and the scheduler's client rate when not its default (a
	// benchmark's bursts: the API server, not the clients' limiters, sets
	// the pace).
	HollowNodeArgs []string
	SchedulerQPS   int
	// The scheduler and the hollow nodes, when started (nodes.go).
	Scheduler   *Process
	HollowNodes []*Process
}

// NewPlane makes the PKI and the kubeconfigs; nothing runs yet.
func NewPlane(c Config) (*Plane, error) {
	pki, err := NewPKI(filepath.Join(c.Work, "pki"), c.NodeIP, c.ServiceIP, c.Identities, c.AuditPolicy)
	if err != nil {
		return nil, err
	}
	p := &Plane{Config: c, PKI: pki, Logs: filepath.Join(c.Work, "logs"), extraAPI: map[int]*Process{}}
	p.AdminKubeconfig = filepath.Join(c.Work, "admin.kubeconfig")
	if err := Kubeconfig(p.AdminKubeconfig, APIURL(APIPort), pki.CAFile, pki.AdminToken); err != nil {
		return nil, err
	}
	p.OwnerguardAdminKubeconfig = filepath.Join(c.Work, "ownerguard-admin.kubeconfig")
	if err := Kubeconfig(p.OwnerguardAdminKubeconfig, APIURL(APIPort), pki.CAFile, pki.OwnerguardAdminToken); err != nil {
		return nil, err
	}
	if err := Kubeconfig(filepath.Join(c.Work, "kcm.kubeconfig"), APIURL(APIPort), pki.CAFile, pki.KCMToken); err != nil {
		return nil, err
	}
	return p, nil
}

// APIURL of an API server on loopback.
func APIURL(port int) string { return "https://127.0.0.1:" + strconv.Itoa(port) }

// StartEtcd starts etcd on loopback and waits for its health.
func (p *Plane) StartEtcd(ctx context.Context) error {
	proc, err := Start("etcd", p.Logs, nil, filepath.Join(p.PlaneBin, "etcd"),
		"--name=e2e",
		"--data-dir="+filepath.Join(p.Work, "etcd"),
		"--listen-client-urls="+EtcdClientURL,
		"--advertise-client-urls="+EtcdClientURL,
		"--listen-peer-urls=http://127.0.0.1:2380",
		"--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=e2e=http://127.0.0.1:2380",
		"--listen-metrics-urls=http://127.0.0.1:2381",
		// A test cluster: losing the data on a power cut is fine.
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
	if err != nil {
		return err
	}
	p.Etcd = proc
	return WaitHTTP(ctx, proc, http.DefaultClient, "http://127.0.0.1:2381/health", "", 60*time.Second)
}

func (p *Plane) apiServerArgs(port int) []string {
	return withOverrides([]string{
		"--etcd-servers=" + EtcdClientURL,
		"--bind-address=0.0.0.0",
		"--secure-port=" + strconv.Itoa(port),
		"--advertise-address=" + p.NodeIP.String(),
		"--tls-cert-file=" + p.PKI.ServerCert,
		"--tls-private-key-file=" + p.PKI.ServerKey,
		"--client-ca-file=" + p.PKI.CAFile,
		"--token-auth-file=" + p.PKI.TokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + p.PKI.SAPub,
		"--service-account-signing-key-file=" + p.PKI.SAKey,
		"--service-cluster-ip-range=" + p.ServiceCIDR,
		// The defaults (MutatingAdmissionWebhook and ValidatingAdmissionWebhook
		// among them) plus the plugin behind trap 2: blockOwnerDeletion needs
		// update on the owner's finalizers.
		"--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
		"--audit-policy-file=" + p.PKI.AuditPolicy,
		"--audit-log-path=" + filepath.Join(p.Logs, fmt.Sprintf("audit-%d.log", port)),
		"--audit-log-format=json",
		"--profiling=false",
	}, p.APIServerArgs)
}

// withOverrides: the flags of args, each one that overrides names in its
// place (a list flag such as --authorization-mode appends when repeated).
func withOverrides(args, overrides []string) []string {
	name := func(arg string) string { n, _, _ := strings.Cut(arg, "="); return n }
	out := make([]string, 0, len(args)+len(overrides))
	used := map[string]bool{}
	for _, arg := range args {
		replaced := false
		for _, o := range overrides {
			if name(o) == name(arg) {
				out = append(out, o)
				used[o], replaced = true, true
			}
		}
		if !replaced {
			out = append(out, arg)
		}
	}
	for _, o := range overrides {
		if !used[o] {
			out = append(out, o)
		}
	}
	return out
}

// StartAPIServer starts an API server on port (APIPort for the main one;
// another port runs a second one on the same etcd) and waits for /readyz.
func (p *Plane) StartAPIServer(ctx context.Context, port int) error {
	return p.StartAPIServerWith(ctx, port)
}

// StartAPIServerWith is StartAPIServer with more flags (or flags in place
// of the same ones) for this API server alone.
func (p *Plane) StartAPIServerWith(ctx context.Context, port int, extra ...string) error {
	name := "kube-apiserver"
	if port != APIPort {
		name = fmt.Sprintf("kube-apiserver-%d", port)
	}
	proc, err := Start(name, p.Logs, nil, filepath.Join(p.PlaneBin, "kube-apiserver"), withOverrides(p.apiServerArgs(port), extra)...)
	if err != nil {
		return err
	}
	if port == APIPort {
		p.APIServer = proc
	} else {
		p.extraAPI[port] = proc
	}
	return WaitHTTP(ctx, proc, p.HTTPClient(), APIURL(port)+"/readyz", p.PKI.AdminToken, 120*time.Second)
}

// StopAPIServer stops the API server on port.
func (p *Plane) StopAPIServer(port int) {
	proc := p.APIServer
	if port != APIPort {
		proc = p.extraAPI[port]
		delete(p.extraAPI, port)
	}
	if proc != nil {
		// A stopped API server stops listening at once but may take
		// its time to exit while watches are open: killed after 15 s.
		proc.Stop(15 * time.Second)
	}
}

// Controllers the controller manager runs (names from Kubernetes v1.34's
// cmd/kube-controller-manager/names): the garbage collector; every
// built-in controller that makes objects from a workload a worker labels
// (ReplicaSets, pods, Jobs, ControllerRevisions, claims), the
// ephemeral-volume and resource-claim controllers among them, which
// write a blocking Pod reference; what lets a collected claim go (the
// pvc-protection controller removes the kubernetes.io/pvc-protection
// finalizer the API server puts on every claim); and what they all need
// (service accounts and their tokens, the root CA, namespace deletion).
// The resource-claim controller runs only where DynamicResourceAllocation
// is on (GA, on by default, in v1.34); StartedControllers tells which did.
var Controllers = []string{
	"garbage-collector-controller",
	"job-controller",
	"deployment-controller",
	"replicaset-controller",
	"cronjob-controller",
	"statefulset-controller",
	"daemonset-controller",
	"ephemeral-volume-controller",
	"resourceclaim-controller",
	"persistentvolumeclaim-protection-controller",
	// Copies of a Service's own labels onto its Endpoints and
	// EndpointSlices, and of Endpoints' onto mirrored slices (rule 16).
	"endpoints-controller",
	"endpointslice-controller",
	"endpointslice-mirroring-controller",
	"serviceaccount-controller",
	"serviceaccount-token-controller",
	"root-ca-certificate-publisher-controller",
	"namespace-controller",
}

// StartKCM starts the controller manager and waits for its /healthz.
func (p *Plane) StartKCM(ctx context.Context) error {
	kubeconfig := filepath.Join(p.Work, "kcm.kubeconfig")
	controllers := ""
	list := Controllers
	if p.KCMControllers != nil {
		list = p.KCMControllers
	}
	for i, c := range list {
		if i > 0 {
			controllers += ","
		}
		controllers += c
	}
	args := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=10257",
		"--controllers=" + controllers,
		"--use-service-account-credentials=" + strconv.FormatBool(!p.SharedKCMCredentials),
		"--service-account-private-key-file=" + p.PKI.SAKey,
		"--root-ca-file=" + p.PKI.CAFile,
		"--leader-elect=false",
		// Collect quickly after a deletion: the scenarios time the collector.
		"--concurrent-gc-syncs=20",
		"--profiling=false",
	}, p.KCMArgs...)
	proc, err := Start("kube-controller-manager", p.Logs, nil, filepath.Join(p.PlaneBin, "kube-controller-manager"), args...)
	if err != nil {
		return err
	}
	p.KCM = proc
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 5 * time.Second}
	return WaitHTTP(ctx, proc, insecure, "https://127.0.0.1:10257/healthz", "", 120*time.Second)
}

// RestartKCM stops the controller manager and starts it again, its
// controllers under their own service accounts or all under its own user
// (shared).
func (p *Plane) RestartKCM(ctx context.Context, shared bool) error {
	if p.KCM != nil {
		p.KCM.Stop(15 * time.Second)
		p.KCM = nil
	}
	p.SharedKCMCredentials = shared
	return p.StartKCM(ctx)
}

// HTTPClient trusts the cluster CA.
func (p *Plane) HTTPClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(p.PKI.CA.Cert)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// RESTConfig for the admin, on the main API server.
func (p *Plane) RESTConfig() *rest.Config {
	return p.RESTConfigToken(p.PKI.AdminToken)
}

// RESTConfigToken is the main API server with a bearer token.
func (p *Plane) RESTConfigToken(token string) *rest.Config {
	return &rest.Config{
		Host:            APIURL(APIPort),
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: p.PKI.CA.CertPEM},
		QPS:             200,
		Burst:           400,
		Timeout:         30 * time.Second,
	}
}

// Admin is a clientset for the admin.
func (p *Plane) Admin() *kubernetes.Clientset {
	return kubernetes.NewForConfigOrDie(p.RESTConfig())
}

// Stop everything, in reverse order.
func (p *Plane) Stop() {
	for _, node := range p.HollowNodes {
		node.Stop(15 * time.Second)
	}
	if p.Scheduler != nil {
		p.Scheduler.Stop(15 * time.Second)
	}
	if p.KCM != nil {
		p.KCM.Stop(15 * time.Second)
	}
	for port := range p.extraAPI {
		p.StopAPIServer(port)
	}
	if p.APIServer != nil {
		p.APIServer.Stop(30 * time.Second)
	}
	if p.Etcd != nil {
		p.Etcd.Stop(15 * time.Second)
	}
}

// Processes that are running, for the logs printed on a failure.
func (p *Plane) Processes() []*Process {
	var out []*Process
	for _, proc := range append([]*Process{p.Etcd, p.APIServer, p.KCM, p.Scheduler}, p.HollowNodes...) {
		if proc != nil {
			out = append(out, proc)
		}
	}
	for _, proc := range p.extraAPI {
		out = append(out, proc)
	}
	return out
}

// StartedControllers asks the controller manager which controllers it
// started: each one it starts gets a health check of its name
// (`[+]<name> ok` in /healthz?verbose, on every minor from 1.33; the
// "Started controller" log line is gone from 1.35 on). One skipped for a
// feature gate or a missing API has no check and is not in the set.
func (p *Plane) StartedControllers() (map[string]bool, error) {
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 5 * time.Second}
	resp, err := insecure.Get("https://127.0.0.1:10257/healthz?verbose")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	started := map[string]bool{}
	for _, line := range strings.Split(string(body), "\n") {
		name, ok := strings.CutPrefix(line, "[+]")
		if !ok {
			continue
		}
		if name, ok = strings.CutSuffix(name, " ok"); ok {
			started[name] = true
		}
	}
	if len(started) == 0 {
		return nil, fmt.Errorf("the controller manager's /healthz?verbose names no check: %q", body)
	}
	return started, nil
}

// WaitStartedControllers waits (60 s at most) until the controller
// manager has started every one of names, and returns what it started:
// right after a (re)start it starts them one by one (1.33 and 1.34 with a
// jitter between two), and /healthz answers before the last is up.
func (p *Plane) WaitStartedControllers(ctx context.Context, names ...string) (map[string]bool, error) {
	var started map[string]bool
	err := Until(ctx, 60*time.Second, 250*time.Millisecond, "the controllers started", func() error {
		var err error
		if started, err = p.StartedControllers(); err != nil {
			return err
		}
		for _, name := range names {
			if !started[name] {
				return fmt.Errorf("%s not started", name)
			}
		}
		return nil
	})
	return started, err
}

// ServerMinor is the minor version the API server reports (37 for
// v1.37.2): scenarios that hold only from some minor on skip below it.
func ServerMinor(c *kubernetes.Clientset) (int, error) {
	v, err := c.Discovery().ServerVersion()
	if err != nil {
		return 0, err
	}
	minor, err := strconv.Atoi(strings.TrimSuffix(v.Minor, "+"))
	if err != nil {
		return 0, fmt.Errorf("the API server's minor version %q: %w", v.Minor, err)
	}
	return minor, nil
}
