{{/*
Names are fixed (runplane-*), not derived from the release name: the components find each other
and their shared objects (runplane-gpu-specs, runplane-nats, the runplane-scheduler
profile, the PriorityClasses) by these names, and the cluster-scoped objects allow one runplane
per cluster anyway.
*/}}

{{- define "runplane.labels" -}}
app.kubernetes.io/name: runplane
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: runplane
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* runplane.componentLabels: labels of a component's objects. Call with (dict "ctx" $ "component" "webhook"). */}}
{{- define "runplane.componentLabels" -}}
{{ include "runplane.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* runplane.selectorLabels: the immutable selector of a component's Pods. */}}
{{- define "runplane.selectorLabels" -}}
app.kubernetes.io/name: runplane
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* runplane.image: the one image that holds every runplane binary. */}}
{{- define "runplane.image" -}}
{{ include "runplane.imageRef" (dict "image" .Values.image "defaultTag" .Chart.AppVersion) }}
{{- end -}}

{{/* runplane.imageRef: repository:tag@digest of an image value (dict "image" "defaultTag"); the tag stays for readers, the digest decides what runs. */}}
{{- define "runplane.imageRef" -}}
{{ .image.repository }}:{{ .image.tag | default .defaultTag }}{{ with .image.digest }}@{{ . }}{{ end }}
{{- end -}}

{{- define "runplane.podSecurityContext" -}}
{{ toYaml .Values.podSecurityContext }}
{{- end -}}

{{- define "runplane.securityContext" -}}
{{ toYaml .Values.securityContext }}
{{- end -}}

{{/* runplane.podCommon: pull secrets and scheduling knobs of a component. Call with (dict "ctx" $ "values" .Values.webhook "component" "webhook").
Without topologySpreadConstraints of its own, a component's replicas spread over nodes and zones as
far as the cluster allows (ScheduleAnyway: one node still runs them all), so a node loss never takes
every replica. */}}
{{- define "runplane.podCommon" -}}
{{- with .ctx.Values.imagePullSecrets }}
imagePullSecrets:
{{ toYaml . }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector:
{{ toYaml . | indent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
{{ toYaml . }}
{{- end }}
{{- with .values.affinity }}
affinity:
{{ toYaml . | indent 2 }}
{{- end }}
{{- if .values.topologySpreadConstraints }}
topologySpreadConstraints:
{{ toYaml .values.topologySpreadConstraints }}
{{- else }}
topologySpreadConstraints:
{{- range $key := list "kubernetes.io/hostname" "topology.kubernetes.io/zone" }}
  - maxSkew: 1
    topologyKey: {{ $key }}
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "runplane.selectorLabels" (dict "ctx" $.ctx "component" $.component) | nindent 8 }}
{{- end }}
{{- end }}
{{- with .ctx.Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}

{{/* runplane.extenderTLSHosts: names and addresses of the extender's serving certificate, comma-separated. */}}
{{- define "runplane.extenderTLSHosts" -}}
localhost,127.0.0.1,runplane-extender.{{ .Release.Namespace }}.svc,runplane-extender.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}
{{- end -}}

{{/* runplane.metricsSecretName: the Secret of a component's /metrics CA and certificate (dict "component"), which the component keeps (internal/pki) and its ServiceMonitor verifies with. */}}
{{- define "runplane.metricsSecretName" -}}runplane-{{ .component }}-metrics-tls{{- end -}}

{{/* runplane.metricsSettings: the metrics section of a component's configuration file (internal/metricsauth.Settings): /metrics on port, with a certificate of its own Secret's CA for its metrics Service (dict "ctx" "component" "service" "port"). */}}
{{- define "runplane.metricsSettings" -}}
bindAddress: ":{{ .port }}"
tlsSecret: {{ .ctx.Release.Namespace }}/{{ include "runplane.metricsSecretName" . }}
tlsHosts:
  - {{ .service }}.{{ .ctx.Release.Namespace }}.svc
  - {{ .service }}.{{ .ctx.Release.Namespace }}.svc.{{ .ctx.Values.clusterDomain }}
{{- end -}}

{{/* runplane.metricsTLSRules: the RBAC rules a component needs to keep its /metrics Secret (dict "component"). */}}
{{- define "runplane.metricsTLSRules" -}}
# The CA and certificate of /metrics, created at start when missing and renewed; create cannot be
# limited by name, reading and updating can.
- apiGroups: [""]
  resources: [secrets]
  verbs: [create]
- apiGroups: [""]
  resources: [secrets]
  resourceNames: [{{ include "runplane.metricsSecretName" . }}]
  verbs: [get, update]
{{- end -}}

{{- define "runplane.webhookServiceName" -}}runplane-webhook{{- end -}}
{{- define "runplane.webhookSecretName" -}}runplane-webhook-tls{{- end -}}

{{/* runplane.natsURL: the URL every component (and every worker sidecar, in any namespace) dials. */}}
{{- define "runplane.natsURL" -}}
{{- if eq .Values.nats.mode "external" -}}
{{ required "nats.external.url is required when nats.mode is external" .Values.nats.external.url }}
{{- else -}}
nats://runplane-nats.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}:4222
{{- end -}}
{{- end -}}

{{/* runplane.natsServerName: the name NATS's certificate carries, which every client (the queue, each worker sidecar) verifies over TLS, whatever host the URL names. */}}
{{- define "runplane.natsServerName" -}}
{{- if eq .Values.nats.mode "external" -}}
{{ required "nats.external.tls.serverName is required when nats.mode is external (the name the external NATS's certificate carries)" .Values.nats.external.tls.serverName }}
{{- else -}}
runplane-nats.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}
{{- end -}}
{{- end -}}

