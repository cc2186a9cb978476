package scenarios

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The cases committed as tests/fixtures/recorded/<name>/: what the real
// API server sent in the scenarios above, as `serve --record` wrote it.
var curated = []struct {
	name, webhook, operation, resource, nsPrefix, object string
	nth                                                  int    // 0: first match; -1: last
	user                                                 string // the requester, when it tells cases apart
}{
	{"create-agent-pod-from-worker-token", "mutate", "CREATE", "pods", "e2e-creates-", "agent-0", 0, ""},
	{"create-configmap-from-worker-token", "mutate", "CREATE", "configmaps", "e2e-creates-", "prompt-0", 0, ""},
	{"validate-create-configmap-after-mutation", "validate", "CREATE", "configmaps", "e2e-creates-", "prompt-0", 0, ""},
	{"create-job-with-labelled-template", "mutate", "CREATE", "jobs", "e2e-creates-", "agents-0", 0, ""},
	{"create-job-pod-by-job-controller", "mutate", "CREATE", "pods", "e2e-creates-", "agents-0-", 0, "system:serviceaccount:kube-system:job-controller"},
	{"create-replicaset-pod-by-replicaset-controller", "mutate", "CREATE", "pods", "e2e-creates-", "agents-", 0, "system:serviceaccount:kube-system:replicaset-controller"},
	{"create-wrong-uid-denied", "mutate", "CREATE", "configmaps", "e2e-creates-", "wrong-uid", 0, ""},
	{"create-owner-in-another-namespace-denied", "mutate", "CREATE", "configmaps", "e2e-creates-other-", "elsewhere", 0, ""},
	{"create-missing-owner-denied", "mutate", "CREATE", "configmaps", "e2e-creates-", "orphan", 0, ""},
	{"create-dry-run", "mutate", "CREATE", "configmaps", "e2e-creates-", "dry", 0, ""},
	{"create-reinvoked-after-another-webhook", "mutate", "CREATE", "configmaps", "e2e-creates-", "reinvoked-", -1, ""},
	{"update-replace-original-manifest", "mutate", "UPDATE", "configmaps", "e2e-updates-", "upd-put", 0, ""},
	{"update-owner-label-changed-denied", "mutate", "UPDATE", "configmaps", "e2e-updates-", "upd-label", 0, ""},
	{"update-owner-reference-removed", "mutate", "UPDATE", "configmaps", "e2e-updates-", "upd-ref", 0, ""},
	{"update-reference-made-blocking", "mutate", "UPDATE", "configmaps", "e2e-updates-", "upd-block", 0, ""},
	{"create-blocking-reference-unblocked", "mutate", "CREATE", "configmaps", "e2e-updates-", "upd-blocked-create", 0, ""},
	{"update-orphaned-by-garbage-collector", "mutate", "UPDATE", "configmaps", "e2e-gc-", "orphan-prompt", 0, ""},
}

