{{/*
matchConditions: CEL the API server evaluates before calling a webhook
(GA in Kubernetes 1.30). A condition that errors counts as a failed call
(under failurePolicy Fail the user's request is refused), so no expression
here may error on any object: fields are read with optional selection
(`a.?b`, `m[?k]`: none when absent, and two nones are equal), and every
step into a part whose shape no schema fixes (a custom resource's
spec.template may be a string, a list or null, where `.?` errors) is
guarded by `type(x) == map`.
*/}}

{{/*
A kind ownerguard may read as pod-like (OwnerReference::means_pod: the
kind a person reads as Pod or Pods, through case, separators, invisible
characters and the Unicode confusables of UTS #39), as a superset RE2 can
say: an ASCII kind whose letters and digits, in any case, spell pod or pods
with the digit 0 for the o (UTS #39 reads 0 as O: `Pod`, `pods`, `POD`,
` pod `, `p-o-d`, `P0d`; not `Podx`, `Pod1` nor `v1/Pod`); and any kind
holding a character outside printable ASCII (a Cyrillic o, a fullwidth
letter, a zero-width space...), which only ownerguard's skeleton can read.
Written with explicit case classes, not (?i): RE2 folds `k` with the
Kelvin sign and `s` with the long s.
*/}}
{{- define "ownerguard.cel.podKindRegex" -}}
^[^A-Za-z0-9]*[Pp][^A-Za-z0-9]*[Oo0][^A-Za-z0-9]*[Dd][^A-Za-z0-9]*([Ss][^A-Za-z0-9]*)?$|[^ -~]
{{- end }}

{{/* Whether the ownerReference in CEL variable . is pod-like (never an error, whatever its shape). */}}
{{- define "ownerguard.cel.podLike" -}}
(type({{ . }}) == map && type({{ . }}.?kind.orValue(null)) == string && {{ . }}.kind.matches('{{ include "ownerguard.cel.podKindRegex" . }}'))
{{- end }}

{{/* The ownerReferences of .root (object or oldObject): a list, empty when absent. */}}
{{- define "ownerguard.cel.references" -}}
(type({{ . }}.metadata.?ownerReferences.orValue(null)) == list ? {{ . }}.metadata.ownerReferences : [])
{{- end }}

{{/*
The value at .path (a list of field names) of .root, then [?.key] of the
map found there, as an optional: none wherever a step is absent or not a
map (a custom resource's spec.template may be a string, a list or null:
`.?` on those errors, `type(x) == map` does not).
*/}}
{{- define "ownerguard.cel.at" -}}
{{- $map := include "ownerguard.cel.steps" (dict "root" .root "path" .path) | fromJson -}}
({{ join " && " $map.guards }} ? {{ $map.at }}[?'{{ .key }}'] : optional.none())
{{- end }}

