{{/*
Names, labels and the pieces the services' Deployments share with the preflight Jobs:
each service's environment is written once here, so the preflight checks exactly what the
service will run with.
*/}}

{{- define "sandgate.ns" -}}{{ .Release.Namespace }}{{- end }}

{{- define "sandgate.sandboxNamespace" -}}{{ index .Values "runtime-api" "sandbox_namespace" }}{{- end }}

{{- define "sandgate.image" -}}
{{- $image := .Values.sandgate.image -}}
{{ $image.repository }}:{{ $image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The labels every object carries. */}}
{{- define "sandgate.labels" -}}
app.kubernetes.io/part-of: sandgate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Values.sandgate.image.tag | default .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* A component's selector labels: name and component, as the Services select. */}}
{{- define "sandgate.selector" -}}
app.kubernetes.io/name: sandgate
app.kubernetes.io/component: {{ . }}
{{- end }}

{{/* metadata of an object in the release's namespace: `dict "ctx" $ "name" N "component" C`. */}}
{{- define "sandgate.metadata" -}}
name: {{ .name }}
namespace: {{ .namespace | default (include "sandgate.ns" .ctx) }}
labels:
  {{- include "sandgate.labels" .ctx | nindent 2 }}
  {{- if .component }}
  {{- include "sandgate.selector" .component | nindent 2 }}
  {{- end }}
{{- end }}

{{/* The pod security context of every Sandgate pod (distroless `nonroot`). */}}
{{- define "sandgate.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The container security context of every Sandgate container. */}}
{{- define "sandgate.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
privileged: false
capabilities:
  drop: ["ALL"]
{{- end }}

{{/* The store's URL: the bundled Redis's, or sandgate.redis.url. */}}
{{- define "sandgate.redisUrl" -}}
{{- if .Values.sandgate.redis.bundled -}}
redis://:$(REDIS_PASSWORD)@redis:6379/0
{{- else -}}
{{ .Values.sandgate.redis.url }}
{{- end }}
{{- end }}

{{/* REDIS_PASSWORD then REDIS_URL, which expands it; with replicas' acknowledgements. */}}
{{- define "sandgate.env.store" -}}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: cache
      key: redis-password
- name: REDIS_URL
  value: {{ include "sandgate.redisUrl" . | quote }}
{{- with .Values.sandgate.redis.minReplicasAck }}
- name: REDIS_MIN_REPLICAS_ACK
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{/* The edge's settings. */}}
{{- define "sandgate.env.edge" -}}
- name: SANDGATE_LISTEN
  value: "0.0.0.0:8080"
- name: SANDGATE_RUNTIME_API_URL
  value: "http://runtime-api:50051"
{{- if index .Values "gateway-helm" "enabled" }}
- name: SANDGATE_MODEL_GW_URL
  value: "http://model-gw:50052"
{{- end }}
{{- if .Values.sandgate.edge.console }}
- name: SANDGATE_CONSOLE
  value: "true"
{{- end }}
- name: SANDGATE_LOG_FORMAT
  value: json
{{ include "sandgate.env.store" . }}
{{- end }}

{{/* runtime-api's settings: the spec's runtime-api.env, derived ones, and secrets. */}}
{{- define "sandgate.env.runtimeApi" -}}
{{- $rt := index .Values "runtime-api" -}}
{{- $env := $rt.env -}}
- name: SANDGATE_GRPC_LISTEN
  value: "0.0.0.0:50051"
- name: SANDGATE_METRICS_LISTEN
  value: "0.0.0.0:9090"
- name: SANDGATE_LOG_FORMAT
  value: json
{{ include "sandgate.env.store" . }}
- name: ADMIN_PASSWORD
  valueFrom:
    secretKeyRef:
      name: admin-password
      key: admin-password
- name: JWT_SECRET
  valueFrom:
    secretKeyRef:
      name: jwt-secret
      key: jwt-secret
- name: DEFAULT_API_KEY
  valueFrom:
    secretKeyRef:
      name: default-api-key
      key: default-api-key
- name: SANDGATE_WEBHOOK_API_KEYS
  valueFrom:
    secretKeyRef:
      name: sandbox-api-key
      key: sandbox-api-key
{{- if $rt.warmRuntimes.enabled }}
- name: WARM_RUNTIMES_FILE
  value: /etc/sandgate/warm-runtimes/warm-runtimes.json
{{- end }}
- name: SANDBOX_DRIVER
  value: kubernetes
- name: SANDBOX_NAMESPACE
  value: {{ include "sandgate.sandboxNamespace" . | quote }}
- name: EPHEMERAL_STORAGE_SIZE
  value: {{ .Values.sandgate.ephemeralStorageSize | quote }}
- name: SANDBOX_POD_SECURITY
  value: {{ .Values.sandgate.sandboxPodSecurity | quote }}
- name: RUNTIME_URL_PATTERN
  value: {{ .Values.env.RUNTIME_URL_PATTERN | quote }}
{{- with .Values.sandgate.sandboxIngressClass | default .Values.ingress.class }}
- name: SANDBOX_INGRESS_CLASS
  value: {{ . | quote }}
{{- end }}
{{- if .Values.tls.enabled }}
- name: SANDBOX_TLS_SECRET
  value: {{ .Values.sandgate.tlsSecretName | quote }}
{{- end }}
- name: RECONCILE_INTERVAL
  value: {{ .Values.sandgate.reconcileInterval | quote }}
- name: RUNTIME_DEAD_SECONDS
  value: {{ .Values.sandgate.runtimeDeadSeconds | quote }}
- name: RUNTIME_IDLE_SECONDS
  value: {{ .Values.sandgate.runtimeIdleSeconds | quote }}
{{- range $name := keys $env | sortAlpha }}
{{- $value := index $env $name }}
{{- if not (kindIs "invalid" $value) }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* model-gw's settings; its gateway keys come from gateway-api-key and gateway-env-secrets. */}}
{{- define "sandgate.env.modelGw" -}}
- name: SANDGATE_GRPC_LISTEN
  value: "0.0.0.0:50052"
- name: SANDGATE_METRICS_LISTEN
  value: "0.0.0.0:9090"
- name: SANDGATE_LOG_FORMAT
  value: json
{{ include "sandgate.env.store" . }}
{{- /* Its calls mark their sandboxes active at a fraction of this (idle pause). */}}
- name: RUNTIME_IDLE_SECONDS
  value: {{ .Values.sandgate.runtimeIdleSeconds | quote }}
- name: GATEWAY_CONFIG
  value: /etc/sandgate/gateway/gateway.yaml
- name: PROXY_MASTER_KEY
  valueFrom:
    secretKeyRef:
      name: gateway-master-key
      key: master-key
- name: GATEWAY_API_KEY
  valueFrom:
    secretKeyRef:
      name: gateway-api-key
      key: gateway-api-key
{{- end }}

{{/* The model list and settings model-gw reads (gateway.yaml). */}}
{{- define "sandgate.gatewayConfig" -}}
{{- $proxy := index .Values "gateway-helm" "proxy_config" -}}
# model-gw's configuration, from the values gateway-helm.proxy_config.
{{ toYaml $proxy }}
{{- end }}

{{/* The installer's warm runtime configurations (warm-runtimes.json). */}}
{{- define "sandgate.warmRuntimes" -}}
{{- $warm := index .Values "runtime-api" "warmRuntimes" -}}
{{ dict "count" $warm.count "configs" $warm.configs | toPrettyJson }}
{{- end }}
