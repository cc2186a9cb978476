package harness

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The image e2e/lib.sh names (OWNERGUARD_IMAGE, as .ci/image builds it).
func Image() string { return os.Getenv("OWNERGUARD_IMAGE") }

// Limits of every container: the engine's defaults exceed what this
// sandbox allows (a kubelet's containers get the runtime's).
var containerLimits = []string{"--ulimit", "nofile=16384:16384", "--ulimit", "nproc=4096:4096"}

// Where a container records its reviews (--record), a writable mount.
const recordMountPath = "/var/run/ownerguard-e2e/record"

// Podman is a podman command (runc runtime) run from the host's network
// and mount namespaces, those of e2e/run (E2E_HOST_PID), as a kubelet's
// runtime runs: inside the suite's namespace, runc takes it for the
// host's and refuses the network sysctls podman sets by default, and
// `ip netns exec` hides the cgroup mounts under a fresh /sys. The
// container joins the suite's network namespace all the same
// (--network ns:).
func Podman(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"podman", "--runtime", "runc"}, args...)
	if pid := os.Getenv("E2E_HOST_PID"); pid != "" {
		full = append([]string{"nsenter", "--net=/proc/" + pid + "/ns/net", "--mount=/proc/" + pid + "/ns/mnt", "--"}, full...)
	}
	return exec.CommandContext(ctx, full[0], full[1:]...)
}

