{{/* runplane.natsConfig: the bundled NATS server configuration. */}}
{{- define "runplane.natsConfig" -}}
server_name: $POD_NAME
pid_file: /var/run/nats/nats.pid
listen: 0.0.0.0:4222
http: 0.0.0.0:8222
lame_duck_duration: 30s
lame_duck_grace_period: 10s
# The queue's --result-max-size is the same; bigger bodies travel through the Object Store.
max_payload: {{ int64 $.Values.nats.maxPayload }}
jetstream {
  store_dir: /data/jetstream
  max_memory_store: {{ $.Values.nats.bundled.jetstream.maxMemoryStore }}
  max_file_store: {{ $.Values.nats.bundled.jetstream.maxFileStore }}
  # fsync before acknowledging (always): an acknowledged write survives a crash of every server.
  sync_interval: {{ $.Values.nats.bundled.jetstream.syncInterval | quote }}
}
# Operator mode: each worker Pod gets a NATS account of its own (the account, not a permission in
# a shared one, is the tenant boundary). The queue derives every key (operator, accounts, its own
# users) from one secret in the Secret {{ $.Values.nats.auth.trustSecret }}, which it creates at start.
# Its key trust.conf, mounted here, holds no private key: the operator, the system account, the
# default_sentinel (what a worker sidecar, with only its Pod-bound token, connects as until the
# queue's auth callout places it in its worker's account), the resolver (the account JWTs the queue
# pushes, kept in /data/jwt on the PVC: the queue's --nats-resolver-dir) and SYS and RUNPLANE
# preloaded. include is relative to this file's directory, even an absolute path: ../trust is the
# Secret's mount.
include "../trust/trust.conf"
# TLS from the first byte (handshake_first: not even INFO in clear; a client that does not begin with
# a TLS handshake gets nothing). The certificate (Secret nats.bundled.tlsSecret) is the queue's: it
# renews it and asks each server to reload it ($SYS.REQ.SERVER.<id>.RELOAD) once the kubelet has
# updated the files, so no server restarts. Clients verify it against runplane's NATS CA and the
# name runplane-nats.<namespace>.svc.<clusterDomain>; no client certificates (clients authenticate
# with JWTs and the callout).
tls {
  cert_file: "/etc/nats/tls/tls.crt"
  key_file: "/etc/nats/tls/tls.key"
  handshake_first: true
}
{{- if gt (int $.Values.nats.bundled.replicas) 1 }}
# Routes authenticate with a password the queue generates (Secret nats.bundled.routeSecret): a peer
# that reaches port 6222 without it is no route (the NetworkPolicy is the first fence, this the
# second). The password and the routes come from the environment (NATS_ROUTE_*). A route is TLS
# from its first byte, each server presenting the same certificate as client and server and
# verifying its peer's against the CA (verify: true); the dialing one also checks the peer's
# per-Pod name.
cluster {
  name: runplane
  listen: 0.0.0.0:6222
  authorization { user: route, password: $NATS_ROUTE_PASSWORD, timeout: 2 }
  tls {
    cert_file: "/etc/nats/tls/tls.crt"
    key_file: "/etc/nats/tls/tls.key"
    ca_file: "/etc/nats/tls/ca-bundle.crt"
    verify: true
  }
  routes: [
    {{- range $i := until (int $.Values.nats.bundled.replicas) }}
    $NATS_ROUTE_{{ $i }}
    {{- end }}
  ]
}
{{- end }}
{{- end -}}


{{/* runplane.streamReplicas: the replicas of the queue's streams and buckets — queue.stream.replicas,
or (0) the bundled NATS's servers, or 3 with an external NATS. */}}
{{- define "runplane.streamReplicas" -}}
{{- $r := int .Values.queue.stream.replicas }}
{{- if eq $r 0 }}
{{- if eq .Values.nats.mode "bundled" }}{{ $r = int .Values.nats.bundled.replicas }}{{ else }}{{ $r = 3 }}{{ end }}
{{- end }}
{{- $r }}
{{- end -}}
