package stream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runplane/runplane/internal/messages"
)

// MigratedHeader marks a result copied from an older invocation stream to
// the results stream: its value is <stream>/<sequence> of the original.
const MigratedHeader = "Runplane-Migrated-From"

// movedResults are the results an older invocation stream held that its
// results consumers had not acknowledged yet, to be copied to the results
// stream once it exists.
type movedResults struct {
	stream    string
	msgs      []*jetstream.RawStreamMsg
	consumers []string
	subject   string
	// floor: results at or below it were handled before the migration.
	floor uint64
	// skipped are the old results that could not be copied (sequence:
	// error); Open logs them.
	skipped []string
}

// migrateResults takes results out of an invocation stream of an older
// release, which stored <prefix>.result.> next to invocations and
// dispatches. It removes the subject from the stream (so no new result
// lands there; invocations and dispatches stay where they are, nothing
// queued is touched) and notes the lowest ack floor of the stream's
// results consumers. Once the results stream exists, read takes the
// results stored after that floor and finish copies them to the results
// stream, then deletes those consumers and purges the old results.
// Until finish is done the results consumers remain, and a retried Open
// (after an error) migrates again from them; a result copied twice is
// handled once by the activator.
func migrateResults(ctx context.Context, js jetstream.JetStream, cfg Config, subj messages.Subjects) (*movedResults, error) {
	old, err := js.Stream(ctx, cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read stream %s: %w", cfg.Stream, err)
	}
	m := &movedResults{stream: cfg.Stream, subject: subj.ResultStreamSubjects()[0]}
	resultPrefix := strings.TrimSuffix(m.subject, ">")
	hasSubject := slices.Contains(old.CachedInfo().Config.Subjects, m.subject)
	var floor uint64
	first := true
	list := old.ListConsumers(ctx)
	for ci := range list.Info() {
		filters := append([]string{ci.Config.FilterSubject}, ci.Config.FilterSubjects...)
		if !slices.ContainsFunc(filters, func(f string) bool { return f != "" && strings.HasPrefix(f, resultPrefix) }) {
			continue
		}
		m.consumers = append(m.consumers, ci.Name)
		if first || ci.AckFloor.Stream < floor {
			floor, first = ci.AckFloor.Stream, false
		}
	}
	if err := list.Err(); err != nil {
		return nil, fmt.Errorf("list consumers of stream %s: %w", cfg.Stream, err)
	}
	if !hasSubject && len(m.consumers) == 0 {
		return nil, nil // migrated already, or never stored results
	}
	if hasSubject {
		c := old.CachedInfo().Config
		c.Subjects = slices.DeleteFunc(slices.Clone(c.Subjects), func(s string) bool { return strings.HasPrefix(s, resultPrefix) })
		if _, err := js.UpdateStream(ctx, c); err != nil {
			return nil, fmt.Errorf("remove %s from stream %s: %w", m.subject, cfg.Stream, err)
		}
	}
	m.floor = floor
	return m, nil
}

// read collects the old results stored after the floor, by subject (the
// invocations and dispatches between them are never read). It runs after
// the results stream exists, so results published meanwhile have a home.
func (m *movedResults) read(ctx context.Context, old jetstream.Stream) error {
	if m == nil {
		return nil
	}
	for seq := m.floor + 1; ; {
		msg, err := old.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(m.subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read results of stream %s from %d: %w", m.stream, seq, err)
		}
		m.msgs = append(m.msgs, msg)
		seq = msg.Sequence + 1
	}
}

// finish copies the moved results to the results stream (without their
// Nats-Msg-Id), then deletes the old results consumers and purges the old
// results from the invocation stream st.
func (m *movedResults) finish(ctx context.Context, js jetstream.JetStream, st jetstream.Stream) error {
	if m == nil {
		return nil
	}
	for _, r := range m.msgs {
		msg := nats.NewMsg(r.Subject)
		msg.Data = r.Data
		// A worker chose these headers: none of the server's (Nats-Msg-Id,
		// Nats-Expected-*, ...) may steer the copy.
		for k, v := range r.Header {
			if !strings.HasPrefix(k, "Nats-") {
				msg.Header[k] = v
			}
		}
		msg.Header.Set(MigratedHeader, fmt.Sprintf("%s/%d", m.stream, r.Sequence))
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			// One result that cannot be copied (too large with the header,
			// refused) must not keep the queue from starting: its
			// invocation times out or is redelivered like a lost result.
			m.skipped = append(m.skipped, fmt.Sprintf("%d: %v", r.Sequence, err))
		}
	}
	for _, name := range m.consumers {
		if err := st.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("delete results consumer %s of stream %s: %w", name, m.stream, err)
		}
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(m.subject)); err != nil {
		return fmt.Errorf("purge old results of stream %s: %w", m.stream, err)
	}
	return nil
}
