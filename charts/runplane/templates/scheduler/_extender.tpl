{{- /*
runplane.extenderConfig is runplane-extender's configuration file (extender/config,
ExtenderConfiguration): only what the chart decides; every other key keeps the binary's default
(mirror_test.go decodes it with the extender's own decoder and compares it with config.New()).
*/}}
{{- define "runplane.extenderConfig" -}}
{{- $e := .Values.scheduler.extender -}}
apiVersion: runplane.io/v1alpha1
kind: ExtenderConfiguration
namespace: {{ .Release.Namespace }}
# filter, prioritize and bind over HTTPS on loopback: only this Pod's kube-scheduler can call them.
addr: "127.0.0.1:{{ $e.port }}"
# /metrics, /healthz and /readyz over HTTPS on every interface; /metrics serves a certificate of a
# CA kept in a Secret, which the ServiceMonitor verifies (the verbs keep their own, which only this
# Pod's kube-scheduler trusts).
metrics:
  {{- include "runplane.metricsSettings" (dict "ctx" . "component" "extender" "service" "runplane-extender" "port" $e.metricsPort) | nindent 2 }}
# The verbs' certificate: written for these hosts by the init container, or issued by cert-manager.
tls:
  certFile: /etc/runplane-extender/tls/tls.crt
  keyFile: /etc/runplane-extender/tls/tls.key
  hosts: {{ include "runplane.extenderTLSHosts" . | splitList "," | toJson }}
# Bind only while this Pod's kube-scheduler holds the scheduler Lease, so the active scheduler always
# calls an extender that binds.
leaderElection:
  leaderElect: false
  followLease: {{ .Release.Namespace }}/runplane-scheduler
# The resources the scheduler config lists as managedResources: the extender checks the catalog
# against them.
managedResources: {{ include "runplane.managedResources" . | splitList "," | toJson }}
# Reservation Pods (preemption) run the webhook's pause image.
reservationImage: {{ .Values.webhook.pauseImage | quote }}
{{- if .Values.stock.pools }}
stock:
  namespace: {{ .Values.stock.namespace }}
{{- end }}
{{- end -}}
