{{/*
The render-time guards: what values.schema.json cannot say, each failing the render with
the key named. Included once, from NOTES.txt and every template that needs the checked
values (an `include` of it renders nothing).
*/}}

{{/* The runtime API host: runtime-api.ingress.host, else the host of sandbox.apiHostname. */}}
{{- define "sandgate.runtimeApiHost" -}}
{{- $rt := index .Values "runtime-api" -}}
{{- if $rt.ingress.host -}}
{{ $rt.ingress.host }}
{{- else if .Values.sandbox.apiHostname -}}
{{ (urlParse .Values.sandbox.apiHostname).host }}
{{- end }}
{{- end }}

{{- define "sandgate.validate" -}}
{{- $rt := index .Values "runtime-api" -}}
{{- $env := $rt.env -}}
{{- if and .Values.ingress.enabled (not .Values.ingress.host) -}}
{{- fail "ingress.host: required when ingress.enabled (the application host, e.g. app.sandgate.example.com)" -}}
{{- end -}}
{{- if and $rt.ingress.enabled (not (include "sandgate.runtimeApiHost" .)) -}}
{{- fail "runtime-api.ingress.host: required when runtime-api.ingress.enabled (or sandbox.apiHostname), e.g. runtime-api.sandgate.example.com" -}}
{{- end -}}
{{- with .Values.sandbox.apiHostname -}}
{{- $url := urlParse . -}}
{{- if or (not (has $url.scheme (list "http" "https"))) (not $url.host) -}}
{{- fail (printf "sandbox.apiHostname: %q is not an http(s) URL (the runtime API's, e.g. https://runtime-api.sandgate.example.com)" .) -}}
{{- end -}}
{{- if and $rt.ingress.host (ne $url.host $rt.ingress.host) -}}
{{- fail (printf "sandbox.apiHostname: %q names host %q, but runtime-api.ingress.host is %q" . $url.host $rt.ingress.host) -}}
{{- end -}}
{{- end -}}
{{- if not $env.RUNTIME_BASE_URL -}}
{{- fail "runtime-api.env.RUNTIME_BASE_URL: required (the sandbox host suffix, e.g. runtime.sandgate.example.com)" -}}
{{- end -}}
{{- if not $env.STORAGE_CLASS -}}
{{- fail "runtime-api.env.STORAGE_CLASS: required (a storage class of this cluster, `kubectl get storageclass`; a missing one leaves every sandbox pending)" -}}
{{- end -}}
{{- $ssl := not (has (toString $env.RUNTIME_DISABLE_SSL | lower) (list "true" "1" "yes")) -}}
{{- $want := printf "%s://{runtime_id}%s%s" (ternary "https" "http" $ssl) (toString $env.RUNTIME_URL_SEPARATOR) $env.RUNTIME_BASE_URL -}}
{{- if not .Values.env.RUNTIME_URL_PATTERN -}}
{{- fail (printf "env.RUNTIME_URL_PATTERN: required, %q with these values" $want) -}}
{{- end -}}
{{- if ne .Values.env.RUNTIME_URL_PATTERN $want -}}
{{- fail (printf "env.RUNTIME_URL_PATTERN: %q disagrees with runtime-api.env.RUNTIME_BASE_URL %q, RUNTIME_URL_SEPARATOR %q and RUNTIME_DISABLE_SSL %q: sandboxes would get %q" .Values.env.RUNTIME_URL_PATTERN $env.RUNTIME_BASE_URL (toString $env.RUNTIME_URL_SEPARATOR) (toString $env.RUNTIME_DISABLE_SSL) $want) -}}
{{- end -}}
{{- if and (not .Values.sandgate.redis.bundled) (not .Values.sandgate.redis.url) -}}
{{- fail "sandgate.redis.url: required unless sandgate.redis.bundled (the external Redis, e.g. rediss://:$(REDIS_PASSWORD)@redis.example.internal:6380/0)" -}}
{{- end -}}
{{- if and .Values.sandgate.redis.bundled .Values.sandgate.redis.url -}}
{{- fail "sandgate.redis.url: must be empty with sandgate.redis.bundled (the bundled Redis's URL is set by the chart)" -}}
{{- end -}}
{{- if and $rt.warmRuntimes.enabled (not $rt.warmRuntimes.configs) -}}
{{- fail "runtime-api.warmRuntimes.configs: empty while runtime-api.warmRuntimes.enabled (list the installer's configurations, v1_current first, or disable it)" -}}
{{- end -}}
{{- $names := list -}}
{{- range $i, $c := $rt.warmRuntimes.configs -}}
{{- if has $c.name $names -}}
{{- fail (printf "runtime-api.warmRuntimes.configs[%d].name: %q is listed twice" $i $c.name) -}}
{{- end -}}
{{- $names = append $names $c.name -}}
{{- end -}}
{{- if and (index .Values "gateway-helm" "enabled") (not (index .Values "gateway-helm" "proxy_config" "model_list")) -}}
{{- fail "gateway-helm.proxy_config.model_list: empty while gateway-helm.enabled (list the external gateway's models, spec 2.4)" -}}
{{- end -}}
{{- $edge := .Values.sandgate.edge -}}
{{- if .Values.sandgate.podDisruptionBudgets -}}
{{- range $name, $count := dict "sandgate.edge" (ternary $edge.autoscaling.minReplicas $edge.replicas $edge.autoscaling.enabled) "runtime-api.replicaCount" $rt.replicaCount "sandgate.modelGw" (ternary .Values.sandgate.modelGw.autoscaling.minReplicas .Values.sandgate.modelGw.replicas .Values.sandgate.modelGw.autoscaling.enabled) -}}
{{- if lt (int $count) 2 -}}
{{- fail (printf "sandgate.podDisruptionBudgets: needs 2 or more replicas, but %s gives %d (a budget of one pod would block every drain)" $name (int $count)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end }}
