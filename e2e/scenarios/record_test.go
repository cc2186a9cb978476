package scenarios

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// recordedCase is one review the chart's ownerguard wrote with --record.
type recordedCase struct {
	Dir      string
	Webhook  string
	Request  map[string]any // request.request
	Response map[string]any // response.response, patch decoded
}

func (c recordedCase) object() metav1.ObjectMeta {
	var o struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	b, _ := json.Marshal(c.Request["object"])
	_ = json.Unmarshal(b, &o)
	return o.Metadata
}

// recordedCases reads every case written so far, in order of arrival.
func recordedCases(t *testing.T) []recordedCase {
	t.Helper()
	entries, err := os.ReadDir(recordDir)
	if err != nil {
		t.Fatalf("read %s: %v", recordDir, err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var cases []recordedCase
	for _, name := range names {
		dir := filepath.Join(recordDir, name)
		c := recordedCase{Dir: dir}
		var request, response map[string]any
		var config map[string]any
		if readJSON(filepath.Join(dir, "request.json"), &request) != nil ||
			readJSON(filepath.Join(dir, "response.json"), &response) != nil {
			continue // being written
		}
		if data, err := os.ReadFile(filepath.Join(dir, "case.yaml")); err == nil {
			_ = yaml.Unmarshal(data, &config)
		}
		c.Webhook, _ = config["webhook"].(string)
		c.Request, _ = request["request"].(map[string]any)
		c.Response, _ = response["response"].(map[string]any)
		cases = append(cases, c)
	}
	return cases
}

func readJSON(path string, into any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, into)
}

// recordedFor: the cases of one webhook and operation on one object.
func recordedFor(t *testing.T, webhook, operation, ns, name string) []recordedCase {
	var out []recordedCase
	for _, c := range recordedCases(t) {
		if c.Webhook == webhook && c.Request["operation"] == operation && c.Request["namespace"] == ns &&
			(c.Request["name"] == name || c.object().Name == name) {
			out = append(out, c)
		}
	}
	return out
}
