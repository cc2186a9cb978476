package harness

// Traces in the end-to-end suite: an OpenTelemetry Collector (e2e/otelcol,
// built from the collector's modules) takes OTLP from kube-apiserver (gRPC)
// and from ownerguard (HTTP), and sends every span on over OTLP/HTTP to a
// receiver of the harness, which keeps them for a scenario to read. What a
// scenario asserts is what a tracing backend would be given.

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// The collector's OTLP ports, on loopback of the suite's network
// namespace (where the API servers and ownerguard run).
const (
	CollectorGRPC = "127.0.0.1:4317"
	CollectorHTTP = "127.0.0.1:4318"
)

// Span is one span as the collector passed it on.
type Span struct {
	Service         string // its resource's service.name
	Name            string
	TraceID, SpanID string // hex
	ParentSpanID    string // hex, "" for a root
	Attributes      map[string]string
}

// SpanSink receives the collector's exports.
type SpanSink struct {
	URL    string // the collector's traces_endpoint
	server *http.Server
	mu     sync.Mutex
	spans  []Span
}

// StartSpanSink listens on loopback for OTLP/HTTP protobuf exports.
func StartSpanSink() (*SpanSink, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &SpanSink{URL: "http://" + listener.Addr().String() + "/v1/traces"}
	s.server = &http.Server{Handler: http.HandlerFunc(s.receive), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.server.Serve(listener) }()
	return s, nil
}

func (s *SpanSink) Close() { _ = s.server.Close() }

func (s *SpanSink) receive(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = io.LimitReader(r.Body, 64<<20)
	if r.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var request coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(data, &request); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var spans []Span
	for _, rs := range request.ResourceSpans {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				service = value(kv.Value)
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				attributes := map[string]string{}
				for _, kv := range sp.Attributes {
					attributes[kv.Key] = value(kv.Value)
				}
				parent := ""
				if len(sp.ParentSpanId) > 0 {
					parent = hex.EncodeToString(sp.ParentSpanId)
				}
				spans = append(spans, Span{Service: service, Name: sp.Name, TraceID: hex.EncodeToString(sp.TraceId),
					SpanID: hex.EncodeToString(sp.SpanId), ParentSpanID: parent, Attributes: attributes})
			}
		}
	}
	s.mu.Lock()
	s.spans = append(s.spans, spans...)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	default:
		return v.String()
	}
}

// Spans is every span received so far.
func (s *SpanSink) Spans() []Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Span(nil), s.spans...)
}

// StartCollector runs the suite's collector (E2E_BIN/e2e-otelcol), its
// OTLP receivers on CollectorGRPC and CollectorHTTP, exporting to sink.
func (p *Plane) StartCollector(ctx context.Context, sink *SpanSink) (*Process, error) {
	config := filepath.Join(p.Work, "otelcol.yaml")
	data := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc: {endpoint: %q}
      http: {endpoint: %q}
exporters:
  otlp_http:
    traces_endpoint: %q
    encoding: proto
    compression: none
    sending_queue: {enabled: false}
    retry_on_failure: {enabled: false}
service:
  pipelines:
    traces: {receivers: [otlp], exporters: [otlp_http]}
  telemetry:
    metrics: {level: none}
    logs: {level: warn}
`, CollectorGRPC, CollectorHTTP, sink.URL)
	if err := os.WriteFile(config, []byte(data), 0o600); err != nil {
		return nil, err
	}
	proc, err := Start("otelcol", p.Logs, nil, filepath.Join(p.Bin, "e2e-otelcol"), "--config=file:"+config)
	if err != nil {
		return nil, err
	}
	err = Until(ctx, 60*time.Second, 200*time.Millisecond, "the collector's OTLP ports", func() error {
		if done, err := proc.Exited(); done {
			return fmt.Errorf("the collector exited: %v: %s", err, proc.Tail(10))
		}
		for _, addr := range []string{CollectorGRPC, CollectorHTTP} {
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				return err
			}
			_ = conn.Close()
		}
		return nil
	})
	if err != nil {
		proc.Stop(5 * time.Second)
		return nil, err
	}
	return proc, nil
}

// TracingConfig writes kube-apiserver's tracing configuration: every
// request sampled, exported to the collector's gRPC port.
func (p *Plane) TracingConfig() (string, error) {
	path := filepath.Join(p.Work, "apiserver-tracing.yaml")
	data := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1beta1
kind: TracingConfiguration
endpoint: %s
samplingRatePerMillion: 1000000
`, CollectorGRPC)
	return path, os.WriteFile(path, []byte(data), 0o600)
}
