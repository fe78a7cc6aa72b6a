package ingress

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/runplane/runplane/internal/httpjson"
)

// Handler returns the HTTP API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/namespaces/{ns}/pools/{pool}/invocations", func(w http.ResponseWriter, r *http.Request) {
		s.handleInvoke(w, r, r.PathValue("ns"), r.PathValue("pool"), false)
	})
	mux.HandleFunc("POST /api/v1/serverless/invocations", func(w http.ResponseWriter, r *http.Request) {
		s.handleInvoke(w, r, "", "", true)
	})
	mux.HandleFunc("GET /v1/namespaces/{ns}/invocations/{id}", s.handleGet)
	mux.HandleFunc("POST /v1/namespaces/{ns}/invocations/{id}/cancel", s.handleCancel)
	mux.HandleFunc("GET /v1/namespaces/{ns}/pools/{pool}", s.handlePool)
	// The routes before pools were namespaced: a pointer to the new ones.
	for _, old := range []string{"/v1/pools/", "/v1/invocations/"} {
		mux.HandleFunc(old, func(w http.ResponseWriter, r *http.Request) {
			httpjson.Error(w, http.StatusNotFound, fmt.Sprintf("no route for %s %s: pools and invocations are addressed within their namespace, "+
				"/v1/namespaces/{namespace}/pools/{pool}[/invocations] and /v1/namespaces/{namespace}/invocations/{id}[/cancel]", r.Method, r.URL.Path))
		})
	}
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(OpenAPI))
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		httpjson.Write(w, 200, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case !s.cfg.NC.IsConnected():
			httpjson.Error(w, http.StatusServiceUnavailable, "NATS is not connected")
		case !s.cfg.Pools.Synced():
			httpjson.Error(w, http.StatusServiceUnavailable, "pool list not synced")
		default:
			httpjson.Write(w, 200, map[string]string{"status": "ready"})
		}
	})
	if s.cfg.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpjson.Error(w, http.StatusNotFound, fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	})
	return mux
}
