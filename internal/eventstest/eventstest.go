// Package eventstest reads what controllers recorded on a client-go
// events.FakeRecorder, for the controllers' fake-client tests.
package eventstest

import (
	"strings"

	"k8s.io/client-go/tools/events"
)

// Drain empties the recorder and returns "<type> <reason>" of each Event, in
// the order they were recorded (nil when there was none).
func Drain(rec *events.FakeRecorder) []string {
	var got []string
	for len(rec.Events) > 0 {
		typ, rest, _ := strings.Cut(<-rec.Events, " ")
		reason, _, _ := strings.Cut(rest, " ")
		got = append(got, typ+" "+reason)
	}
	return got
}