{{/*
The labelled webhooks: every CREATE; an UPDATE only when it touches what
ownerguard judges:
- the ownerReferences that are pod-like (kind as above, any apiVersion),
  and every other entry carrying the uid of one of them or of the owner-uid
  label (ownerguard refuses an entry re-kinded, renamed or added under an
  owner's uid), compared whole, flags included, on both sides: so a
  reference changed, removed, renamed, re-kinded from or to a pod, or made
  blocking is sent, and a controller adding or removing its own
  (non-pod) reference is not;
- the owner labels and the owner-pod-name annotation;
- whether a template has labels at all (a CronJob whose Job template's
  labels are dropped gives its Jobs the pod template's: refused when that
  says Self);
- those of a template it completes (SPEC §3 rule 12), of any kind,
  custom resources included, read with a type check at each step: the pod
  templates (spec.template, spec.jobTemplate and its spec.template), each
  claim template of spec.volumeClaimTemplates and the selector's labels
  its claims take, each generic ephemeral volume's claim template of the
  pod specs (spec, spec.template.spec, spec.jobTemplate.spec.template.spec;
  a list compared entry by entry, each with the key ownerguard knows it
  by, the claim template's or the volume's name, so a reordering or a
  rename is sent too), whether the selector's matchLabels is a map of
  strings (ownerguard reads it only then), and spec.metadata (a ResourceClaimTemplate's);
- an object with more than 64 references on either side, a reference
  whose kind or uid is longer than 253 characters (no kind is; a uid is
  36), more than 64 entries in any list or map the filter would scan (a
  template's labels or annotations, the claim templates, a pod spec's
  volumes, the selector's matchLabels), or an entry of those lists whose
  claim template has more than 16 labels or annotations: sent without
  scanning them, since a scan of an unbounded list, map or string could
  pass the API server's cost limit for an expression, and an error
  refuses the request under failurePolicy Fail (the uid is compared
  with every owner uid: its length costs nothing today, and is bounded
  should the cost model come to charge it).
So, within those bounds, an outage never blocks a finalizer removal, a
status-less metadata edit, a scale or a rollout of a labelled object.
oldObject is null only on CREATE, which the first line takes.
*/}}
{{- define "ownerguard.matchConditions.labelled" -}}
{{- $keys := list (printf "%s/owner-pod" .Values.keyPrefix) (printf "%s/owner-uid" .Values.keyPrefix) }}
{{- $uidKey := printf "%s/owner-uid" .Values.keyPrefix }}
{{- $nameKey := printf "%s/owner-pod-name" .Values.keyPrefix }}
{{- $refs := dict "object" (include "ownerguard.cel.references" "object") "oldObject" (include "ownerguard.cel.references" "oldObject") }}
matchConditions:
  - name: create-or-ownership-update
    expression: |-
      request.operation != 'UPDATE'
      || size({{ $refs.object }}) > 64 || size({{ $refs.oldObject }}) > 64
      || ({{ $refs.object }} + {{ $refs.oldObject }}).exists(r, type(r) == map
           && ((type(r.?kind.orValue(null)) == string && size(r.kind) > 253) || (type(r.?uid.orValue(null)) == string && size(r.uid) > 253)))
      || {{ include "ownerguard.cel.oversized" "object" }}
      || {{ include "ownerguard.cel.oversized" "oldObject" }}
      || [(({{ $refs.object }} + {{ $refs.oldObject }})
            .filter(r, {{ include "ownerguard.cel.podLike" "r" }} && type(r.?uid.orValue(null)) == string)
            .map(r, r.uid)
          + [object.metadata.?labels[?'{{ $uidKey }}'].orValue(''), oldObject.metadata.?labels[?'{{ $uidKey }}'].orValue('')]
        ).filter(u, u != '')].exists(uids,
          {{ $refs.object }}.filter(r, {{ include "ownerguard.cel.podLike" "r" }} || (type(r) == map && r.?uid.orValue(null) in uids))
          != {{ $refs.oldObject }}.filter(r, {{ include "ownerguard.cel.podLike" "r" }} || (type(r) == map && r.?uid.orValue(null) in uids)))
      || {{ $refs.object }}.exists(r, {{ include "ownerguard.cel.podLike" "r" }} && r.?blockOwnerDeletion.orValue(false) == true)
      {{- range $keys }}
      || object.metadata.?labels[?'{{ . }}'] != oldObject.metadata.?labels[?'{{ . }}']
      {{- end }}
      || object.metadata.?annotations[?'{{ $nameKey }}'] != oldObject.metadata.?annotations[?'{{ $nameKey }}']
      {{- range list (list "spec" "template") (list "spec" "jobTemplate") (list "spec" "jobTemplate" "spec" "template") (list "spec") }}
      {{- $template := . }}
      {{- range $keys }}
      || {{ include "ownerguard.cel.at" (dict "root" "object" "path" (concat $template (list "metadata" "labels")) "key" .) }}
         != {{ include "ownerguard.cel.at" (dict "root" "oldObject" "path" (concat $template (list "metadata" "labels")) "key" .) }}
      {{- end }}
      || {{ include "ownerguard.cel.isTemplate" (dict "root" "object" "path" $template) }}
         != {{ include "ownerguard.cel.isTemplate" (dict "root" "oldObject" "path" $template) }}
      || {{ include "ownerguard.cel.hasLabels" (dict "root" "object" "path" $template) }}
         != {{ include "ownerguard.cel.hasLabels" (dict "root" "oldObject" "path" $template) }}
      || {{ include "ownerguard.cel.at" (dict "root" "object" "path" (concat $template (list "metadata" "annotations")) "key" $nameKey) }}
         != {{ include "ownerguard.cel.at" (dict "root" "oldObject" "path" (concat $template (list "metadata" "annotations")) "key" $nameKey) }}
      {{- end }}
      {{- range $keys }}
      || {{ include "ownerguard.cel.at" (dict "root" "object" "path" (list "spec" "selector" "matchLabels") "key" .) }}
         != {{ include "ownerguard.cel.at" (dict "root" "oldObject" "path" (list "spec" "selector" "matchLabels") "key" .) }}
      {{- end }}
      || {{ include "ownerguard.cel.isStringMap" (dict "root" "object" "path" (list "spec" "selector" "matchLabels")) }}
         != {{ include "ownerguard.cel.isStringMap" (dict "root" "oldObject" "path" (list "spec" "selector" "matchLabels")) }}
      {{- $claims := dict "path" (list "spec" "volumeClaimTemplates") "entry" (list) "keys" $keys "nameKey" $nameKey "key" "e.metadata.?name.orValue(null)" }}
      || {{ include "ownerguard.cel.listOwnerKeys" (merge (dict "root" "object") $claims) }}
         != {{ include "ownerguard.cel.listOwnerKeys" (merge (dict "root" "oldObject") $claims) }}
      {{- range list (list "spec") (list "spec" "template" "spec") (list "spec" "jobTemplate" "spec" "template" "spec") }}
      {{- $volumes := dict "path" (concat . (list "volumes")) "entry" (list "ephemeral" "volumeClaimTemplate") "keys" $keys "nameKey" $nameKey "key" "e.?name.orValue(null)" }}
      || {{ include "ownerguard.cel.listOwnerKeys" (merge (dict "root" "object") $volumes) }}
         != {{ include "ownerguard.cel.listOwnerKeys" (merge (dict "root" "oldObject") $volumes) }}
      {{- end }}
{{- end }}

