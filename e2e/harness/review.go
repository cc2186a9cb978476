package harness

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// ReviewClient posts AdmissionReviews straight to an ownerguard, as the
// API server does: HTTPS verified against the chart's CA for the
// Service's DNS name, HTTP/1.1.
type ReviewClient struct {
	URL    string // https://addr
	client *http.Client
}

// NewReviewClient for ownerguard at addr, serving the certificate of caFile for serverName.
func NewReviewClient(addr, caFile, serverName string) (*ReviewClient, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", caFile)
	}
	transport := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: serverName, NextProtos: []string{"http/1.1"}},
		ForceAttemptHTTP2: false,
	}
	return &ReviewClient{URL: "https://" + addr, client: &http.Client{Transport: transport, Timeout: 40 * time.Second}}, nil
}

// Answer is a review's response and how long it took.
type Answer struct {
	HTTPStatus int
	Response   admissionv1.AdmissionResponse
	Took       time.Duration
}

// Review posts review to path (/mutate or /validate) with ?timeout=.
func (c *ReviewClient) Review(path string, timeout time.Duration, review *admissionv1.AdmissionReview) (*Answer, error) {
	body, err := json.Marshal(review)
	if err != nil {
		return nil, err
	}
	url := fmt.Sprintf("%s%s?timeout=%s", c.URL, path, timeout)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, */*")
	req.Header.Set("User-Agent", "kube-apiserver-admission")
	start := time.Now()
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	if err != nil {
		return nil, err
	}
	answer := &Answer{HTTPStatus: resp.StatusCode, Took: took}
	if resp.StatusCode != http.StatusOK {
		return answer, fmt.Errorf("HTTP %d: %s", resp.StatusCode, data)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(data, &out); err != nil {
		return answer, fmt.Errorf("decode %s: %w", data, err)
	}
	if out.Response == nil {
		return answer, fmt.Errorf("no response in %s", data)
	}
	if out.Response.UID != review.Request.UID {
		return answer, fmt.Errorf("response uid %q, request uid %q", out.Response.UID, review.Request.UID)
	}
	answer.Response = *out.Response
	return answer, nil
}

// ConfigMapCreate is the review the API server sends for a ConfigMap
// create by the admin (no pod identity) carrying labels.
func ConfigMapCreate(namespace, name string, labels map[string]string) *admissionv1.AdmissionReview {
	object := map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": namespace, "labels": labels, "creationTimestamp": nil},
		"data":     map[string]string{"prompt": "hello"},
	}
	raw, _ := json.Marshal(object)
	options, _ := json.Marshal(map[string]string{"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"})
	dryRun := false
	return &admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:             types.UID(uuid.NewUUID()),
			Kind:            metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Resource:        metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
			RequestKind:     &metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			RequestResource: &metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
			Name:            name,
			Namespace:       namespace,
			Operation:       admissionv1.Create,
			UserInfo:        authenticationv1.UserInfo{Username: "e2e-admin", UID: "e2e-admin", Groups: []string{"system:masters", "system:authenticated"}},
			Object:          runtime.RawExtension{Raw: raw},
			DryRun:          &dryRun,
			Options:         runtime.RawExtension{Raw: options},
		},
	}
}
