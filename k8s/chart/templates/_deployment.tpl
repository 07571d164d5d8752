{{/*
One of Sandgate's three Deployments. Parameters (a dict):
  ctx         the root context
  component   edge | runtime-api | model-gw (also the subcommand, the ServiceAccount and
              the container's name)
  env         the name of the template with the container's environment
  replicas    the count, or nil when an autoscaler owns it
  ports       list of {name, port}
  probe       the `sandgate health-check` arguments
  metricsPort the port Prometheus scrapes
  token       whether its pods get a Kubernetes API token
  grace       terminationGracePeriodSeconds
  resources   requests and limits
  extra       the name of a template with more container fields (envFrom, lifecycle), or ""
  configMap   {name, mountPath} of a mounted ConfigMap, or nil
*/}}
{{- define "sandgate.deployment" -}}
{{- $ := .ctx -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  {{- include "sandgate.metadata" (dict "ctx" $ "name" .component "component" .component) | nindent 2 }}
spec:
  {{- if not (kindIs "invalid" .replicas) }}
  replicas: {{ .replicas }}
  {{- end }}
  revisionHistoryLimit: 5
  selector:
    matchLabels:
      {{- include "sandgate.selector" .component | nindent 6 }}
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxUnavailable: 0
      maxSurge: 1
  template:
    metadata:
      labels:
        {{- include "sandgate.labels" $ | nindent 8 }}
        {{- include "sandgate.selector" .component | nindent 8 }}
      annotations:
        prometheus.io/scrape: "true"
        prometheus.io/port: {{ .metricsPort | quote }}
        prometheus.io/path: /metrics
    spec:
      serviceAccountName: {{ .component }}
      automountServiceAccountToken: {{ .token }}
      enableServiceLinks: false
      terminationGracePeriodSeconds: {{ .grace }}
      securityContext:
        {{- include "sandgate.podSecurityContext" $ | nindent 8 }}
      {{- if $.Values.sandgate.topologySpread }}
      topologySpreadConstraints:
        {{- range $key := list "kubernetes.io/hostname" "topology.kubernetes.io/zone" }}
        - maxSkew: 1
          topologyKey: {{ $key }}
          whenUnsatisfiable: ScheduleAnyway
          labelSelector:
            matchLabels:
              app.kubernetes.io/name: sandgate
          matchLabelKeys: [app.kubernetes.io/component, pod-template-hash]
        {{- end }}
      {{- end }}
      containers:
        - name: {{ .component }}
          image: {{ include "sandgate.image" $ }}
          imagePullPolicy: {{ $.Values.sandgate.image.pullPolicy }}
          args: [{{ .component | quote }}]
          {{- with .extra }}
          {{- include . $ | nindent 10 }}
          {{- end }}
          env:
            {{- include .env $ | nindent 12 }}
          ports:
            {{- range .ports }}
            - name: {{ .name }}
              containerPort: {{ .port }}
              protocol: TCP
            {{- end }}
          {{- $probe := concat (list "/sandgate" "health-check") .probe }}
          startupProbe:
            exec:
              command: {{ toJson $probe }}
            periodSeconds: 2
            timeoutSeconds: 5
            failureThreshold: 30
          readinessProbe:
            exec:
              command: {{ toJson $probe }}
            periodSeconds: 10
            timeoutSeconds: 5
            failureThreshold: 2
          # Unhealthy while the store is unreachable; restarting would not bring it back,
          # so liveness is patient (2 minutes) and readiness does the quick work.
          livenessProbe:
            exec:
              command: {{ toJson $probe }}
            periodSeconds: 20
            timeoutSeconds: 5
            failureThreshold: 6
          resources:
            {{- toYaml .resources | nindent 12 }}
          securityContext:
            {{- include "sandgate.containerSecurityContext" $ | nindent 12 }}
          volumeMounts:
            {{- with .configMap }}
            - name: {{ .name }}
              mountPath: {{ .mountPath }}
              readOnly: true
            {{- end }}
            - name: tmp
              mountPath: /tmp
      volumes:
        {{- with .configMap }}
        # Mounted as a directory (no subPath), so an edited ConfigMap reaches the running
        # pods and is re-read without a restart.
        - name: {{ .name }}
          configMap:
            name: {{ .name }}
        {{- end }}
        - name: tmp
          emptyDir:
            sizeLimit: 64Mi
---
apiVersion: v1
kind: Service
metadata:
  {{- include "sandgate.metadata" (dict "ctx" $ "name" .component "component" .component) | nindent 2 }}
spec:
  type: ClusterIP
  selector:
    {{- include "sandgate.selector" .component | nindent 4 }}
  ports:
    {{- range .ports }}
    - name: {{ .name }}
      port: {{ .port }}
      targetPort: {{ .name }}
      protocol: TCP
      {{- if eq .name "grpc" }}
      appProtocol: kubernetes.io/h2c
      {{- end }}
    {{- end }}
{{- end }}
