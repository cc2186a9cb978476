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

{{/* Labels of every object: the standard ones, then commonLabels. */}}
{{- define "ownerguard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "ownerguard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "ownerguard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ownerguard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Whether the server deletes what owner pods own: the reaper
(reaper.enabled), or the release of restarted workers
(restartRelease.enabled). Empty when neither. */}}
{{- define "ownerguard.releases" -}}
{{- if or .Values.reaper.enabled .Values.restartRelease.enabled }}true{{ end }}
{{- end }}

{{/* The image, by digest when one is given. image.repository is required. */}}
{{- define "ownerguard.image" -}}
{{- $repository := required "image.repository is required: build the image from the Dockerfile, push it to your registry and set image.repository (and image.tag or image.digest); there is no public image yet" .Values.image.repository }}
{{- $tag := .Values.image.tag | default .Chart.AppVersion }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" $repository $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repository $tag }}
{{- end }}
{{- end }}

{{/* Whole seconds of a value written "<N>s". */}}
{{- define "ownerguard.seconds" -}}
{{- trimSuffix "s" . | int }}
{{- end }}

{{/* --shutdown-timeout, in seconds: given, or timeoutSeconds + 1. */}}
{{- define "ownerguard.shutdownTimeoutSeconds" -}}
{{- if .Values.server.shutdownTimeout }}
{{- include "ownerguard.seconds" .Values.server.shutdownTimeout }}
{{- else }}
{{- add (int .Values.webhook.timeoutSeconds) 1 }}
{{- end }}
{{- end }}

{{/* shutdownDelay + shutdownTimeout, in seconds: the longest a drain takes. */}}
{{- define "ownerguard.shutdownSeconds" -}}
{{- add (include "ownerguard.seconds" .Values.server.shutdownDelay | int) (include "ownerguard.shutdownTimeoutSeconds" . | int) }}
{{- end }}

{{/* terminationGracePeriodSeconds: given, or delay + timeout + 5 s. */}}
{{- define "ownerguard.terminationGracePeriodSeconds" -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add (include "ownerguard.shutdownSeconds" . | int) 5 }}
{{- else }}
{{- int .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/* The Secret holding tls.crt and tls.key. */}}
{{- define "ownerguard.tlsSecretName" -}}
{{- if eq .Values.certificates.mode "secret" }}
{{- required "certificates.secret.name is required with certificates.mode=secret: the kubernetes.io/tls Secret (tls.crt, tls.key) in the release namespace" .Values.certificates.secret.name }}
{{- else }}
{{- printf "%s-tls" (include "ownerguard.fullname" .) }}
{{- end }}
{{- end }}

{{/* The CA's common name: <fullname>-ca, within the 64 characters X.509 (and cert-manager) allow. */}}
{{- define "ownerguard.caCommonName" -}}
{{- printf "%s-ca" (include "ownerguard.fullname" . | trunc 61 | trimSuffix "-") }}
{{- end }}

{{/* The Secret holding the chart-made CA (chart mode only; never mounted). */}}
{{- define "ownerguard.caSecretName" -}}
{{- printf "%s-ca" (include "ownerguard.fullname" .) }}
{{- end }}

{{/* The DNS names the API server uses for the Service. */}}
{{- define "ownerguard.serviceDNSNames" -}}
{{- $svc := include "ownerguard.fullname" . -}}
{{- list (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) | toJson }}
{{- end }}

{{/* Where the chart keeps a generated certificate's expiry (Unix seconds). */}}
{{- define "ownerguard.notAfterAnnotation" -}}
ownerguard.io/not-after
{{- end }}

{{/* Where the CA Secret keeps the expiry of the CA the current one replaced. */}}
{{- define "ownerguard.previousNotAfterAnnotation" -}}
ownerguard.io/previous-ca-not-after
{{- end }}

{{/*
The chart-made CA and serving certificate (certificates.mode=chart), made
once per render and shared by every template through .Values (one map for
the whole render), so that the Secrets and the caBundle agree.

What the cluster holds is kept (lookup): the CA in <fullname>-ca, the
serving pair in <fullname>-tls. Either is renewed when it has fewer than
renewBeforeDays left (its expiry is kept in an annotation, since templates
cannot parse X.509). A renewed serving certificate is signed by the same CA,
so the caBundle does not change and the pods may reload it at their pace.
When the CA itself is new (renewed, or its Secret gone), the CA it replaces
(the CA Secret's, else the ca.crt of the serving Secret) is kept in the CA
Secret as previous-ca.crt, with its expiry, and the caBundle carries it
next to the new CA until the next CA renewal (or its own expiry): the API
server keeps trusting the certificate a pod still serves, however late its
Secret volume refreshes and however many upgrades come in between. The
ca.crt of the serving Secret is carried too whenever it is neither.

Rendered without a cluster, lookup sees nothing and every render would make
a new CA: refused unless certificates.chart.allowRenderWithoutCluster.
*/}}
{{- define "ownerguard.chartCertificates" -}}
{{- if not (hasKey .Values "_chartCertificates") }}
{{- if not (lookup "v1" "Namespace" "" "kube-system") }}
{{- if not .Values.certificates.chart.allowRenderWithoutCluster }}
{{- fail "certificates.mode=chart needs the cluster at render time (helm install/upgrade, or --dry-run=server), to keep the CA and certificate it made before. Rendered without one (helm template, Argo CD), every render makes a new CA, and each sync refuses labelled creates until the pods reload the certificate. For GitOps use certificates.mode=certManager or secret; or set certificates.chart.allowRenderWithoutCluster=true together with the ignoreDifferences of docs/install.md" }}
{{- end }}
{{- end }}
{{- $caSecret := lookup "v1" "Secret" .Release.Namespace (include "ownerguard.caSecretName" .) }}
{{- $tlsSecret := lookup "v1" "Secret" .Release.Namespace (include "ownerguard.tlsSecretName" .) }}
{{- $certificates := include "ownerguard.chartCertificatesFrom" (dict "root" . "caSecret" $caSecret "tlsSecret" $tlsSecret "now" (now | unixEpoch | int64)) | fromJson }}
{{- $_ := set .Values "_chartCertificates" $certificates }}
{{- end }}
{{- toJson .Values._chartCertificates }}
{{- end }}

{{/*
The decision of ownerguard.chartCertificates, from what the cluster holds:
.caSecret and .tlsSecret (as lookup returns them, empty when absent), .now
(Unix seconds), .root the chart's context. Apart, so that it can be judged
on Secrets made up for the purpose (tests/chart/rotation).
*/}}
{{- define "ownerguard.chartCertificatesFrom" -}}
{{- $caSecret := .caSecret }}
{{- $tlsSecret := .tlsSecret }}
{{- $now := int64 .now }}
{{- $root := .root }}
{{- with $root }}
{{- $annotation := include "ownerguard.notAfterAnnotation" . }}
{{- $days := int .Values.certificates.chart.days }}
{{- $renewAfter := add $now (mul (int .Values.certificates.chart.renewBeforeDays) 86400) }}
{{- $caData := dig "data" dict $caSecret }}
{{- $tlsData := dig "data" dict $tlsSecret }}
{{- $previousAnnotation := include "ownerguard.previousNotAfterAnnotation" . }}
{{- $ca := dict }}
{{- $caCert := "" }}
{{- $caNotAfter := 0 }}
{{- $oldCaNotAfter := dig "metadata" "annotations" $annotation "0" $caSecret | int64 }}
{{- $caKept := false }}
{{- if and (hasKey $caData "tls.crt") (hasKey $caData "tls.key") }}
{{- $caNotAfter = $oldCaNotAfter }}
{{- if or (eq $caNotAfter 0) (gt $caNotAfter $renewAfter) }}
{{- $ca = buildCustomCert (index $caData "tls.crt") (index $caData "tls.key") }}
{{- $caCert = index $caData "tls.crt" }}
{{- $caKept = true }}
{{- end }}
{{- end }}
{{- if not $caKept }}
{{- $ca = genCA (include "ownerguard.caCommonName" .) $days }}
{{- $caCert = $ca.Cert | b64enc }}
{{- $caNotAfter = add $now (mul $days 86400) }}
{{- end }}
{{- $result := dict "ca" $caCert "caKey" ($ca.Key | b64enc) "caNotAfter" (toString $caNotAfter) }}
{{- $servingKept := false }}
{{- if and $caKept (hasKey $tlsData "tls.crt") (hasKey $tlsData "tls.key") (eq (index $tlsData "ca.crt" | default "") $caCert) }}
{{- $notAfter := dig "metadata" "annotations" $annotation "0" $tlsSecret | int64 }}
{{- if or (eq $notAfter 0) (gt $notAfter $renewAfter) }}
{{- $_ := set $result "cert" (index $tlsData "tls.crt") }}
{{- $_ := set $result "key" (index $tlsData "tls.key") }}
{{- $_ := set $result "notAfter" (toString $notAfter) }}
{{- $servingKept = true }}
{{- end }}
{{- end }}
{{- if not $servingKept }}
{{- $names := include "ownerguard.serviceDNSNames" . | fromJsonArray }}
{{- $cert := genSignedCert (first $names) nil $names $days $ca }}
{{- $_ := set $result "cert" ($cert.Cert | b64enc) }}
{{- $_ := set $result "key" ($cert.Key | b64enc) }}
{{- $_ := set $result "notAfter" (toString (min (add $now (mul $days 86400)) $caNotAfter)) }}
{{- end }}
{{- /* The CA the current one replaced: kept until the next CA renewal. */}}
{{- $previous := "" }}
{{- $previousNotAfter := 0 }}
{{- if $caKept }}
{{- $previous = index $caData "previous-ca.crt" | default "" }}
{{- $previousNotAfter = dig "metadata" "annotations" $previousAnnotation "0" $caSecret | int64 }}
{{- else if hasKey $caData "tls.crt" }}
{{- $previous = index $caData "tls.crt" }}
{{- $previousNotAfter = $oldCaNotAfter }}
{{- else }}
{{- $previous = index $tlsData "ca.crt" | default "" }}
{{- end }}
{{- if or (eq $previous $caCert) (and (gt $previousNotAfter 0) (le $previousNotAfter $now)) }}
{{- $previous = "" }}
{{- $previousNotAfter = 0 }}
{{- end }}
{{- $_ := set $result "previousCa" $previous }}
{{- $_ := set $result "previousCaNotAfter" (toString $previousNotAfter) }}
{{- $bundle := $caCert | b64dec }}
{{- $served := index $tlsData "ca.crt" | default "" }}
{{- range list $previous $served | uniq }}
{{- if and . (ne . $caCert) }}
{{- $bundle = printf "%s\n%s" (trimSuffix "\n" $bundle) (. | b64dec) }}
{{- end }}
{{- end }}
{{- $_ := set $result "bundle" ($bundle | b64enc) }}
{{- toJson $result }}
{{- end }}
{{- end }}

{{/* caBundle of the webhook configurations; empty with cert-manager, whose CA injector fills it. */}}
{{- define "ownerguard.caBundle" -}}
{{- if eq .Values.certificates.mode "chart" }}
{{- (include "ownerguard.chartCertificates" . | fromJson).bundle }}
{{- else if eq .Values.certificates.mode "secret" }}
{{- required "certificates.secret.caBundle is required with certificates.mode=secret: the base64 PEM of the CA that signed the Secret's certificate" .Values.certificates.secret.caBundle }}
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
webhook.excludeNamespaces. With "optOut", also those labelled
<keyPrefix>/skip-validate-all.
*/}}
{{- define "ownerguard.namespaceSelector" -}}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values:
        - kube-system
        - {{ .root.Release.Namespace }}
        {{- range .root.Values.webhook.excludeNamespaces }}
        - {{ . }}
        {{- end }}
    {{- if .optOut }}
    - key: {{ .root.Values.keyPrefix }}/skip-validate-all
      operator: DoesNotExist
    {{- end }}
    {{- with .mode }}
    {{- include "ownerguard.modeExpression" (dict "root" $.root "mode" .) | nindent 4 }}
    {{- end }}
    {{- /* A namespace labelled <keyPrefix>/ignore is sent to no webhook (docs/security.md). */}}
    {{- if .root.Values.webhook.ignoreLabel }}
    - key: {{ .root.Values.keyPrefix }}/ignore
      operator: DoesNotExist
    {{- end }}
{{- end }}

