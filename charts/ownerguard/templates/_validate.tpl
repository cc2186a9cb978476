{{/*
Values that helm lint accepts and the schema cannot judge (they relate two
values, or the cluster would take them and then break): refused here, each
with a message that says what breaks and what to set. Included by
deployment.yaml, which every render holds. (helm lint only logs a `fail`;
helm template, install and upgrade stop on it.)
*/}}
{{- define "ownerguard.validateValues" -}}
{{- $v := .Values }}

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

{{- if eq (int $v.ports.webhook) (int $v.ports.metrics) }}
{{- fail (printf "ports.webhook and ports.metrics are both %v: the server cannot listen twice on one port" $v.ports.webhook) }}
{{- end }}

{{- if and $v.server.clientCA.secretName $v.server.clientCA.configMapName }}
{{- fail "server.clientCA: set secretName or configMapName, not both" }}
{{- end }}

{{- /* The check needs a namespace the webhooks see. */}}
{{- $_ := include "ownerguard.checkNamespace" . }}
{{- end }}
