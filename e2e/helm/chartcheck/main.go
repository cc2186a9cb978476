// chartcheck decodes, strictly, the objects of a rendered chart whose
// kinds the test API server has no real CRD for (cert-manager's
// Certificate and Issuer, the Prometheus Operator's ServiceMonitor and
// PrometheusRule) into those projects' own Go API types, at the current
// releases e2e/helm/go.mod pins: an unknown or mistyped field fails. The
// API server's schema judges every other object (helm install
// --dry-run=server validates against it; the suite's installs apply them).
//
//	chartcheck < rendered.yaml
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

func main() {
	n, err := check(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chartcheck:", err)
		os.Exit(1)
	}
	fmt.Printf("chartcheck: %d objects decoded strictly into their projects' types\n", n)
}

func check(in io.Reader) (int, error) {
	reader := yaml.NewYAMLReader(bufio.NewReader(in))
	checked := 0
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return checked, nil
		}
		if err != nil {
			return checked, err
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		if err := sigsyaml.Unmarshal(doc, &head); err != nil {
			return checked, err
		}
		var into any
		switch head.APIVersion + "/" + head.Kind {
		case "cert-manager.io/v1/Certificate":
			into = &cmv1.Certificate{}
		case "cert-manager.io/v1/Issuer":
			into = &cmv1.Issuer{}
		case "monitoring.coreos.com/v1/ServiceMonitor":
			into = &monitoringv1.ServiceMonitor{}
		case "monitoring.coreos.com/v1/PrometheusRule":
			into = &monitoringv1.PrometheusRule{}
		default:
			continue
		}
		if err := sigsyaml.UnmarshalStrict(doc, into); err != nil {
			return checked, fmt.Errorf("%s %s: %w", head.Kind, head.Metadata.Name, err)
		}
		checked++
	}
}
