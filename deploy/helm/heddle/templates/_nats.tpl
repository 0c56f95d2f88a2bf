{{/*
NATS users and their permissions: a copy of shared/broker/nats_permissions.py, which is the source of
truth. A static server configuration cannot template a permission on the connecting user, so
every runner gets a user of its own with its name written into its subjects.
tests/deploy/test_deploy_security.py renders every user and compares it with
permissions_for(user).to_config(): change both together. Each helper returns JSON (read it back
with fromJson/fromJsonArray);
the lists are sorted and deduplicated, as Permissions.to_config() does.
*/}}

{{- define "heddle.nats.streams" -}}
{{- list "HEDDLE_CMD" "HEDDLE_STEPS" "HEDDLE_EVENTS" "HEDDLE_LOGS" "HEDDLE_DOCS" | toRawJson -}}
{{- end -}}

{{- define "heddle.nats.buckets" -}}
{{- list "heddle-workflows" "heddle-runs" "heddle-heartbeats" "heddle-runners" "heddle-cron" "heddle-tokens" "heddle-pods" "heddle-leases" "heddle-semaphores" "heddle-concurrency" "heddle-namespaces" "heddle-approvals" "heddle-secrets" "heddle-notifications" | toRawJson -}}
{{- end -}}

{{/* info(*streams): check the server and look streams up. Usage: include ... (list "S1" "S2") */}}
{{- define "heddle.nats.info" -}}
{{- $out := list "$JS.API.INFO" "$JS.API.STREAM.NAMES" -}}
{{- range . }}{{ $out = append $out (printf "$JS.API.STREAM.INFO.%s" .) }}{{ end -}}
{{- toRawJson $out -}}
{{- end -}}

{{/* keeps(*streams): create a stream or bring its configuration up to date. */}}
{{- define "heddle.nats.keeps" -}}
{{- $out := list -}}
{{- range . }}{{ $out = concat $out (list (printf "$JS.API.STREAM.CREATE.%s" .) (printf "$JS.API.STREAM.UPDATE.%s" .)) }}{{ end -}}
{{- toRawJson $out -}}
{{- end -}}

{{/* reads(*streams): gets, KV watches, durable pull consumers with their acks and flow control. */}}
{{- define "heddle.nats.reads" -}}
{{- $out := include "heddle.nats.info" . | fromJsonArray -}}
{{- range $s := . -}}
{{- range $f := list "$JS.API.DIRECT.GET.%s" "$JS.API.DIRECT.GET.%s.>" "$JS.API.STREAM.MSG.GET.%s" "$JS.API.CONSUMER.CREATE.%s" "$JS.API.CONSUMER.CREATE.%s.>" "$JS.API.CONSUMER.DURABLE.CREATE.%s.>" "$JS.API.CONSUMER.INFO.%s.>" "$JS.API.CONSUMER.DELETE.%s.>" "$JS.API.CONSUMER.MSG.NEXT.%s.>" "$JS.ACK.%s.>" "$JS.FC.%s.>" -}}
{{- $out = append $out (printf $f $s) -}}
{{- end -}}
{{- end -}}
{{- toRawJson $out -}}
{{- end -}}

{{/* KV_<bucket> for each bucket. */}}
{{- define "heddle.nats.kvStreams" -}}
{{- $out := list -}}
{{- range . }}{{ $out = append $out (printf "KV_%s" .) }}{{ end -}}
{{- toRawJson $out -}}
{{- end -}}

{{/* secret_reads(): every call that reads heddle-secrets' values, the gateway's alone. */}}
{{- define "heddle.nats.secretReads" -}}
{{- $s := "KV_heddle-secrets" -}}
{{- $out := list -}}
{{- range $f := list "$JS.API.DIRECT.GET.%s" "$JS.API.DIRECT.GET.%s.>" "$JS.API.STREAM.MSG.GET.%s" "$JS.API.CONSUMER.CREATE.%s" "$JS.API.CONSUMER.CREATE.%s.>" "$JS.API.CONSUMER.DURABLE.CREATE.%s.>" "$JS.API.STREAM.SNAPSHOT.%s" -}}
{{- $out = append $out (printf $f $s) -}}
{{- end -}}
{{- toRawJson $out -}}
{{- end -}}