// Recorded fixtures: every review the chart's ownerguard recorded from
// the real API server is decided again offline (`ownerguard review` with
// the case's pods and settings) with the same answer; the curated ones
// are found, and written to tests/fixtures/recorded/ with
// E2E_UPDATE_RECORDED=1.
func TestRecordedFixtures(t *testing.T) {
	cases := recordedCases(t)
	if len(cases) == 0 {
		t.Fatal("nothing recorded")
	}
	t.Run("ManagedFieldsStripped", func(t *testing.T) {
		for _, c := range cases {
			data, err := os.ReadFile(filepath.Join(c.Dir, "request.json"))
			must(t, err, "read")
			if strings.Contains(string(data), `"managedFields"`) {
				t.Errorf("%s: managedFields kept", filepath.Base(c.Dir))
			}
		}
	})

	t.Run("ReplayedOffline", func(t *testing.T) {
		replayed, sourceDiffers := 0, 0
		for _, c := range cases {
			var config map[string]any
			data, _ := os.ReadFile(filepath.Join(c.Dir, "case.yaml"))
			must(t, yaml.Unmarshal(data, &config), "case.yaml")
			if failures, _ := config["lookupFailures"].([]any); len(failures) > 0 {
				continue // a failed lookup is not reproducible offline
			}
			args := []string{"review", "--pods", filepath.Join(c.Dir, "pods.yaml"), "--webhook", c.Webhook}
			if v, ok := config["requesterCheck"].(string); ok {
				args = append(args, "--requester-check", v)
			}
			if v, _ := config["failOpen"].(bool); v {
				args = append(args, "--fail-open")
			}
			if v, ok := config["keyPrefix"].(string); ok {
				args = append(args, "--key-prefix", v)
			}
			args = append(args, filepath.Join(c.Dir, "request.json"))
			out, err := exec.Command(os.Getenv("OWNERGUARD_BIN"), args...).Output()
			var exit *exec.ExitError
			if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
				t.Errorf("%s: ownerguard review: %v", filepath.Base(c.Dir), err)
				continue
			}
			var offline map[string]any
			must(t, json.Unmarshal(out, &offline), "review output")
			got, _ := offline["response"].(map[string]any)
			if p, ok := got["patch"].(string); ok {
				raw, _ := base64.StdEncoding.DecodeString(p)
				var patch any
				_ = json.Unmarshal(raw, &patch)
				got["patch"] = patch
			}
			want := c.Response
			// Where the owner was found differs by nature: the cluster's
			// cache or API against the offline inventory.
			gotSource, wantSource := annotation(got, "owner-source"), annotation(want, "owner-source")
			if gotSource != wantSource {
				sourceDiffers++
			}
			for _, key := range []string{"allowed", "status", "patch", "patchType", "warnings"} {
				if !reflect.DeepEqual(got[key], want[key]) {
					t.Errorf("%s: %s offline %v, recorded %v", filepath.Base(c.Dir), key, got[key], want[key])
				}
			}
			if annotation(got, "owner") != annotation(want, "owner") {
				t.Errorf("%s: owner annotation offline %q, recorded %q", filepath.Base(c.Dir), annotation(got, "owner"), annotation(want, "owner"))
			}
			replayed++
		}
		t.Logf("%d of %d recorded reviews replayed offline with the same answer; owner-source differs (cache/api against inventory) in %d", replayed, len(cases), sourceDiffers)
		fmt.Printf("    recorded: %d reviews replayed offline, same answers; owner-source differs in %d\n", replayed, sourceDiffers)
	})

	for _, want := range curated {
		want := want
		t.Run("Curated/"+want.name, func(t *testing.T) {
			var matches []recordedCase
			for _, c := range cases {
				ns, _ := c.Request["namespace"].(string)
				res, _ := c.Request["resource"].(map[string]any)
				meta := c.object()
				name := meta.Name
				if name == "" {
					name = meta.GenerateName
				}
				user, _ := c.Request["userInfo"].(map[string]any)
				if want.user != "" && user["username"] != want.user {
					continue
				}
				if c.Webhook == want.webhook && c.Request["operation"] == want.operation && res["resource"] == want.resource &&
					strings.HasPrefix(ns, want.nsPrefix) && !strings.HasPrefix(ns, want.nsPrefix+"other-") &&
					(name == want.object || (strings.HasSuffix(want.object, "-") && strings.HasPrefix(name, want.object))) {
					matches = append(matches, c)
				}
			}
			if len(matches) == 0 {
				t.Fatalf("no %s %s review of %s %s* in %s* was recorded", want.webhook, want.operation, want.resource, want.object, want.nsPrefix)
			}
			pick := matches[0]
			if want.nth < 0 {
				pick = matches[len(matches)-1]
			}
			if os.Getenv("E2E_UPDATE_RECORDED") == "" {
				return
			}
			dest := filepath.Join(repo, "tests", "fixtures", "recorded", want.name)
			must(t, os.RemoveAll(dest), "clear")
			must(t, os.MkdirAll(dest, 0o755), "mkdir")
			entries, err := os.ReadDir(pick.Dir)
			must(t, err, "read case")
			source := annotation(pick.Response, "owner-source")
			for _, e := range entries {
				data, err := os.ReadFile(filepath.Join(pick.Dir, e.Name()))
				must(t, err, "read")
				switch e.Name() {
				case "response.json":
					// The golden tests replay the case against its pods.yaml,
					// so the owner is found in the inventory: the one field
					// that differs from the cluster's answer by nature.
					if source != "" {
						var review map[string]any
						must(t, json.Unmarshal(data, &review), "response.json")
						review["response"].(map[string]any)["auditAnnotations"].(map[string]any)["owner-source"] = "inventory"
						data, err = json.MarshalIndent(review, "", "  ")
						must(t, err, "response.json")
						data = append(data, '\n')
					}
				case "case.yaml":
					var config map[string]any
					must(t, yaml.Unmarshal(data, &config), "case.yaml")
					description := fmt.Sprintf("Recorded from the real API server (Kubernetes 1.34) by the end-to-end suite: %s %s of %s %s by %s.",
						want.webhook, want.operation, want.resource, pick.object().Name+pick.object().GenerateName, requester(pick))
					if source != "" {
						description += fmt.Sprintf(" ownerguard found the owner in its %s; replayed, it finds it in pods.yaml (owner-source inventory).", source)
					}
					config["description"] = description
					data, err = yaml.Marshal(config)
					must(t, err, "case.yaml")
				}
				must(t, os.WriteFile(filepath.Join(dest, e.Name()), data, 0o644), "write")
			}
			t.Logf("wrote %s from %s", dest, filepath.Base(pick.Dir))
		})
	}
}

func annotation(response map[string]any, key string) string {
	a, _ := response["auditAnnotations"].(map[string]any)
	v, _ := a[key].(string)
	return v
}

func requester(c recordedCase) string {
	user, _ := c.Request["userInfo"].(map[string]any)
	name, _ := user["username"].(string)
	return name
}