{{/* runplane.natsTLSNames: what the bundled NATS's certificate covers: the Service's names, and each server's per-Pod name, which the routes dial. */}}
{{- define "runplane.natsTLSNames" -}}
{{- $ns := .Release.Namespace -}}
runplane-nats,runplane-nats.{{ $ns }},runplane-nats.{{ $ns }}.svc,runplane-nats.{{ $ns }}.svc.{{ .Values.clusterDomain }},*.runplane-nats-headless.{{ $ns }}.svc,*.runplane-nats-headless.{{ $ns }}.svc.{{ .Values.clusterDomain }}
{{- end -}}

{{/* runplane.namespaceSelector: the webhook never sees kube-system or runplane's own namespace, so runplane can always start and repair itself. Sorted, as webhook.Configurations builds it. */}}
{{- define "runplane.namespaceSelector" -}}
{{- $excluded := concat (list "kube-system" .Release.Namespace) .Values.webhook.excludeNamespaces | uniq | sortAlpha -}}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values:
{{- range $excluded }}
        - {{ . }}
{{- end }}
{{- end -}}

{{/* runplane.natsEndpoint: the NATS Pods restricted egress may reach, as YAML {namespace, podLabels, port, cidrs}: cidrs (checked: a render fails naming a bad one) are an external NATS's addresses outside the cluster's Pods. */}}
{{- define "runplane.natsEndpoint" -}}
{{- if eq .Values.nats.mode "bundled" -}}
namespace: {{ .Release.Namespace }}
podLabels:
  app.kubernetes.io/component: nats
  app.kubernetes.io/instance: {{ .Release.Name }}
  app.kubernetes.io/name: runplane
port: 4222
{{- else -}}
{{- $e := .Values.nats.external.egress -}}
namespace: {{ required "nats.external.egress.namespace is required when nats.mode is external (the namespace of the NATS Pods restricted egress may reach)" $e.namespace }}
podLabels:
  {{- required "nats.external.egress.podLabels is required when nats.mode is external" $e.podLabels | toYaml | nindent 2 }}
port: {{ $e.port }}
cidrs:
{{- range $i, $c := $e.cidrs }}
{{- if not (include "runplane.isCIDR" $c) }}
{{- fail (printf "nats.external.egress.cidrs[%d]: %q is not a CIDR (an IPv4 or IPv6 range such as 192.168.10.5/32 or fd00:1::/64)" $i $c) }}
{{- end }}
  - {{ $c | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* runplane.egressDeniedRanges: the ranges pool Pods never reach (controllers/egress DeniedIPv4, DeniedIPv6), as JSON. */}}
{{- define "runplane.egressDeniedRanges" -}}
["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "127.0.0.0/8", "0.0.0.0/8", "192.0.0.0/24", "198.18.0.0/15", "192.88.99.0/24", "224.0.0.0/4", "240.0.0.0/4",
 "fc00::/7", "fe80::/10", "fec0::/10", "::1/128", "::/128", "64:ff9b::/96", "64:ff9b:1::/48", "2002::/16", "2001::/32", "ff00::/8"]
{{- end -}}

