{{- /*
runplane.webhookConfig is runplane-webhook's configuration file (webhook/config, WebhookConfiguration):
only what the chart decides; every other key keeps the binary's default (mirror_test.go decodes it with
the webhook's own decoder and compares it with config.New()).
*/}}
{{- define "runplane.webhookConfig" -}}
apiVersion: runplane.io/v1alpha1
kind: WebhookConfiguration
namespace: {{ .Release.Namespace }}
addr: ":{{ .Values.webhook.port }}"
healthAddr: ":{{ .Values.webhook.healthPort }}"
injection:
  image: {{ include "runplane.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  pauseImage: {{ .Values.webhook.pauseImage | quote }}
  natsURL: {{ include "runplane.natsURL" . | quote }}
  # Worker sidecars verify NATS's certificate against this name and the CA bundle of the ConfigMap
  # runplane-nats-ca, which the webhook follows.
  natsServerName: {{ include "runplane.natsServerName" . | quote }}
  subjectPrefix: {{ .Values.nats.subjectPrefix }}
  streamName: {{ .Values.nats.streamName }}
  # Stock placeholders only in the platform's stock namespace.
  stockNamespaces: [{{ .Values.stock.namespace | quote }}]
  {{- with include "runplane.draStockNamespaces" . }}
  # Tenant namespaces holding DRA specs' stock (stock.pools[].namespaces): placeholders of DRA specs
  # only there (their claims go to GPU Pods of the same namespace).
  draStockNamespaces: [{{ range $i, $n := splitList "," . }}{{ if $i }}, {{ end }}{{ $n | quote }}{{ end }}]
  {{- end }}
  # The tiers GPU Pods may name besides runplane-workload.
  workloadPriorityClasses: [{{ range $i, $t := .Values.priorityClasses.tiers }}{{ if $i }}, {{ end }}{{ $t.name | quote }}{{ end }}]
  {{- with .Values.webhook.sidecarResources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
tls:
  {{- if .Values.certManager.enabled }}
  certManager: true
  certDir: /var/run/runplane/webhook-tls
  {{- else }}
  secretName: {{ include "runplane.webhookSecretName" . }}
  dnsNames:
    - {{ include "runplane.webhookServiceName" . }}.{{ .Release.Namespace }}.svc
    - {{ include "runplane.webhookServiceName" . }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}
  {{- end }}
service:
  name: {{ include "runplane.webhookServiceName" . }}
webhooks:
  name: runplane-webhook
# A Pod may not name, by resourceClaimName, a claim of these DeviceClasses (nor of a DRA spec's):
# the set of the policies runplane-gpu and runplane-gpu-claims.
gpuDeviceClasses: {{ include "runplane.gpuDeviceClasses" . }}
{{- end -}}