{{/*
The modes (SPEC §3 rule 17), each a webhook of its own whose
namespaceSelector picks the namespaces in that mode by their
`<keyPrefix>/mode` label: the default mode's webhook takes every namespace
not labelled with one of the other two modes (unlabelled, or any other
value), each other mode's takes those labelled with it. So every
namespace is sent to exactly one webhook of each configuration.
*/}}
{{- define "ownerguard.modes" -}}
enforce warn audit
{{- end }}

{{- define "ownerguard.modeExpression" -}}
{{- $default := .root.Values.webhook.mode | default "enforce" }}
- key: {{ .root.Values.keyPrefix }}/mode
{{- if eq .mode $default }}
  operator: NotIn
  values:
  {{- range splitList " " (include "ownerguard.modes" .root) }}
  {{- if ne . $default }}
    - {{ . }}
  {{- end }}
  {{- end }}
{{- else }}
  operator: In
  values:
    - {{ .mode }}
{{- end }}
{{- end }}

{{/* A webhook's name in a mode: `mutate.<keyPrefix>` in enforce, `mutate-warn.<keyPrefix>` in warn. */}}
{{- define "ownerguard.webhookName" -}}
{{- if eq .mode "enforce" -}}
{{ .word }}.{{ .root.Values.keyPrefix }}
{{- else -}}
{{ .word }}-{{ .mode }}.{{ .root.Values.keyPrefix }}
{{- end }}
{{- end }}