{{/* runplane.egressExtraCIDRs: egress.deniedCIDRs, each checked (a render fails naming a bad one), without the built-in ranges and duplicates, as JSON. */}}
{{- define "runplane.egressExtraCIDRs" -}}
{{- $builtin := include "runplane.egressDeniedRanges" . | fromJsonArray -}}
{{- $out := list -}}
{{- range $i, $c := .Values.egress.deniedCIDRs -}}
{{- if not (include "runplane.isCIDR" $c) -}}
{{- fail (printf "egress.deniedCIDRs[%d]: %q is not a CIDR (an IPv4 or IPv6 range such as 203.0.113.0/24 or 2001:db8::/32)" $i $c) -}}
{{- end -}}
{{- if not (or (has $c $builtin) (has $c $out)) -}}
{{- $out = append $out $c -}}
{{- end -}}
{{- end -}}
{{- $out | toJson -}}
{{- end -}}

{{/* runplane.isCIDR: "true" when the string is an IPv4 CIDR (dotted quad) or an IPv6 CIDR (hex groups, at most one ::), else "". Templates have no address parser; the controller parses the same flags with net/netip. */}}
{{- define "runplane.isCIDR" -}}
{{- $octet := "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])" -}}
{{- if regexMatch (printf "^(%s\\.){3}%s/(3[0-2]|[12]?[0-9])$" $octet $octet) . -}}
true
{{- else if and (regexMatch "^[0-9a-fA-F:]+/(12[0-8]|1[01][0-9]|[1-9]?[0-9])$" .) (not (contains ":::" .)) -}}
{{- $addr := index (splitList "/" .) 0 -}}
{{- $halves := splitList "::" $addr -}}
{{- $groups := list -}}
{{- range $halves }}{{ if . }}{{ $groups = concat $groups (splitList ":" .) }}{{ end }}{{ end -}}
{{- $ok := true -}}
{{- range $groups }}{{ if not (regexMatch "^[0-9a-fA-F]{1,4}$" .) }}{{ $ok = false }}{{ end }}{{ end -}}
{{- if and $ok (eq (len $halves) 1) (eq (len $groups) 8) }}true{{ else if and $ok (eq (len $halves) 2) (le (len $groups) 7) }}true{{ end -}}
{{- end -}}
{{- end -}}

{{/* runplane.celList: a list of strings as a CEL list literal, as webhook.Policies writes it (hack/admgen checks). */}}
{{- define "runplane.celList" -}}
{{- $quoted := list -}}
{{- range . }}{{ $quoted = append $quoted (printf "'%s'" (. | replace "\\" "\\\\" | replace "'" "\\'")) }}{{ end -}}
[{{ join ", " $quoted }}]
{{- end -}}

{{/* runplane.workloadTiers: the PriorityClasses GPU Pods may name besides runplane-workload, as a sorted JSON list (policy runplane-gpu, hack/admgen). */}}
{{- define "runplane.workloadTiers" -}}
{{- $tiers := list -}}
{{- range .Values.priorityClasses.tiers }}{{ $tiers = append $tiers .name }}{{ end -}}
{{- without ($tiers | uniq | sortAlpha) "runplane-workload" | toJson -}}
{{- end }}

{{/* runplane.gpuResources: admissionPolicies.gpu.resources and every catalog spec's gpuResource, as a sorted JSON list (policy runplane-gpu, hack/admgen). */}}
{{- define "runplane.gpuResources" -}}
{{- $resources := .Values.admissionPolicies.gpu.resources -}}
{{- range $name, $spec := .Values.catalog.specs }}{{ $resources = append $resources (default "nvidia.com/gpu" $spec.gpuResource) }}{{ end -}}
{{- $resources | uniq | sortAlpha | toJson -}}
{{- end }}

