package ingress

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

func (s *Server) reject(w http.ResponseWriter, code int, msg string) {
	s.m.rejected.WithLabelValues(strconv.Itoa(code)).Inc()
	problem(w, nil, code, msg)
}

type ingressMetrics struct {
	accepted, duplicates, rejected, limited *prometheus.CounterVec
	syncLatency                             *prometheus.HistogramVec
	connsRefused                            prometheus.Counter
}

func newIngressMetrics(r prometheus.Registerer) *ingressMetrics {
	m := &ingressMetrics{
		accepted:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_ingress_invocations_total", Help: "Invocations accepted (including duplicates)."}, []string{"namespace", "pool", "mode"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_ingress_duplicates_total", Help: "Re-posted invocation IDs."}, []string{"namespace", "pool"}),
		rejected:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_ingress_rejected_total", Help: "Rejected requests by HTTP status."}, []string{"code"}),
		// namespace: only namespaces with a pool (the pool is looked up
		// before a limit is checked), which tenants cannot create: bounded.
		// No pool label: tenants create pools at will.
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_ingress_limited_total",
			Help: "Invocations refused with 429 by a fairness limit (reason: the limit the answer names, such as pool_backlog or namespace_body_bytes), per namespace."}, []string{"reason", "namespace"}),
		connsRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "runplane_ingress_connections_refused_total",
			Help: "Connections answered 503 and closed at once: as many as the ingress allows were waiting for their callers' authentication."}),
		syncLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "runplane_ingress_sync_seconds", Help: "Sync invocation latency.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 20)}, []string{"namespace", "pool"}),
	}
	if r != nil {
		for _, c := range []prometheus.Collector{m.accepted, m.duplicates, m.rejected, m.limited, m.syncLatency, m.connsRefused} {
			_ = r.Register(c)
		}
	}
	return m
}