{{/* A permission block as Permissions.to_config() writes it. Usage: include ... (dict "publish"
list "subscribe" list ["publishDeny" list] ["subscribeDeny" list] ["allowResponses" true]) */}}
{{- define "heddle.nats.rule" -}}
{{- $publish := dict "allow" (.publish | uniq | sortAlpha) -}}
{{- with .publishDeny }}{{ $_ := set $publish "deny" (. | uniq | sortAlpha) }}{{ end -}}
{{- $subscribe := dict "allow" (.subscribe | uniq | sortAlpha) -}}
{{- with .subscribeDeny }}{{ $_ := set $subscribe "deny" (. | uniq | sortAlpha) }}{{ end -}}
{{- $out := dict "publish" $publish "subscribe" $subscribe -}}
{{- if .allowResponses }}{{ $_ := set $out "allow_responses" true }}{{ end -}}
{{- toRawJson $out -}}
{{- end -}}

{{- define "heddle.nats.gateway" -}}
{{- $streams := include "heddle.nats.streams" . | fromJsonArray -}}
{{- $kv := include "heddle.nats.kvStreams" (include "heddle.nats.buckets" . | fromJsonArray) | fromJsonArray -}}
{{- $all := concat $streams $kv -}}
{{- $publish := concat (list "heddle.cmd.submit.*" "heddle.cmd.cancel.*" "heddle.cmd.approval.*" "heddle.doc.>" "$JS.API.STREAM.PURGE.HEDDLE_DOCS" "$KV.heddle-workflows.>" "$KV.heddle-tokens.>" "$KV.heddle-semaphores.>" "$KV.heddle-namespaces.>" "$KV.heddle-secrets.>" "$KV.heddle-notifications.>" "$KV.heddle-approvals.>")
  (include "heddle.nats.keeps" $all | fromJsonArray)
  (include "heddle.nats.info" $all | fromJsonArray)
  (include "heddle.nats.reads" (prepend $kv "HEDDLE_LOGS") | fromJsonArray) -}}
{{- include "heddle.nats.rule" (dict "publish" $publish "subscribe" (list "_INBOX_gateway.>" "heddle.notify.run.*" "$KV.heddle-runs.run.*" "$KV.heddle-runs.step.*.*")) -}}
{{- end -}}

{{/* The owner of run state: every stream's keeper, the only writer of runs, cron and pods. */}}
{{- define "heddle.nats.orchestrator" -}}
{{- $publish := list "heddle.cmd.submit.*" "heddle.cmd.cancel.*" "heddle.cmd.child.*" "heddle.cmd.timer.*" "heddle.cmd.deadline.*" "heddle.sched.>" "heddle.step.ready.>" "heddle.log.>" "heddle.runner.*.cancel" "heddle.runner.*.assign" "heddle.notify.run.*" "$KV.heddle-runs.>" "$KV.heddle-cron.>" "$KV.heddle-pods.>" "$KV.heddle-leases.>" "$KV.heddle-semaphores.>" "$KV.heddle-concurrency.>" "$KV.heddle-notifications.>" "$KV.heddle-approvals.>" "$JS.API.>" "$JS.ACK.>" "$JS.FC.>" -}}
{{- include "heddle.nats.rule" (dict "publish" $publish "subscribe" (list "_INBOX_orchestrator.>") "publishDeny" (include "heddle.nats.secretReads" . | fromJsonArray)) -}}
{{- end -}}

{{- define "heddle.nats.dispatcher" -}}
{{- $kv := include "heddle.nats.kvStreams" (list "heddle-runners" "heddle-heartbeats" "heddle-runs") | fromJsonArray -}}
{{- $streams := concat (list "HEDDLE_STEPS" "HEDDLE_EVENTS") $kv -}}
{{- $publish := concat (list "heddle.runner.*.assign") (include "heddle.nats.keeps" $streams | fromJsonArray) (include "heddle.nats.reads" $streams | fromJsonArray) -}}
{{- include "heddle.nats.rule" (dict "publish" $publish "subscribe" (list "_INBOX_dispatcher.>" "heddle.evt.*.*.finished.*")) -}}
{{- end -}}

