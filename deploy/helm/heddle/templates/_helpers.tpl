{{/*
Name of one of the release's objects: namePrefix + component, e.g. "runner" or "blue-runner".
Usage: include "heddle.name" (list . "runner")
*/}}
{{- define "heddle.name" -}}
{{- $root := index . 0 -}}
{{- printf "%s%s" $root.Values.namePrefix (index . 1) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "heddle.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels that select one component's pods. Usage: include "heddle.selectorLabels" (list . "gateway") */}}
{{- define "heddle.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ $root.Chart.Name }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* Every label of one component's objects. Usage: include "heddle.labels" (list . "gateway") */}}
{{- define "heddle.labels" -}}
{{- $root := index . 0 -}}
{{ include "heddle.selectorLabels" . }}
app.kubernetes.io/part-of: heddle
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
{{- if $root.Chart.AppVersion }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
{{- end }}
helm.sh/chart: {{ include "heddle.chart" $root }}
{{- end -}}

{{- define "heddle.image" -}}
{{- printf "%s:%s" .Values.image.repository (toString (.Values.image.tag | default .Chart.AppVersion)) -}}
{{- end -}}

{{- define "heddle.settingsName" -}}
{{- include "heddle.name" (list . "heddle-settings") -}}
{{- end -}}

{{- define "heddle.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "heddle.name" (list . "heddle")) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{- define "heddle.orchestratorServiceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.orchestratorName | default (include "heddle.name" (list . "heddle-orchestrator")) -}}
{{- else -}}
{{- .Values.serviceAccount.orchestratorName | default "default" -}}
{{- end -}}
{{- end -}}

{{/* The label selector of this release's runner pods (the orchestrator's pod watch). */}}
{{- define "heddle.runnerPodSelector" -}}
{{- $out := list -}}
{{- range $k, $v := include "heddle.selectorLabels" (list . "runner") | fromYaml -}}
{{- $out = append $out (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," (sortAlpha $out) -}}
{{- end -}}

{{- define "heddle.dispatcherServiceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.dispatcherName | default (include "heddle.name" (list . "heddle-dispatcher")) -}}
{{- else -}}
{{- .Values.serviceAccount.dispatcherName | default "default" -}}
{{- end -}}
{{- end -}}

{{- define "heddle.runnerServiceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.runnerName | default (include "heddle.name" (list . "heddle-runner")) -}}
{{- else -}}
{{- .Values.serviceAccount.runnerName | default "default" -}}
{{- end -}}
{{- end -}}

{{/* The NATS URL every service gets: settings.natsUrl, else the chart's own NATS Service. */}}
{{- define "heddle.natsUrl" -}}
{{- if .Values.settings.natsUrl -}}
{{- .Values.settings.natsUrl -}}
{{- else if .Values.nats.enabled -}}
{{- printf "nats://%s:%d" (include "heddle.name" (list . "nats")) (int .Values.nats.clientPort) -}}
{{- else -}}
{{- fail "nats.enabled is false: set settings.natsUrl to your NATS server (nats://host:4222)" -}}
{{- end -}}
{{- end -}}

{{/*
A setting's value as an environment variable string. Helm reads numbers as float64, which Go
prints in exponent form past a million (8.388608e+06): whole numbers are printed as integers.
*/}}
{{- define "heddle.settingValue" -}}
{{- if and (kindIs "float64" .) (eq . (float64 (int64 .))) -}}
{{- int64 . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/* Refuse grace periods the services' SIGTERM drain would not fit in. */}}
{{- define "heddle.checkValues" -}}
{{- $s := .Values.settings -}}
{{- $shutdown := 10.0 -}}
{{- if and (not (kindIs "invalid" $s.shutdownGrace)) (ne (toString $s.shutdownGrace) "") -}}
{{- $shutdown = float64 $s.shutdownGrace -}}
{{- end -}}
{{- $kill := 5.0 -}}
{{- if and (not (kindIs "invalid" $s.killGrace)) (ne (toString $s.killGrace) "") -}}
{{- $kill = float64 $s.killGrace -}}
{{- end -}}
{{- range $component := list "gateway" "orchestrator" "dispatcher" -}}
{{- $tgps := float64 (index $.Values $component).terminationGracePeriodSeconds -}}
{{- if le $tgps $shutdown -}}
{{- fail (printf "%s.terminationGracePeriodSeconds (%v) must exceed settings.shutdownGrace (%v)" $component $tgps $shutdown) -}}
{{- end -}}
{{- end -}}
{{- /* A stopping runner waits shutdownGrace for its step, then kills the step's process group
and waits up to killGrace + 5 s more for it to exit. */ -}}
{{- $runnerNeeds := addf $shutdown $kill 5 -}}
{{- if le (float64 .Values.runners.terminationGracePeriodSeconds) $runnerNeeds -}}
{{- fail (printf "runners.terminationGracePeriodSeconds (%v) must exceed settings.shutdownGrace + settings.killGrace + 5 (%v)" .Values.runners.terminationGracePeriodSeconds $runnerNeeds) -}}
{{- end -}}
{{- if and (include "heddle.anyAutoscaling" .) (gt (int .Values.dispatcher.replicas) 1) -}}
{{- fail (printf "runner autoscaling (runners.autoscaling.enabled, or a pool's) needs dispatcher.replicas 1 (not %v): the pools' scaler is the one dispatcher that leases runners" .Values.dispatcher.replicas) -}}
{{- end -}}
{{- /* Each orchestrator holds at least one partition: one beyond them would hold nothing. */ -}}
{{- $partitions := 12 -}}
{{- if and (not (kindIs "invalid" $s.partitions)) (ne (toString $s.partitions) "") -}}
{{- $partitions = int $s.partitions -}}
{{- end -}}
{{- if gt (int .Values.orchestrator.replicas) $partitions -}}
{{- fail (printf "orchestrator.replicas (%v) must not exceed settings.partitions (%v): each orchestrator holds at least one partition" .Values.orchestrator.replicas $partitions) -}}
{{- end -}}
{{- if and .Values.nats.enabled $s.replicas (gt (float64 $s.replicas) (float64 .Values.nats.replicas)) -}}
{{- fail (printf "settings.replicas (%v) must not exceed nats.replicas (%v), the chart's NATS nodes" $s.replicas .Values.nats.replicas) -}}
{{- end -}}
{{- /* nats-server gives JetStream 75% of its volume, and HEDDLE_LOGS reserves its max_bytes:
a volume that cannot hold it makes every service crash-loop (err_code=10047, insufficient
storage resources). 70%: a margin for the filesystem's own overhead. */ -}}
{{- $storage := toString (default "file" $s.storage) -}}
{{- if and .Values.nats.enabled .Values.nats.persistence.enabled (eq $storage "file") -}}
{{- $logBytes := 1073741824.0 -}}
{{- if and (not (kindIs "invalid" $s.logMaxBytes)) (ne (toString $s.logMaxBytes) "") -}}
{{- $logBytes = float64 $s.logMaxBytes -}}
{{- end -}}
{{- $volume := float64 (include "heddle.bytes" .Values.nats.persistence.size) -}}
{{- $usable := mulf $volume 0.7 -}}
{{- if gt $logBytes $usable -}}
{{- fail (printf "nats.persistence.size %s cannot hold the log stream: settings.logMaxBytes (%s bytes) must be at most 70%% of the volume (%s bytes); raise the size or lower logMaxBytes" (toString .Values.nats.persistence.size) (include "heddle.settingValue" $logBytes) (include "heddle.settingValue" (floor $usable))) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A Kubernetes quantity (2Gi, 1500M, 1073741824) in bytes. */}}
{{- define "heddle.bytes" -}}
{{- $q := toString . -}}
{{- $units := dict "" 1.0 "k" 1e3 "K" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 -}}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" $q -}}
{{- $unit := trimPrefix $num $q -}}
{{- if or (not $num) (not (hasKey $units $unit)) -}}
{{- fail (printf "%q is not a size this chart reads (e.g. 2Gi, 1500Mi, 2G)" $q) -}}
{{- end -}}
{{- mulf (float64 $num) (index $units $unit) | floor | int64 -}}
{{- end -}}

{{/*
Pod-level parts every Heddle pod shares. Usage: include "heddle.podCommon" .
*/}}
{{- define "heddle.podCommon" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The services' metrics port (settings.metricsPort), or "" when they serve none. */}}
{{- define "heddle.metricsPort" -}}
{{- $port := .Values.settings.metricsPort -}}
{{- if and (not (kindIs "invalid" $port)) (ne (toString $port) "") (ne (toString $port) "0") -}}
{{- int $port -}}
{{- end -}}
{{- end -}}

{{/* The metrics port as a container port, when there is one. Usage: include "heddle.metricsContainerPort" . */}}
{{- define "heddle.metricsContainerPort" -}}
{{- with include "heddle.metricsPort" . }}
- name: metrics
  containerPort: {{ . }}
  protocol: TCP
{{- end }}
{{- end -}}

{{/* Pod template annotations: restart the pods when the settings change; where Prometheus
scrapes the pod (metrics.annotations). */}}
{{- define "heddle.podAnnotations" -}}
checksum/settings: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- $port := include "heddle.metricsPort" . }}
{{- if and $port .Values.metrics.annotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ $port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- with .Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
The environment of every Heddle container: the settings ConfigMap (and settingsSecret), the
pod and node names from the downward API, the container's identity (its NATS user and how it
gets its password, as YAML list entries), then the component's extraEnv.
Usage: include "heddle.env" (list . .Values.gateway.extraEnv identityYaml)
*/}}
{{- define "heddle.env" -}}
{{- $root := index . 0 -}}
envFrom:
  - configMapRef:
      name: {{ include "heddle.settingsName" $root }}
  {{- with $root.Values.settingsSecret }}
  - secretRef:
      name: {{ . }}
  {{- end }}
env:
  - name: POD_NAME
    valueFrom:
      fieldRef:
        fieldPath: metadata.name
  - name: NODE_NAME
    valueFrom:
      fieldRef:
        fieldPath: spec.nodeName
  {{- with index . 2 }}
  {{- . | trim | nindent 2 }}
  {{- end }}
  {{- with index . 1 }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{/*
A control-plane Deployment. Usage: include "heddle.controlPlane" (dict "root" . "component"
"orchestrator" "values" .Values.orchestrator)
*/}}
{{- define "heddle.controlPlane" -}}
{{- $root := .root -}}
{{- $c := .component -}}
{{- $v := .values -}}
{{- $identity := list (dict "name" "HEDDLE_NATS_USER" "value" $c) (dict "name" "HEDDLE_NATS_PASSWORD_FILE" "value" "/var/run/heddle/nats/password") -}}
{{- if eq $c "gateway" -}}
{{- $identity = concat $identity (list (dict "name" "HEDDLE_ADMIN_TOKEN_FILE" "value" "/var/run/heddle/admin/token") (dict "name" "HEDDLE_ALLOWED_HOSTS" "value" (include "heddle.allowedHosts" $root))) -}}
{{- end -}}
{{- $watch := and (eq $c "orchestrator") $root.Values.podWatch.enabled -}}
{{- $anyScaling := include "heddle.anyAutoscaling" $root -}}
{{- $scaler := and (eq $c "dispatcher") $anyScaling -}}
{{- if $scaler -}}
{{- $a := $root.Values.runners.autoscaling -}}
{{- $identity = concat $identity (list
  (dict "name" "HEDDLE_AUTOSCALE" "value" "on")
  (dict "name" "HEDDLE_AUTOSCALE_MIN" "value" (toString (int $a.minReplicas)))
  (dict "name" "HEDDLE_AUTOSCALE_MAX" "value" (toString (int $a.maxReplicas)))
  (dict "name" "HEDDLE_AUTOSCALE_UP_AFTER" "value" (toString $a.upAfterSeconds))
  (dict "name" "HEDDLE_AUTOSCALE_IDLE_AFTER" "value" (toString $a.idleAfterSeconds))
  (dict "name" "HEDDLE_AUTOSCALE_INTERVAL" "value" (toString $a.intervalSeconds))
  (dict "name" "HEDDLE_AUTOSCALE_START_TIMEOUT" "value" (toString $a.startTimeoutSeconds))
  (dict "name" "HEDDLE_RUNNER_STATEFULSET_PREFIX" "value" (printf "%s-" (include "heddle.name" (list $root "runner"))))) -}}
{{- end -}}
{{- /* The pools, to the dispatcher (which scales each) and the orchestrator (which steps
some pool can take). */ -}}
{{- with include "heddle.runnerPoolsSetting" $root -}}
{{- if has $c (list "dispatcher" "orchestrator") -}}
{{- $identity = append $identity (dict "name" "HEDDLE_RUNNER_POOLS" "value" .) -}}
{{- end -}}
{{- end -}}
{{- if eq $c "orchestrator" -}}
{{- $identity = concat $identity (list (dict "name" "HEDDLE_POD_WATCH" "value" (ternary "auto" "off" $watch)) (dict "name" "HEDDLE_RUNNER_POD_SELECTOR" "value" (include "heddle.runnerPodSelector" $root))) -}}
{{- if $anyScaling -}}
{{- /* Autoscaling drains runners in the dispatcher alone: the orchestrator hands no step to one. */ -}}
{{- $identity = concat $identity (list (dict "name" "HEDDLE_HANDOFF" "value" "off")) -}}
{{- end -}}
{{- end -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "heddle.name" (list $root $c) }}
  labels:
    {{- include "heddle.labels" (list $root $c) | nindent 4 }}
spec:
  replicas: {{ int $v.replicas }}
  revisionHistoryLimit: 5
  strategy:
    {{- /* A new pod joins (ready) before an old one leaves, so there is always one holding
    the partitions, giving out the steps or answering (docs/upgrading.md); old and new
    versions overlap as the compatibility promise allows. The one exception: the dispatcher
    that scales the runners, never two at once. */}}
    {{- if not $scaler }}
    type: RollingUpdate
    rollingUpdate:
      maxUnavailable: 0
      maxSurge: 1
    {{- else }}
    type: Recreate
    {{- end }}
  selector:
    matchLabels:
      {{- include "heddle.selectorLabels" (list $root $c) | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "heddle.selectorLabels" (list $root $c) | nindent 8 }}
        {{- with $root.Values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        {{- include "heddle.podAnnotations" $root | nindent 8 }}
        {{- include "heddle.nats.passwordChecksum" (list $root $c) | nindent 8 }}
    spec:
      {{- if eq $c "orchestrator" }}
      serviceAccountName: {{ include "heddle.orchestratorServiceAccountName" $root }}
      # The pod watch's token (podWatch.enabled); the other control-plane pods mount none.
      automountServiceAccountToken: {{ $watch }}
      {{- else if $scaler }}
      serviceAccountName: {{ include "heddle.dispatcherServiceAccountName" $root }}
      # Autoscaling's token (runners.autoscaling.enabled, or a pool's): get and patch the runner
      # StatefulSets' scale, nothing else.
      automountServiceAccountToken: true
      {{- else }}
      serviceAccountName: {{ include "heddle.serviceAccountName" $root }}
      automountServiceAccountToken: false
      {{- end }}
      enableServiceLinks: false
      terminationGracePeriodSeconds: {{ int $v.terminationGracePeriodSeconds }}
      {{- with include "heddle.podCommon" $root | trim }}{{ . | nindent 6 }}{{ end }}
      containers:
        - name: {{ $c }}
          image: {{ include "heddle.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args: ["heddle", {{ $c | quote }}]
          {{- include "heddle.env" (list $root $v.extraEnv (toYaml $identity)) | nindent 10 }}
          {{- $metricsPort := include "heddle.metricsContainerPort" $root | trim }}
          {{- if or (eq $c "gateway") $metricsPort }}
          ports:
            {{- if eq $c "gateway" }}
            - name: http
              containerPort: {{ int (default 8080 $root.Values.settings.gatewayPort) }}
              protocol: TCP
            {{- end }}
            {{- with $metricsPort }}
            {{- . | nindent 12 }}
            {{- end }}
          {{- end }}
          {{- if or (eq $c "gateway") $metricsPort }}
          {{- with $v.startupProbe }}
          startupProbe:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with $v.livenessProbe }}
          livenessProbe:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with $v.readinessProbe }}
          readinessProbe:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- end }}
          {{- with $v.resources }}
          resources:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with $root.Values.securityContext }}
          securityContext:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
            - name: nats-password
              mountPath: /var/run/heddle/nats
              readOnly: true
            {{- if eq $c "gateway" }}
            - name: admin-token
              mountPath: /var/run/heddle/admin
              readOnly: true
            {{- end }}
      volumes:
        - name: tmp
          emptyDir: {}
        # This service's own key of the passwords Secret, nothing else. A directory mount (not
        # subPath), so a rotated password reaches the file: it is read at every connect.
        - name: nats-password
          secret:
            secretName: {{ include "heddle.nats.usersSecretName" $root }}
            defaultMode: 0440
            items:
              - key: {{ $c }}
                path: password
        {{- if eq $c "gateway" }}
        - name: admin-token
          secret:
            secretName: {{ include "heddle.adminTokenSecretName" $root }}
            defaultMode: 0440
            items:
              - key: token
                path: token
        {{- end }}
{{- end -}}

{{/*
The Host names the gateway answers (HEDDLE_ALLOWED_HOSTS): loopback (kubectl port-forward), its
Service's cluster names, then gateway.allowedHosts (an Ingress host...). Not <svc>.<namespace>:
with a namespace such as "dev" that is a domain anyone may register and point at the gateway.
*/}}
{{- define "heddle.allowedHosts" -}}
{{- $svc := include "heddle.name" (list . "gateway") -}}
{{- $ns := .Release.Namespace -}}
{{- $hosts := list "localhost" "127.0.0.1" "::1" $svc (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain) -}}
{{- concat $hosts .Values.gateway.allowedHosts | uniq | join "," -}}
{{- end -}}
