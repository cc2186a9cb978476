{{/*
Values that helm lint accepts and the schema cannot judge (they relate two
values, or the cluster would take them and then break): refused here, each
with a message that says what breaks and what to set. Included by
deployment.yaml, which every render holds. (helm lint only logs a `fail`;
helm template, install and upgrade stop on it.)
*/}}
{{- define "ownerguard.validateValues" -}}
{{- $v := .Values }}

{{- /* The Service is named <fullname>: a DNS-1035 label. */}}
{{- $fullname := include "ownerguard.fullname" . }}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $fullname) }}
{{- if $v.fullnameOverride }}
{{- fail (printf "fullnameOverride '%s' is not a DNS-1035 label (lowercase letters, digits and '-', starting with a letter, at most 63 characters): the Service is named so, and the API server refuses it" $v.fullnameOverride) }}
{{- else }}
{{- fail (printf "release name '%s' makes the Service name '%s', which is not a DNS-1035 label (lowercase letters, digits and '-', starting with a letter, at most 63 characters), and the API server refuses it. Install under a release name that starts with a letter and holds no dot, or set fullnameOverride (and nameOverride to lowercase letters, digits and '-')" .Release.Name $fullname) }}
{{- end }}
{{- end }}

{{- if not (contains "." $v.keyPrefix) }}
{{- fail (printf "keyPrefix '%s' needs a dot (such as %s.example.com): the webhooks are named mutate.<keyPrefix> and validate.<keyPrefix>, and the API server refuses a webhook name with fewer than three dot-separated segments" $v.keyPrefix $v.keyPrefix) }}
{{- end }}

{{- /* The PodDisruptionBudget: how many pods a drain may take at once. */}}
{{- $replicas := int $v.replicaCount }}
{{- $pdb := $v.podDisruptionBudget }}
{{- $max := $pdb.maxUnavailable }}
{{- $min := $pdb.minAvailable }}
{{- if eq (kindIs "invalid" $max) (kindIs "invalid" $min) }}
{{- fail "podDisruptionBudget: set exactly one of maxUnavailable (recommended: 1) and minAvailable (set the other to null)" }}
{{- end }}
{{- $allowed := 0 }}
{{- $given := "" }}
{{- if not (kindIs "invalid" $max) }}
{{- $given = printf "maxUnavailable: %v" $max }}
{{- if kindIs "string" $max }}
{{- $allowed = div (add (mul (trimSuffix "%" $max | int) $replicas) 99) 100 }}
{{- else }}
{{- $allowed = int $max }}
{{- end }}
{{- else }}
{{- $given = printf "minAvailable: %v" $min }}
{{- if kindIs "string" $min }}
{{- $allowed = sub $replicas (div (add (mul (trimSuffix "%" $min | int) $replicas) 99) 100) }}
{{- else }}
{{- $allowed = sub $replicas (int $min) }}
{{- end }}
{{- end }}
{{- if le (int $allowed) 0 }}
{{- fail (printf "podDisruptionBudget %s with replicaCount %d lets no pod be evicted: every node drain would block on it. Use maxUnavailable: 1" $given $replicas) }}
{{- end }}
{{- if and (ge (int $allowed) $replicas) (gt $replicas 1) }}
{{- fail (printf "podDisruptionBudget %s with replicaCount %d lets a drain evict every replica at once, and with failurePolicy Fail no labelled object can then be created. Use maxUnavailable: 1" $given $replicas) }}
{{- end }}

{{- /* Shutdown: SIGKILL must never cut a drain short. */}}
{{- $timeout := int $v.webhook.timeoutSeconds }}
{{- if and $v.server.shutdownTimeout (lt (include "ownerguard.seconds" $v.server.shutdownTimeout | int) $timeout) }}
{{- fail (printf "server.shutdownTimeout %s is shorter than webhook.timeoutSeconds (%ds): a review in flight at shutdown could be cut off while the API server still waits for it. Leave it empty (derived) or raise it" $v.server.shutdownTimeout $timeout) }}
{{- end }}
{{- $shutdown := include "ownerguard.shutdownSeconds" . | int }}
{{- if and (not (kindIs "invalid" $v.terminationGracePeriodSeconds)) (le (int $v.terminationGracePeriodSeconds) $shutdown) }}
{{- fail (printf "terminationGracePeriodSeconds %v does not exceed server.shutdownDelay + shutdownTimeout (%ds): the kubelet would SIGKILL the server in the middle of its drain. Leave it null (derived) or raise it" $v.terminationGracePeriodSeconds $shutdown) }}
{{- end }}

{{- /* The owner lookup must end well before the API server gives up. */}}
{{- $lookup := $v.server.lookupTimeout }}
{{- $lookupMs := 0 }}
{{- if hasSuffix "ms" $lookup }}
{{- $lookupMs = trimSuffix "ms" $lookup | int }}
{{- else }}
{{- $lookupMs = mul (trimSuffix "s" $lookup | int) 1000 }}
{{- end }}
{{- if gt (int $lookupMs) (mul $timeout 750) }}
{{- fail (printf "server.lookupTimeout %s is more than three quarters of webhook.timeoutSeconds (%ds): the API server would give up on a slow lookup before ownerguard answers. Lower it or raise timeoutSeconds" $lookup $timeout) }}
{{- end }}

{{- /* chart mode: a renewal window as long as the validity renews at every render. */}}
{{- $chart := $v.certificates.chart }}
{{- if and (eq $v.certificates.mode "chart") (ge (int $chart.renewBeforeDays) (int $chart.days)) }}
{{- fail (printf "certificates.chart.renewBeforeDays %d is not less than certificates.chart.days %d: a certificate would be due for renewal as soon as it is made, so every install and upgrade would make a new CA and certificate. Lower renewBeforeDays (default 30) or raise days" (int $chart.renewBeforeDays) (int $chart.days)) }}
{{- end }}

{{- if eq (int $v.ports.webhook) (int $v.ports.metrics) }}
{{- fail (printf "ports.webhook and ports.metrics are both %v: the server cannot listen twice on one port" $v.ports.webhook) }}
{{- end }}

{{- if and $v.server.clientCA.secretName $v.server.clientCA.configMapName }}
{{- fail "server.clientCA: set secretName or configMapName, not both" }}
{{- end }}

{{- /* The selectors: labels that the user's labels may not override. */}}
{{- $selector := include "ownerguard.selectorLabels" . | fromYaml }}
{{- range $values := list "commonLabels" "podLabels" }}
{{- range $key, $_ := index $v $values }}
{{- if hasKey $selector $key }}
{{- fail (printf "%s sets %s, a label the Deployment, the Service, the PodDisruptionBudget and the NetworkPolicy select the pods by (the chart sets it to '%s'): overriding it breaks those selectors (and a Deployment's selector is immutable). Use another key" $values $key (index $selector $key)) }}
{{- end }}
{{- end }}
{{- end }}
{{- range $key, $_ := $v.podLabels }}
{{- if hasKey $v.commonLabels $key }}
{{- fail (printf "podLabels and commonLabels both set %s: the pods would carry the key twice. Set it in one of them" $key) }}
{{- end }}
{{- end }}

{{- /* The check needs a namespace the webhooks see. */}}
{{- $_ := include "ownerguard.checkNamespace" . }}
{{- end }}