{{/* One runner: its own events, heartbeats, registry entry and assignments; it reads no
stream. Usage: include "heddle.nats.runner" "<runner name>" */}}
{{- define "heddle.nats.runner" -}}
{{- $n := . -}}
{{- $publish := concat (list (printf "heddle.evt.*.*.started.%s" $n) (printf "heddle.evt.*.*.finished.%s" $n) (printf "heddle.log.*.*.*.*.%s" $n) (printf "$KV.heddle-heartbeats.*.*.%s" $n) (printf "$KV.heddle-runners.%s" $n))
  (include "heddle.nats.info" (list "HEDDLE_EVENTS" "HEDDLE_LOGS" "KV_heddle-heartbeats" "KV_heddle-runners") | fromJsonArray) -}}
{{- $subscribe := list (printf "_INBOX_runner-%s.>" $n) (printf "heddle.runner.%s.>" $n) -}}
{{- include "heddle.nats.rule" (dict "publish" $publish "subscribe" $subscribe "allowResponses" true) -}}
{{- end -}}

{{/* Reads only, and no consumer of any kind: a consumer create's body can name a service's
consumer, be durable or push to any subject (see inspector() in shared/broker/nats_permissions.py). */}}
{{- define "heddle.nats.inspector" -}}
{{- $publish := list "$JS.API.INFO" "$JS.API.STREAM.LIST" "$JS.API.STREAM.NAMES" "$JS.API.STREAM.INFO.*" "$JS.API.CONSUMER.LIST.*" "$JS.API.CONSUMER.NAMES.*" "$JS.API.CONSUMER.INFO.*.*" "$JS.API.DIRECT.GET.*" "$JS.API.DIRECT.GET.*.>" "$JS.API.STREAM.MSG.GET.*" -}}
{{- include "heddle.nats.rule" (dict "publish" $publish "subscribe" (list "heddle.>" "$KV.>" "_INBOX.>" "_INBOX_inspector.>") "publishDeny" (include "heddle.nats.secretReads" . | fromJsonArray) "subscribeDeny" (list "$KV.heddle-secrets.>")) -}}
{{- end -}}

{{/* Snapshots of every stream and bucket, their chunks acknowledged: it reads everything, the
secrets too, and changes nothing (backup() in shared/broker/nats_permissions.py; docs/backup.md). */}}
{{- define "heddle.nats.backup" -}}
{{- $streams := include "heddle.nats.streams" . | fromJsonArray -}}
{{- $kv := include "heddle.nats.kvStreams" (include "heddle.nats.buckets" . | fromJsonArray) | fromJsonArray -}}
{{- $all := concat $streams $kv -}}
{{- $publish := include "heddle.nats.info" $all | fromJsonArray -}}
{{- range $all }}{{ $publish = concat $publish (list (printf "$JS.API.STREAM.SNAPSHOT.%s" .) (printf "$JS.SNAPSHOT.ACK.%s.>" .)) }}{{ end -}}
{{- include "heddle.nats.rule" (dict "publish" $publish "subscribe" (list "_INBOX_backup.>")) -}}
{{- end -}}

{{/* One namespace's inspector: that namespace's logs live, nothing else (no stream read, no
consumer: see namespace_inspector() in shared/broker/nats_permissions.py).
Usage: include "heddle.nats.namespaceInspector" "<namespace>" */}}
{{- define "heddle.nats.namespaceInspector" -}}
{{- $subscribe := list (printf "heddle.log.*.*.*.%s.*" .) (printf "_INBOX_inspector-%s.>" .) -}}
{{- include "heddle.nats.rule" (dict "publish" (list "$JS.API.INFO") "subscribe" $subscribe) -}}
{{- end -}}

{{/* permissions_for(user). Usage: include "heddle.nats.permissions" "<user>" */}}
{{- define "heddle.nats.permissions" -}}
{{- if has . (list "gateway" "orchestrator" "dispatcher" "inspector" "backup") -}}
{{- include (printf "heddle.nats.%s" .) . -}}
{{- else if hasPrefix "runner-" . -}}
{{- include "heddle.nats.runner" (trimPrefix "runner-" .) -}}
{{- else if hasPrefix "inspector-" . -}}
{{- include "heddle.nats.namespaceInspector" (trimPrefix "inspector-" .) -}}
{{- else -}}
{{- fail (printf "no NATS role for user %q" .) -}}
{{- end -}}
{{- end -}}

{{/* Every runner's name, of every pool (templates/_pools.tpl): <namePrefix>runner-0 ... for
the default pool, <namePrefix>runner-<pool>-0 ... for another; with autoscaling, every runner
the pool may grow to (users, passwords, StatefulSets). */}}
{{- define "heddle.runnerNames" -}}
{{- $out := list -}}
{{- range include "heddle.runnerPools" . | fromJsonArray }}{{ $out = concat $out .runners }}{{ end -}}
{{- toRawJson $out -}}
{{- end -}}

