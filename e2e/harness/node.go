package harness

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
)

// Node stands in for the kubelet and kube-proxy of a node, for the pods of
// one release of the chart, so that an install, a rollout and a deletion
// go as in a cluster:
//
//   - kubelet: each pod of the release's Deployment that appears is run
//     (Launch: the image with the pod's own spec, a token bound to the
//     pod) at an address of its own on og0, its status written Running
//     with that pod IP; its readiness probe (the pod's, with its period,
//     timeout and thresholds) runs from the start, as the kubelet's
//     prober does, and turns the Ready condition; a pod being deleted gets
//     SIGTERM, is still probed while it drains, is killed after its grace
//     period, and its object is then deleted.
//   - kube-proxy: the release Service's ClusterIP:port forwards each new
//     connection to a ready endpoint (a pod Ready and not terminating; when
//     there is none, one Ready and terminating, as kube-proxy falls back to
//     serving terminating endpoints), as the API reports the pods; a
//     connection stays with its pod (conntrack); with no endpoint at all
//     nothing listens, and a connection is refused, as kube-proxy's REJECT.
//
// It does not pull images (the image is local), schedule (every pod is
// bound to NodeName), run the liveness probe, or retry a pod whose start
// failed (its volumes' objects must exist when it appears, as the chart's
// Secret does in chart mode).
type Node struct {
	plane     *Plane
	client    kubernetes.Interface
	namespace string
	name      string
	start     time.Time

	mu       sync.Mutex
	inst     *Installation
	pods     map[string]*nodePod // by uid
	nextIP   int
	events   []NodeEvent
	proxy    *serviceProxy
	informer cache.SharedIndexInformer
	stop     chan struct{}
	wake     chan struct{}
	done     chan struct{}
}

// NodeName is the node the Node binds its pods to.
const NodeName = "e2e-node"

// NodeEvent is a moment of the node's timeline.
type NodeEvent struct {
	At   time.Time
	What string
}

type nodePod struct {
	pod       *corev1.Pod
	ip        string
	og        *Ownerguard
	terminate chan struct{}
	once      sync.Once
	exited    chan struct{}
}

// StartNode runs the node for the release name in namespace; nothing of
// the release need exist yet. Pod addresses are 10.200.0.<firstIP>, <firstIP+1>…
func (p *Plane) StartNode(c kubernetes.Interface, namespace, name string, firstIP int) *Node {
	n := &Node{plane: p, client: c, namespace: namespace, name: name, start: time.Now(),
		pods: map[string]*nodePod{}, nextIP: firstIP,
		stop: make(chan struct{}), wake: make(chan struct{}, 1), done: make(chan struct{})}
	go n.run()
	return n
}

// Events is the node's timeline so far.
func (n *Node) Events() []NodeEvent {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]NodeEvent(nil), n.events...)
}

func (n *Node) event(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.events = append(n.events, NodeEvent{At: time.Now(), What: fmt.Sprintf(format, args...)})
}

// Stop ends every container (SIGTERM, the pod's grace), the Service's
// forwarding and the watch.
func (n *Node) Stop() {
	close(n.stop)
	<-n.done
	n.mu.Lock()
	var pods []*nodePod
	for _, np := range n.pods {
		pods = append(pods, np)
	}
	proxy := n.proxy
	n.mu.Unlock()
	var wg sync.WaitGroup
	for _, np := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			np.once.Do(func() { close(np.terminate) })
			select {
			case <-np.exited:
			case <-time.After(60 * time.Second):
			}
		}()
	}
	wg.Wait()
	if proxy != nil {
		proxy.close()
	}
}

