{{/*
One pool pod's spec. Pass (dict "root" $ "pool" $pool "k8s" $k8s "m" $model "role" ROLE), where
$model is the pool's entry of specgate.models, and ROLE is
"single" (a Deployment pod), "leader" or "worker" (LeaderWorkerSet). Only "single" and
"leader" pods serve HTTP, so only they carry ports and HTTP probes.
*/}}
{{- define "specgate.poolPodSpec" -}}
{{- $root := .root -}}
{{- $k8s := .k8s -}}
{{- $serves := ne .role "worker" -}}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $k8s.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
automountServiceAccountToken: false
terminationGracePeriodSeconds: {{ int64 $k8s.terminationGracePeriodSeconds }}
containers:
  - name: sglang
    image: {{ printf "%s:%s" $k8s.image.repository $k8s.image.tag | quote }}
    imagePullPolicy: {{ $k8s.image.pullPolicy }}
    command:
      {{- toYaml $k8s.command | nindent 6 }}
    args:
      {{- include "specgate.poolArgs" (dict "root" $root "pool" .pool "k8s" $k8s "m" .m) | nindent 6 }}
    {{- if $serves }}
    ports:
      - name: http
        containerPort: {{ int64 $k8s.port }}
        protocol: TCP
    {{- end }}
    {{- if $k8s.multiNode.enabled }}
    {{- if eq .role "leader" }}
      - name: dist-init
        containerPort: {{ int64 $k8s.multiNode.distInitPort }}
        protocol: TCP
    {{- end }}
    {{- end }}
    {{- $env := prepend $k8s.env (dict "name" "SGLANG_TIMEOUT_KEEP_ALIVE" "value" (toString (int64 $k8s.keepAliveTimeoutSeconds))) }}
    {{- with $root.Values.auth.engineApiKey.existingSecret }}
    {{- $env = prepend $env (dict "name" "SGLANG_API_KEY" "valueFrom" (dict "secretKeyRef" (dict "name" . "key" $root.Values.auth.engineApiKey.key))) }}
    {{- end }}
    {{- if .pool.engine.cpu }}
    {{- $env = prepend $env (dict "name" "SGLANG_USE_CPU_ENGINE" "value" "1") }}
    {{- end }}
    {{- with $env }}
    env:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- if $serves }}
    startupProbe:
      {{- toYaml $k8s.probes.startup | nindent 6 }}
    readinessProbe:
      {{- toYaml $k8s.probes.readiness | nindent 6 }}
    livenessProbe:
      {{- toYaml $k8s.probes.liveness | nindent 6 }}
    {{- end }}
    resources:
      {{- $resources := deepCopy $k8s.resources }}
      {{- if gt (int64 $k8s.gpus) 0 }}
      {{- $limits := default (dict) $resources.limits }}
      {{- $_ := set $limits "nvidia.com/gpu" (int64 $k8s.gpus) }}
      {{- $_ := set $resources "limits" $limits }}
      {{- end }}
      {{- toYaml $resources | nindent 6 }}
    volumeMounts:
      - name: models
        mountPath: {{ $root.Values.storage.models.mountPath }}
        readOnly: true
      {{- if $root.Values.storage.drafters.enabled }}
      - name: drafters
        mountPath: {{ $root.Values.storage.drafters.mountPath }}
        readOnly: true
      {{- end }}
      - name: dshm
        mountPath: /dev/shm
volumes:
  {{- include "specgate.storageVolume" (dict "name" "models" "spec" $root.Values.storage.models) | nindent 2 }}
  {{- if $root.Values.storage.drafters.enabled }}
  {{- include "specgate.storageVolume" (dict "name" "drafters" "spec" $root.Values.storage.drafters) | nindent 2 }}
  {{- end }}
  - name: dshm
    emptyDir:
      medium: Memory
      sizeLimit: {{ $k8s.shmSize }}
{{- with $k8s.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $k8s.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $k8s.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Pod template metadata of a pool pod; pass (dict "root" $ "pool" $pool "k8s" $k8s "role" ROLE). */}}
{{- define "specgate.poolPodMetadata" -}}
{{- $component := printf "pool-%s" .pool.name -}}
{{- if eq .role "worker" }}{{ $component = printf "pool-%s-worker" .pool.name }}{{ end -}}
labels:
  {{- include "specgate.selectorLabels" (dict "root" .root "component" $component) | nindent 2 }}
  specgate.dev/pool: {{ .pool.name }}
  specgate.dev/speculative: {{ .pool.speculative | quote }}
  {{- with .k8s.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .k8s.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
