package sidecar

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/runplane/runplane/internal/buildinfo"
	"github.com/runplane/runplane/internal/httpjson"
	"github.com/runplane/runplane/internal/messages"
)

// metrics are the sidecar's Prometheus series, on a registry of its own.
type metrics struct {
	reg         *prometheus.Registry
	invocations *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	inFlight    prometheus.Gauge
	ready       prometheus.Gauge
	duplicates  prometheus.Counter
	// refused counts dispatches handed back because the framework refused
	// the connection; publishRetries failed tries to store a result;
	// handedBack the dispatches a draining worker gave back unstarted.
	refused, publishRetries, handedBack prometheus.Counter
	ackErrors                           *prometheus.CounterVec
	// bodiesUnstored: big response bodies the bucket refused.
	bodiesUnstored prometheus.Counter
	// chunks: chunks of streamed answers relayed (stream.go).
	chunks prometheus.Counter
}

func newMetrics(concurrency int) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		invocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runplane_sidecar_invocations_total", Help: "Invocations finished, by final state.",
		}, []string{"state"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "runplane_sidecar_invocation_duration_seconds", Help: "Time from dispatch delivery to result, by final state.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}, []string{"state"}),
		inFlight:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "runplane_sidecar_in_flight", Help: "Invocations running now."}),
		ready:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "runplane_sidecar_framework_ready", Help: "1 while the framework answers its health check."}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{Name: "runplane_sidecar_duplicate_dispatches_total", Help: "Redelivered dispatches that were not run again."}),
		handedBack: prometheus.NewCounter(prometheus.CounterOpts{Name: "runplane_sidecar_handed_back_total", Help: "Dispatches handed back unstarted while draining."}),
		bodiesUnstored: prometheus.NewCounter(prometheus.CounterOpts{Name: "runplane_sidecar_response_bodies_unstored_total",
			Help: "Response bodies too big for one message that could not be stored in the pool's object bucket (their invocations failed)."}),
		ackErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runplane_sidecar_ack_errors_total", Help: "JetStream acknowledgements of dispatches that failed, by operation (ack, nak, term, in_progress).",
		}, []string{"op"}),
	}
	conc := prometheus.NewGauge(prometheus.GaugeOpts{Name: "runplane_sidecar_concurrency", Help: "Invocations this worker runs at once."})
	conc.Set(float64(concurrency))
	m.refused = prometheus.NewCounter(prometheus.CounterOpts{Name: "runplane_sidecar_refused_dispatches_total",
		Help: "Dispatches handed back unrun because the framework refused the connection (the worker turns not ready)."})
	m.publishRetries = prometheus.NewCounter(prometheus.CounterOpts{Name: "runplane_sidecar_result_publish_retries_total",
		Help: "Failed tries to store a result (NATS away, results stream full); the result is retried, never the framework call."})
	m.chunks = prometheus.NewCounter(prometheus.CounterOpts{Name: "runplane_sidecar_stream_chunks_total",
		Help: "Chunks of streamed framework answers relayed to the chunks stream."})
	m.reg.MustRegister(m.chunks, m.invocations, m.duration, m.inFlight, m.ready, m.duplicates, m.ackErrors, m.refused, m.publishRetries, m.handedBack, m.bodiesUnstored, conc, buildinfo.Collector(),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) observe(state messages.State, d time.Duration) {
	m.invocations.WithLabelValues(string(state)).Inc()
	m.duration.WithLabelValues(string(state)).Observe(d.Seconds())
}

// status is the JSON body of /livez and /readyz.
type status struct {
	Status    string `json:"status"`
	Framework string `json:"framework,omitempty"`
	NATS      string `json:"nats,omitempty"`
	Consumer  string `json:"consumer,omitempty"`
	Draining  bool   `json:"draining,omitempty"`
}

func (s *Sidecar) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) {
		httpjson.Write(w, http.StatusOK, status{Status: "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		st, ok := s.readiness(r.Context())
		code := http.StatusOK
		if !ok {
			code = http.StatusServiceUnavailable
		}
		httpjson.Write(w, code, st)
	})
	return mux
}

// metricsHandler serves /metrics, on the loopback listener only.
func (s *Sidecar) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	return mux
}

// readiness checks the framework live (not the cached probe), so a Pod
// turns Ready the moment its framework can serve.
func (s *Sidecar) readiness(ctx context.Context) (status, bool) {
	st := status{Status: "ok", Framework: "ok", NATS: "connected", Consumer: "ok", Draining: s.draining.Load()}
	ok := true
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.client.Health(ctx); err != nil {
		st.Framework, ok = err.Error(), false
	}
	if nc := s.nc; nc == nil || !nc.IsConnected() {
		st.NATS, ok = "not connected", false
	}
	if s.consumer.Load() == nil {
		st.Consumer, ok = "not created yet (is the stream there?)", false
	}
	if st.Draining {
		ok = false
	}
	if !ok {
		st.Status = "not ready"
	}
	return st, ok
}
