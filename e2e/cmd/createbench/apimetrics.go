package main

// Where a create's time goes, as the API server itself measures it: its
// histograms of webhook calls (from sending the review to reading the
// answer, connection and TLS included) and of the etcd writes, scraped
// before and after every counted round and summed per variant. The
// client's latency says how long a create took; these say whether a slow
// one waited on a webhook call or on storage.

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"ownerguard.io/e2e/harness"

	"k8s.io/client-go/kubernetes"
)

// A histogram the API server exports, narrowed to the series that carry
// every pair of labels.
type watchedHistogram struct {
	name   string
	metric string
	labels map[string]string
}

var watchedHistograms = []watchedHistogram{
	{"mutating webhook calls", "apiserver_admission_webhook_admission_duration_seconds_bucket", map[string]string{"type": "admit", "operation": "CREATE"}},
	{"validating webhook calls", "apiserver_admission_webhook_admission_duration_seconds_bucket", map[string]string{"type": "validating", "operation": "CREATE"}},
	{"etcd creates (every type)", "etcd_request_duration_seconds_bucket", map[string]string{"operation": "create"}},
	{"pod creates (whole request)", "apiserver_request_duration_seconds_bucket", map[string]string{"verb": "POST", "resource": "pods", "subresource": ""}},
}

// buckets: cumulative counts by upper bound (`le`), summed over the
// matching series.
type buckets map[string]float64

// scrapeHistograms reads the API server's /metrics once.
func scrapeHistograms(ctx context.Context, admin *kubernetes.Clientset) (map[string]buckets, error) {
	raw, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	samples, err := harness.ParseSamples(string(raw))
	if err != nil {
		return nil, fmt.Errorf("the API server's metrics: %w", err)
	}
	out := map[string]buckets{}
	for _, w := range watchedHistograms {
		out[w.name] = buckets{}
		for _, s := range samples {
			if le := s.Labels["le"]; s.Name == w.metric && le != "" && s.Has(w.labels) {
				out[w.name][le] += s.Value
			}
		}
	}
	return out, nil
}

// addDelta adds after - before into sum.
func addDelta(sum map[string]buckets, before, after map[string]buckets) {
	for name, b := range after {
		if sum[name] == nil {
			sum[name] = buckets{}
		}
		for le, n := range b {
			sum[name][le] += n - before[name][le]
		}
	}
}

// printHistograms writes, per variant and histogram, how many observations
// fell under each bound the API server uses (cumulative shares), so that a
// tail shows where it is.
func printHistograms(order []string, sums map[string]map[string]buckets) {
	fmt.Printf("\nthe API server's own histograms, summed over the counted rounds (share of observations at or under each bound):\n\n")
	fmt.Printf("| variant | histogram | observations | shares by bound |\n|---|---|---|---|\n")
	for _, variant := range order {
		for _, w := range watchedHistograms {
			b := sums[variant][w.name]
			total := b["+Inf"]
			if total == 0 {
				continue
			}
			var bounds []string
			for le := range b {
				if le != "+Inf" {
					bounds = append(bounds, le)
				}
			}
			sort.Slice(bounds, func(i, j int) bool {
				x, _ := strconv.ParseFloat(bounds[i], 64)
				y, _ := strconv.ParseFloat(bounds[j], 64)
				return x < y
			})
			var shares []string
			for _, le := range bounds {
				if v, _ := strconv.ParseFloat(le, 64); v > 1 {
					break
				}
				shares = append(shares, fmt.Sprintf("≤%ss %.1f%%", le, 100*b[le]/total))
			}
			fmt.Printf("| %s | %s | %.0f | %s |\n", variant, w.name, total, strings.Join(shares, ", "))
		}
	}
}
