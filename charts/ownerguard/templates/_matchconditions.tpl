{{/*
matchConditions: CEL the API server evaluates before calling a webhook
(GA in Kubernetes 1.30). A condition that errors counts as a failed call
(under failurePolicy Fail the user's request is refused), so no expression
here may error on any object: fields are read with optional selection
(`a.?b`, `m[?k]`: none when absent, and two nones are equal), and pod
templates only in the built-in groups, whose schema is known (a custom
resource may hold a list at spec.template, where `.?` errors).
*/}}

{{/* `X != Y` for the value at .path (a CEL selection after object/oldObject). */}}
{{- define "ownerguard.cel.changed" -}}
object{{ . }} != oldObject{{ . }}
{{- end }}

{{/*
The labelled webhooks: every CREATE; an UPDATE only when it touches what
ownerguard owns: metadata.ownerReferences, the owner labels and the
owner-pod-name annotation, or those of a pod template it completes (spec.template, a CronJob's
spec.jobTemplate and its spec.template). So an outage never blocks a
finalizer removal, a status-less metadata edit, a scale or a rollout of a
labelled object. oldObject is null only on CREATE, which the first line
takes.
*/}}
{{- define "ownerguard.matchConditions.labelled" -}}
{{- $keys := list (printf "%s/owner-pod" .Values.keyPrefix) (printf "%s/owner-uid" .Values.keyPrefix) }}
{{- $nameKey := printf "%s/owner-pod-name" .Values.keyPrefix }}
matchConditions:
  - name: create-or-ownership-update
    expression: |-
      request.operation != 'UPDATE'
      || {{ include "ownerguard.cel.changed" ".metadata.?ownerReferences" }}
      {{- range $keys }}
      || {{ include "ownerguard.cel.changed" (printf ".metadata.?labels[?'%s']" .) }}
      {{- end }}
      || {{ include "ownerguard.cel.changed" (printf ".metadata.?annotations[?'%s']" $nameKey) }}
      || (request.kind.group in ['', 'apps', 'batch'] && (false
      {{- range list ".?spec.?template" ".?spec.?jobTemplate" ".?spec.?jobTemplate.?spec.?template" }}
      {{- $template := . }}
      {{- range $keys }}
        || {{ include "ownerguard.cel.changed" (printf "%s.?metadata.?labels[?'%s']" $template .) }}
      {{- end }}
        || {{ include "ownerguard.cel.changed" (printf "%s.?metadata.?annotations[?'%s']" $template $nameKey) }}
      {{- end }}
      ))
{{- end }}

{{/*
validation.allPodOwnerReferences: only objects that name a pod as owner,
the kind read as ownerguard reads it: its letters and digits, in any case,
spell pod or pods (`Pod`, `pods`, `Pod ` with a space...), so that every
spelling ownerguard refuses reaches it.
*/}}
{{- define "ownerguard.matchConditions.podReferences" -}}
matchConditions:
  - name: has-pod-owner-reference
    expression: |-
      object.metadata.?ownerReferences.orValue([]).exists(r,
        type(r) == map && type(r.?kind.orValue(null)) == string
        && r.kind.matches('(?i)^[^a-z0-9]*p[^a-z0-9]*o[^a-z0-9]*d[^a-z0-9]*(s[^a-z0-9]*)?$'))
{{- end }}