func (n *Node) poke() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// run waits for the release's Deployment and Service, then watches its
// pods and reconciles on every change (and every second).
func (n *Node) run() {
	defer close(n.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-n.stop
		cancel()
	}()
	// kube-proxy programs a Service as soon as it exists: its ClusterIP
	// answers (refusing while there is no endpoint) before any pod runs.
	serviceSeen := false
	for n.inst == nil {
		if !serviceSeen {
			if svc, err := n.client.CoreV1().Services(n.namespace).Get(ctx, n.name, metav1.GetOptions{}); err == nil && svc.Spec.ClusterIP != "" {
				if err := AssignIP(svc.Spec.ClusterIP); err != nil {
					n.event("kube-proxy: %v", err)
				}
				serviceSeen = true
				n.event("kube-proxy: Service %s/%s at %s, no endpoint yet", n.namespace, n.name, svc.Spec.ClusterIP)
			}
		}
		if in, err := ReadInstallation(ctx, n.client, n.namespace, n.name); err == nil {
			n.mu.Lock()
			n.inst = in
			n.mu.Unlock()
			n.event("kubelet: Deployment %s/%s seen", n.namespace, n.name)
			break
		}
		select {
		case <-n.stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	selector := labels.SelectorFromSet(n.inst.Selector).String()
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return n.client.CoreV1().Pods(n.namespace).List(ctx, o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return n.client.CoreV1().Pods(n.namespace).Watch(ctx, o)
		},
	}
	n.informer = cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	_, _ = n.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { n.poke() },
		UpdateFunc: func(any, any) { n.poke() },
		DeleteFunc: func(any) { n.poke() },
	})
	go n.informer.Run(n.stop)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-n.wake:
		case <-tick.C:
		}
		n.reconcile(ctx)
	}
}

func (n *Node) reconcile(ctx context.Context) {
	seen := map[string]bool{}
	var endpoints, serving []string
	for _, obj := range n.informer.GetStore().List() {
		pod := obj.(*corev1.Pod)
		uid := string(pod.UID)
		seen[uid] = true
		n.mu.Lock()
		np, known := n.pods[uid]
		if !known && pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			np = &nodePod{pod: pod, ip: "10.200.0." + strconv.Itoa(n.nextIP), terminate: make(chan struct{}), exited: make(chan struct{})}
			n.nextIP++
			n.pods[uid] = np
			go n.runPod(ctx, np)
		}
		n.mu.Unlock()
		if known && pod.DeletionTimestamp != nil {
			np.once.Do(func() { close(np.terminate) })
		}
		if pod.Status.PodIP == "" || !podReady(pod) {
			continue
		}
		if pod.DeletionTimestamp == nil {
			endpoints = append(endpoints, pod.Status.PodIP)
		} else {
			serving = append(serving, pod.Status.PodIP)
		}
	}
	n.mu.Lock()
	for uid, np := range n.pods {
		if !seen[uid] {
			np.once.Do(func() { close(np.terminate) })
		}
	}
	n.mu.Unlock()
	if len(endpoints) == 0 {
		endpoints = serving
	}
	n.updateProxy(endpoints)
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (n *Node) updateProxy(ips []string) {
	sort.Strings(ips)
	n.mu.Lock()
	if n.proxy == nil {
		n.proxy = &serviceProxy{addr: net.JoinHostPort(n.inst.ClusterIP, strconv.Itoa(int(n.inst.Port))),
			targetPort: strconv.Itoa(int(n.inst.TargetPort))}
	}
	proxy := n.proxy
	n.mu.Unlock()
	changed, err := proxy.update(ips, n.inst.ClusterIP)
	if err != nil {
		n.event("kube-proxy: %v", err)
	}
	if changed {
		n.event("kube-proxy: endpoints of %s now [%s]", proxy.addr, strings.Join(ips, " "))
	}
}

