package egress

import (
	"net/netip"
	"slices"
)

// DeniedIPv4 and DeniedIPv6 are the ranges a restricted Pod never reaches,
// whatever the cluster: where cluster networks, nodes, cloud metadata and
// translators to them live. IPv4-mapped IPv6 (::ffff:0:0/96) is not listed:
// it never travels on the wire, and Go's net.ParseCIDR, which policy
// implementations use, reads it as the whole of IPv4.
var (
	DeniedIPv4 = []string{
		"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", // RFC 1918 private
		"100.64.0.0/10",  // RFC 6598 shared (CGNAT)
		"169.254.0.0/16", // link-local: cloud metadata at 169.254.169.254
		"127.0.0.0/8",    // loopback
		"0.0.0.0/8",      // "this network": 0.0.0.0 reaches the host's own listeners
		"192.0.0.0/24",   // IETF protocol assignments
		"198.18.0.0/15",  // benchmarking, used as private space
		"192.88.99.0/24", // 6to4 relay anycast: relays into IPv6
		"224.0.0.0/4",    // multicast
		"240.0.0.0/4",    // reserved, broadcast
	}
	DeniedIPv6 = []string{
		"fc00::/7",       // unique local
		"fe80::/10",      // link-local
		"fec0::/10",      // deprecated site-local
		"::1/128",        // loopback
		"::/128",         // unspecified
		"64:ff9b::/96",   // NAT64 well-known prefix: reaches any IPv4 address
		"64:ff9b:1::/48", // NAT64 local-use prefix
		"2002::/16",      // 6to4: embeds an IPv4 address
		"2001::/32",      // Teredo: embeds an IPv4 address
		"ff00::/8",       // multicast
	}
)

// deniedPrefixes is every denied range, built in first, then extra, in
// canonical form (host bits cleared: "10.1.2.3/8" is 10.0.0.0/8, as every
// policy implementation reads it), without duplicates.
func deniedPrefixes(extra []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, c := range slices.Concat(DeniedIPv4, DeniedIPv6) {
		out = append(out, netip.MustParsePrefix(c))
	}
	for _, p := range extra {
		if p = p.Masked(); !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}