{{/*
The owner keys of every template in the list at .path of .root, in order:
for each entry, its template (the entry itself, or what .entry leads to)
as [owner-pod label, owner-uid label, owner-pod-name annotation, whether
it is a template ownerguard reads, the entry's key (.key, a CEL expression
on the entry `e`: the name ownerguard knows the template by)], each an
optional; [] for an entry of another shape, [] for no list. Never an
error: every step is type-checked.
*/}}
{{- define "ownerguard.cel.listOwnerKeys" -}}
{{- $parent := include "ownerguard.cel.steps" (dict "root" .root "path" (initial .path)) | fromJson }}
{{- $guards := append $parent.guards (printf "type(%s.?%s.orValue(null)) == list" $parent.at (last .path)) }}
{{- $prefix := printf "%s.%s" $parent.at (last .path) }}
{{- $meta := include "ownerguard.cel.steps" (dict "root" "e" "path" (concat .entry (list "metadata"))) | fromJson }}
{{- $entryGuards := prepend $meta.guards "type(e) == map" }}
{{- $entry := $meta.at }}
{{- $fields := list }}
{{- range .keys }}
{{- $fields = append $fields (printf "(type(%s.?labels.orValue(null)) == map ? %s.labels[?'%s'] : optional.none())" $entry $entry .) }}
{{- end }}
{{- $fields = append $fields (printf "(type(%s.?annotations.orValue(null)) == map ? %s.annotations[?'%s'] : optional.none())" $entry $entry .nameKey) }}
{{- $fields = append $fields (printf "dyn(optional.of(%s))" (include "ownerguard.cel.isTemplateMeta" $entry)) -}}
{{- $fields = append $fields (printf "dyn(optional.of(%s))" .key) -}}
({{ join " && " $guards }} ? {{ $prefix }}.map(e, {{ join " && " $entryGuards }} ? [{{ join ", " $fields }}] : []) : [])
{{- end }}

{{/* Whether the metadata map . holds labels and annotations ownerguard reads (each absent, or a map of strings). */}}
{{- define "ownerguard.cel.isTemplateMeta" -}}
['labels', 'annotations'].all(f, type({{ . }}[?f].orValue(null)) == null_type || (type({{ . }}[?f].orValue(null)) == map && {{ . }}[f].all(k, type({{ . }}[f][k]) == string)))
{{- end }}

{{/*
validation.allPodOwnerReferences: only objects that name a pod as owner,
the kind read as ownerguard may read it (pod-like, above: a superset), so
that every spelling ownerguard refuses reaches it; and, unscanned, an
object with more than 64 references or a kind longer than 253 characters:
a scan of those could pass the API server's cost limit, and an error
under this webhook's failurePolicy (Ignore) would let the request through
unjudged.
*/}}
{{- define "ownerguard.matchConditions.podReferences" -}}
matchConditions:
  - name: has-pod-owner-reference
    expression: |-
      size({{ include "ownerguard.cel.references" "object" }}) > 64
      || {{ include "ownerguard.cel.references" "object" }}.exists(r,
        type(r) == map && type(r.?kind.orValue(null)) == string && (size(r.kind) > 253 || {{ include "ownerguard.cel.podLike" "r" }}))
{{- end }}

{{/*
Whether the template at .path of .root has labels (a map of at least one
entry): the API server gives a Job the pod template's labels when the Job
template has none (batch/v1 defaulting), so a template's labels emptied
or dropped changes what a CronJob's Jobs carry.
*/}}
{{- define "ownerguard.cel.hasLabels" -}}
{{- $meta := include "ownerguard.cel.steps" (dict "root" .root "path" (concat .path (list "metadata"))) | fromJson -}}
({{ join " && " $meta.guards }} && type({{ $meta.at }}.?labels.orValue(null)) == map && size({{ $meta.at }}.labels) > 0)
{{- end }}

{{- define "ownerguard.cel.isTemplate" -}}
{{- $meta := include "ownerguard.cel.steps" (dict "root" .root "path" (concat .path (list "metadata"))) | fromJson -}}
({{ join " && " $meta.guards }} && {{ include "ownerguard.cel.isTemplateMeta" $meta.at }})
{{- end }}

