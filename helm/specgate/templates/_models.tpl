{{/*
The release's models, each with its own limits, routing and pools. Pass (dict "root" $ "out"
$out); the list lands in $out.models (the include's text is empty), each entry a dict:
  model    the model block the router reads (name, tokenizer, aliases, multimodal);
  limits   models[].limits merged over the top-level limits, key by key;
  routing  models[].routing merged over the top-level routing, key by key;
  pools    the model's pools (poolDefaults apply to each one's k8s block as usual);
  multi    false for the one-model layout (model + pools, models empty), whose blocks are the
           top-level ones unchanged, true for a models list;
  where    the prefix of the chart's messages about that model ("" for one model).
Refused: model (or pools) next to models, neither of them, a model name or alias used twice,
a pool name used twice (pool names name the pools' Deployments, Services and metric labels,
so they are unique across the release).
*/}}
{{- define "specgate.models" -}}
{{- $v := .root.Values -}}
{{- $list := list -}}
{{- if $v.models }}
{{- if $v.model }}
{{- fail "model and models are both set: a release serves one model (model, limits, routing, pools) or several (models, each with its own limits, routing and pools); with models set model: null and pools: null, which the chart's defaults set" }}
{{- end }}
{{- if $v.pools }}
{{- fail "pools and models are both set: with models, each model lists its own pools (models[].pools); set pools: null, which the chart's defaults set" }}
{{- end }}
{{- $served := dict }}
{{- $owner := dict }}
{{- range $entry := $v.models }}
{{- range $name := prepend (default (list) $entry.aliases) $entry.name }}
{{- if hasKey $served $name }}
{{- if eq (get $served $name) $entry.name }}
{{- fail (printf "models: the name %q is given twice: model names and aliases are unique across models" $name) }}
{{- end }}
{{- fail (printf "models: the name %q is served by model %q and by model %q: model names and aliases are unique across models" $name (get $served $name) $entry.name) }}
{{- end }}
{{- $_ := set $served $name $entry.name }}
{{- end }}
{{- range $pool := $entry.pools }}
{{- if hasKey $owner $pool.name }}
{{- if eq (get $owner $pool.name) $entry.name }}
{{- fail (printf "model %q: duplicate pool name %q" $entry.name $pool.name) }}
{{- end }}
{{- fail (printf "models: pool name %q is used by model %q and by model %q: pool names are unique across models (each names its pool's Deployment, Service and metric labels)" $pool.name (get $owner $pool.name) $entry.name) }}
{{- end }}
{{- $_ := set $owner $pool.name $entry.name }}
{{- end }}
{{- $limits := mergeOverwrite (deepCopy $v.limits) (deepCopy (default (dict) $entry.limits)) }}
{{- $routing := mergeOverwrite (deepCopy $v.routing) (deepCopy (default (dict) $entry.routing)) }}
{{- $model := omit $entry "limits" "routing" "pools" }}
{{- $list = append $list (dict "model" $model "limits" $limits "routing" $routing "pools" $entry.pools "multi" true "where" (printf "model %q: " $entry.name)) }}
{{- end }}
{{- else }}
{{- if not $v.model }}
{{- fail "no model: set model and pools (one model), or models (several models, each with its pools)" }}
{{- end }}
{{- if not $v.pools }}
{{- fail "pools is empty: list the model's pools in pools (or use models, each with its pools)" }}
{{- end }}
{{- $list = list (dict "model" $v.model "limits" $v.limits "routing" $v.routing "pools" $v.pools "multi" false "where" "") }}
{{- end }}
{{- $_ := set .out "models" $list }}
{{- end }}

{{/* Every pool of every model, as (dict "m" MODEL "pool" POOL) in values order, into .out.pools. */}}
{{- define "specgate.allPools" -}}
{{- $ms := dict }}
{{- $_ := include "specgate.models" (dict "root" .root "out" $ms) }}
{{- $all := list }}
{{- range $m := $ms.models }}
{{- range $pool := $m.pools }}
{{- $all = append $all (dict "m" $m "pool" $pool) }}
{{- end }}
{{- end }}
{{- $_ := set .out "pools" $all }}
{{- end }}
