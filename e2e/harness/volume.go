package harness

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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
	return secret.MakePayload(source.Items, s, source.DefaultMode, source.DefaultUser, source.Optional != nil && *source.Optional)
}

// ConfigMapPayload is the same for a ConfigMap volume source
// (pkg/volume/configmap.MakePayload).
func ConfigMapPayload(source *corev1.ConfigMapVolumeSource, cm *corev1.ConfigMap) (map[string]volumeutil.FileProjection, error) {
	return configmap.MakePayload(source.Items, cm, source.DefaultMode, source.DefaultUser, source.Optional != nil && *source.Optional)
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

// projectedPayload is a projected volume's files (pkg/volume/projected):
// a service-account token (token: the pod's), ConfigMap and Secret items,
// and the downward API's metadata.namespace and metadata.name (of the
// pod the token is bound to is not known here: the namespace only).
func projectedPayload(ctx context.Context, c kubernetes.Interface, namespace string, source *corev1.ProjectedVolumeSource, token string, fsGroup *int64) (map[string]volumeutil.FileProjection, error) {
	mode := int32(corev1.ProjectedVolumeSourceDefaultMode)
	if source.DefaultMode != nil {
		mode = *source.DefaultMode
	}
	payload := map[string]volumeutil.FileProjection{}
	for _, s := range source.Sources {
		switch {
		case s.ServiceAccountToken != nil:
			tokenMode := mode
			if fsGroup != nil {
				tokenMode = 0o600
			}
			payload[s.ServiceAccountToken.Path] = volumeutil.FileProjection{Data: []byte(token), Mode: tokenMode}
		case s.ConfigMap != nil:
			// The kubelet retries a mount until the ConfigMap exists (a
			// fresh namespace's kube-root-ca.crt comes a moment after it).
			var cm *corev1.ConfigMap
			err := Until(ctx, 30*time.Second, 200*time.Millisecond, "configmap "+s.ConfigMap.Name, func() error {
				var err error
				cm, err = c.CoreV1().ConfigMaps(namespace).Get(ctx, s.ConfigMap.Name, metav1.GetOptions{})
				return err
			})
			if err != nil {
				return nil, err
			}
			files, err := configmap.MakePayload(s.ConfigMap.Items, cm, &mode, source.DefaultUser, s.ConfigMap.Optional != nil && *s.ConfigMap.Optional)
			if err != nil {
				return nil, err
			}
			maps.Copy(payload, files)
		case s.Secret != nil:
			sec, err := c.CoreV1().Secrets(namespace).Get(ctx, s.Secret.Name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			files, err := secret.MakePayload(s.Secret.Items, sec, &mode, source.DefaultUser, s.Secret.Optional != nil && *s.Secret.Optional)
			if err != nil {
				return nil, err
			}
			maps.Copy(payload, files)
		case s.DownwardAPI != nil:
			for _, item := range s.DownwardAPI.Items {
				if item.FieldRef == nil || item.FieldRef.FieldPath != "metadata.namespace" {
					return nil, fmt.Errorf("downward API item %s: only metadata.namespace is written here", item.Path)
				}
				m := mode
				if item.Mode != nil {
					m = *item.Mode
				}
				payload[item.Path] = volumeutil.FileProjection{Data: []byte(namespace), Mode: m}
			}
		default:
			return nil, fmt.Errorf("a projected source the suite does not write")
		}
	}
	return payload, nil
}

// ServiceAccountMountPath is where the kubelet mounts the projected token.
const ServiceAccountMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