{{/* Whether the value at .path of .root is a map of strings (what ownerguard reads as labels). */}}
{{- define "ownerguard.cel.isStringMap" -}}
{{- $parent := include "ownerguard.cel.steps" (dict "root" .root "path" (initial .path)) | fromJson -}}
{{- $prefix := $parent.at -}}
({{ join " && " $parent.guards }} && type({{ $prefix }}.?{{ last .path }}.orValue(null)) == map && {{ $prefix }}.{{ last .path }}.all(k, type({{ $prefix }}.{{ last .path }}[k]) == string))
{{- end }}

{{/*
Whether . (object or oldObject) has more than 64 entries in a list or
map the labelled filter scans: the labels and annotations of each
template, the claim templates and the pod specs' volumes (and each
entry's labels and annotations), the selector's matchLabels. Each step is
type-checked and only sizes are read, so this costs the same whatever the
object holds; the scans it guards are then bounded (64 entries of 64),
well inside the API server's cost limit for an expression.
*/}}
{{- define "ownerguard.cel.oversized" -}}
{{- $root := . }}
{{- $terms := list }}
{{- range list (list "spec" "template" "metadata") (list "spec" "jobTemplate" "metadata") (list "spec" "jobTemplate" "spec" "template" "metadata") (list "spec" "metadata") }}
{{- $meta := include "ownerguard.cel.path" (dict "root" $root "path" .) | fromJson }}
{{- $terms = append $terms (printf "(%s && type(%s) == map && ['labels', 'annotations'].exists(f, type(%s[?f].orValue(null)) == map && size(%s[f]) > 64))" $meta.guard $meta.value $meta.value $meta.value) }}
{{- end }}
{{- $selector := include "ownerguard.cel.path" (dict "root" $root "path" (list "spec" "selector" "matchLabels")) | fromJson }}
{{- $terms = append $terms (printf "(%s && type(%s) == map && size(%s) > 64)" $selector.guard $selector.value $selector.value) }}
{{- range list (dict "path" (list "spec" "volumeClaimTemplates") "entry" (list "metadata")) (dict "path" (list "spec" "volumes") "entry" (list "ephemeral" "volumeClaimTemplate" "metadata")) (dict "path" (list "spec" "template" "spec" "volumes") "entry" (list "ephemeral" "volumeClaimTemplate" "metadata")) (dict "path" (list "spec" "jobTemplate" "spec" "template" "spec" "volumes") "entry" (list "ephemeral" "volumeClaimTemplate" "metadata")) }}
{{- $list := include "ownerguard.cel.path" (dict "root" $root "path" .path) | fromJson }}
{{- $entry := include "ownerguard.cel.path" (dict "root" "e" "path" .entry) | fromJson }}
{{- $entryGuards := list "type(e) == map" }}
{{- if ne $entry.guard "true" }}{{ $entryGuards = append $entryGuards $entry.guard }}{{ end }}
{{- $terms = append $terms (printf "(%s && type(%s) == list && (size(%s) > 64 || %s.exists(e, %s && type(%s) == map && ['labels', 'annotations'].exists(f, type(%s[?f].orValue(null)) == map && size(%s[f]) > 16))))" $list.guard $list.value $list.value $list.value (join " && " $entryGuards) $entry.value $entry.value $entry.value) }}
{{- end -}}
({{ join " || " $terms }})
{{- end }}

{{/*
The value at .path of .root, as {"guard", "value"}: value is CEL that
reads it as `.?last.orValue(null)` (null when absent), guard one CEL
condition, true when each step before the last is a map, so that reading
it cannot error.
*/}}
{{- define "ownerguard.cel.path" -}}
{{- $parent := include "ownerguard.cel.steps" (dict "root" .root "path" (initial .path)) | fromJson -}}
{{- dict "guard" (join " && " ($parent.guards | default (list "true"))) "value" (printf "%s.?%s.orValue(null)" $parent.at (last .path)) | toJson }}
{{- end }}

{{/*
The steps of .path from .root, as {"guards", "at"}: guards, one CEL
condition a step, each true when that step is a map (`.?` on a string, a
list or null errors, `type(x) == map` does not), so that reading the next
step cannot error; at, the CEL that reads the value the last step reaches.
Every read of a template, a list or the selector walks its path through
this (the object's own metadata is always a map, and is read directly).
*/}}
{{- define "ownerguard.cel.steps" -}}
{{- $guards := list }}
{{- $at := .root }}
{{- range .path }}
{{- $guards = append $guards (printf "type(%s.?%s.orValue(null)) == map" $at .) }}
{{- $at = printf "%s.%s" $at . }}
{{- end -}}
{{- dict "guards" $guards "at" $at | toJson }}
{{- end }}