{{/* The runners autoscaling may scale: those of the pools with autoscaling. */}}
{{- define "heddle.scaledRunnerNames" -}}
{{- $out := list -}}
{{- range include "heddle.runnerPools" . | fromJsonArray }}{{ if .autoscaling.enabled }}{{ $out = concat $out .runners }}{{ end }}{{ end -}}
{{- toRawJson $out -}}
{{- end -}}

{{- define "heddle.nats.usersSecretName" -}}
{{- include "heddle.name" (list . "heddle-nats-users") -}}
{{- end -}}

{{- define "heddle.nats.authSecretName" -}}
{{- include "heddle.name" (list . "nats-auth") -}}
{{- end -}}

{{- define "heddle.adminTokenSecretName" -}}
{{- include "heddle.name" (list . "heddle-admin-token") -}}
{{- end -}}

{{/*
{user: password} for every user of this release: the services, the inspector, backup, one user per
runner (runner-<runner name>) and one per nats.namespaceInspectors (inspector-<namespace>). A password that is already in the Secret (an upgrade) is kept;
a new user gets a random one. Computed once per render and remembered, so the passwords
Secret, the server's configuration and the pods' checksums all see the same passwords.
*/}}
{{- define "heddle.nats.passwords" -}}
{{- if not (hasKey .Values "__heddleNatsPasswords") -}}
{{- $existing := dict -}}
{{- with lookup "v1" "Secret" .Release.Namespace (include "heddle.nats.usersSecretName" .) -}}
{{- $existing = .data | default dict -}}
{{- end -}}
{{- $users := list "gateway" "orchestrator" "dispatcher" "inspector" "backup" -}}
{{- range include "heddle.runnerNames" . | fromJsonArray }}{{ $users = append $users (printf "runner-%s" .) }}{{ end -}}
{{- range .Values.nats.namespaceInspectors }}{{ $users = append $users (printf "inspector-%s" .) }}{{ end -}}
{{- $passwords := dict -}}
{{- range $users -}}
{{- if hasKey $existing . -}}
{{- $_ := set $passwords . (index $existing . | b64dec) -}}
{{- else -}}
{{- $_ := set $passwords . (randAlphaNum 32) -}}
{{- end -}}
{{- end -}}
{{- $_ := set .Values "__heddleNatsPasswords" $passwords -}}
{{- end -}}
{{- toRawJson (index .Values "__heddleNatsPasswords") -}}
{{- end -}}

{{/* A pod annotation that changes when the user's password does, so a rotation rolls the pod.
Usage: include "heddle.nats.passwordChecksum" (list . "<user>") */}}
{{- define "heddle.nats.passwordChecksum" -}}
{{- $root := index . 0 -}}
{{- $user := index . 1 -}}
checksum/nats-password: {{ printf "%s:%s" $user (index (include "heddle.nats.passwords" $root | fromJson) $user) | sha256sum }}
{{- end -}}

{{/*
The server's `accounts` block, as services/nats_users.NatsUsers.save writes it (NATS
configuration takes JSON values): every user with its password and permissions in its account,
nothing else, so a client without a user is refused. The accounts' exports and imports are
files/nats-accounts.json, a copy of links() in shared/broker/nats_accounts.py (the runners and the
inspector in accounts of their own, so that no reply subject reaches a stream). toRawJson keeps
`>` as it is (toJson writes \u003e, which the server's parser does not read).
*/}}
{{- define "heddle.nats.authConfig" -}}
{{- $accounts := .Files.Get "files/nats-accounts.json" | fromJson -}}
{{- range $name, $block := $accounts }}{{ $_ := set $block "users" (list) }}{{ end -}}
{{- $_ := set (index $accounts "HEDDLE") "jetstream" "enabled" -}}
{{- range $user, $password := include "heddle.nats.passwords" . | fromJson -}}
{{- $account := "HEDDLE" -}}
{{- if hasPrefix "runner-" $user }}{{ $account = "RUNNERS" }}{{ else if hasPrefix "inspector" $user }}{{ $account = "INSPECT" }}{{ end -}}
{{- $block := index $accounts $account -}}
{{- $_ := set $block "users" (append $block.users (dict "user" $user "password" $password "permissions" (include "heddle.nats.permissions" $user | fromJson))) -}}
{{- end -}}
accounts: {{ $accounts | toRawJson }}
{{ end -}}
