{{/* Name of the chart, overridable. */}}
{{- define "ownerguard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects. */}}
{{- define "ownerguard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "ownerguard.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "ownerguard.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "ownerguard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ownerguard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "ownerguard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "ownerguard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "ownerguard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ownerguard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret holding tls.crt and tls.key. */}}
{{- define "ownerguard.tlsSecretName" -}}
{{- if eq .Values.certificates.mode "secret" }}
{{- required "certificates.secret.name is required with certificates.mode=secret" .Values.certificates.secret.name }}
{{- else }}
{{- printf "%s-tls" (include "ownerguard.fullname" .) }}
{{- end }}
{{- end }}

{{/* The DNS names the API server uses for the Service. */}}
{{- define "ownerguard.serviceDNSNames" -}}
{{- $svc := include "ownerguard.fullname" . -}}
{{- list (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) | toJson }}
{{- end }}

{{/*
The chart-generated CA and serving certificate, made once per render and
shared by every template through .Values (one map for the whole render), so
that the Secret and the caBundle agree. An existing Secret is reused, so an
upgrade does not change the certificate.
*/}}
{{- define "ownerguard.generatedCertificates" -}}
{{- if not (hasKey .Values "_generatedCertificates") }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "ownerguard.tlsSecretName" .) }}
{{- if and $existing (hasKey (default dict $existing.data) "ca.crt") }}
{{- $_ := set .Values "_generatedCertificates" (dict "ca" (index $existing.data "ca.crt") "cert" (index $existing.data "tls.crt") "key" (index $existing.data "tls.key")) }}
{{- else }}
{{- $days := int .Values.certificates.chart.days }}
{{- $ca := genCA (printf "%s-ca" (include "ownerguard.fullname" .)) $days }}
{{- $names := include "ownerguard.serviceDNSNames" . | fromJsonArray }}
{{- $cert := genSignedCert (first $names) nil $names $days $ca }}
{{- $_ := set .Values "_generatedCertificates" (dict "ca" ($ca.Cert | b64enc) "cert" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc)) }}
{{- end }}
{{- end }}
{{- toJson .Values._generatedCertificates }}
{{- end }}

{{/* caBundle of the webhook configurations; empty with cert-manager, whose CA injector fills it. */}}
{{- define "ownerguard.caBundle" -}}
{{- if eq .Values.certificates.mode "chart" }}
{{- (include "ownerguard.generatedCertificates" . | fromJson).ca }}
{{- else if eq .Values.certificates.mode "secret" }}
{{- required "certificates.secret.caBundle is required with certificates.mode=secret" .Values.certificates.secret.caBundle }}
{{- end }}
{{- end }}

{{/* Annotations asking cert-manager to inject the CA. */}}
{{- define "ownerguard.webhookAnnotations" -}}
{{- if eq .Values.certificates.mode "certManager" }}
cert-manager.io/inject-ca-from: {{ printf "%s/%s" .Release.Namespace (include "ownerguard.fullname" .) }}
{{- end }}
{{- end }}

{{/*
Namespaces the webhooks never see: kube-system and the release's own, so
that the webhook can never block its own pods or the control plane, plus
webhook.excludeNamespaces.
*/}}
{{- define "ownerguard.namespaceSelector" -}}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values:
        - kube-system
        - {{ .Release.Namespace }}
        {{- range .Values.webhook.excludeNamespaces }}
        - {{ . }}
        {{- end }}
{{- end }}

{{/* What every webhook entry shares. */}}
{{- define "ownerguard.webhookCommon" -}}
admissionReviewVersions: ["v1", "v1beta1"]
sideEffects: None
failurePolicy: {{ .Values.webhook.failurePolicy }}
timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
matchPolicy: Equivalent
{{ include "ownerguard.namespaceSelector" . }}
{{- end }}

{{- define "ownerguard.clientConfig" -}}
clientConfig:
  service:
    name: {{ include "ownerguard.fullname" .root }}
    namespace: {{ .root.Release.Namespace }}
    path: {{ .path }}
    port: 443
  {{- with include "ownerguard.caBundle" .root }}
  caBundle: {{ . }}
  {{- end }}
{{- end }}

{{/* The rules of webhook.rules for the given operations. */}}
{{- define "ownerguard.rules" -}}
rules:
{{- range .root.Values.webhook.rules }}
  - operations: {{ toJson $.operations }}
    apiGroups: {{ toJson .apiGroups }}
    apiVersions: {{ toJson .apiVersions }}
    resources: {{ toJson .resources }}
    scope: Namespaced
{{- end }}
{{- end }}
