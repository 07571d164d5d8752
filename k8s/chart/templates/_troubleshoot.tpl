{{/*
What the troubleshoot.sh specs (troubleshoot-preflight.yaml, troubleshoot-support-bundle.yaml)
share: the secrets of spec 2.8 the install reads, by namespace, name and key.
*/}}

{{/* The secrets the services read, as a YAML list of {namespace, name, key}; a secret
read whole (envFrom) has no key. The same names and keys as the workloads' references
(tests/e2e/k8s_policy/troubleshoot.rs checks they agree). */}}
{{- define "sandgate.troubleshoot.secrets" -}}
{{- $ns := include "sandgate.ns" . -}}
- {namespace: {{ $ns | quote }}, name: cache, key: redis-password}
- {namespace: {{ $ns | quote }}, name: admin-password, key: admin-password}
- {namespace: {{ $ns | quote }}, name: jwt-secret, key: jwt-secret}
- {namespace: {{ $ns | quote }}, name: default-api-key, key: default-api-key}
- {namespace: {{ $ns | quote }}, name: sandbox-api-key, key: sandbox-api-key}
{{- if index .Values "gateway-helm" "enabled" }}
- {namespace: {{ $ns | quote }}, name: gateway-master-key, key: master-key}
- {namespace: {{ $ns | quote }}, name: gateway-api-key, key: gateway-api-key}
- {namespace: {{ $ns | quote }}, name: gateway-env-secrets}
{{- end }}
{{- if .Values.tls.enabled }}
- {namespace: {{ $ns | quote }}, name: {{ .Values.sandgate.tlsSecretName | quote }}, key: tls.crt}
- {namespace: {{ include "sandgate.sandboxNamespace" . | quote }}, name: {{ .Values.sandgate.tlsSecretName | quote }}, key: tls.crt}
{{- end }}
{{- end }}