{{/* runplane.gpuDeviceClasses: admissionPolicies.gpu.deviceClasses and every DRA catalog spec's dra.deviceClassName (default gpu.nvidia.com, mig.nvidia.com with migProfile, as catalog/dra.go), as a sorted JSON list (policies runplane-gpu and runplane-gpu-claims, hack/admgen). */}}
{{- define "runplane.gpuDeviceClasses" -}}
{{- $classes := .Values.admissionPolicies.gpu.deviceClasses -}}
{{- range $name, $spec := .Values.catalog.specs }}{{ with $spec.dra }}{{ $classes = append $classes (default (ternary "mig.nvidia.com" "gpu.nvidia.com" (not (empty .migProfile))) .deviceClassName) }}{{ end }}{{ end -}}
{{- $classes | uniq | sortAlpha | toJson -}}
{{- end }}

{{/* runplane.platformNamespaces: the namespaces that are the platform's, never a tenant's, comma-separated and sorted: kube-system, the release namespace, the stock namespace and, with an external NATS, its namespace. runplane's components scale, create, change and delete nothing there (templates/rbac/policies.yaml); the chart installs what is there. */}}
{{- define "runplane.platformNamespaces" -}}
{{- $ns := list "kube-system" .Release.Namespace .Values.stock.namespace -}}
{{- if and (eq .Values.nats.mode "external") .Values.nats.external.egress.namespace -}}
{{- $ns = append $ns .Values.nats.external.egress.namespace -}}
{{- end -}}
{{- $ns | uniq | sortAlpha | join "," -}}
{{- end -}}

{{/* runplane.draStockNamespaces: the tenant namespaces of DRA specs' stock pools (stock.pools[].namespaces), comma-separated and sorted; empty when none. The webhook admits placeholders of DRA specs there (injection.draStockNamespaces). */}}
{{- define "runplane.draStockNamespaces" -}}
{{- $ns := list -}}
{{- range .Values.stock.pools }}{{ range .namespaces }}{{ $ns = append $ns . }}{{ end }}{{ end -}}
{{- $ns | uniq | sortAlpha | join "," -}}
{{- end -}}

{{/* runplane.stockNamespaces: where the chart's placeholders live, comma-separated and sorted: stock.namespace and runplane.draStockNamespaces. */}}
{{- define "runplane.stockNamespaces" -}}
{{- $ns := list .Values.stock.namespace -}}
{{- with include "runplane.draStockNamespaces" . }}{{ $ns = concat $ns (splitList "," .) }}{{ end -}}
{{- $ns | uniq | sortAlpha | join "," -}}
{{- end -}}

{{- /* The extender's managed resources, comma-separated: scheduler.extender.gpuResource, then
scheduler.extender.managedResources (the scheduler config lists the same). */}}
{{- define "runplane.managedResources" -}}
{{- $e := .Values.scheduler.extender -}}
{{- $list := list $e.gpuResource -}}
{{- range $e.managedResources }}{{ if ne . $e.gpuResource }}{{ $list = append $list . }}{{ end }}{{ end -}}
{{- join "," $list -}}
{{- end -}}

{{/* runplane.quantityBytes: a Kubernetes quantity (64Mi, 10G, 1e9, 2) as a number of bytes (checks only: float precision). */}}
{{- define "runplane.quantityBytes" -}}
{{- $q := toString . -}}
{{- $num := regexFind "^[+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)" $q -}}
{{- $suffix := trimPrefix $num $q -}}
{{- $n := trimPrefix "+" $num | float64 -}}
{{- $mult := dict "" 1.0 "m" 0.001 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- if hasKey $mult $suffix -}}
{{- $n = mulf $n (get $mult $suffix) -}}
{{- else -}}{{/* an exponent: e3, E+6, e-2 */}}
{{- $e := regexReplaceAll "^[eE][+]?" $suffix "" | int -}}
{{- range until (max $e (mul -1 $e) | int) }}{{ $n = ternary (mulf $n 10.0) (divf $n 10.0) (ge $e 0) }}{{ end -}}
{{- end -}}
{{- printf "%f" $n -}}
{{- end -}}
