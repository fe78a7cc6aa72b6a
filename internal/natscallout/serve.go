package natscallout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// RequestSubject is where nats-server sends authorization requests.
const RequestSubject = "$SYS.REQ.USER.AUTH"

// QueueGroup lets several replicas share the requests.
const QueueGroup = "runplane-callout"

// Metrics counts the callout's answers.
type Metrics struct {
	Answers *prometheus.CounterVec
}

// NewMetrics registers the callout's metrics with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{Answers: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "runplane_nats_callout_answers_total",
		Help: "NATS auth callout answers by result: admitted, refused, or error (no answer could be signed).",
	}, []string{"result"})}
	if reg != nil {
		reg.MustRegister(m.Answers)
	}
	return m
}

// Serve answers authorization requests on nc until ctx ends. nc must be a
// connection of one of the server's auth_callout.auth_users.
func Serve(ctx context.Context, nc *nats.Conn, r *Responder, m *Metrics, log *slog.Logger) error {
	// Each request is answered within the server's auth timeout; a slow
	// TokenReview must not hold the subscription's goroutine for longer.
	const answerTimeout = 2 * time.Second
	sub, err := nc.QueueSubscribe(RequestSubject, QueueGroup, func(msg *nats.Msg) {
		actx, cancel := context.WithTimeout(ctx, answerTimeout)
		defer cancel()
		res, err := r.Respond(actx, msg.Data)
		switch {
		case err != nil:
			m.Answers.WithLabelValues("error").Inc()
			log.Error("NATS auth callout could not answer", "err", err)
			return
		case res.Err != nil:
			m.Answers.WithLabelValues("refused").Inc()
			log.Info("NATS connection refused", "client", res.Identity.Name, "reason", res.Err)
		default:
			m.Answers.WithLabelValues("admitted").Inc()
			log.Debug("NATS connection admitted", "client", res.Identity.Name, "expires", res.Identity.Expires)
		}
		if err := msg.Respond(res.Response); err != nil {
			m.Answers.WithLabelValues("error").Inc()
			log.Error("NATS auth callout could not reply", "err", err)
		}
	})
	if err != nil {
		return fmt.Errorf("subscribing to %s: %w", RequestSubject, err)
	}
	<-ctx.Done()
	if err := sub.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("draining the callout subscription: %w", err)
	}
	return nil
}
