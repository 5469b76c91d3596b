{{/*
Names, labels and the two derived documents every template shares: the router's operator
config and each pool's effective Kubernetes settings.
*/}}

{{- define "specgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "specgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "specgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Common labels; pass (dict "root" $ "component" "router"). */}}
{{- define "specgate.labels" -}}
helm.sh/chart: {{ include "specgate.chart" .root }}
{{ include "specgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: specgate
{{- end }}

{{- define "specgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "specgate.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "specgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "specgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "specgate.routerImage" -}}
{{- printf "%s:%s" .Values.router.image.repository (default .Chart.AppVersion .Values.router.image.tag) }}
{{- end }}

{{- define "specgate.configPath" -}}/etc/specgate/config.yaml{{- end }}

{{/* The pool's resource name: <fullname>-pool-<name>. Pass (dict "root" $ "pool" $pool). */}}
{{- define "specgate.poolFullname" -}}
{{- printf "%s-pool-%s" (include "specgate.fullname" .root) .pool.name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The validated context cap of a pool (tokens): its max_context_tokens, else its model's
limits.max_context_tokens. The pool's --context-length is exactly this number; an
engine.context_length that disagrees is an error, not a silent override. Pass (dict "root" $
"pool" $pool "m" $model), $model an entry of specgate.models.
*/}}
{{- define "specgate.poolCap" -}}
{{- $pool := .pool -}}
{{- $limit := int64 .m.limits.max_context_tokens -}}
{{- $cap := $limit -}}
{{- if $pool.max_context_tokens }}
{{- $cap = int64 $pool.max_context_tokens -}}
{{- end }}
{{- if gt $cap $limit }}
{{- fail (printf "%spool %q: max_context_tokens %d exceeds limits.max_context_tokens %d" .m.where $pool.name $cap $limit) }}
{{- end }}
{{- if and $pool.engine (hasKey $pool.engine "context_length") $pool.engine.context_length }}
{{- if ne (int64 $pool.engine.context_length) $cap }}
{{- fail (printf "%spool %q: engine.context_length %d differs from the pool's validated cap %d (max_context_tokens, else limits.max_context_tokens); the engine must be capped at exactly the validated length" .m.where $pool.name (int64 $pool.engine.context_length) $cap) }}
{{- end }}
{{- end }}
{{- $cap -}}
{{- end }}

{{/*
A pool's effective Kubernetes settings as YAML: poolDefaults deep-merged with the pool's own
k8s block (the pool wins, key by key; lists are replaced whole).
*/}}
{{- define "specgate.poolK8s" -}}
{{- $k8s := mergeOverwrite (deepCopy .root.Values.poolDefaults) (deepCopy (default (dict) .pool.k8s)) -}}
{{- toYaml $k8s -}}
{{- end }}

{{/* The pool's discovery label selector: exactly the labels of its HTTP-serving pods. */}}
{{- define "specgate.poolSelectorString" -}}
{{- printf "app.kubernetes.io/name=%s,app.kubernetes.io/instance=%s,app.kubernetes.io/component=pool-%s" (include "specgate.name" .root) .root.Release.Name .pool.name -}}
{{- end }}

{{/*
The router's operator YAML, built from values. Only keys the router knows are emitted.
A chart-run pool (k8s.enabled) gets engine_keepalive_s = its k8s.keepAliveTimeoutSeconds, the
SGLANG_TIMEOUT_KEEP_ALIVE its pods run with, so the router's check
upstream.keepalive_timeout_s < engine_keepalive_s is about the engines it really talks to.
One model: top-level model, limits, routing and pools, as values give them. Several
(values `models`): a `models` list, each entry its model block plus its limits and routing
(merged over the top-level ones, specgate.models) and its rendered pools.
*/}}
{{- define "specgate.routerConfig" -}}
{{- $root := . -}}
{{- $ms := dict -}}
{{- $_ := include "specgate.models" (dict "root" . "out" $ms) -}}
{{- $entries := list -}}
{{- range $m := $ms.models }}
{{- $names := list -}}
{{- $pools := list -}}
{{- range $pool := $m.pools }}
{{- if has $pool.name $names }}
{{- fail (printf "pools: duplicate pool name %q" $pool.name) }}
{{- end }}
{{- $names = append $names $pool.name }}
{{- $k8s := include "specgate.poolK8s" (dict "root" $root "pool" $pool) | fromYaml }}
{{- $cap := include "specgate.poolCap" (dict "root" $root "pool" $pool "m" $m) | int64 }}
{{- $algo := "" }}
{{- if $pool.engine.speculative_algorithm }}{{ $algo = $pool.engine.speculative_algorithm }}{{ end }}
{{- if and $pool.speculative (not $algo) }}
{{- fail (printf "pool %q: speculative is true but engine.speculative_algorithm is empty" $pool.name) }}
{{- end }}
{{- if and (not $pool.speculative) $algo }}
{{- fail (printf "pool %q: speculative is false but engine.speculative_algorithm is %q" $pool.name $algo) }}
{{- end }}
{{- $p := dict "name" $pool.name "speculative" $pool.speculative }}
{{- range $key := list "max_context_tokens" "draft_reserved_tokens" "drafter_cost_ratio" "speed" "serves" "capabilities" "priority_order" "lora_adapters" "follow_engine_context" }}
{{- if hasKey $pool $key }}
{{- if not (kindIs "invalid" (index $pool $key)) }}
{{- $_ := set $p $key (index $pool $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- $disc := default (dict) $pool.discovery }}
{{- if $pool.endpoints }}
{{- $_ := set $p "endpoints" $pool.endpoints }}
{{- else if $disc.label_selector }}
{{- $_ := set $p "discovery" $disc }}
{{- else if $k8s.enabled }}
{{- /* the chart's own block; a discovery block without label_selector only tunes it */}}
{{- $own := dict "namespace" $root.Release.Namespace "label_selector" (include "specgate.poolSelectorString" (dict "root" $root "pool" $pool)) "port" (int64 $k8s.port) }}
{{- $_ := set $p "discovery" (merge $own (deepCopy $disc)) }}
{{- else }}
{{- fail (printf "pool %q: k8s.enabled is false, so give endpoints or a discovery block with a label_selector" $pool.name) }}
{{- end }}
{{- $keepAlive := 5.0 }}
{{- if $k8s.enabled }}
{{- $keepAlive = float64 $k8s.keepAliveTimeoutSeconds }}
{{- if and (hasKey $pool "engine_keepalive_s") (ne (float64 $pool.engine_keepalive_s) $keepAlive) }}
{{- fail (printf "pool %q: engine_keepalive_s (%v) differs from k8s.keepAliveTimeoutSeconds (%v), the SGLANG_TIMEOUT_KEEP_ALIVE the chart gives its pods; set k8s.keepAliveTimeoutSeconds (or poolDefaults.keepAliveTimeoutSeconds) instead" $pool.name $pool.engine_keepalive_s $k8s.keepAliveTimeoutSeconds) }}
{{- end }}
{{- $_ := set $p "engine_keepalive_s" (int64 $k8s.keepAliveTimeoutSeconds) }}
{{- else if hasKey $pool "engine_keepalive_s" }}
{{- $keepAlive = float64 $pool.engine_keepalive_s }}
{{- $_ := set $p "engine_keepalive_s" $pool.engine_keepalive_s }}
{{- end }}
{{- $up := $root.Values.upstream }}
{{- if and (hasKey $up "keepalive_timeout_s") (ge (float64 $up.keepalive_timeout_s) $keepAlive) }}
{{- if $k8s.enabled }}
{{- fail (printf "pool %q: k8s.keepAliveTimeoutSeconds (%v, the engines' SGLANG_TIMEOUT_KEEP_ALIVE) must exceed upstream.keepalive_timeout_s (%v)" $pool.name $k8s.keepAliveTimeoutSeconds $up.keepalive_timeout_s) }}
{{- else }}
{{- fail (printf "pool %q runs outside the chart: its engine_keepalive_s (%v s; the router's default 5 is SGLang's own) must exceed upstream.keepalive_timeout_s (%v); set it to those engines' SGLANG_TIMEOUT_KEEP_ALIVE" $pool.name $keepAlive $up.keepalive_timeout_s) }}
{{- end }}
{{- end }}
{{- $engine := dict "context_length" $cap }}
{{- range $key, $value := $pool.engine }}
{{- if and (ne $key "context_length") (not (kindIs "invalid" $value)) }}
{{- $_ := set $engine $key $value }}
{{- end }}
{{- end }}
{{- $_ := set $p "engine" $engine }}
{{- $pools = append $pools $p }}
{{- end }}
{{- $generating := list }}
{{- range $p := $pools }}
{{- if has "generate" (default (list "generate") $p.serves) }}
{{- $generating = append $generating (has "responses" (default (list) $p.serves)) }}
{{- end }}
{{- end }}
{{- if not $generating }}
{{- fail (printf "%spools: no pool serves `generate` (chat and completions); list it in one pool's serves" $m.where) }}
{{- end }}
{{- if gt (len (uniq $generating)) 1 }}
{{- fail (printf "%spools: list `responses` in serves of every pool that serves `generate`, or of none" $m.where) }}
{{- end }}
{{- $sat := $m.routing.saturation }}
{{- if ge (int64 $sat.exit) (int64 $sat.enter) }}
{{- fail (printf "%srouting.saturation.exit (%d) must be < routing.saturation.enter (%d)" $m.where (int64 $sat.exit) (int64 $sat.enter)) }}
{{- end }}
{{- $entry := merge (dict "limits" $m.limits "routing" $m.routing "pools" $pools) $m.model }}
{{- $entries = append $entries $entry }}
{{- end }}
{{- if lt (float64 .Values.scrape.stale_after_s) (float64 .Values.scrape.interval_s) }}
{{- fail "scrape.stale_after_s must be >= scrape.interval_s" }}
{{- end }}
{{- $server := merge (dict "host" "0.0.0.0" "port" (int64 .Values.router.port)) .Values.server }}
{{- $cfg := dict
  "scrape" .Values.scrape
  "health" .Values.health
  "upstream" .Values.upstream
  "server" $server
  "canary" .Values.canary
  "tracing" .Values.tracing
  "planner" (pick .Values.planner "window_requests" "window_s")
  "state" (include "specgate.stateConfig" . | fromYaml) }}
{{- if (index $ms.models 0).multi }}
{{- $_ := set $cfg "models" $entries }}
{{- else }}
{{- $one := index $entries 0 }}
{{- $_ := set $cfg "model" .Values.model }}
{{- $_ := set $cfg "limits" .Values.limits }}
{{- $_ := set $cfg "routing" .Values.routing }}
{{- $_ := set $cfg "pools" $one.pools }}
{{- end }}
{{- $auth := dict }}
{{- range $src := (include "specgate.authSources" . | fromYaml).sources }}
{{- $_ := set $auth $src.configKey $src.file }}
{{- end }}
{{- if .Values.auth.engineApiKey.existingSecret }}
{{- $_ := set $auth "engine_api_key_env" "SPECGATE_ENGINE_API_KEY" }}
{{- end }}
{{- with .Values.auth.speculation_defaults }}
{{- $_ := set $auth "speculation_defaults" . }}
{{- end }}
{{- if or .Values.auth.priority.keys (not (kindIs "invalid" .Values.auth.priority.default)) }}
{{- $_ := set $auth "priority" .Values.auth.priority }}
{{- end }}
{{- with .Values.auth.rate_limits }}
{{- if or .keys (not (kindIs "invalid" .default)) }}
{{- $_ := set $auth "rate_limits" . }}
{{- end }}
{{- end }}
{{- with .Values.auth.engine_fields }}
{{- if or .allow .keys }}
{{- $_ := set $auth "engine_fields" . }}
{{- end }}
{{- end }}
{{- if $auth }}
{{- $_ := set $cfg "auth" $auth }}
{{- end }}
{{- /* Go writes a float such as 0.00004 as 4e-05, which YAML 1.1 readers (PyYAML, so the
router) take for a string: give such a bare number a decimal point (4.0e-05). */}}
{{- regexReplaceAll "(?m)^(\\s*(?:- )?[^\\s:#]+: |\\s*- )(-?[0-9]+)(e[-+][0-9]+)$" (toYaml $cfg) "${1}${2}.0${3}" }}
{{- end }}

{{/*
The most router pods that can run at once: the HPA's maxReplicas when autoscaling is on,
else router.replicas.
*/}}
{{- define "specgate.routerMaxReplicas" -}}
{{- if .Values.router.autoscaling.enabled }}
{{- int64 .Values.router.autoscaling.maxReplicas }}
{{- else }}
{{- int64 .Values.router.replicas }}
{{- end }}
{{- end }}

{{/*
How the router learns its Redis URL (router/shared/state.py reads state.redis_url, else the variable
named by state.redis_url_env; a password can only travel inside the URL):
  ""          state.backend is memory;
  "inline"    no credentials: the URL is state.redis_url in config.yaml (the chart's Redis
              without a password, or redis.external.url);
  "password"  the chart's Redis with redis.auth.existingSecret: the router's
              SPECGATE_REDIS_URL is composed from SPECGATE_REDIS_PASSWORD (secretKeyRef);
  "secret"    redis.external.existingSecret: SPECGATE_REDIS_URL is that Secret's whole URL.
*/}}
{{- define "specgate.redisMode" -}}
{{- if eq .Values.state.backend "redis" }}
{{- if .Values.redis.enabled }}
{{- if .Values.redis.auth.existingSecret }}password{{ else }}inline{{ end }}
{{- else if .Values.redis.external.existingSecret }}secret
{{- else }}inline
{{- end }}
{{- end }}
{{- end }}

{{/* HOST:PORT/DB of the chart's Redis Service (no scheme, no credentials). */}}
{{- define "specgate.chartRedisAddress" -}}
{{- printf "%s-redis:%d/0" (include "specgate.fullname" .) (int64 .Values.redis.port) }}
{{- end }}

{{/*
The router config's `state:` block, after the checks that keep replicas and Redis consistent:
per-process (memory) state with more than one router pod would make every replica count only
its own in-flight requests, so the saturation bypass and admin overrides would diverge.
*/}}
{{- define "specgate.stateConfig" -}}
{{- $s := .Values.state -}}
{{- $r := .Values.redis -}}
{{- $ext := $r.external -}}
{{- $max := include "specgate.routerMaxReplicas" . | int64 -}}
{{- if eq $s.backend "memory" }}
{{- if gt $max 1 }}
{{- $where := printf "router.replicas is %d" $max }}
{{- if .Values.router.autoscaling.enabled }}{{ $where = printf "router.autoscaling.maxReplicas is %d" $max }}{{ end }}
{{- fail (printf "state.backend is memory but %s: each router replica would count only its own in-flight requests, so the saturation bypass and admin overrides would differ between replicas. Set state.backend=redis (with redis.enabled=true or redis.external), or run one replica (router.replicas=1, router.autoscaling.enabled=false)" $where) }}
{{- end }}
{{- if $r.enabled }}
{{- fail "redis.enabled is true but state.backend is memory: the router would not use that Redis. Set state.backend=redis, or redis.enabled=false" }}
{{- end }}
{{- if or $ext.url $ext.existingSecret }}
{{- fail "redis.external is set but state.backend is memory: set state.backend=redis, or clear redis.external" }}
{{- end }}
backend: memory
{{- else }}
{{- if and $r.enabled (or $ext.url $ext.existingSecret) }}
{{- fail "redis.enabled (the chart's Redis) and redis.external are exclusive: set one" }}
{{- end }}
{{- if and $ext.url $ext.existingSecret }}
{{- fail "redis.external.url and redis.external.existingSecret are exclusive: set one" }}
{{- end }}
{{- if not (or $r.enabled $ext.url $ext.existingSecret) }}
{{- fail "state.backend is redis but no Redis is configured: set redis.enabled=true (the chart's Redis), redis.external.url or redis.external.existingSecret" }}
{{- end }}
{{- if gt (mulf (float64 $s.renew_interval_s) 2.0) (float64 $s.lease_ttl_s) }}
{{- fail "state.renew_interval_s must be <= state.lease_ttl_s / 2" }}
{{- end }}
{{- if ge (float64 $s.op_timeout_s) (float64 $s.renew_interval_s) }}
{{- fail "state.op_timeout_s must be < state.renew_interval_s" }}
{{- end }}
{{- $out := deepCopy $s }}
{{- $_ := set $out "key_prefix" (default (include "specgate.fullname" .) $s.key_prefix) }}
{{- if eq (include "specgate.redisMode" .) "inline" }}
{{- $_ := set $out "redis_url" (ternary (printf "redis://%s" (include "specgate.chartRedisAddress" .)) $ext.url $r.enabled) }}
{{- else }}
{{- $_ := set $out "redis_url_env" "SPECGATE_REDIS_URL" }}
{{- end }}
{{- toYaml $out }}
{{- end }}
{{- end }}

{{/* The router's env entries for its Redis URL (modes "password" and "secret"). */}}
{{- define "specgate.routerRedisEnv" -}}
{{- $mode := include "specgate.redisMode" . }}
{{- if eq $mode "password" }}
# Declared before SPECGATE_REDIS_URL, which refers to it ($(VAR) expansion).
- name: SPECGATE_REDIS_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ .Values.redis.auth.existingSecret | quote }}, key: {{ .Values.redis.auth.passwordKey | quote }}}
- name: SPECGATE_REDIS_URL
  value: {{ printf "redis://:$(SPECGATE_REDIS_PASSWORD)@%s" (include "specgate.chartRedisAddress" .) | quote }}
{{- else if eq $mode "secret" }}
- name: SPECGATE_REDIS_URL
  valueFrom:
    secretKeyRef: {name: {{ .Values.redis.external.existingSecret | quote }}, key: {{ .Values.redis.external.urlKey | quote }}}
{{- end }}
{{- end }}

{{/*
The API key sources as YAML {sources: [...]}, one entry per configured key set (client
`api-keys`, admin `admin-api-keys`): the Secret (existingSecret, else the chart's
<fullname>-auth built from devKeys), its key, the volume, the directory it is mounted at and
the file the router config names (auth.api_keys_file / auth.admin_api_key_file). router/access/auth.py
reads such a file as one key per line and re-reads it on every config reload.
*/}}
{{- define "specgate.authSources" -}}
{{- $root := . -}}
{{- $sources := list -}}
{{- $chartSecret := printf "%s-auth" (include "specgate.fullname" .) -}}
{{- range $set := list (dict "name" "api-keys" "values" .Values.auth.apiKeys "path" "auth.apiKeys" "configKey" "api_keys_file") (dict "name" "admin-api-keys" "values" .Values.auth.adminApiKeys "path" "auth.adminApiKeys" "configKey" "admin_api_key_file") }}
{{- $v := $set.values }}
{{- if and $v.existingSecret $v.devKeys }}
{{- fail (printf "%s: existingSecret and devKeys are exclusive: set one" $set.path) }}
{{- end }}
{{- if or $v.existingSecret $v.devKeys }}
{{- $secret := $chartSecret }}
{{- $key := $set.name }}
{{- if $v.existingSecret }}{{ $secret = $v.existingSecret }}{{ $key = $v.key }}{{ end }}
{{- $dir := printf "/etc/specgate-auth/%s" $set.name }}
{{- $sources = append $sources (dict "name" $set.name "configKey" $set.configKey "secret" $secret "key" $key "mountPath" $dir "file" (printf "%s/%s" $dir $key)) }}
{{- end }}
{{- end }}
{{- if eq (len $sources) 2 }}
{{- $a := index $sources 0 }}{{ $b := index $sources 1 }}
{{- if and (eq $a.secret $b.secret) (eq $a.key $b.key) }}
{{- fail (printf "auth.apiKeys and auth.adminApiKeys both read key %q of Secret %q: an admin key must not also be a client key" $a.key $a.secret) }}
{{- end }}
{{- end }}
{{- range $k := .Values.auth.apiKeys.devKeys }}
{{- if has $k $root.Values.auth.adminApiKeys.devKeys }}
{{- fail "auth: a key is in both auth.apiKeys.devKeys and auth.adminApiKeys.devKeys: an admin key must not also be a client key" }}
{{- end }}
{{- end }}
{{- toYaml (dict "sources" $sources) }}
{{- end }}

{{/*
The SGLang flags of one pool, one list item per line, in the order of serving/launch.py's
engine_argv (the argv `specgate serve` would exec), then the LeaderWorkerSet flags. Pass (dict "root" $ "pool" $pool
"k8s" $k8s "m" $model). Numbers go through int64/toString so Go never prints 2.4576e+05; the
served model name is the pool's model's unless engine.served_model_name says otherwise.
*/}}
{{- define "specgate.poolArgs" -}}
{{- $pool := .pool -}}
{{- $k8s := .k8s -}}
{{- $engine := $pool.engine -}}
{{- $cap := include "specgate.poolCap" (dict "root" .root "pool" $pool "m" .m) | int64 -}}
- --model-path
- {{ $engine.model_path | quote }}
- --served-model-name
- {{ default .m.model.name $engine.served_model_name | quote }}
- --host
- "0.0.0.0"
- --port
- {{ int64 $k8s.port | quote }}
- --context-length
- {{ $cap | quote }}
- --tp-size
- {{ int64 (default 1 $engine.tp_size) | quote }}
- --enable-metrics
- --log-level-http
- warning
{{- if .root.Values.auth.engineApiKey.existingSecret }}
- --api-key
- "$(SGLANG_API_KEY)"
{{- end }}
{{- if not (kindIs "invalid" $engine.mem_fraction_static) }}
- --mem-fraction-static
- {{ $engine.mem_fraction_static | toString | quote }}
{{- end }}
{{- if $engine.max_total_tokens }}
- --max-total-tokens
- {{ int64 $engine.max_total_tokens | quote }}
{{- end }}
{{- if $engine.dtype }}
- --dtype
- {{ $engine.dtype | quote }}
{{- end }}
{{- if $engine.speculative_algorithm }}
- --speculative-algorithm
- {{ $engine.speculative_algorithm | quote }}
{{- if $engine.speculative_draft_model_path }}
- --speculative-draft-model-path
- {{ $engine.speculative_draft_model_path | quote }}
{{- end }}
{{- range $flag := list "speculative_num_steps" "speculative_eagle_topk" "speculative_num_draft_tokens" }}
{{- $value := index $engine $flag }}
{{- if not (kindIs "invalid" $value) }}
- --{{ $flag | replace "_" "-" }}
- {{ int64 $value | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- if $engine.tool_call_parser }}
- --tool-call-parser
- {{ $engine.tool_call_parser | quote }}
{{- end }}
{{- if $engine.reasoning_parser }}
- --reasoning-parser
- {{ $engine.reasoning_parser | quote }}
{{- end }}
{{- if $engine.otlp_traces_endpoint }}
- --enable-trace
- --otlp-traces-endpoint
- {{ $engine.otlp_traces_endpoint | quote }}
{{- if $engine.otlp_service_name }}
- --otlp-service-name
- {{ $engine.otlp_service_name | quote }}
{{- end }}
{{- end }}
{{- if $engine.lora_paths }}
- --enable-lora
- --lora-paths
{{- range $entry := $engine.lora_paths }}
- {{ $entry | quote }}
{{- end }}
{{- end }}
{{- if not (has "generate" (default (list "generate") $pool.serves)) }}
- --is-embedding
{{- end }}
{{- if $engine.cpu }}
{{- range list "--device" "cpu" "--attention-backend" "intel_amx" "--sampling-backend" "pytorch" "--disable-overlap-schedule" "--sleep-on-idle" }}
- {{ . | quote }}
{{- end }}
{{- end }}
{{- range $engine.extra_args }}
- {{ . | quote }}
{{- end }}
{{- if $k8s.multiNode.enabled }}
- --dist-init-addr
- "$(LWS_LEADER_ADDRESS):{{ int64 $k8s.multiNode.distInitPort }}"
- --nnodes
- "$(LWS_GROUP_SIZE)"
- --node-rank
- "$(LWS_WORKER_INDEX)"
{{- end }}
{{- end }}

{{/* Pool GPU arithmetic: gpus * nodes must equal tp_size when the pool uses GPUs. */}}
{{- define "specgate.checkPoolGpus" -}}
{{- $nodes := 1 -}}
{{- if .k8s.multiNode.enabled }}{{ $nodes = int64 .k8s.multiNode.size }}{{ end -}}
{{- $tp := 1 -}}
{{- if .pool.engine.tp_size }}{{ $tp = int64 .pool.engine.tp_size }}{{ end -}}
{{- if and (gt (int64 .k8s.gpus) 0) (ne (mul (int64 .k8s.gpus) $nodes) $tp) }}
{{- fail (printf "pool %q: k8s.gpus (%d) x nodes (%d) must equal engine.tp_size (%d)" .pool.name (int64 .k8s.gpus) $nodes $tp) }}
{{- end }}
{{- end }}

{{/* Volumes shared by pools and the router: models (and drafters). */}}
{{- define "specgate.storageVolume" -}}
- name: {{ .name }}
{{- if eq .spec.type "pvc" }}
  persistentVolumeClaim:
    claimName: {{ .spec.claimName }}
    readOnly: true
{{- else }}
  hostPath:
    path: {{ .spec.hostPath }}
    type: Directory
{{- end }}
{{- end }}

{{/*
The data of the chart-created key Secret <fullname>-auth (from auth.*.devKeys; dev only):
`api-keys` and/or `admin-api-keys`, one key per line, base64.
*/}}
{{- define "specgate.authSecretData" -}}
{{- $data := dict }}
{{- if .Values.auth.apiKeys.devKeys }}
{{- $_ := set $data "api-keys" (printf "%s\n" (join "\n" .Values.auth.apiKeys.devKeys) | b64enc) }}
{{- end }}
{{- if .Values.auth.adminApiKeys.devKeys }}
{{- $_ := set $data "admin-api-keys" (printf "%s\n" (join "\n" .Values.auth.adminApiKeys.devKeys) | b64enc) }}
{{- end }}
{{- toYaml $data }}
{{- end }}

{{/*
The router pod's terminationGracePeriodSeconds: the drain's worst case (server.drain_listen_s
+ server.drain_timeout_s, then upstream.abort_timeout_s for the cut requests' aborts) plus
router.shutdownMarginSeconds, rounded up to whole seconds (router/front/drain.py).
*/}}
{{- define "specgate.routerGraceSeconds" -}}
{{- $server := .Values.server -}}
{{- $listen := float64 (default 5.0 $server.drain_listen_s) -}}
{{- if hasKey $server "drain_listen_s" }}{{ $listen = float64 $server.drain_listen_s }}{{ end -}}
{{- $timeout := float64 (default 30.0 $server.drain_timeout_s) -}}
{{- if hasKey $server "drain_timeout_s" }}{{ $timeout = float64 $server.drain_timeout_s }}{{ end -}}
{{- $abort := float64 (default 2.0 .Values.upstream.abort_timeout_s) -}}
{{- ceil (addf $listen $timeout $abort (float64 .Values.router.shutdownMarginSeconds)) | int64 -}}
{{- end }}


{{/*
What `specgate plan` sizes (planner.enabled), as YAML: model (the model's name), speculativePool
and plainPool (pool names), speculativeDeployment and plainDeployment (their Deployments), engines
(N) and the floors. The model is planner.model, else the release's one model; each pool is the one
named, else the model's only candidate of its kind: a pool the chart runs as a Deployment
(k8s.enabled, not multiNode: the planner scales Deployments) that serves generate. N is the two
pools' k8s.replicas together (planner.engines, when set, must equal it). Refused: more than one
router pod (each router process keeps its own window, so through the Service the planner would
see one replica's share of the traffic), no admin key to read the window with, floors above N.
*/}}
{{- define "specgate.plannerTargets" -}}
{{- $root := . -}}
{{- $p := .Values.planner -}}
{{- $max := include "specgate.routerMaxReplicas" . | int64 -}}
{{- if gt $max 1 }}
{{- fail (printf "planner.enabled needs exactly one router pod (router.replicas: 1, router.autoscaling.enabled: false), not %d: each router process keeps its own window of requests, so through the Service the planner would read one replica's share of the traffic and size the pools for it" $max) }}
{{- end }}
{{- if not (include "specgate.authSources" . | fromYaml).sources }}
{{- fail "planner.enabled needs an admin key to read the router's window (GET /admin/plan/window): set auth.adminApiKeys.existingSecret (or devKeys)" }}
{{- end }}
{{- $admin := false }}
{{- range (include "specgate.authSources" . | fromYaml).sources }}{{ if eq .name "admin-api-keys" }}{{ $admin = true }}{{ end }}{{ end }}
{{- if not $admin }}
{{- fail "planner.enabled needs an admin key to read the router's window (GET /admin/plan/window): set auth.adminApiKeys.existingSecret (or devKeys)" }}
{{- end }}
{{- $ms := dict -}}
{{- $_ := include "specgate.models" (dict "root" . "out" $ms) -}}
{{- $m := dict -}}
{{- if $p.model }}
{{- range $ms.models }}{{ if eq .model.name $p.model }}{{ $m = . }}{{ end }}{{ end }}
{{- if not $m }}
{{- fail (printf "planner.model %q is not a model of this release" $p.model) }}
{{- end }}
{{- else if gt (len $ms.models) 1 }}
{{- fail "planner.model: name the model whose pools the planner sizes (this release serves several)" }}
{{- else }}
{{- $m = index $ms.models 0 }}
{{- end }}
{{- $found := dict "spec" (list) "plain" (list) "replicas" (dict) }}
{{- range $pool := $m.pools }}
{{- $k8s := include "specgate.poolK8s" (dict "root" $root "pool" $pool) | fromYaml }}
{{- if and $k8s.enabled (not $k8s.multiNode.enabled) (has "generate" (default (list "generate") $pool.serves)) }}
{{- $kind := ternary "spec" "plain" (eq $pool.speculative true) }}
{{- $_ := set $found $kind (append (get $found $kind) $pool.name) }}
{{- $_ := set $found.replicas $pool.name (int64 $k8s.replicas) }}
{{- end }}
{{- end }}
{{- $chosen := dict }}
{{- range $kind := list (dict "key" "spec" "value" "speculativePool" "what" "speculative") (dict "key" "plain" "value" "plainPool" "what" "plain") }}
{{- $names := get $found $kind.key }}
{{- $want := index $p $kind.value }}
{{- if $want }}
{{- if not (has $want $names) }}
{{- fail (printf "planner.%s %q is not a %s pool of model %q that the chart runs as a Deployment serving generate (candidates: %s)" $kind.value $want $kind.what $m.model.name (join ", " $names)) }}
{{- end }}
{{- else if ne (len $names) 1 }}
{{- fail (printf "planner.%s: model %q has %d %s pools that the chart runs as a Deployment serving generate (%s); name the one the planner sizes" $kind.value $m.model.name (len $names) $kind.what (join ", " $names)) }}
{{- else }}
{{- $want = index $names 0 }}
{{- end }}
{{- $_ := set $chosen $kind.key $want }}
{{- end }}
{{- $engines := add (get $found.replicas $chosen.spec) (get $found.replicas $chosen.plain) | int64 }}
{{- if and (not (kindIs "invalid" $p.engines)) (ne (int64 $p.engines) $engines) }}
{{- fail (printf "planner.engines (%d) differs from the replicas of pools %q and %q together (%d): the planner holds the two at N engines; set their k8s.replicas to the first split of N" (int64 $p.engines) $chosen.spec $chosen.plain $engines) }}
{{- end }}
{{- if gt (add (int64 $p.floors.speculative) (int64 $p.floors.plain)) $engines }}
{{- fail (printf "planner.floors (%d speculative + %d plain) exceed the %d engines of the two pools" (int64 $p.floors.speculative) (int64 $p.floors.plain) $engines) }}
{{- end }}
model: {{ $m.model.name | quote }}
speculativePool: {{ $chosen.spec | quote }}
plainPool: {{ $chosen.plain | quote }}
speculativeDeployment: {{ include "specgate.poolFullname" (dict "root" $root "pool" (dict "name" $chosen.spec)) | quote }}
plainDeployment: {{ include "specgate.poolFullname" (dict "root" $root "pool" (dict "name" $chosen.plain)) | quote }}
engines: {{ $engines }}
{{- end }}

{{/*
A chart-run pool Deployment's replicas: its k8s.replicas; but for one of the two pools the planner
moves (planner.enabled and apply), the live replicas when both Deployments exist and hold N
together, so a `helm upgrade` keeps the split the planner set. Helm's lookup reads them; under
`helm template` it finds nothing and the values' replicas are rendered. Pass (dict "root" $ "pool"
$pool "k8s" $k8s).
*/}}
{{- define "specgate.poolReplicas" -}}
{{- $replicas := int64 .k8s.replicas -}}
{{- $p := .root.Values.planner -}}
{{- if and $p.enabled $p.apply -}}
{{- $t := include "specgate.plannerTargets" .root | fromYaml -}}
{{- if has .pool.name (list $t.speculativePool $t.plainPool) -}}
{{- $ns := .root.Release.Namespace -}}
{{- $spec := lookup "apps/v1" "Deployment" $ns $t.speculativeDeployment -}}
{{- $plain := lookup "apps/v1" "Deployment" $ns $t.plainDeployment -}}
{{- if and $spec $plain -}}
{{- $live := dict "spec" (int64 (default 0 $spec.spec.replicas)) "plain" (int64 (default 0 $plain.spec.replicas)) -}}
{{- if eq (add $live.spec $live.plain | int64) (int64 $t.engines) -}}
{{- $replicas = ternary $live.spec $live.plain (eq .pool.name $t.speculativePool) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $replicas -}}
{{- end }}
