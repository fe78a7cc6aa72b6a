// Package netprobe proves network policy enforcement from inside a Pod:
// a prober Pod tries each target every round and logs
// "R <round> <target> ok|fail"; Probe waits until two consecutive rounds
// after a change read as expected (a policy change reaches the enforcer
// within a round or two, never at a known instant: no sleeps).
package netprobe

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// Target is one destination the prober tries each round.
type Target struct {
	Name string
	// Check is a shell condition (busybox): true when the target answers.
	Check string
	// Allowed: the policy under test lets the prober reach it.
	Allowed bool
}

// TCP is a Check: it connects to ip:port, sends a line and succeeds once
// the server closes (a listener that closes at once, an HTTP server, NATS
// on a bad protocol line or TLS handshake). A dropped SYN fails within
// nc's 1 s connect timeout.
func TCP(ip string, port int) string {
	return fmt.Sprintf("echo x | timeout 3 nc -w 1 %s %d >/dev/null 2>&1", ip, port)
}

// Script is the prober's shell script: every target each round,
// concurrently (a denied one takes nc's timeout), logged in order.
func Script(targets []Target) string {
	var b strings.Builder
	b.WriteString("i=0\nwhile true; do\n  i=$((i+1))\n")
	for _, tg := range targets {
		fmt.Fprintf(&b, "  ( if %s; then echo ok; else echo fail; fi > /tmp/%s ) &\n", tg.Check, tg.Name)
	}
	b.WriteString("  wait\n")
	for _, tg := range targets {
		fmt.Fprintf(&b, "  echo \"R $i %[1]s $(cat /tmp/%[1]s)\"\n", tg.Name)
	}
	b.WriteString("  sleep 0.2\ndone\n")
	return b.String()
}

// Want is what the targets read when the policy holds: "<name> ok" for an
// allowed one, "<name> fail" for the others.
func Want(targets []Target) []string {
	want := make([]string, len(targets))
	for i, tg := range targets {
		want[i] = tg.Name + " fail"
		if tg.Allowed {
			want[i] = tg.Name + " ok"
		}
	}
	return want
}

// Probe reads the rounds of one prober Pod.
type Probe struct {
	T       *testing.T
	Client  kubernetes.Interface
	NS, Pod string
	// seen is the last round logged before the current step's change.
	seen int
}

// Mark notes the last round logged so far: call it before a change.
func (p *Probe) Mark(ctx context.Context) {
	p.T.Helper()
	data, err := p.Client.CoreV1().Pods(p.NS).GetLogs(p.Pod, &corev1.PodLogOptions{}).DoRaw(ctx)
	require.NoError(p.T, err)
	for n := range parseRounds(string(data)) {
		p.seen = max(p.seen, n)
	}
}

// Expect waits until two consecutive rounds after the last Mark read
// exactly want ("<target> ok|fail", in the prober's order).
func (p *Probe) Expect(ctx context.Context, step string, want ...string) {
	p.T.Helper()
	all := strings.Join(want, "|")
	var rounds map[int]string
	err := wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		data, err := p.Client.CoreV1().Pods(p.NS).GetLogs(p.Pod, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return false, nil
		}
		rounds = parseRounds(string(data))
		complete := func(r string) bool { return strings.Count(r, "|") == len(want)-1 }
		for n := p.seen + 1; complete(rounds[n]) && complete(rounds[n+1]); n++ {
			if rounds[n] == all && rounds[n+1] == all {
				return true, nil
			}
		}
		return false, nil
	})
	last := ""
	for n := p.seen + 1; rounds[n] != ""; n++ {
		last = strconv.Itoa(n) + ": " + rounds[n]
	}
	require.NoError(p.T, err, "%s: never two rounds of %q after round %d (last %s)", step, all, p.seen, last)
}

// parseRounds maps round numbers to "<target> <r>|<target> <r>...".
func parseRounds(log string) map[int]string {
	rounds := map[int]string{}
	for _, line := range strings.Split(log, "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != "R" {
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		if rounds[n] == "" {
			rounds[n] = f[2] + " " + f[3]
		} else {
			rounds[n] += "|" + f[2] + " " + f[3]
		}
	}
	return rounds
}

// Allow is a target the policy lets through; Deny one it blocks.
func Allow(name, check string) Target { return Target{Name: name, Check: check, Allowed: true} }

// Deny is a target the policy blocks.
func Deny(name, check string) Target { return Target{Name: name, Check: check} }