{{/* The path ownerguard decides a mode's reviews on: `/mutate`, `/mutate/warn`. */}}
{{- define "ownerguard.webhookPath" -}}
{{- if eq .mode "enforce" -}}
/{{ .word }}
{{- else -}}
/{{ .word }}/{{ .mode }}
{{- end }}
{{- end }}

{{/* What every webhook entry shares. */}}
{{- define "ownerguard.webhookCommon" -}}
admissionReviewVersions: ["v1", "v1beta1"]
sideEffects: {{ .sideEffects | default "None" }}
{{- /* Warn and audit never refuse what the API server would store, ownerguard down included: their webhooks fail open. */}}
failurePolicy: {{ if and .mode (ne .mode "enforce") }}Ignore{{ else }}{{ .failurePolicy | default .root.Values.webhook.failurePolicy }}{{ end }}
timeoutSeconds: {{ .root.Values.webhook.timeoutSeconds }}
matchPolicy: Equivalent
{{ include "ownerguard.namespaceSelector" . }}
{{- end }}

{{- define "ownerguard.clientConfig" -}}
clientConfig:
  service:
    name: {{ include "ownerguard.fullname" .root }}
    namespace: {{ .root.Release.Namespace }}
    path: {{ .path }}
    port: {{ .root.Values.service.port }}
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

