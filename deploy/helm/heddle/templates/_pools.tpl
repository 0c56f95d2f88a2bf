{{/*
The runner pools, as JSON (read it back with fromJsonArray): the default pool (runners.*),
then each of runners.pools, every field resolved. A pool is a set of single-replica
StatefulSets, one per runner (see templates/runner.yaml): the default pool's are
<namePrefix>runner-<i> as ever, another pool's <namePrefix>runner-<pool>-<i>. Each entry:
name, where (its values' path, for messages), replicas, image, pullPolicy, resources,
nodeSelector, tolerations, affinity (a pool's own, else the chart's), labels (its extra runner
labels), namespaces (the only ones whose steps its runners take; none: every one), stepUids, autoscaling {enabled, minReplicas, maxReplicas}, prefix (its StatefulSets'
names before the ordinal) and runners (every StatefulSet's name: autoscaling's maxReplicas of
them, else replicas).
*/}}
{{- define "heddle.runnerPools" -}}
{{- $r := .Values.runners -}}
{{- $a := $r.autoscaling -}}
{{- $pools := list (dict
  "name" "default" "where" "runners" "replicas" (int $r.replicas)
  "image" (include "heddle.image" .) "pullPolicy" .Values.image.pullPolicy
  "resources" ($r.resources | default dict) "nodeSelector" (.Values.nodeSelector | default dict)
  "tolerations" (.Values.tolerations | default list) "affinity" (.Values.affinity | default dict)
  "labels" ($r.labels | default list) "namespaces" list "stepUids" (toString $r.stepUids)
  "autoscaling" (dict "enabled" $a.enabled "minReplicas" (int $a.minReplicas) "maxReplicas" (int $a.maxReplicas))
  "prefix" (printf "%s-" (include "heddle.name" (list . "runner")))) -}}
{{- range $p := $r.pools | default list -}}
{{- $where := printf "runners.pools[%s]" $p.name -}}
{{- if eq $p.name "default" -}}
{{- fail "runners.pools: the pool \"default\" is runners.* itself (runners.replicas, runners.stepUids, runners.autoscaling...): name the other pools otherwise" -}}
{{- end -}}
{{- $image := $p.image | default dict -}}
{{- $repository := $image.repository | default $.Values.image.repository -}}
{{- $tag := toString ($image.tag | default ($.Values.image.tag | default $.Chart.AppVersion)) -}}
{{- $scaling := $p.autoscaling | default dict -}}
{{- $pools = append $pools (dict
  "name" $p.name "where" $where "replicas" (int (ternary $p.replicas 1 (hasKey $p "replicas")))
  "image" (printf "%s:%s" $repository $tag) "pullPolicy" ($image.pullPolicy | default $.Values.image.pullPolicy)
  "resources" (ternary $p.resources $r.resources (hasKey $p "resources") | default dict)
  "nodeSelector" (ternary $p.nodeSelector $.Values.nodeSelector (hasKey $p "nodeSelector") | default dict)
  "tolerations" (ternary $p.tolerations $.Values.tolerations (hasKey $p "tolerations") | default list)
  "affinity" (ternary $p.affinity $.Values.affinity (hasKey $p "affinity") | default dict)
  "labels" ($p.labels | default list) "namespaces" ($p.namespaces | default list) "stepUids" (toString $p.stepUids)
  "autoscaling" (dict "enabled" ($scaling.enabled | default false) "minReplicas" (int (ternary $scaling.minReplicas 1 (hasKey $scaling "minReplicas"))) "maxReplicas" (int (ternary $scaling.maxReplicas 8 (hasKey $scaling "maxReplicas"))))
  "prefix" (printf "%s-" (include "heddle.name" (list $ (printf "runner-%s" $p.name))))) -}}
{{- end -}}
{{- range $pool := $pools -}}
{{- $count := ternary $pool.autoscaling.maxReplicas $pool.replicas $pool.autoscaling.enabled -}}
{{- $runners := list -}}
{{- range $i := until (int $count) }}{{ $runners = append $runners (printf "%s%d" $pool.prefix $i) }}{{ end -}}
{{- $_ := set $pool "runners" $runners -}}
{{- end -}}
{{- toRawJson $pools -}}
{{- end -}}

{{/* "true" when any pool autoscales, else "". */}}
{{- define "heddle.anyAutoscaling" -}}
{{- range include "heddle.runnerPools" . | fromJsonArray -}}
{{- if .autoscaling.enabled }}true{{ end -}}
{{- end -}}
{{- end -}}