// runPod runs one pod as the kubelet would, until it is terminated.
func (n *Node) runPod(ctx context.Context, np *nodePod) {
	defer close(np.exited)
	pod := np.pod
	fail := func(what string, err error) {
		n.event("kubelet: %s: %s: %v", pod.Name, what, err)
		<-np.terminate
	}
	// Bound to this node, as the scheduler would: a pod on no node is
	// deleted at once, one on a node waits for its kubelet to see its
	// containers stopped.
	if pod.Spec.NodeName == "" {
		err := n.client.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, UID: pod.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: NodeName},
		}, metav1.CreateOptions{})
		if err != nil {
			fail("bind", err)
			return
		}
	}
	in, err := n.inst.ForPod(pod)
	if err != nil {
		fail("spec", err)
		return
	}
	port, err := in.ArgPort("--addr")
	if err != nil {
		fail("spec", err)
		return
	}
	metricsPort, err := in.ArgPort("--metrics-addr")
	if err != nil {
		fail("spec", err)
		return
	}
	if err := AssignIP(np.ip); err != nil {
		fail("pod IP", err)
		return
	}
	token, err := PodToken(ctx, n.client, in, *pod)
	if err != nil {
		fail("token", err)
		return
	}
	og, err := n.plane.Launch(ctx, n.client, in, ServeOptions{Name: pod.Name, Token: token,
		Addr: net.JoinHostPort(np.ip, port), MetricsAddr: net.JoinHostPort(np.ip, metricsPort), Hostname: pod.Name})
	if err != nil {
		fail("start", err)
		return
	}
	np.og = og
	if og.Image != "" {
		n.event("kubelet: %s: container of %s started at %s", pod.Name, og.Image, np.ip)
	} else {
		n.event("kubelet: %s: container started at %s", pod.Name, np.ip)
	}
	if err := n.writeStatus(ctx, pod, np.ip, false); err != nil {
		n.event("kubelet: %s: status: %v", pod.Name, err)
	}
	probe := in.Pod.Containers[0].ReadinessProbe
	if probe == nil {
		probe = &corev1.Probe{PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}
	}
	ready := false
	var failures, successes int32
	check := func() {
		ok := probeOnce(probe, np.ip, in)
		switch {
		case ok:
			successes, failures = successes+1, 0
		default:
			successes, failures = 0, failures+1
		}
		next := ready
		if !ready && successes >= max(probe.SuccessThreshold, 1) {
			next = true
		}
		if ready && failures >= max(probe.FailureThreshold, 1) {
			next = false
		}
		if next != ready {
			ready = next
			n.event("kubelet: %s: readiness probe: ready %v", pod.Name, ready)
			if err := n.writeStatus(ctx, pod, np.ip, ready); err != nil {
				n.event("kubelet: %s: status: %v", pod.Name, err)
			}
		}
	}
	period := time.Duration(max(probe.PeriodSeconds, 1)) * time.Second
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	check()
loop:
	for {
		select {
		case <-np.terminate:
			break loop
		case <-ticker.C:
			check()
		}
	}
	// Terminate: SIGTERM now, SIGKILL after the grace period; the readiness
	// probe goes on while the server drains.
	grace := int64(30)
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	if current, err := n.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); err == nil && current.DeletionGracePeriodSeconds != nil {
		grace = *current.DeletionGracePeriodSeconds
	}
	n.event("kubelet: %s: SIGTERM (grace %d s)", pod.Name, grace)
	stopped := make(chan struct{})
	go func() {
		og.Stop(time.Duration(grace) * time.Second)
		close(stopped)
	}()
drain:
	for {
		select {
		case <-stopped:
			break drain
		case <-ticker.C:
			if ctx.Err() == nil {
				check()
			}
		}
	}
	_, exitErr := og.Exited()
	n.event("kubelet: %s: container exited (%v)", pod.Name, exitErr)
	// The kubelet's status manager deletes the pod once its containers
	// have stopped.
	uid := pod.UID
	if err := n.client.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name,
		metav1.DeleteOptions{GracePeriodSeconds: ptrInt64(0), Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		n.event("kubelet: %s: delete: %v", pod.Name, err)
	}
}

func ptrInt64(v int64) *int64 { return &v }

