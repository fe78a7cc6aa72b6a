{{- /*
runplane.controllerConfig is runplane-controller's configuration file (controllers/config,
ControllerConfiguration): only what the chart decides; every other key keeps the binary's default
(mirror_test.go decodes it with the controller's own decoder and compares it with config.New()).
The controller copies no Secret: it has no Secret access.
*/}}
{{- define "runplane.controllerConfig" -}}
{{- $nats := include "runplane.natsEndpoint" . | fromYaml -}}
{{- $e := .Values.egress -}}
apiVersion: runplane.io/v1alpha1
kind: ControllerConfiguration
namespace: {{ .Release.Namespace }}
image: {{ include "runplane.image" . | quote }}
clusterDomain: {{ .Values.clusterDomain }}
{{- with .Values.controller.accessorAllowedNamespaces }}
accessorAllowedNamespaces: {{ . | quote }}
{{- end }}
metrics:
  {{- include "runplane.metricsSettings" (dict "ctx" . "component" "controller" "service" "runplane-controller-metrics" "port" .Values.controller.metricsPort) | nindent 2 }}
healthAddr: ":{{ .Values.controller.healthPort }}"
leaderElection:
  leaderElect: true
# What restricts runplane.io/egress Pods (controllers/egress; the chart README's "Egress of pool Pods").
egress:
  enforcement: {{ $e.enforcement }}
  priority: {{ $e.priority }}
  nats:
    {{- toYaml $nats | nindent 4 }}
  dns:
    namespace: {{ $e.dns.namespace }}
    podLabels:
      {{- toYaml $e.dns.podLabels | nindent 6 }}
    ports: {{ toJson $e.dns.ports }}
  {{- with include "runplane.egressExtraCIDRs" . | fromJsonArray }}
  deniedCIDRs: {{ toJson . }}
  {{- end }}
{{- end -}}