{{/*
HEDDLE_RUNNER_POOLS for the dispatcher and the orchestrator (shared/core/runner_pools.py):
every pool's name, labels (its name among them, sorted), StatefulSet name prefix, bounds (a
pool that does not autoscale: its fixed size as both) and namespaces. "" without runners.pools.
*/}}
{{- define "heddle.runnerPoolsSetting" -}}
{{- if .Values.runners.pools -}}
{{- $out := list -}}
{{- range include "heddle.runnerPools" . | fromJsonArray -}}
{{- $a := .autoscaling -}}
{{- $min := ternary $a.minReplicas .replicas $a.enabled -}}
{{- $max := ternary $a.maxReplicas .replicas $a.enabled -}}
{{- $out = append $out (dict "name" .name "labels" (prepend .labels .name | uniq | sortAlpha) "statefulset" .prefix "minReplicas" (int $min) "maxReplicas" (int $max) "autoscaling" $a.enabled "namespaces" .namespaces) -}}
{{- end -}}
{{- toRawJson $out -}}
{{- end -}}
{{- end -}}

{{/*
Refuse pools that cannot run: two of one name, bounds upside down, and step uids that two
runners would share. Each runner runs its steps as FIRST+N of its pool's stepUids (runner
<prefix>N; services/runner_agent/isolation.py), a uid of its own: a pool's range must hold
every runner's uid and never nobody's, and no two pools' ranges may overlap.
*/}}
{{- define "heddle.checkPools" -}}
{{- $pools := include "heddle.runnerPools" . | fromJsonArray -}}
{{- $seen := dict -}}
{{- $ranges := list -}}
{{- range $pool := $pools -}}
{{- if hasKey $seen $pool.name -}}
{{- fail (printf "runners.pools: two pools named %q" $pool.name) -}}
{{- end -}}
{{- $_ := set $seen $pool.name true -}}
{{- $a := $pool.autoscaling -}}
{{- if and $a.enabled (gt (int $a.minReplicas) (int $a.maxReplicas)) -}}
{{- fail (printf "%s.autoscaling.minReplicas must not exceed %s.autoscaling.maxReplicas" $pool.where $pool.where) -}}
{{- end -}}
{{- $stepUids := $pool.stepUids -}}
{{- $bounds := splitList "-" $stepUids -}}
{{- $first := index $bounds 0 | int64 -}}
{{- $last := index $bounds (sub (len $bounds) 1) | int64 -}}
{{- if gt $first $last -}}
{{- fail (printf "%s.stepUids %s: FIRST is above LAST" $pool.where $stepUids) -}}
{{- end -}}
{{- if gt $last 2147483647 -}}
{{- fail (printf "%s.stepUids %s: uids go up to 2147483647" $pool.where $stepUids) -}}
{{- end -}}
{{- if and (le $first 65535) (ge $last 65534) -}}
{{- fail (printf "%s.stepUids %s holds 65534 or 65535 (nobody, and -1 in 16 bits)" $pool.where $stepUids) -}}
{{- end -}}
{{- if and (eq (toString $.Values.runners.stepUser) "") (lt (add1 (sub $last $first)) (len $pool.runners)) -}}
{{- fail (printf "%s.stepUids %s holds %d uids, for %d runners: runner-N runs its steps as FIRST+N" $pool.where $stepUids (add1 (sub $last $first)) (len $pool.runners)) -}}
{{- end -}}
{{- range $other := $ranges -}}
{{- if and (le $first (int64 $other.last)) (le (int64 $other.first) $last) -}}
{{- fail (printf "%s.stepUids %s overlaps %s.stepUids %s: each runner runs its steps as a uid of its own, so no two pools' ranges may overlap" $pool.where $stepUids $other.where $other.stepUids) -}}
{{- end -}}
{{- end -}}
{{- $ranges = append $ranges (dict "first" $first "last" $last "where" $pool.where "stepUids" $stepUids) -}}
{{- end -}}
{{- end -}}

{{/* A runner pod's scheduling and shared pod parts. Usage: include "heddle.runnerPodCommon" (list . $pool) */}}
{{- define "heddle.runnerPodCommon" -}}
{{- $root := index . 0 -}}
{{- $pool := index . 1 -}}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $pool.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $pool.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $pool.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
