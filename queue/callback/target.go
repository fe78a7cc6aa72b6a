// Package callback delivers completion callbacks: when an invocation with
// a callback URL (its callbackURL, or its pool's runplane.io/callback-url)
// reaches a terminal state, the activator's leader POSTs the Record to
// the URL, signed with the namespace's key (sign.go), retrying with
// backoff and recording every attempt in the Record (deliver.go). Targets
// are restricted (target.go) so a tenant cannot make runplane reach what
// only runplane can reach (SSRF).
package callback

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// Targets decides which addresses a callback may reach. Every address
// that is not globally routable is refused — loopback, private (RFC 1918,
// fc00::/7), link-local (169.254/16 with the cloud metadata endpoints,
// fe80::/10), shared CGNAT space, unspecified, multicast, reserved — and
// so are the Deny prefixes (e.g. a cluster's public Pod and Service
// ranges); Allow prefixes are let through even so (a chart value: an
// in-cluster receiver the operator vouches for). Allow wins.
type Targets struct {
	Allow, Deny []netip.Prefix
}

// refused are the non-public ranges Go's netip predicates do not cover.
var refused = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // shared address space (CGNAT)
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, broadcast
	netip.MustParsePrefix("64:ff9b::/96"),    // NAT64: embeds any IPv4
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("2002::/16"),       // 6to4: embeds any IPv4
	netip.MustParsePrefix("2001::/32"),       // Teredo
	netip.MustParsePrefix("100::/64"),        // discard
	netip.MustParsePrefix("::/96"),           // IPv4-compatible (deprecated): ::7f00:1 is 127.0.0.1
	netip.MustParsePrefix("::ffff:0:0:0/96"), // SIIT IPv4-translated: embeds any IPv4
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated, still routed internally)
}

// Permitted reports why ip may not be reached (nil: it may).
func (t Targets) Permitted(ip netip.Addr) error {
	ip = ip.Unmap() // ::ffff:10.0.0.1 is 10.0.0.1
	for _, p := range t.Allow {
		if p.Contains(ip) {
			return nil
		}
	}
	switch {
	case !ip.IsValid():
		return errors.New("not an IP address")
	case ip.IsLoopback():
		return fmt.Errorf("%s is a loopback address", ip)
	case ip.IsPrivate():
		return fmt.Errorf("%s is a private address", ip)
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return fmt.Errorf("%s is a link-local address", ip)
	case ip.IsUnspecified(), ip.IsMulticast(), ip.IsInterfaceLocalMulticast():
		return fmt.Errorf("%s is not a unicast address", ip)
	}
	for _, p := range refused {
		if p.Contains(ip) {
			return fmt.Errorf("%s is in the reserved range %s", ip, p)
		}
	}
	for _, p := range t.Deny {
		if p.Contains(ip) {
			return fmt.Errorf("%s is in the denied range %s", ip, p)
		}
	}
	return nil
}

// MaxURLLength bounds a callback URL.
const MaxURLLength = 2048

// internalSuffixes are host names that name cluster-internal or local
// services: refused by name, before any lookup.
var internalSuffixes = []string{".svc", ".cluster.local", ".local", ".localhost", ".internal"}

// ValidateURL checks a callback URL when it is accepted: absolute http or
// https, a host, no credentials, no cluster-internal name, and a literal
// IP only where Permitted. A host name is resolved only when the callback
// is delivered, and its address checked then (Client).
func (t Targets) ValidateURL(raw string) error {
	if len(raw) > MaxURLLength {
		return fmt.Errorf("callback URL of %d characters: at most %d", len(raw), MaxURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("callback URL %q: %w", raw, err)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return fmt.Errorf("callback URL %q: the scheme must be https or http", raw)
	}
	if u.User != nil {
		return fmt.Errorf("callback URL %q: must not carry credentials", raw)
	}
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if host == "" {
		return fmt.Errorf("callback URL %q: no host", raw)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if err := t.Permitted(ip); err != nil {
			return fmt.Errorf("callback URL %q: %w", raw, err)
		}
		return nil
	}
	if host == "localhost" || !strings.Contains(host, ".") {
		return fmt.Errorf("callback URL %q: %q is not a public host name", raw, host)
	}
	for _, s := range internalSuffixes {
		if strings.HasSuffix(host, s) {
			return fmt.Errorf("callback URL %q: %q names a cluster-internal or local host", raw, host)
		}
	}
	return nil
}

// Client is the HTTP client callbacks are sent with. The address check
// sits in the dialer's Control hook, which sees the very IP being
// connected to after resolution: a name that resolves to a public address
// when checked and to a private one when dialled (DNS rebinding) is
// still refused, and so is every address of a name with several. No
// proxy (the environment's could reach anything) and no redirects (a
// public target could send the POST on to a private one).
func (t Targets) Client(timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: timeout, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("callback target %s: %w", address, err)
		}
		if err := t.Permitted(ap.Addr()); err != nil {
			return &RefusedError{Addr: address, Reason: err}
		}
		return nil
	}}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       30 * time.Second,
	}
	return &http.Client{Transport: tr, Timeout: timeout, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
}

// RefusedError is a callback target address Targets refuses. Its text
// names neither the address nor why it is refused: it ends up in the
// Record its tenant reads, and a host name's addresses are the cluster
// resolver's to know (a tenant could map internal names through them).
// Addr and Reason are for the operator's log.
type RefusedError struct {
	Addr   string
	Reason error
}

func (e *RefusedError) Error() string {
	return "callback target refused: it resolves to a denied address" + refusedHint
}

const refusedHint = " (runplane does not call private or cluster-internal addresses; chart queue.callbacks.allowCIDRs)"

// attemptError is what a Record tells its tenant of a POST to rawURL that
// failed with err: the host the tenant named and what went wrong, never an
// address it resolved to nor the queue's own (net.OpError carries both).
func attemptError(rawURL string, err error) string {
	host := rawURL
	if u, perr := url.Parse(rawURL); perr == nil {
		host = u.Host
	}
	var (
		re     *RefusedError
		dnsE   *net.DNSError
		opE    *net.OpError
		netE   net.Error
		target = "callback target " + host
	)
	switch {
	case errors.As(err, &re):
		return target + " refused: it resolves to a denied address" + refusedHint
	case errors.As(err, &dnsE) && dnsE.IsNotFound:
		return target + ": no such host"
	case errors.As(err, &dnsE):
		return target + ": its name could not be resolved" // the error names the resolver's address
	case errors.As(err, &netE) && netE.Timeout():
		return target + ": timed out"
	case errors.As(err, &opE):
		return fmt.Sprintf("%s: %s: %v", target, opE.Op, opE.Err)
	}
	return err.Error()
}

// ParsePrefixes parses CIDRs (or single addresses) of a flag or chart value.
func ParsePrefixes(vals []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range vals {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if p, err := netip.ParsePrefix(v); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("%q is neither a CIDR nor an IP address", v)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}
