package scenarios

// The owner lookup under a faulty watch (issue 19, item 1): the chart's
// ownerguard runs at the Service's address (the real API server calls it)
// with its in-cluster address of the API server pointing at a proxy of
// the test (harness.APIProxy), which drops, holds back or cuts chosen
// watch events, or makes the API server unreachable. Other pods keep
// changing meanwhile (a churn of pods that start, finish and go), so that
// each of ownerguard's three watches (every pod, Succeeded pods, Failed
// pods) keeps hearing events: a fault is then the only reason for it to
// distrust its cache.
//
// A create naming an owner is made through the real API server by the
// admin, with the owner's name and uid labels; it is admitted (the
// reference added) or refused by ownerguard.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ownerguard.io/e2e/harness"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The --watch-silence-limit of the ownerguard under test (the window of
// a silent stream), and its --cache-max-age: the bound within which a
// create naming a deleted owner must be refused whatever the stream does
// (docs/reference/server.md, "Worst-case staleness").
var (
	faultsSilenceLimit = 6 * time.Second
	stalenessBound     = 10 * time.Second
)

// What a measured time may exceed its bound by: the poll interval (250
// ms), a create's round trip through the API server and the webhook.
const faultsMargin = 2 * time.Second

func TestWatchFaults(t *testing.T) {
	ctx := ctxFor(t, 10*time.Minute)
	proxy, err := harness.StartAPIProxy(net.JoinHostPort(plane.NodeIP.String(), "6451"), harness.APIURL(harness.APIPort), plane.PKI.CA)
	must(t, err, "the API proxy")
	defer proxy.Close()

	// The chart's ownerguard, as its pod runs it, but for the API server
	// address: stopped, then started again behind the proxy.
	stopGuard(t)
	pods, err := harness.ChartPods(ctx, admin, inst, 0)
	must(t, err, "the chart's pods")
	token, err := harness.PodToken(ctx, admin, inst, pods[0])
	must(t, err, "a token bound to a chart pod")
	faulty, err := plane.Serve(ctx, admin, inst, harness.ServeOptions{Name: "ownerguard-faults", Token: token,
		APIServer: proxy.Addr, Hostname: pods[0].Name,
		ExtraArgs: []string{"--watch-silence-limit=" + faultsSilenceLimit.String(), "--cache-max-age=" + stalenessBound.String()}})
	must(t, err, "ownerguard behind the proxy")
	defer faulty.Stop(30 * time.Second)
	reviews, err := harness.NewReviewClient(faulty.Addr, faulty.CAFile, faulty.ServerName)
	must(t, err, "review client")

	ns := newNamespace(t, "faults", nil)
	stopChurn := startChurn(ns)
	defer stopChurn()

	healthy := func(t *testing.T, d time.Duration) {
		t.Helper()
		must(t, harness.Until(ctx, d, 100*time.Millisecond, "the watches healthy", func() error {
			v, err := faulty.Metric("ownerguard_owner_watch_healthy", nil)
			if err != nil {
				return err
			}
			if v != 1 {
				return fmt.Errorf("ownerguard_owner_watch_healthy %v", v)
			}
			return nil
		}), "ownerguard's watches")
	}
	// cached waits until ownerguard answers for owner from its cache.
	cached := func(t *testing.T, owner *corev1.Pod) {
		t.Helper()
		must(t, harness.Until(ctx, 20*time.Second, 100*time.Millisecond, owner.Name+" cached", func() error {
			a, err := reviews.Review("/mutate", 10*time.Second, harness.ConfigMapCreate(ns, "probe-"+owner.Name, ownedLabels(owner.Name, string(owner.UID))))
			if err != nil {
				return err
			}
			if !a.Response.Allowed || a.Response.AuditAnnotations["owner-source"] != "cache" {
				return fmt.Errorf("allowed %v from %q", a.Response.Allowed, a.Response.AuditAnnotations["owner-source"])
			}
			return nil
		}), "cache")
	}
	deletePod := func(t *testing.T, owner *corev1.Pod) time.Time {
		t.Helper()
		must(t, admin.CoreV1().Pods(ns).Delete(ctx, owner.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}), "delete "+owner.Name)
		_, err := gone(ctx, 30*time.Second, func(ctx context.Context) error {
			_, err := admin.CoreV1().Pods(ns).Get(ctx, owner.Name, metav1.GetOptions{})
			return err
		})
		must(t, err, owner.Name+" gone")
		return time.Now()
	}

	t.Run("LostDeletionOnLiveStream", func(t *testing.T) {
		owner := newPod(t, ns, "owner-lost")
		healthy(t, 30*time.Second)
		cached(t, owner)
		var dropped atomic.Int64
		proxy.SetFilter(func(e harness.WatchEvent) harness.Verdict {
			if e.Stream.Resource == "pods" && e.Namespace == ns && e.Name == owner.Name && (e.Type == "MODIFIED" || e.Type == "DELETED") {
				dropped.Add(1)
				return harness.Drop
			}
			return harness.Pass
		})
		defer proxy.SetFilter(nil)
		deleted := deletePod(t, owner)
		must(t, harness.Until(ctx, 10*time.Second, 50*time.Millisecond, "the deletion dropped", func() error {
			if dropped.Load() == 0 {
				return errors.New("no event of the owner dropped yet")
			}
			return nil
		}), "the proxy")
		res := pollCreates(ctx, ns, owner, stalenessBound+faultsMargin, func(r createResult) bool { return !r.admitted })
		// The premise: the stream that lost the events stayed open and the
		// watches healthy, events of other pods flowing.
		live := 0
		for _, s := range proxy.Streams(harness.PodsWatch("")) {
			if s.Live() && s.Dropped.Load() > 0 && s.Passed.Load() > 0 {
				live++
			}
		}
		v, _ := faulty.Metric("ownerguard_owner_watch_healthy", nil)
		fmt.Printf("    faults: lost deletion: %d events of %s dropped on a live stream (%d such streams open, watches healthy %v); %s\n",
			dropped.Load(), owner.Name, live, v, res.describe(deleted))
		if live == 0 {
			t.Errorf("no live stream of every pod dropped the deletion and passed other events: the scenario proves nothing")
		}
		if res.stopped == nil {
			t.Fatalf("a create naming %s (deleted, its deletion events lost on a live stream) still admitted %v after the deletion (%d creates admitted); want refused within --cache-max-age=%v",
				owner.Name, time.Since(deleted).Round(time.Millisecond), res.admitted, stalenessBound)
		}
		if at := res.stopped.at.Sub(deleted); at > stalenessBound+faultsMargin {
			t.Errorf("refused %.2f s after the deletion, later than the bound %v", at.Seconds(), stalenessBound)
		}
	})

	t.Run("FrozenStream", func(t *testing.T) {
		owner := newPod(t, ns, "owner-frozen")
		healthy(t, 30*time.Second)
		cached(t, owner)
		proxy.Freeze(harness.PodsWatch(""))
		thawed := false
		defer func() {
			if !thawed {
				proxy.Thaw()
			}
		}()
		lastEvent := lastPassed(proxy.Streams(harness.PodsWatch("")), false)
		deleted := deletePod(t, owner)
		res := pollCreates(ctx, ns, owner, faultsSilenceLimit+faultsMargin+5*time.Second, func(r createResult) bool { return !r.admitted })
		fmt.Printf("    faults: frozen stream of every pod (its last event passed %.2f s before the deletion); %s; refused %s after the last event heard (limit %v)\n",
			deleted.Sub(lastEvent).Seconds(), res.describe(deleted), res.sinceStr(lastEvent), faultsSilenceLimit)
		if res.stopped == nil {
			t.Fatalf("still admitted %v after the last event of a frozen stream; the documented window is --watch-silence-limit (%v)", time.Since(lastEvent).Round(time.Millisecond), faultsSilenceLimit)
		}
		if at := res.stopped.at.Sub(lastEvent); at > faultsSilenceLimit+faultsMargin {
			t.Errorf("refused %.2f s after the last event heard, beyond the silence limit %v (+%v)", at.Seconds(), faultsSilenceLimit, faultsMargin)
		}
		if res.stopped.code != 403 {
			t.Errorf("refused with %d %s, want 403 (the live GET finds no owner)", res.stopped.code, res.stopped.message)
		}
		// Thawed, the held events arrive, the deletion among them.
		proxy.Thaw()
		thawed = true
		healthy(t, 30*time.Second)
		a, err := reviews.Review("/mutate", 10*time.Second, harness.ConfigMapCreate(ns, "after-thaw", ownedLabels(owner.Name, string(owner.UID))))
		must(t, err, "review")
		if a.Response.Allowed {
			t.Errorf("the deleted owner allowed once the stream thawed (from %q)", a.Response.AuditAnnotations["owner-source"])
		}
	})

	t.Run("CutStream", func(t *testing.T) {
		owner := newPod(t, ns, "owner-cut")
		healthy(t, 30*time.Second)
		cached(t, owner)
		failures, _ := faulty.Metric("ownerguard_owner_watch_failures_total", nil)
		lists := proxy.Requests("GET /api/v1/pods")
		before := len(proxy.Streams(harness.PodsWatch("")))
		cutAt := time.Now()
		if n := proxy.Cut(harness.PodsWatch("")); n == 0 {
			t.Fatal("no live stream of every pod to cut")
		}
		deleted := deletePod(t, owner)
		res := pollCreates(ctx, ns, owner, 5*time.Second, func(createResult) bool { return false })
		if res.admitted > 0 {
			t.Errorf("%d creates naming %s admitted after its deletion, with the stream cut: %s", res.admitted, owner.Name, res.describe(deleted))
		}
		healthy(t, 60*time.Second)
		after, _ := faulty.Metric("ownerguard_owner_watch_failures_total", nil)
		streams := proxy.Streams(harness.PodsWatch(""))
		if len(streams) <= before {
			t.Fatalf("no new watch of every pod after the cut (%d streams before, %d after)", before, len(streams))
		}
		// A dropped watch resumes from its resourceVersion (docs: the
		// server's lookup): a new stream from where it was, no list.
		resumed := streams[len(streams)-1]
		relisted := proxy.Requests("GET /api/v1/pods") - lists
		if resumed.Query.Get("resourceVersion") == "" || relisted != 0 {
			t.Errorf("after the cut: a watch from resourceVersion %q and %d lists; want it resumed from its version without a list", resumed.Query.Get("resourceVersion"), relisted)
		}
		fmt.Printf("    faults: cut stream (%s): %d creates naming the deleted owner, none admitted (%v); watch resumed after %.2f s from resourceVersion %s with %d relists; ownerguard_owner_watch_failures_total %v -> %v; watches healthy\n",
			resumed.Proto, res.total, res.codes, resumed.Started.Sub(cutAt).Seconds(), resumed.Query.Get("resourceVersion"), relisted, failures, after)
		// The resumed watch replayed the deletion: the cache no longer has it.
		a, err := reviews.Review("/mutate", 10*time.Second, harness.ConfigMapCreate(ns, "after-cut", ownedLabels(owner.Name, string(owner.UID))))
		must(t, err, "review")
		if a.Response.Allowed {
			t.Errorf("the deleted owner allowed after the watch resumed (from %q)", a.Response.AuditAnnotations["owner-source"])
		}
		fresh := newPod(t, ns, "owner-after-cut")
		cached(t, fresh)
	})

	t.Run("APIServerUnreachable", func(t *testing.T) {
		hit := newPod(t, ns, "owner-hit")
		healthy(t, 30*time.Second)
		cached(t, hit)
		proxy.SetUnreachable(true)
		reachable := false
		defer func() {
			if !reachable {
				proxy.SetUnreachable(false)
			}
		}()
		// Trust lasts while every watch of the scope was heard within the
		// limit: from the earliest of their last events.
		heard := lastPassed(proxy.Streams(harness.AnyPodsWatch), true)
		miss := newPod(t, ns, "owner-miss")

		r := createNaming(ctx, ns, hit)
		if !r.admitted {
			t.Errorf("a cached owner, the API server unreachable %.2f s after the last event heard: %d %s, want admitted", time.Since(heard).Seconds(), r.code, r.message)
		}
		r = createNaming(ctx, ns, miss)
		const webhookTimeout = 5 * time.Second
		if r.admitted || r.code != 503 || r.took >= webhookTimeout {
			t.Errorf("an owner not cached, the API server unreachable: admitted %v, %d %s in %v; want denied 503 within the webhook's %v", r.admitted, r.code, r.message, r.took, webhookTimeout)
		}
		fmt.Printf("    faults: API server unreachable: a miss denied %d in %v (%s)\n", r.code, r.took.Round(time.Millisecond), r.message)

		res := pollCreates(ctx, ns, hit, faultsSilenceLimit+faultsMargin+5*time.Second, func(r createResult) bool { return !r.admitted })
		fmt.Printf("    faults: API server unreachable: the cached owner %s; last admitted %s, first refused %s after the last event heard (limit %v)\n",
			res.describe(heard), res.lastAdmittedSince(heard), res.sinceStr(heard), faultsSilenceLimit)
		if res.stopped == nil {
			t.Fatalf("a cached owner still admitted %v after the last event heard, the API server unreachable; the limit is %v", time.Since(heard).Round(time.Millisecond), faultsSilenceLimit)
		}
		if res.stopped.code != 503 {
			t.Errorf("the cached owner past the limit: %d %s, want 503", res.stopped.code, res.stopped.message)
		}
		if res.lastAdmitted != nil && res.lastAdmitted.at.Sub(heard) > faultsSilenceLimit+faultsMargin {
			t.Errorf("a create admitted from the cache %.2f s after the last event heard, beyond the limit %v", res.lastAdmitted.at.Sub(heard).Seconds(), faultsSilenceLimit)
		}
		proxy.SetUnreachable(false)
		reachable = true
		healthy(t, 90*time.Second)
		if r := createNaming(ctx, ns, miss); !r.admitted {
			t.Errorf("the owner created while unreachable, once reachable again: %d %s", r.code, r.message)
		}
	})
}