{{/* The objectSelector: objects carrying the owner-pod label ("Exists"), or not ("DoesNotExist"). */}}
{{- define "ownerguard.objectSelector" -}}
objectSelector:
  matchExpressions:
    - key: {{ .root.Values.keyPrefix }}/owner-pod
      operator: {{ .operator }}
{{- end }}

{{/* Flags of `ownerguard serve` given as a file path inside the pod. */}}
{{- define "ownerguard.tlsDir" -}}
/etc/ownerguard/tls
{{- end }}
{{- define "ownerguard.clientCADir" -}}
/etc/ownerguard/client-ca
{{- end }}

{{/*
Where the install check probes: check.namespace, or the first of default
and kube-public (both made by the API server itself, so always there) that
the webhooks see.
*/}}
{{- define "ownerguard.checkNamespace" -}}
{{- $excluded := concat (list "kube-system" .Release.Namespace) .Values.webhook.excludeNamespaces }}
{{- if .Values.check.namespace }}
{{- if has .Values.check.namespace $excluded }}
{{- fail (printf "check.namespace '%s' is excluded from the webhooks (kube-system, the release namespace and webhook.excludeNamespaces are), so the check could never reach ownerguard. Name a namespace the webhooks see" .Values.check.namespace) }}
{{- end }}
{{- .Values.check.namespace }}
{{- else if not (has "default" $excluded) }}
{{- "default" }}
{{- else if not (has "kube-public" $excluded) }}
{{- "kube-public" }}
{{- else }}
{{- fail "check.namespace: default and kube-public are both excluded from the webhooks; name a namespace the webhooks see, where the install check can probe" }}
{{- end }}
{{- end }}

