package scenarios

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Cluster lookup against the real list and watch: ownerguard serving
// with an admin kubeconfig (a system:masters user of its own, so that the
// audit log tells its requests apart), reviews posted straight to it.
func TestClusterLookup(t *testing.T) {
	ctx := ctxFor(t, 8*time.Minute)
	ns := newNamespace(t, "lookup", nil)
	hit := newPod(t, ns, "owner-hit")
	doomed := newPod(t, ns, "owner-doomed")

	lookup, err := plane.Serve(ctx, admin, inst, harness.ServeOptions{
		Name: "ownerguard-lookup", Token: plane.PKI.OwnerguardAdminToken, Addr: "127.0.0.1:8450", MetricsPort: 9450})
	must(t, err, "serve with the admin kubeconfig")
	defer lookup.Stop(30 * time.Second)
	open, err := plane.Serve(ctx, admin, inst, harness.ServeOptions{
		Name: "ownerguard-fail-open", Token: plane.PKI.OwnerguardAdminToken, Addr: "127.0.0.1:8451", MetricsPort: 9451,
		ExtraArgs: []string{"--fail-open"}})
	must(t, err, "serve with --fail-open")
	defer open.Stop(30 * time.Second)
	reviews, err := harness.NewReviewClient(lookup.Addr, lookup.CAFile, lookup.ServerName)
	must(t, err, "review client")
	openReviews, err := harness.NewReviewClient(open.Addr, open.CAFile, open.ServerName)
	must(t, err, "review client")

	review := func(t *testing.T, c *harness.ReviewClient, owner *corev1.Pod, uid string, timeout time.Duration) *harness.Answer {
		t.Helper()
		answer, err := c.Review("/mutate", timeout, harness.ConfigMapCreate(ns, "agent-of-"+owner.Name, ownedLabels(owner.Name, uid)))
		must(t, err, "review")
		return answer
	}
	source := func(a *harness.Answer) string { return a.Response.AuditAnnotations["owner-source"] }

	t.Run("CacheFillsFromListAndWatch", func(t *testing.T) {
		// Pods come and go as earlier scenarios' namespaces are deleted:
		// the cache must agree with a list taken at the same moment.
		must(t, harness.Until(ctx, 30*time.Second, 200*time.Millisecond, "the cache holds every pod", func() error {
			all, err := admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			n, err := lookup.Metric("ownerguard_owner_cache_pods", nil)
			if err != nil {
				return err
			}
			if int(n) != len(all.Items) {
				return fmt.Errorf("ownerguard_owner_cache_pods %v, the cluster has %d pods", n, len(all.Items))
			}
			return nil
		}), "cache")
		a := review(t, reviews, hit, string(hit.UID), 10*time.Second)
		if !a.Response.Allowed || source(a) != "cache" {
			t.Fatalf("an owner listed at start: allowed %v, owner-source %q (want true, cache): %+v", a.Response.Allowed, source(a), a.Response.Result)
		}
	})

	t.Run("OwnerCreatedAMomentBefore", func(t *testing.T) {
		fresh := newPod(t, ns, "owner-fresh")
		a := review(t, reviews, fresh, string(fresh.UID), 10*time.Second)
		if !a.Response.Allowed {
			t.Fatalf("an owner created a moment before: denied %+v", a.Response.Result)
		}
		t.Logf("answered from %s in %v", source(a), a.Took)
		fmt.Printf("    lookup: an owner created just before its agent answered from %q\n", source(a))
	})

	t.Run("OwnerDeletedAndRecreatedUnderSameName", func(t *testing.T) {
		first := newPod(t, ns, "owner-again")
		// Let the watch see the first one, so that the cache holds a uid
		// that is about to be wrong.
		must(t, harness.Until(ctx, 10*time.Second, 100*time.Millisecond, "cached", func() error {
			if a := review(t, reviews, first, string(first.UID), 10*time.Second); source(a) != "cache" {
				return fmt.Errorf("answered from %q", source(a))
			}
			return nil
		}), "the first pod cached")
		must(t, admin.CoreV1().Pods(ns).Delete(ctx, first.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}), "delete")
		_, err := gone(ctx, 30*time.Second, func(ctx context.Context) error {
			_, err := admin.CoreV1().Pods(ns).Get(ctx, first.Name, metav1.GetOptions{})
			return err
		})
		must(t, err, "first pod gone")
		second := newPod(t, ns, "owner-again")
		if a := review(t, reviews, second, string(second.UID), 10*time.Second); !a.Response.Allowed {
			t.Fatalf("the recreated owner's uid: denied %+v", a.Response.Result)
		}
		if a := review(t, reviews, first, string(first.UID), 10*time.Second); a.Response.Allowed || a.Response.Result == nil || a.Response.Result.Code != 403 {
			t.Fatalf("the deleted pod's uid: %+v, want denied 403", a.Response)
		}
	})

	t.Run("APIServerStoppedAndRestarted", func(t *testing.T) {
		// A second API server on the same etcd makes the changes while the
		// one ownerguard watches is down.
		must(t, plane.StartAPIServer(ctx, 6444), "second API server")
		defer plane.StopAPIServer(6444)
		cfg := plane.RESTConfig()
		cfg.Host = harness.APIURL(6444)
		other := kubernetes.NewForConfigOrDie(cfg)

		// Cached before the stop.
		if a := review(t, reviews, hit, string(hit.UID), 10*time.Second); source(a) != "cache" {
			t.Fatalf("owner-hit not answered from the cache before the stop: %q", source(a))
		}
		plane.StopAPIServer(harness.APIPort)
		restarted := false
		defer func() {
			if !restarted {
				must(t, plane.StartAPIServer(context.Background(), harness.APIPort), "restart the API server")
			}
		}()

		// etcd compacted: the watch's resourceVersion is gone for good, so
		// its resumption must relist (410 Gone).
		etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{harness.EtcdClientURL}, DialTimeout: 5 * time.Second})
		must(t, err, "etcd client")
		defer etcd.Close()
		// Changes while it is down, through the other API server.
		must(t, other.CoreV1().Pods(ns).Delete(ctx, doomed.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}), "delete owner-doomed")
		created, err := other.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "owner-while-down"},
			Spec:       corev1.PodSpec{ServiceAccountName: "worker", Containers: []corev1.Container{{Name: "w", Image: "e2e.invalid/worker:1"}}},
		}, metav1.CreateOptions{})
		must(t, err, "create owner-while-down")
		status, err := etcd.Status(ctx, harness.EtcdClientURL)
		must(t, err, "etcd status")
		_, err = etcd.Compact(ctx, status.Header.Revision, clientv3.WithCompactPhysical())
		must(t, err, "compact etcd")
		fmt.Printf("    lookup: etcd compacted at revision %d with the API server down\n", status.Header.Revision)

		t.Run("CacheHitAnswered", func(t *testing.T) {
			a := review(t, reviews, hit, string(hit.UID), 10*time.Second)
			if !a.Response.Allowed {
				t.Fatalf("a cached owner with the API server down: %+v", a.Response.Result)
			}
		})
		t.Run("MissDenied503WithinTimeout", func(t *testing.T) {
			const timeout = 3 * time.Second
			a := review(t, reviews, created, string(created.UID), timeout)
			if a.Response.Allowed || a.Response.Result == nil || a.Response.Result.Code != 503 {
				t.Fatalf("a miss with the API server down: %+v, want denied 503", a.Response)
			}
			if a.Took >= timeout {
				t.Fatalf("answered in %v, not within ?timeout=%v", a.Took, timeout)
			}
			fmt.Printf("    lookup: miss with the API server down denied 503 in %v (timeout %v)\n", a.Took.Round(time.Millisecond), timeout)
		})
		t.Run("FailOpenAllows", func(t *testing.T) {
			a := review(t, openReviews, created, string(created.UID), 3*time.Second)
			if !a.Response.Allowed || len(a.Response.Warnings) == 0 {
				t.Fatalf("--fail-open with the API server down: allowed %v, warnings %v", a.Response.Allowed, a.Response.Warnings)
			}
		})

		restarted = true
		auditLog := filepath.Join(plane.Logs, fmt.Sprintf("audit-%d.log", harness.APIPort))
		auditFrom := fileSize(auditLog)
		must(t, plane.StartAPIServer(ctx, harness.APIPort), "restart the API server")
		t.Run("WatchResumesAndCatchesUp", func(t *testing.T) {
			must(t, harness.Until(ctx, 90*time.Second, 500*time.Millisecond, "the cache caught up", func() error {
				if a := review(t, reviews, created, string(created.UID), 10*time.Second); !a.Response.Allowed || source(a) != "cache" {
					return fmt.Errorf("owner-while-down: allowed %v from %q", a.Response.Allowed, source(a))
				}
				return nil
			}), "owner created while down")
			if a := review(t, reviews, doomed, string(doomed.UID), 10*time.Second); a.Response.Allowed {
				t.Fatalf("owner deleted while down still allowed (from %q)", source(a))
			}
			// What the restarted API server saw of ownerguard's identity: the
			// watch resumed from a version etcd no longer holds (answered
			// 410 Expired), then a list: the relist.
			var resumed, relisted bool
			for _, e := range auditEvents(t, auditLog, auditFrom, harness.OwnerguardAdmin) {
				u, err := url.Parse(e.RequestURI)
				if err != nil || u.Path != "/api/v1/pods" {
					continue
				}
				rv, _ := strconv.ParseInt(u.Query().Get("resourceVersion"), 10, 64)
				switch {
				case e.Verb == "watch" && rv > 0 && rv < status.Header.Revision:
					resumed = true
				case e.Verb == "list" && resumed:
					relisted = true
				}
			}
			if !resumed || !relisted {
				t.Errorf("the restarted API server saw no watch resumed from before the compaction (%v) followed by a relist (%v)", resumed, relisted)
			}
		})
	})
}

func fileSize(path string) int64 {
	info, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return info.Size()
}

type auditEvent struct {
	Verb       string `json:"verb"`
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// auditEvents of user in the audit log from byte offset on, in order.
func auditEvents(t *testing.T, path string, from int64, user string) []auditEvent {
	t.Helper()
	data, err := os.ReadFile(path)
	must(t, err, "read the audit log")
	if from > int64(len(data)) {
		from = 0
	}
	var out []auditEvent
	for _, line := range bytes.Split(data[from:], []byte("\n")) {
		var e auditEvent
		if json.Unmarshal(line, &e) == nil && e.User.Username == user {
			out = append(out, e)
		}
	}
	return out
}