// startChurn keeps pods changing in ns: every 500 ms a pod is created,
// finishes (Succeeded and Failed in turn, written through pods/status)
// and the one of two rounds before is deleted, so that the watch of every
// pod and both watches of finished pods hear events. It returns its stop.
func startChurn(ns string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx := context.Background()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			pod, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "churn-" + strconv.Itoa(i)},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "e2e.invalid/churn:1"}}},
			}, metav1.CreateOptions{})
			if err == nil {
				pod.Status.Phase = corev1.PodSucceeded
				if i%2 == 1 {
					pod.Status.Phase = corev1.PodFailed
				}
				_, _ = admin.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
			}
			if i >= 2 {
				_ = admin.CoreV1().Pods(ns).Delete(ctx, "churn-"+strconv.Itoa(i-2), metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// lastPassed is when the live streams last passed an event on: the
// latest of them, or the earliest when earliest is set.
func lastPassed(streams []*harness.WatchStream, earliest bool) time.Time {
	var out time.Time
	for _, s := range streams {
		if !s.Live() {
			continue
		}
		at := s.LastPassed()
		if out.IsZero() || (earliest && at.Before(out)) || (!earliest && at.After(out)) {
			out = at
		}
	}
	return out
}

// createResult is one create naming an owner.
type createResult struct {
	at       time.Time // when it was sent
	took     time.Duration
	admitted bool
	code     int32
	message  string
}

// createNaming creates, as the admin, a ConfigMap naming owner by name and uid.
func createNaming(ctx context.Context, ns string, owner *corev1.Pod) createResult {
	object := configMap("", ownedLabels(owner.Name, string(owner.UID)))
	object.GenerateName = "names-" + owner.Name + "-"
	r := createResult{at: time.Now()}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	_, err := admin.CoreV1().ConfigMaps(ns).Create(cctx, object, metav1.CreateOptions{})
	r.took = time.Since(r.at)
	if err == nil {
		r.admitted = true
		return r
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		r.code, r.message = status.Status().Code, status.Status().Message
	} else {
		r.message = err.Error()
	}
	return r
}

// polled is a series of creates naming one owner.
type polled struct {
	total, admitted int
	codes           map[int32]int
	lastAdmitted    *createResult
	stopped         *createResult // the result that ended the series
}

// pollCreates creates every 250 ms naming owner until until(result) or d passes.
func pollCreates(ctx context.Context, ns string, owner *corev1.Pod, d time.Duration, until func(createResult) bool) polled {
	p := polled{codes: map[int32]int{}}
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		r := createNaming(ctx, ns, owner)
		p.total++
		if r.admitted {
			p.admitted++
			p.lastAdmitted = &r
		} else {
			p.codes[r.code]++
		}
		if until(r) {
			p.stopped = &r
			return p
		}
		time.Sleep(250 * time.Millisecond)
	}
	return p
}

func (p polled) describe(from time.Time) string {
	s := fmt.Sprintf("%d creates, %d admitted", p.total, p.admitted)
	if p.stopped != nil && !p.stopped.admitted {
		s += fmt.Sprintf(", then refused %d %.2f s after", p.stopped.code, p.stopped.at.Sub(from).Seconds())
	} else if p.stopped == nil {
		s += fmt.Sprintf(", never refused in %.2f s", time.Since(from).Seconds())
	}
	return s
}

func (p polled) sinceStr(from time.Time) string {
	if p.stopped == nil {
		return "never"
	}
	return fmt.Sprintf("%.2f s", p.stopped.at.Sub(from).Seconds())
}

func (p polled) lastAdmittedSince(from time.Time) string {
	if p.lastAdmitted == nil {
		return "none"
	}
	return fmt.Sprintf("%.2f s", p.lastAdmitted.at.Sub(from).Seconds())
}
