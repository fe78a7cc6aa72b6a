package natscallout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// RequestSubject is where nats-server sends authorization requests.
const RequestSubject = "$SYS.REQ.USER.AUTH"

// QueueGroup lets several replicas share the requests.
const QueueGroup = "runplane-callout"

// Reasons of answers that are not refusals of a credential (see also the
// Reason* constants of KubeAuthenticator).
const (
	// ReasonBusy: every worker was answering; refused at once.
	ReasonBusy = "busy"
	// ReasonCached and ReasonReviewed: an admission from the cache, or
	// after asking the apiserver.
	ReasonCached   = "cached"
	ReasonReviewed = "reviewed"
	// ReasonUndecodable and ReasonReply: no answer could be signed, or it
	// could not be sent (result "error").
	ReasonUndecodable = "undecodable"
	ReasonReply       = "reply"
)

// Metrics counts the callout's answers.
type Metrics struct {
	Answers *prometheus.CounterVec
}

// NewMetrics registers the callout's metrics with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{Answers: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "runplane_nats_callout_answers_total",
		Help: "NATS auth callout answers by result (admitted, refused, or error: no answer could be signed or sent) and reason " +
			"(admitted: cached, reviewed; refused: busy, malformed, invalid_token, not_worker, apiserver_unavailable, timeout, other; error: undecodable, reply).",
	}, []string{"result", "reason"})}
	if reg != nil {
		reg.MustRegister(m.Answers)
	}
	return m
}

// ServeOptions bounds the work Serve does at once.
type ServeOptions struct {
	// Workers answer requests that need the apiserver concurrently
	// (default 16). A request arriving while all are busy is refused at
	// once (reason busy; the client retries) instead of waiting behind
	// them past the server's deadline, which would time out every client.
	// Requests the Authenticator answers from memory (Known) are answered
	// on the subscription's goroutine without a worker.
	Workers int
	// AnswerTimeout bounds one answer (default 1.5s): below nats-server's
	// auth callout timeout (2s by default), so an answer is never late.
	AnswerTimeout time.Duration
}

// known is an Authenticator that can tell it will answer from memory.
type known interface {
	Known(token string) bool
}

// Serve answers authorization requests on nc until ctx ends. nc must be a
// connection of one of the server's auth_callout.auth_users.
func Serve(ctx context.Context, nc *nats.Conn, r *Responder, m *Metrics, log *slog.Logger, o ServeOptions) error {
	o.Workers = cmp.Or(o.Workers, 16)
	o.AnswerTimeout = cmp.Or(o.AnswerTimeout, 1500*time.Millisecond)
	s := &answerer{r: r, m: m, log: log, timeout: o.AnswerTimeout, slots: make(chan struct{}, o.Workers)}
	s.known, _ = r.Auth.(known)
	// In-flight answers finish during a drain: not cancelled with ctx.
	actx := context.WithoutCancel(ctx)
	sub, err := nc.QueueSubscribe(RequestSubject, QueueGroup, func(msg *nats.Msg) { s.dispatch(actx, msg) })
	if err != nil {
		return fmt.Errorf("subscribing to %s: %w", RequestSubject, err)
	}
	<-ctx.Done()
	err = sub.Drain()
	if err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		err = fmt.Errorf("draining the callout subscription: %w", err)
	} else {
		err = nil
	}
	s.wg.Wait()
	return err
}

type answerer struct {
	r       *Responder
	m       *Metrics
	log     *slog.Logger
	known   known
	timeout time.Duration
	slots   chan struct{}
	wg      sync.WaitGroup
}

// dispatch runs on the subscription's goroutine: it never waits for the
// apiserver.
func (s *answerer) dispatch(ctx context.Context, msg *nats.Msg) {
	req, err := jwt.DecodeAuthorizationRequestClaims(string(msg.Data))
	if err != nil {
		s.m.Answers.WithLabelValues("error", ReasonUndecodable).Inc()
		s.log.Error("NATS auth callout could not decode a request", "err", err)
		return
	}
	if s.known != nil && s.known.Known(presentedToken(req)) {
		s.answer(ctx, msg, ReasonCached)
		return
	}
	select {
	case s.slots <- struct{}{}:
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.slots }()
			s.answer(ctx, msg, ReasonReviewed)
		}()
	default:
		resp, err := s.r.respond(req, "", "not authorized")
		if err != nil {
			s.m.Answers.WithLabelValues("error", ReasonUndecodable).Inc()
			s.log.Error("NATS auth callout could not sign a refusal", "err", err)
			return
		}
		s.m.Answers.WithLabelValues("refused", ReasonBusy).Inc()
		s.reply(msg, resp)
	}
}

func (s *answerer) answer(ctx context.Context, msg *nats.Msg, admitted string) {
	actx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	res, err := s.r.Respond(actx, msg.Data)
	switch {
	case err != nil:
		s.m.Answers.WithLabelValues("error", ReasonUndecodable).Inc()
		s.log.Error("NATS auth callout could not answer", "err", err)
		return
	case res.Err != nil:
		s.m.Answers.WithLabelValues("refused", Reason(res.Err)).Inc()
		s.log.Info("NATS connection refused", "client", res.Identity.Name, "reason", res.Err)
	default:
		s.m.Answers.WithLabelValues("admitted", admitted).Inc()
		s.log.Debug("NATS connection admitted", "client", res.Identity.Name, "expires", res.Identity.Expires)
	}
	s.reply(msg, res.Response)
}

func (s *answerer) reply(msg *nats.Msg, resp []byte) {
	if err := msg.Respond(resp); err != nil {
		s.m.Answers.WithLabelValues("error", ReasonReply).Inc()
		s.log.Error("NATS auth callout could not reply", "err", err)
	}
}

// presentedToken is the credential Responder.decide authenticates.
func presentedToken(req *jwt.AuthorizationRequestClaims) string {
	return cmp.Or(req.ConnectOptions.Token, req.ConnectOptions.Password)
}