{{/*
The install check's objects (helm test and the post-install hook):
<fullname>-check, the base cut to 57 characters so that the name stays
within 63 and never collides, truncated, with <fullname> (a check
ServiceAccount named as the server's, deleted once the check passed).
*/}}
{{- define "ownerguard.checkName" -}}
{{- printf "%s-check" (include "ownerguard.fullname" . | trunc 57 | trimSuffix "-") }}
{{- end }}

{{/*
Labels of the check's objects. Never the server's selector labels: the
Service, the PodDisruptionBudget and the spread constraints must not count
a check pod as a server.
*/}}
{{- define "ownerguard.checkLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "ownerguard.name" . | trunc 57 | trimSuffix "-" }}-check
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: check
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* RBAC of the check: created before it (weight), removed once it passed. */}}
{{- define "ownerguard.checkRBACAnnotations" -}}
helm.sh/hook: {{ if .Values.check.afterInstall }}post-install,post-upgrade,{{ end }}test
helm.sh/hook-weight: "-10"
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}

{{/*
The pod of the check: `ownerguard doctor --probe`, a server-side dry-run
create of a labelled ConfigMap in the check's namespace whose owner does not
exist; it passes only on mutate.<keyPrefix>'s own denial. .wait is how long
it keeps trying.
*/}}
{{- define "ownerguard.checkPodSpec" -}}
serviceAccountName: {{ include "ownerguard.checkName" .root }}
restartPolicy: Never
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
containers:
  - name: check
    image: {{ include "ownerguard.image" .root | quote }}
    imagePullPolicy: {{ .root.Values.image.pullPolicy }}
    args:
      - doctor
      - --probe={{ include "ownerguard.checkNamespace" .root }}
      - --probe-only
      - --key-prefix={{ .root.Values.keyPrefix }}
      - --wait={{ .wait }}s
    {{- with .root.Values.securityContext }}
    securityContext:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    resources:
      requests:
        cpu: 10m
        memory: 32Mi
      limits:
        memory: 64Mi
{{- end }}

{{/*
The PromQL label matchers of this release's series (prometheusRule.selector,
or the labels the chart's ServiceMonitor gives them).
*/}}
{{- define "ownerguard.alertSelector" -}}
{{- .Values.prometheusRule.selector | default (printf "job=%q,namespace=%q" (include "ownerguard.fullname" .) .Release.Namespace) }}
{{- end }}

{{/* An alert's labels: .severity, then prometheusRule.alertLabels. */}}
{{- define "ownerguard.alertLabels" -}}
severity: {{ .severity }}
{{- with .root.Values.prometheusRule.alertLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* An alert's runbook: its section of docs/operations.md (.anchor). */}}
{{- define "ownerguard.runbook" -}}
runbook: docs/operations.md#{{ .anchor }}
{{- with .root.Values.prometheusRule.runbookBaseUrl }}
runbook_url: {{ printf "%s#%s" . $.anchor }}
{{- end }}
{{- end }}

{{/* Seconds of a duration written "<N>s", "<N>m", "<N>h" or "<N>d". */}}
{{- define "ownerguard.durationSeconds" -}}
{{- $n := regexFind "^[0-9]+" . }}
{{- mul (int $n) (get (dict "s" 1 "m" 60 "h" 3600 "d" 86400) (trimPrefix $n .)) }}
{{- end }}
