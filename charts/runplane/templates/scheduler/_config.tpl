{{- /*
runplane.schedulerConfig mirrors profile.SchedulerConfig (extender/profile), which chart_test.go
compares it with: one profile, runplane-scheduler, whose in-tree resource plugins are off (the
extender is the resource-fit authority for GPU Pods, counting claimable same-spec placeholders as
free), every node scored, and the extender of the same Pod called over loopback HTTPS.
*/}}
{{- define "runplane.schedulerConfig" -}}
{{- $s := .Values.scheduler -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceLock: leases
  resourceName: runplane-scheduler
  resourceNamespace: {{ .Release.Namespace }}
percentageOfNodesToScore: {{ $s.percentageOfNodesToScore }}
profiles:
  - schedulerName: runplane-scheduler
    percentageOfNodesToScore: {{ $s.percentageOfNodesToScore }}
    plugins:
      preFilter:
        disabled:
          - name: NodeResourcesFit
      filter:
        disabled:
          - name: NodeResourcesFit
      preScore:
        disabled:
          - name: NodeResourcesFit
          - name: NodeResourcesBalancedAllocation
      score:
        disabled:
          - name: NodeResourcesFit
          - name: NodeResourcesBalancedAllocation
extenders:
  - urlPrefix: https://127.0.0.1:{{ $s.extender.port }}
    filterVerb: filter
    prioritizeVerb: prioritize
    bindVerb: bind
    weight: {{ $s.extender.weight }}
    enableHTTPS: true
    tlsConfig:
      caFile: /etc/runplane-extender/tls/ca.crt
    httpTimeout: {{ $s.extender.httpTimeout }}
    nodeCacheCapable: true
    {{- /* A DRA spec's Pods request no managed resource: with one in the catalog the extender is
    asked about every Pod of the profile (profile.Options.DRA), else about none of them, and they
    would bind with no resource fit at all (NodeResourcesFit is off). */}}
    {{- $dra := false }}
    {{- range .Values.catalog.specs }}{{ if hasKey . "dra" }}{{ $dra = true }}{{ end }}{{ end }}
    {{- if not $dra }}
    managedResources:
      - name: {{ $s.extender.gpuResource }}
        ignoredByScheduler: true
      {{- range $s.extender.managedResources }}
      {{- if ne . $s.extender.gpuResource }}
      - name: {{ . }}
        ignoredByScheduler: true
      {{- end }}
      {{- end }}
    {{- end }}
{{- end -}}