// podmanOutput runs podman and returns its standard output.
func podmanOutput(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var out, stderr bytes.Buffer
	cmd := Podman(ctx, args...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("podman %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(out.String()), nil
}

var containerSeq atomic.Int64

// runContainer runs the image as a kubelet would run the Deployment's
// container: its args and env, its volumes mounted where the chart mounts
// them, the service-account volume and the in-cluster address of the API
// server, its securityContext and resources; in the suite's network
// namespace, so that it listens at og.Addr there.
func (p *Plane) runContainer(ctx context.Context, c kubernetes.Interface, in *Installation, opt ServeOptions, og *Ownerguard, dir string) error {
	image := Image()
	if image == "" {
		return fmt.Errorf("OWNERGUARD_IMAGE is not set (run e2e/run)")
	}
	if in.Image != image {
		// A reference by digest is pulled, as a kubelet pulls it (an
		// install from a registry); any other name than the suite's image
		// is a mistake of the scenario.
		pulled, err := PullByDigest(ctx, in.Image)
		if err != nil {
			return fmt.Errorf("deployment %s/%s names the image %q, the suite runs %q: install with harness.ChartSettings, or name an image by digest: %w", in.Namespace, in.Name, in.Image, image, err)
		}
		image = pulled
	}
	user, err := imageUser(ctx, image)
	if err != nil {
		return err
	}
	security, uid, gid, err := SecurityFlags(in.Pod, in.Pod.Containers[0], user)
	if err != nil {
		return fmt.Errorf("deployment %s/%s: %w", in.Namespace, in.Name, err)
	}
	resources, err := resourceFlags(in.Pod.Containers[0].Resources)
	if err != nil {
		return err
	}
	// The service-account volume of a Deployment's template (a pod has its
	// own, added by the ServiceAccount admission plugin and written with
	// the others): the token, the namespace's kube-root-ca.crt (published
	// by the root-CA controller), the namespace.
	hasServiceAccount := false
	for _, m := range og.mounts {
		hasServiceAccount = hasServiceAccount || filepath.Clean(m.path) == ServiceAccountMountPath
	}
	if !hasServiceAccount {
		var rootCA *corev1.ConfigMap
		err = Until(ctx, 30*time.Second, 200*time.Millisecond, "kube-root-ca.crt in "+in.Namespace, func() error {
			rootCA, err = c.CoreV1().ConfigMaps(in.Namespace).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			return err
		})
		if err != nil {
			return err
		}
		sa, err := NewVolume(filepath.Join(dir, "volumes", "kube-api-access"), in.Pod.SecurityContext.FSGroup)
		if err != nil {
			return err
		}
		if err := sa.Write(ServiceAccountPayload(opt.Token, []byte(rootCA.Data["ca.crt"]), in.Namespace, in.Pod.SecurityContext.FSGroup)); err != nil {
			return err
		}
		og.mounts = append(og.mounts, mount{host: sa.Dir, path: ServiceAccountMountPath, readOnly: true})
	}
	api := opt.APIServer
	if api == "" {
		api = net.JoinHostPort(p.NodeIP.String(), strconv.Itoa(APIPort))
	}
	apiHost, apiPort, err := net.SplitHostPort(api)
	if err != nil {
		return err
	}
	netns := os.Getenv("E2E_NETNS")
	if netns == "" {
		return fmt.Errorf("E2E_NETNS is not set (run e2e/run)")
	}
	hostname := opt.Hostname
	if hostname == "" {
		hostname = opt.Name
	}
	og.Image = image
	og.Container = fmt.Sprintf("%s-%s-%d", netns, opt.Name, containerSeq.Add(1))
	args := []string{"run", "--rm", "--pull=never", "--name", og.Container,
		"--label", "io.ownerguard.e2e.netns=" + netns,
		"--network", "ns:/var/run/netns/" + netns, "--hostname", hostname}
	args = append(args, containerLimits...)
	args = append(args, security...)
	args = append(args, resources...)
	for _, m := range og.mounts {
		spec := m.host + ":" + m.path
		if m.readOnly {
			spec += ":ro"
		}
		args = append(args, "-v", spec)
	}
	// What the kubelet gives every container: the API server's in-cluster
	// address (the kubernetes Service; here the node's, as kube-proxy would
	// lead there), then the container's env.
	args = append(args, "-e", "KUBERNETES_SERVICE_HOST="+apiHost, "-e", "KUBERNETES_SERVICE_PORT="+apiPort,
		"-e", "KUBERNETES_SERVICE_PORT_HTTPS="+apiPort)
	for _, e := range in.Env {
		args = append(args, "-e", e)
	}
	serveArgs := append([]string{}, og.Args...)
	if opt.Record != "" {
		if err := os.MkdirAll(opt.Record, 0o770); err != nil {
			return err
		}
		if err := os.Chown(opt.Record, uid, gid); err != nil {
			return err
		}
		args = append(args, "-v", opt.Record+":"+recordMountPath)
		serveArgs = append(serveArgs, "--record="+recordMountPath)
	}
	og.Args = append(serveArgs, opt.ExtraArgs...)
	args = append(args, image)
	args = append(args, og.Args...)
	cmd := Podman(ctx, args...)
	proc, err := Start(opt.Name, p.Logs, nil, cmd.Path, cmd.Args[1:]...)
	if err != nil {
		return err
	}
	og.Process = proc
	return nil
}

// Stop ends ownerguard as the kubelet does: SIGTERM (`podman run` passes
// it on to the container), then SIGKILL after grace.
func (og *Ownerguard) Stop(grace time.Duration) {
	if og.Container == "" {
		og.Process.Stop(grace)
		return
	}
	if done, _ := og.Exited(); done {
		return
	}
	_ = og.Signal(syscall.SIGTERM)
	if og.Wait(grace) {
		return
	}
	_, _ = podmanOutput(context.Background(), "kill", "--signal", "KILL", og.Container)
	if !og.Wait(10 * time.Second) {
		og.Process.Stop(time.Second)
	}
}

// PullByDigest pulls an image named by digest (repository[:tag]@sha256:…)
// as a kubelet's runtime does with imagePullPolicy Always: from the
// suite's network namespace, where a registry started by a scenario
// listens, over plain HTTP (a registry on loopback), by the digest alone
// (the tag of a reference that has both is dropped, as CRI-O and
// containerd drop it: the digest decides). podman checks that the
// manifest it gets has that digest. Always pulled, never taken from the
// store: podman finds an image by its digest whatever the repository,
// and the suite's own image has the same digest when the build is the
// same (a reproducible build), so a lookup would prove nothing of the
// registry. It returns the reference pulled (repository@digest), the
// name to run.
func PullByDigest(ctx context.Context, ref string) (string, error) {
	repository, digest, ok := strings.Cut(ref, "@")
	if !ok || !strings.HasPrefix(digest, "sha256:") || len(digest) != len("sha256:")+64 {
		return "", fmt.Errorf("%q names no sha256 digest", ref)
	}
	if colon := strings.LastIndex(repository, ":"); colon > strings.LastIndex(repository, "/") {
		repository = repository[:colon] // a tag; a colon before the last slash is the registry's port
	}
	pulled := repository + "@" + digest
	netns := os.Getenv("E2E_NETNS")
	if netns == "" {
		return "", fmt.Errorf("E2E_NETNS is not set (run e2e/run)")
	}
	// podman's storage is the host's (E2E_HOST_PID's mount namespace); the
	// registry is in the suite's network namespace.
	args := []string{"--net=/var/run/netns/" + netns}
	if pid := os.Getenv("E2E_HOST_PID"); pid != "" {
		args = append(args, "--mount=/proc/"+pid+"/ns/mnt")
	}
	args = append(args, "--", "podman", "pull", "--quiet", "--tls-verify=false", pulled)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("podman pull %s: %v: %s", pulled, err, strings.TrimSpace(stderr.String()))
	}
	return pulled, nil
}

var imageUsers sync.Map

// imageUser is the image's USER.
func imageUser(ctx context.Context, image string) (string, error) {
	if u, ok := imageUsers.Load(image); ok {
		return u.(string), nil
	}
	out, err := podmanOutput(ctx, "image", "inspect", "--format", "{{.Config.User}}", image)
	if err != nil {
		return "", fmt.Errorf("image %s: %w (build it with `bash .ci/image build`)", image, err)
	}
	imageUsers.Store(image, out)
	return out, nil
}

// SecurityFlags are podman's flags for the pod's and the container's
// securityContext, and the uid and gid the container runs as: runAsUser
// and runAsGroup (else the image's USER), fsGroup and supplementalGroups
// as groups, readOnlyRootFilesystem without the writable /tmp, /run and
// /var/tmp podman adds by default and the kubelet does not, capabilities,
// allowPrivilegeEscalation, seccomp (RuntimeDefault: the engine's default
// profile). runAsNonRoot is checked as the kubelet checks it. What the
// suite cannot honour is an error.
func SecurityFlags(pod corev1.PodSpec, c corev1.Container, imageUser string) (flags []string, uid, gid int, err error) {
	ps := pod.SecurityContext
	if ps == nil {
		ps = &corev1.PodSecurityContext{}
	}
	cs := c.SecurityContext
	if cs == nil {
		cs = &corev1.SecurityContext{}
	}
	first := func(a, b *int64) *int64 {
		if a != nil {
			return a
		}
		return b
	}
	imageUID, imageGID, _ := strings.Cut(imageUser, ":")
	uid, err = strconv.Atoi(imageUID)
	if runAs := first(cs.RunAsUser, ps.RunAsUser); runAs != nil {
		uid, err = int(*runAs), nil
	}
	if err != nil {
		return nil, 0, 0, fmt.Errorf("the image's user %q is not numeric and no runAsUser is set", imageUser)
	}
	gid = 0
	if imageGID != "" {
		if gid, err = strconv.Atoi(imageGID); err != nil {
			return nil, 0, 0, fmt.Errorf("the image's group %q is not numeric", imageUser)
		}
	}
	if runAs := first(cs.RunAsGroup, ps.RunAsGroup); runAs != nil {
		gid = int(*runAs)
	}
	nonRoot := cs.RunAsNonRoot
	if nonRoot == nil {
		nonRoot = ps.RunAsNonRoot
	}
	if nonRoot != nil && *nonRoot && uid == 0 {
		return nil, 0, 0, fmt.Errorf("runAsNonRoot and the container would run as uid 0")
	}
	flags = []string{"--user", fmt.Sprintf("%d:%d", uid, gid)}
	if ps.FSGroup != nil {
		flags = append(flags, "--group-add", strconv.FormatInt(*ps.FSGroup, 10))
	}
	for _, g := range ps.SupplementalGroups {
		flags = append(flags, "--group-add", strconv.FormatInt(g, 10))
	}
	for _, s := range ps.Sysctls {
		flags = append(flags, "--sysctl", s.Name+"="+s.Value)
	}
	if cs.ReadOnlyRootFilesystem != nil && *cs.ReadOnlyRootFilesystem {
		flags = append(flags, "--read-only", "--read-only-tmpfs=false")
	}
	if cs.Privileged != nil && *cs.Privileged {
		return nil, 0, 0, fmt.Errorf("a privileged container is not run here")
	}
	if cs.Capabilities != nil {
		for _, cap := range cs.Capabilities.Drop {
			flags = append(flags, "--cap-drop", string(cap))
		}
		for _, cap := range cs.Capabilities.Add {
			flags = append(flags, "--cap-add", string(cap))
		}
	}
	if cs.AllowPrivilegeEscalation != nil && !*cs.AllowPrivilegeEscalation {
		flags = append(flags, "--security-opt", "no-new-privileges")
	}
	seccomp := cs.SeccompProfile
	if seccomp == nil {
		seccomp = ps.SeccompProfile
	}
	if seccomp != nil {
		switch seccomp.Type {
		case corev1.SeccompProfileTypeRuntimeDefault:
		case corev1.SeccompProfileTypeUnconfined:
			flags = append(flags, "--security-opt", "seccomp=unconfined")
		default:
			return nil, 0, 0, fmt.Errorf("seccompProfile %s is not run here", seccomp.Type)
		}
	}
	return flags, uid, gid, nil
}

// resourceFlags: the container's memory limit, CPU limit, and CPU request
// as cgroup shares (the kubelet's milli-CPU * 1024 / 1000, at least 2).
func resourceFlags(r corev1.ResourceRequirements) ([]string, error) {
	var flags []string
	if m, ok := r.Limits[corev1.ResourceMemory]; ok {
		flags = append(flags, "--memory", strconv.FormatInt(m.Value(), 10))
	}
	if cpu, ok := r.Limits[corev1.ResourceCPU]; ok {
		flags = append(flags, "--cpus", strconv.FormatFloat(float64(cpu.MilliValue())/1000, 'f', 3, 64))
	}
	if cpu, ok := r.Requests[corev1.ResourceCPU]; ok {
		shares := max(cpu.MilliValue()*1024/1000, 2)
		flags = append(flags, "--cpu-shares", strconv.FormatInt(shares, 10))
	}
	return flags, nil
}

// CheckImage fails unless the image exists and holds the very build of
// binary (OWNERGUARD_BIN, the release build the suite also runs offline):
// the GNU build IDs of the two must be equal (stripping keeps it). An
// image built from other sources, or before a change, is a clear error.
func CheckImage(ctx context.Context, image, binary string) error {
	if _, err := podmanOutput(ctx, "image", "exists", image); err != nil {
		return fmt.Errorf("no image %s: build it with `bash .ci/image build` (or run the binary: E2E_OWNERGUARD=process)", image)
	}
	var entrypoint []string
	out, err := podmanOutput(ctx, "image", "inspect", "--format", "{{json .Config.Entrypoint}}", image)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(out), &entrypoint); err != nil || len(entrypoint) == 0 {
		return fmt.Errorf("image %s: entrypoint %s", image, out)
	}
	mnt, err := podmanOutput(ctx, "image", "mount", image)
	if err != nil {
		return err
	}
	defer func() { _, _ = podmanOutput(context.Background(), "image", "unmount", image) }()
	// podman mounted it in the namespace it ran in, under a private mount:
	// seen from here through that namespace's root.
	if pid := os.Getenv("E2E_HOST_PID"); pid != "" {
		mnt = filepath.Join("/proc", pid, "root", mnt)
	}
	inImage, err := BuildID(filepath.Join(mnt, entrypoint[0]))
	if err != nil {
		return fmt.Errorf("image %s: %w", image, err)
	}
	built, err := BuildID(binary)
	if err != nil {
		return err
	}
	if inImage != built {
		return fmt.Errorf("image %s holds the build %s, %s is %s: the image was built from other sources; rebuild it with `bash .ci/image build`", image, inImage, binary, built)
	}
	return nil
}

// BuildID is the GNU build ID of an ELF file.
func BuildID(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_NOTE {
			continue
		}
		data := make([]byte, prog.Filesz)
		if _, err := prog.ReadAt(data, 0); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		for len(data) >= 12 {
			nameSize, descSize := f.ByteOrder.Uint32(data[0:4]), f.ByteOrder.Uint32(data[4:8])
			kind := f.ByteOrder.Uint32(data[8:12])
			nameEnd := 12 + align4(nameSize)
			descEnd := nameEnd + align4(descSize)
			if uint32(len(data)) < descEnd {
				break
			}
			name := string(bytes.TrimRight(data[12:12+nameSize], "\x00"))
			if kind == ntGNUBuildID && name == "GNU" {
				return hex.EncodeToString(data[nameEnd : nameEnd+descSize]), nil
			}
			data = data[descEnd:]
		}
	}
	return "", fmt.Errorf("%s has no GNU build ID", path)
}

func align4(n uint32) uint32 { return (n + 3) &^ 3 }

// NT_GNU_BUILD_ID, the note type of a GNU build ID (elf.h).
const ntGNUBuildID = 3
