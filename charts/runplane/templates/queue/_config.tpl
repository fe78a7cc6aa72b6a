{{- /*
runplane.queueConfig is runplane-queue's configuration file (queue/config, QueueConfiguration): only
what the chart decides; every other key keeps the binary's default (mirror_test.go decodes it with
the queue's own decoder and compares it with config.New()).
*/}}
{{- define "runplane.queueConfig" -}}
{{- $q := .Values.queue -}}
apiVersion: runplane.io/v1alpha1
kind: QueueConfiguration
namespace: {{ .Release.Namespace }}
listen: ":{{ $q.port }}"
leaderElection:
  # The activator spread over the replicas (queue/README.md "Sharded activator").
  shards: {{ $q.activatorShards }}
metrics:
  {{- include "runplane.metricsSettings" (dict "ctx" . "component" "queue" "service" "runplane-queue-metrics" "port" $q.metricsPort) | nindent 2 }}
{{- with .Values.tracing.otlpEndpoint }}
tracing:
  otlpEndpoint: {{ . | quote }}
  sampleRatio: {{ $.Values.tracing.sampleRatio }}
{{- end }}
nats:
  url: {{ include "runplane.natsURL" . | quote }}
  # Every NATS connection TLS first, the server's certificate verified against the CA and this name.
  serverName: {{ include "runplane.natsServerName" . | quote }}
  servers: {{ ternary .Values.nats.bundled.replicas .Values.metrics.prometheusRule.natsServers (eq .Values.nats.mode "bundled") | int }}
  {{- if eq .Values.nats.mode "external" }}
  # The external NATS's CA bundle (nats.external.tls.caBundle), re-read on every reconnect.
  caFile: /etc/runplane/nats-ca/ca.crt
  {{- end }}
  # The NATS trust Secret (and the route password of a bundled cluster): used when it exists, else
  # created here at start, so the chart renders no key material. An external NATS includes the
  # Secret's trust.conf too (chart README).
  bootstrap:
    trustSecret: {{ .Values.nats.auth.trustSecret }}
    # Where nats-server keeps account JWTs (written into trust.conf): the bundled NATS's data PVC
    # (nats.yaml); an external NATS may change it in its copy.
    resolverDir: /data/jwt
    dir: /var/run/runplane/bootstrap
    {{- if and (eq .Values.nats.mode "bundled") (gt (int .Values.nats.bundled.replicas) 1) }}
    routeSecret: {{ .Values.nats.bundled.routeSecret }}
    {{- end }}
    {{- if eq .Values.nats.mode "bundled" }}
    # The bundled NATS's CA and certificate: created here at start, renewed while the queue runs,
    # the servers asked to reload it; the CA bundle published in the ConfigMap runplane-nats-ca for
    # the webhook.
    tlsSecret: {{ .Values.nats.bundled.tlsSecret }}
    tlsDNSNames:
      {{- range splitList "," (include "runplane.natsTLSNames" .) }}
      - {{ . | quote }}
      {{- end }}
    {{- end }}
stream:
  subjectPrefix: {{ .Values.nats.subjectPrefix }}
  name: {{ .Values.nats.streamName }}
  replicas: {{ include "runplane.streamReplicas" . }}
  maxAge: {{ $q.stream.maxAge }}
  duplicateWindow: {{ $q.stream.duplicateWindow }}
  maxBytes: {{ int64 $q.stream.maxBytes }}
  recordTTL: {{ $q.recordTTL }}
  recordsMaxBytes: {{ int64 $q.recordsMaxBytes }}
  resultsMaxBytes: {{ int64 $q.resultsMaxBytes }}
  resultMaxSize: {{ int64 .Values.nats.maxPayload }}
  objectsMaxBytes: {{ int64 $q.payloads.bucketMaxBytes }}
  chunksMaxAge: {{ $q.stream.chunks.maxAge }}
  chunksMaxBytes: {{ int64 $q.stream.chunks.maxBytes }}
  chunksPerInvocation: {{ int64 $q.stream.chunks.maxPerInvocation }}
maxPayloadBytes: {{ int64 $q.payloads.maxBytes }}
limits:
  {{- range $k, $v := $q.limits }}
  {{ $k }}: {{ int64 $v }}
  {{- end }}
workers:
  silentHold: {{ $q.silentWorkerHold }}
{{- if $q.callbacks.enabled }}
callbacks:
  signingSecret: {{ $q.callbacks.signingSecret }}
  keyDir: /var/run/runplane/callbacks
  maxAttempts: {{ $q.callbacks.maxAttempts }}
  workers: {{ $q.callbacks.workers }}
  namespaceWorkers: {{ $q.callbacks.namespaceWorkers }}
  {{- with $q.callbacks.allowCIDRs }}
  allowCIDRs: {{ toJson . }}
  {{- end }}
  {{- with $q.callbacks.denyCIDRs }}
  denyCIDRs: {{ toJson . }}
  {{- end }}
{{- end }}
{{- end -}}
