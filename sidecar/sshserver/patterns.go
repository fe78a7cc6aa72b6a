package sshserver

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// parsePatternList checks a from= pattern list (comma-separated, each entry
// optionally negated with "!", an address, a CIDR prefix, or a wildcard
// pattern with * and ?) and returns its entries. An empty entry or a prefix
// with host bits set (10.0.0.1/8) is an error, as in OpenSSH.
func parsePatternList(list string) ([]string, error) {
	entries := strings.Split(list, ",")
	for _, e := range entries {
		p := strings.TrimPrefix(e, "!")
		if p == "" {
			return nil, errors.New("empty pattern in list")
		}
		if strings.Contains(p, "/") {
			pfx, err := netip.ParsePrefix(p)
			if err != nil {
				return nil, fmt.Errorf("pattern %q: not a CIDR prefix", p)
			}
			if pfx != pfx.Masked() {
				return nil, fmt.Errorf("pattern %q: address has bits set beyond the prefix length", p)
			}
		}
	}
	return entries, nil
}

// matchAddrList applies an OpenSSH pattern list to a client address: it
// matches when some positive entry matches and no negated entry does.
// Hostname patterns are compared with the address text, as sshd does with
// its default UseDNS no (no reverse lookup that a client's DNS could steer).
func matchAddrList(addr string, list []string) bool {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	ip = ip.Unmap().WithZone("")
	text := strings.ToLower(ip.String())
	positive := false
	for _, e := range list {
		p, negated := strings.CutPrefix(e, "!")
		if !matchAddr(ip, text, p) {
			continue
		}
		if negated {
			return false
		}
		positive = true
	}
	return positive
}

func matchAddr(ip netip.Addr, text, pattern string) bool {
	if strings.Contains(pattern, "/") {
		pfx, err := netip.ParsePrefix(pattern)
		return err == nil && pfx.Contains(ip)
	}
	if a, err := netip.ParseAddr(pattern); err == nil {
		return a.Unmap() == ip
	}
	return matchPattern(text, strings.ToLower(pattern))
}

// matchPattern is OpenSSH's wildcard match: * matches any run of characters
// (including none), ? exactly one; everything else is literal. path.Match is
// not this: it gives [ and \ special meanings OpenSSH patterns do not have.
func matchPattern(s, pattern string) bool {
	// Iterative match with single-star backtracking.
	si, pi := 0, 0
	star, mark := -1, 0
	for si < len(s) {
		switch {
		case pi < len(pattern) && (pattern[pi] == '?' || pattern[pi] == s[si]):
			si++
			pi++
		case pi < len(pattern) && pattern[pi] == '*':
			star, mark = pi, si
			pi++
		case star >= 0:
			pi = star + 1
			mark++
			si = mark
		default:
			return false
		}
	}
	for pi < len(pattern) && pattern[pi] == '*' {
		pi++
	}
	return pi == len(pattern)
}
