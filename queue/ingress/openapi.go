package ingress

// OpenAPI is the ingress API description served at /openapi.json.
const OpenAPI = `{
  "openapi": "3.0.3",
  "info": {"title": "runplane queue ingress", "version": "v1"},
  "paths": {
    "/v1/namespaces/{namespace}/pools/{pool}/invocations": {
      "post": {
        "summary": "Enqueue an invocation (sync waits for the result, async returns the ack)",
        "parameters": [{"name": "namespace", "in": "path", "required": true, "schema": {"$ref": "#/components/schemas/DNSLabel"}, "description": "the pool's namespace: pools and invocation IDs are scoped by it (400 when malformed)"}, {"name": "pool", "in": "path", "required": true, "schema": {"$ref": "#/components/schemas/DNSLabel"}, "description": "the runplane.io/pool label of a Deployment of the namespace (400 when malformed)"}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/InvokeRequest"}}}},
        "responses": {
          "200": {"description": "sync: terminal record", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Record"}}}},
          "202": {"description": "async: accepted", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Ack"}}}},
          "400": {"$ref": "#/components/responses/Error"},
          "404": {"$ref": "#/components/responses/Error"},
          "409": {"description": "the invocation ID belongs to another pool, or was accepted with another request (payload, headers, attributes or contentType differ), or several Deployments of the namespace claim the pool (the body names them)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
          "413": {"$ref": "#/components/responses/Error"},
          "429": {"description": "a backlog limit is reached: the pool's (runplane.io/max-backlog) or its namespace's; only this namespace is refused", "headers": {"Retry-After": {"schema": {"type": "integer"}}}, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/LimitError"}}}},
          "503": {"$ref": "#/components/responses/Error"},
          "504": {"description": "sync: no result within timeoutSeconds; the invocation stays pollable", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
        }
      }
    },
    "/api/v1/serverless/invocations": {
      "post": {
        "summary": "Seed alias: the namespace is named by namespace (required) and the pool by serverlessRequestID",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/InvokeRequest"}}}},
        "responses": {"200": {"description": "sync result"}, "202": {"description": "async ack"}, "400": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"}, "429": {"description": "a backlog limit is reached", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/LimitError"}}}}}
      }
    },
    "/v1/namespaces/{namespace}/invocations/{id}": {
      "get": {
        "summary": "Invocation state and result (404 for an ID of another namespace)",
        "parameters": [{"name": "namespace", "in": "path", "required": true, "schema": {"$ref": "#/components/schemas/DNSLabel"}, "description": "the pool's namespace: pools and invocation IDs are scoped by it (400 when malformed)"}, {"name": "id", "in": "path", "required": true, "schema": {"$ref": "#/components/schemas/InvocationID"}, "description": "400 when malformed, 404 when well-formed but unknown"}],
        "responses": {"200": {"description": "record", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Record"}}}}, "400": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"}}
      }
    },
    "/v1/namespaces/{namespace}/invocations/{id}/cancel": {
      "post": {
        "summary": "Cancel: queued becomes cancelled at once; a running invocation's worker is sent a cancel",
        "parameters": [{"name": "namespace", "in": "path", "required": true, "schema": {"$ref": "#/components/schemas/DNSLabel"}, "description": "the pool's namespace: pools and invocation IDs are scoped by it (400 when malformed)"}, {"name": "id", "in": "path", "required": true, "schema": {"$ref": "#/components/schemas/InvocationID"}, "description": "400 when malformed, 404 when well-formed but unknown"}],
        "responses": {"200": {"description": "cancelled record"}, "400": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"}, "409": {"description": "already terminal"}}
      }
    },
    "/v1/namespaces/{namespace}/pools/{pool}": {
      "get": {
        "summary": "Pool policy, workers, backlog and in-flight count; conflict names the Deployments when several claim the pool",
        "parameters": [{"name": "namespace", "in": "path", "required": true, "schema": {"$ref": "#/components/schemas/DNSLabel"}, "description": "the pool's namespace: pools and invocation IDs are scoped by it (400 when malformed)"}, {"name": "pool", "in": "path", "required": true, "schema": {"$ref": "#/components/schemas/DNSLabel"}, "description": "the runplane.io/pool label of a Deployment of the namespace (400 when malformed)"}],
        "responses": {"200": {"description": "pool"}, "400": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"}}
      }
    },
    "/healthz": {"get": {"responses": {"200": {"description": "alive"}}}},
    "/readyz": {"get": {"responses": {"200": {"description": "ready"}, "503": {"description": "not ready"}}}},
    "/metrics": {"get": {"responses": {"200": {"description": "Prometheus metrics"}}}}
  },
  "components": {
    "responses": {"Error": {"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}},
    "schemas": {
      "Error": {"type": "object", "properties": {"error": {"type": "string"}, "invocationID": {"type": "string"}, "state": {"type": "string"}}},
      "LimitError": {"type": "object", "properties": {"error": {"type": "string"}, "limit": {"type": "string", "enum": ["pool_backlog", "namespace_backlog"]},
        "max": {"type": "integer"}, "namespace": {"type": "string"}, "pool": {"type": "string"}}},
      "DNSLabel": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
      "InvocationID": {"type": "string", "pattern": "^[A-Za-z0-9_=-]{1,128}$"},
      "InvokeRequest": {"type": "object", "required": ["mode"], "additionalProperties": false, "description": "exactly one JSON object: unknown fields and trailing data are refused (400)", "properties": {
        "mode": {"type": "string", "enum": ["sync", "async"]},
        "namespace": {"type": "string", "description": "the pool's namespace: required by the seed alias; on the namespaced route it must match the path when set"},
        "invocationID": {"$ref": "#/components/schemas/InvocationID"},
        "serverlessRequestID": {"type": "string", "description": "pool name (seed alias)"},
        "payload": {},
        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
        "attributes": {"type": "object", "additionalProperties": {"type": "string"}},
        "contentType": {"type": "string"},
        "timeoutSeconds": {"type": "integer", "minimum": 0, "maximum": 3600, "description": "execution time allowed; sync callers wait this long (0: 300)"},
        "ttlSeconds": {"type": "integer", "minimum": 0, "maximum": 86400, "description": "time allowed in the queue before dispatch (0: 600; the maximum is lower when the Records' TTL or the stream's max age is)"}}},
      "Ack": {"type": "object", "properties": {
        "invocationID": {"type": "string"}, "namespace": {"type": "string"}, "pool": {"type": "string"}, "stream": {"type": "string"}, "sequence": {"type": "integer"},
        "duplicate": {"type": "boolean"}, "state": {"$ref": "#/components/schemas/State"},
        "subjects": {"type": "object", "properties": {"invoke": {"type": "string"}, "result": {"type": "string"}, "metrics": {"type": "string"}}},
        "acceptedAt": {"type": "string", "format": "date-time"}}},
      "State": {"type": "string", "enum": ["queued", "dispatched", "running", "succeeded", "failed", "timed_out", "cancelled", "dead_lettered"]},
      "Record": {"type": "object", "properties": {
        "invocationID": {"type": "string"}, "namespace": {"type": "string"}, "pool": {"type": "string"}, "mode": {"type": "string"}, "state": {"$ref": "#/components/schemas/State"},
        "worker": {"type": "string"}, "attempt": {"type": "integer"}, "stream": {"type": "string"}, "sequence": {"type": "integer"},
        "response": {"type": "object", "properties": {"statusCode": {"type": "integer"}, "contentType": {"type": "string"}, "headers": {"type": "object"}, "body": {}, "error": {"type": "string"}}},
        "error": {"type": "string"}, "requestHash": {"type": "string", "description": "sha256:<hex> of the canonical request; a re-post must match it"},
        "retries": {"type": "integer", "description": "attempts run again under the pool's retry policy (runplane.io/max-retries)"},
        "attempts": {"type": "array", "description": "how each attempt ended, oldest first, when the pool retries or an attempt was handed back", "items": {"type": "object", "properties": {
          "attempt": {"type": "integer"}, "worker": {"type": "string"}, "state": {"type": "string", "enum": ["succeeded", "failed", "timed_out", "cancelled", "handed_back"]},
          "statusCode": {"type": "integer"}, "error": {"type": "string"}, "startedAt": {"type": "string", "format": "date-time"}, "finishedAt": {"type": "string", "format": "date-time"},
          "retryAt": {"type": "string", "format": "date-time", "description": "set when the attempt was retried: the next attempt starts no earlier"}}}}, "acceptedAt": {"type": "string", "format": "date-time"}, "updatedAt": {"type": "string", "format": "date-time"}}}
    }
  }
}
`
