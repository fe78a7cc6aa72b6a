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
}
# The queue is the one configured user; every other client (the worker sidecars) is handed to the
# queue's auth callout, which admits a Pod-bound ServiceAccount token and places the client in
# {{ $.Values.nats.auth.account }} with exactly its worker's subjects.
accounts {
  {{ $.Values.nats.auth.account }} {
    jetstream: enabled
    users: [ { user: {{ $.Values.nats.auth.queueUser | quote }}, password: $NATS_QUEUE_PASSWORD } ]
  }
}
authorization {
  auth_callout {
    issuer: $NATS_CALLOUT_ISSUER
    account: {{ $.Values.nats.auth.account }}
    auth_users: [ {{ $.Values.nats.auth.queueUser | quote }} ]
  }
}
{{- if gt (int $.Values.nats.bundled.replicas) 1 }}
# Routes authenticate with a password the queue generates (Secret nats.bundled.routeSecret): a peer
# that reaches port 6222 without it is no route (the NetworkPolicy is the first fence, this the
# second). The password and the routes come from the environment (NATS_ROUTE_*).
cluster {
  name: runplane
  listen: 0.0.0.0:6222
  authorization { user: route, password: $NATS_ROUTE_PASSWORD, timeout: 2 }
  routes: [
    {{- range $i := until (int $.Values.nats.bundled.replicas) }}
    $NATS_ROUTE_{{ $i }}
    {{- end }}
  ]
}
{{- end }}
{{- end -}}
