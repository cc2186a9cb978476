package harness

import (
	"io/fs"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/volume/configmap"
	"k8s.io/kubernetes/pkg/volume/secret"
	volumeutil "k8s.io/kubernetes/pkg/volume/util"
)

// Volume is a directory written as the kubelet writes a Secret, ConfigMap
// or projected volume, with the kubelet's own writer
// (k8s.io/kubernetes/pkg/volume/util.AtomicWriter): the files live in a
// timestamped directory, `..data` links to it, each file name links into
// `..data`, and an update swaps `..data` in one rename. So a server
// reading the mount sees what it would see in a pod, rotation included.
type Volume struct {
	Dir     string
	fsGroup *int64
	writer  *volumeutil.AtomicWriter
}

// NewVolume makes dir (the volume's host directory). fsGroup, when set,
// owns the files as in a pod with that podSecurityContext.fsGroup.
func NewVolume(dir string, fsGroup *int64) (*Volume, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	writer, err := volumeutil.NewAtomicWriter(dir, "e2e volume "+filepath.Base(dir))
	if err != nil {
		return nil, err
	}
	return &Volume{Dir: dir, fsGroup: fsGroup, writer: writer}, nil
}

// Write projects payload into the volume (an update when it was written
// before), then sets the ownership the kubelet sets
// (pkg/volume.SetVolumeOwnership on a read-only volume): group fsGroup,
// group-readable files, directories group-searchable and setgid.
func (v *Volume) Write(payload map[string]volumeutil.FileProjection) error {
	return v.writer.Write(payload, func(string) error { return v.setOwnership() })
}

func (v *Volume) setOwnership() error {
	if v.fsGroup == nil {
		return nil
	}
	gid := int(*v.fsGroup)
	return filepath.WalkDir(v.Dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(path, -1, gid); err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mask := fs.FileMode(0o440)
		if d.IsDir() {
			mask |= os.ModeSetgid | 0o110
		}
		return os.Chmod(path, info.Mode()|mask)
	})
}

// SecretPayload is what the kubelet's secret volume plugin projects from
// secret for a volume source (its items and defaultMode): its own
// pkg/volume/secret.MakePayload.
func SecretPayload(source *corev1.SecretVolumeSource, s *corev1.Secret) (map[string]volumeutil.FileProjection, error) {
	return secret.MakePayload(source.Items, s, source.DefaultMode, source.Optional != nil && *source.Optional)
}

// ConfigMapPayload is the same for a ConfigMap volume source
// (pkg/volume/configmap.MakePayload).
func ConfigMapPayload(source *corev1.ConfigMapVolumeSource, cm *corev1.ConfigMap) (map[string]volumeutil.FileProjection, error) {
	return configmap.MakePayload(source.Items, cm, source.DefaultMode, source.Optional != nil && *source.Optional)
}

// ServiceAccountPayload is the kubelet's kube-api-access projected volume
// (defaultMode 0644): the pod's token, the cluster CA of the namespace's
// kube-root-ca.crt ConfigMap, and the namespace. The token is 0600 when
// the pod has an fsGroup (pkg/volume/projected), group-readable once the
// ownership is set.
func ServiceAccountPayload(token string, caCert []byte, namespace string, fsGroup *int64) map[string]volumeutil.FileProjection {
	tokenMode := int32(0o644)
	if fsGroup != nil {
		tokenMode = 0o600
	}
	return map[string]volumeutil.FileProjection{
		"token":     {Data: []byte(token), Mode: tokenMode},
		"ca.crt":    {Data: caCert, Mode: 0o644},
		"namespace": {Data: []byte(namespace), Mode: 0o644},
	}
}

// ServiceAccountMountPath is where the kubelet mounts the projected token.
const ServiceAccountMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
