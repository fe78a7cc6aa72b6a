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
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"
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
	// ReasonRateLimited: the client's address spent its review budget.
	ReasonRateLimited = "rate_limited"
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
			"(admitted: cached, reviewed; refused: busy, rate_limited, malformed, invalid_token, not_worker, apiserver_unavailable, timeout, other; error: undecodable, reply).",
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
	// PerHostQPS and PerHostBurst bound the requests needing a worker that
	// one client address (as nats-server reports it) may make (defaults
	// 5/s, 20; beyond: refused at once, reason rate_limited), so that one
	// Pod flooding forged tokens spends its own budget, not the workers
	// every other Pod's admission needs. Hosts holds the budgets of that
	// many addresses (default 4096, least recently seen forgotten).
	PerHostQPS   float32
	PerHostBurst int
	Hosts        int
	// Clock is for tests (default the real clock).
	Clock clock.PassiveClock
}

// known is an Authenticator that can tell it will answer from memory.
type known interface {
	Known(token string) bool
}

// Serve answers authorization requests on nc until ctx ends. nc must be a
// connection of an auth user of the callout's account (RUNPLANE's queue user).
func Serve(ctx context.Context, nc *nats.Conn, r *Responder, m *Metrics, log *slog.Logger, o ServeOptions) error {
	o.Workers = cmp.Or(o.Workers, 16)
	o.AnswerTimeout = cmp.Or(o.AnswerTimeout, 1500*time.Millisecond)
	o.PerHostQPS, o.PerHostBurst, o.Hosts = cmp.Or(o.PerHostQPS, 5), cmp.Or(o.PerHostBurst, 20), cmp.Or(o.Hosts, 4096)
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	s := &answerer{r: r, m: m, log: log, timeout: o.AnswerTimeout, slots: make(chan struct{}, o.Workers),
		hosts: lru.New(o.Hosts), newLimiter: func() flowcontrol.PassiveRateLimiter {
			return flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(o.PerHostQPS, o.PerHostBurst, o.Clock)
		}}
	s.known, _ = r.Auth.(known)
	// In-flight answers finish during a drain: not cancelled with ctx.
	actx := context.WithoutCancel(ctx)
	sub, err := nc.QueueSubscribe(RequestSubject, QueueGroup, func(msg *nats.Msg) { s.dispatch(actx, msg) })
	if err != nil {
		return fmt.Errorf("subscribing to %s: %w", RequestSubject, err)
	}
	closed := sub.StatusChanged(nats.SubscriptionClosed)
	<-ctx.Done()
	err = sub.Drain()
	switch {
	case err == nil:
		// Requests already delivered are answered; bounded, should the
		// connection go away meanwhile.
		select {
		case <-closed:
		case <-time.After(2 * o.AnswerTimeout):
		}
	case errors.Is(err, nats.ErrConnectionClosed):
		err = nil
	default:
		err = fmt.Errorf("draining the callout subscription: %w", err)
	}
	s.mu.Lock()
	s.stopped = true // no answer starts after this
	s.mu.Unlock()
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
	mu      sync.Mutex
	stopped bool
	wg      sync.WaitGroup
	// hosts: client address → flowcontrol.PassiveRateLimiter; only the
	// subscription's goroutine uses it.
	hosts      *lru.Cache
	newLimiter func() flowcontrol.PassiveRateLimiter
}

// allow spends one of host's reviews.
func (s *answerer) allow(host string) bool {
	v, ok := s.hosts.Get(host)
	if !ok {
		v = s.newLimiter()
		s.hosts.Add(host, v)
	}
	return v.(flowcontrol.PassiveRateLimiter).TryAccept()
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
		// Answered from memory. (Should the entry expire between Known
		// and the answer, that one review runs here, within the timeout.)
		s.answer(ctx, msg, ReasonCached)
		return
	}
	if !s.allow(req.ClientInformation.Host) {
		s.refuseAtOnce(msg, req, ReasonRateLimited)
		return
	}
	select {
	case s.slots <- struct{}{}:
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			<-s.slots
			return
		}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			defer func() { <-s.slots }()
			s.answer(ctx, msg, ReasonReviewed)
		}()
	default:
		s.refuseAtOnce(msg, req, ReasonBusy)
	}
}

// refuseAtOnce answers without asking anyone.
func (s *answerer) refuseAtOnce(msg *nats.Msg, req *jwt.AuthorizationRequestClaims, reason string) {
	resp, err := s.r.respond(req, "", "not authorized")
	if err != nil {
		s.m.Answers.WithLabelValues("error", ReasonUndecodable).Inc()
		s.log.Error("NATS auth callout could not sign a refusal", "err", err)
		return
	}
	s.m.Answers.WithLabelValues("refused", reason).Inc()
	// Debug: these come in floods; the counter is what an operator watches.
	s.log.Debug("NATS connection refused", "host", req.ClientInformation.Host, "reason", reason)
	s.reply(msg, resp)
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