// probeOnce runs an HTTP GET readiness probe against the pod's address.
func probeOnce(probe *corev1.Probe, ip string, in *Installation) bool {
	if probe == nil || probe.HTTPGet == nil {
		return true
	}
	port := probe.HTTPGet.Port.String()
	if probe.HTTPGet.Port.StrVal != "" {
		for _, cp := range in.Pod.Containers[0].Ports {
			if cp.Name == probe.HTTPGet.Port.StrVal {
				port = strconv.Itoa(int(cp.ContainerPort))
			}
		}
	}
	timeout := time.Duration(max(probe.TimeoutSeconds, 1)) * time.Second
	resp, err := (&http.Client{Timeout: timeout}).Get("http://" + net.JoinHostPort(ip, port) + probe.HTTPGet.Path)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode >= 200 && resp.StatusCode < 400
}

// writeStatus writes what the kubelet writes: Running at its pod IP, the
// readiness conditions.
func (n *Node) writeStatus(ctx context.Context, pod *corev1.Pod, ip string, ready bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current, err := n.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		current.Status.Phase = corev1.PodRunning
		current.Status.PodIP = ip
		current.Status.PodIPs = []corev1.PodIP{{IP: ip}}
		current.Status.HostIP = n.plane.NodeIP.String()
		if current.Status.StartTime == nil {
			current.Status.StartTime = &now
		}
		set := func(t corev1.PodConditionType, s corev1.ConditionStatus) {
			for i, c := range current.Status.Conditions {
				if c.Type == t {
					if c.Status != s {
						current.Status.Conditions[i].Status, current.Status.Conditions[i].LastTransitionTime = s, now
					}
					return
				}
			}
			current.Status.Conditions = append(current.Status.Conditions, corev1.PodCondition{Type: t, Status: s, LastTransitionTime: now})
		}
		set(corev1.PodInitialized, corev1.ConditionTrue)
		set(corev1.ContainersReady, status)
		set(corev1.PodReady, status)
		_, err = n.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, current, metav1.UpdateOptions{})
		return err
	})
}

// serviceProxy forwards a Service's ClusterIP:port to its endpoints.
type serviceProxy struct {
	addr       string
	targetPort string

	mu        sync.Mutex
	endpoints []string
	listener  net.Listener
	conns     map[net.Conn]bool
}

// update sets the endpoints: listening while there is one, not at all
// (connections refused) while there is none.
func (s *serviceProxy) update(ips []string, clusterIP string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := strings.Join(ips, ",") != strings.Join(s.endpoints, ",")
	s.endpoints = ips
	switch {
	case len(ips) > 0 && s.listener == nil:
		if err := AssignIP(clusterIP); err != nil {
			return changed, err
		}
		l, err := net.Listen("tcp", s.addr)
		if err != nil {
			return changed, err
		}
		s.listener = l
		go s.accept(l)
	case len(ips) == 0 && s.listener != nil:
		_ = s.listener.Close()
		s.listener = nil
	}
	return changed, nil
}

func (s *serviceProxy) accept(l net.Listener) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		var target string
		if len(s.endpoints) > 0 {
			target = net.JoinHostPort(s.endpoints[rand.IntN(len(s.endpoints))], s.targetPort)
		}
		if s.conns == nil {
			s.conns = map[net.Conn]bool{}
		}
		s.conns[conn] = true
		s.mu.Unlock()
		go s.forward(conn, target)
	}
}

// forward pipes one connection to its endpoint until either side closes.
func (s *serviceProxy) forward(conn net.Conn, target string) {
	defer func() {
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
		_ = conn.Close()
	}()
	if target == "" {
		return
	}
	backend, err := net.DialTimeout("tcp", target, 2*time.Second)
	if err != nil {
		return
	}
	defer backend.Close()
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(backend, conn)
		if tcp, ok := backend.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(conn, backend)
		if tcp, ok := conn.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
		done <- struct{}{}
	}()
	<-done
	<-done
}

func (s *serviceProxy) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener != nil {
		_ = s.listener.Close()
		s.listener = nil
	}
	for c := range s.conns {
		_ = c.Close()
	}
}
