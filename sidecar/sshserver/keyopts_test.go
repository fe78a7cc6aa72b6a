package sshserver

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
)

// parseLine runs a full authorized_keys line through ssh.ParseAuthorizedKey
// (the library's option splitting) and ParseKeyOptions.
func parseLine(t *testing.T, opts string) (KeyOptions, error) {
	t.Helper()
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(newPub(t))))
	if opts != "" {
		line = opts + " " + line
	}
	_, _, o, _, err := ssh.ParseAuthorizedKey([]byte(line))
	require.NoError(t, err, "ssh.ParseAuthorizedKey(%q)", line)
	return ParseKeyOptions(o)
}

func TestParseKeyOptions(t *testing.T) {
	defaults := KeyOptions{PTY: true, PortForwarding: true}
	tests := []struct {
		name       string
		opts       string
		want       KeyOptions
		wantReason string // non-empty: refused with this reason
		wantOption string
	}{
		{name: "none", want: defaults},
		{name: "no-pty", opts: "no-pty", want: KeyOptions{PortForwarding: true}},
		{name: "no-port-forwarding", opts: "no-port-forwarding", want: KeyOptions{PTY: true}},
		{name: "names are case-insensitive", opts: "No-PTY,NO-Port-Forwarding", want: KeyOptions{}},
		{name: "restrict", opts: "restrict", want: KeyOptions{}},
		{name: "restrict then pty", opts: "restrict,pty", want: KeyOptions{PTY: true}},
		{name: "restrict then port-forwarding", opts: "restrict,port-forwarding", want: KeyOptions{PortForwarding: true}},
		{name: "pty before restrict is cleared", opts: "pty,restrict", want: KeyOptions{}},
		{name: "last flag wins", opts: "no-pty,pty", want: defaults},
		{name: "never-offered features are accepted", opts: "no-agent-forwarding,no-X11-forwarding,no-user-rc,agent-forwarding,x11-forwarding,user-rc", want: defaults},
		{name: "command", opts: `command="echo hi"`, want: KeyOptions{PTY: true, PortForwarding: true, ForceCommand: "echo hi", HasForceCommand: true}},
		{name: "command with escaped quotes and commas", opts: `command="echo \"a,b\" \\n",no-pty`,
			want: KeyOptions{PortForwarding: true, ForceCommand: `echo "a,b" \\n`, HasForceCommand: true}},
		{name: "empty command", opts: `command=""`, want: KeyOptions{PTY: true, PortForwarding: true, HasForceCommand: true}},
		{name: "COMMAND upper case", opts: `COMMAND="x"`, want: KeyOptions{PTY: true, PortForwarding: true, ForceCommand: "x", HasForceCommand: true}},
		{name: "internal-sftp", opts: `restrict,command="internal-sftp"`, want: KeyOptions{ForceCommand: "internal-sftp", HasForceCommand: true}},
		{name: "from", opts: `from="10.0.0.0/8,!10.1.2.3,192.168.*"`,
			want: KeyOptions{PTY: true, PortForwarding: true, From: []string{"10.0.0.0/8", "!10.1.2.3", "192.168.*"}}},
		{name: "permitopen repeated", opts: `permitopen="localhost:8888",permitopen="[::1]:*",permitopen="*:22"`,
			want: KeyOptions{PTY: true, PortForwarding: true, PermitOpen: []PermitOpen{{"localhost", 8888}, {"::1", 0}, {"*", 22}}}},

		{name: "cert-authority", opts: "cert-authority", wantReason: reasonUnsupported, wantOption: "cert-authority"},
		{name: "principals", opts: `principals="alice"`, wantReason: reasonUnsupported, wantOption: "principals"},
		{name: "tunnel", opts: `tunnel="0"`, wantReason: reasonUnsupported, wantOption: "tunnel"},
		{name: "expiry-time", opts: `expiry-time="20300101"`, wantReason: reasonUnsupported, wantOption: "expiry-time"},
		{name: "environment", opts: `environment="LD_PRELOAD=/x.so"`, wantReason: reasonUnsupported, wantOption: "environment"},
		{name: "permitlisten", opts: `permitlisten="8080"`, wantReason: reasonUnsupported, wantOption: "permitlisten"},
		{name: "verify-required", opts: "verify-required", wantReason: reasonUnsupported, wantOption: "verify-required"},
		{name: "no-touch-required", opts: "no-touch-required", wantReason: reasonUnsupported, wantOption: "no-touch-required"},
		{name: "unknown option", opts: "no-pty,frobnicate", wantReason: reasonUnsupported, wantOption: "frobnicate"},
		{name: "unsupported after supported still refuses", opts: `restrict,Cert-Authority`, wantReason: reasonUnsupported, wantOption: "cert-authority"},

		{name: "unquoted value", opts: "from=10.0.0.1", wantReason: reasonInvalid, wantOption: "from"},
		{name: "text after the closing quote", opts: `command="a"b`, wantReason: reasonInvalid, wantOption: "command"},
		{name: "value option without value", opts: "command", wantReason: reasonInvalid, wantOption: "command"},
		{name: "flag with a value", opts: `no-pty="yes"`, wantReason: reasonInvalid, wantOption: "no-pty"},
		{name: "two commands", opts: `command="a",command="b"`, wantReason: reasonInvalid, wantOption: "command"},
		{name: "two froms", opts: `from="a",from="b"`, wantReason: reasonInvalid, wantOption: "from"},
		{name: "internal-sftp arguments", opts: `command="internal-sftp -R"`, wantReason: reasonInvalid, wantOption: "command"},
		{name: "empty from entry", opts: `from="10.0.0.1,,10.0.0.2"`, wantReason: reasonInvalid, wantOption: "from"},
		{name: "negated nothing", opts: `from="!"`, wantReason: reasonInvalid, wantOption: "from"},
		{name: "host bits beyond the mask", opts: `from="10.0.0.1/8"`, wantReason: reasonInvalid, wantOption: "from"},
		{name: "bad prefix", opts: `from="10.0.0.0/40"`, wantReason: reasonInvalid, wantOption: "from"},
		{name: "permitopen without port", opts: `permitopen="localhost"`, wantReason: reasonInvalid, wantOption: "permitopen"},
		{name: "permitopen port 0", opts: `permitopen="localhost:0"`, wantReason: reasonInvalid, wantOption: "permitopen"},
		{name: "permitopen port range", opts: `permitopen="localhost:70000"`, wantReason: reasonInvalid, wantOption: "permitopen"},
		{name: "permitopen empty host", opts: `permitopen=":22"`, wantReason: reasonInvalid, wantOption: "permitopen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseLine(t, tt.opts)
			if tt.wantReason != "" {
				var oe *OptionError
				require.ErrorAs(t, err, &oe, "options %q: want a refusal", tt.opts)
				assert.Equal(t, tt.wantReason, oe.Reason)
				assert.Equal(t, tt.wantOption, oe.Option)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestMatchAddrList(t *testing.T) {
	tests := []struct {
		list string
		addr string
		want bool
	}{
		{"127.0.0.1", "127.0.0.1", true},
		{"127.0.0.1", "127.0.0.2", false},
		{"127.0.0.0/8", "127.9.9.9", true},
		{"10.0.0.0/8", "127.0.0.1", false},
		{"!127.0.0.1,*", "127.0.0.1", false},
		{"!127.0.0.1,*", "10.1.1.1", true},
		{"*,!127.0.0.0/8", "127.0.0.1", false},
		{"!10.0.0.0/8", "192.168.1.1", false}, // only negations: nothing positive matched
		{"127.0.0.?", "127.0.0.1", true},
		{"127.0.0.?", "127.0.0.12", false},
		{"127.*", "127.0.0.1", true},
		{"*.example.com", "127.0.0.1", false}, // names match the address text only (UseDNS no)
		{"::1", "::1", true},
		{"::1/128", "::1", true},
		{"FE80::*", "fe80::1", true},
		{"127.0.0.1", "::ffff:127.0.0.1", true}, // IPv4-mapped client
		{"127.0.0.0/8", "::1", false},
		{"*", "not-an-address", false},
	}
	for _, tt := range tests {
		t.Run(tt.list+" "+tt.addr, func(t *testing.T) {
			list, err := parsePatternList(tt.list)
			require.NoError(t, err)
			assert.Equal(t, tt.want, matchAddrList(tt.addr, list))
		})
	}
}

func TestMatchPattern(t *testing.T) {
	tests := []struct {
		s, p string
		want bool
	}{
		{"", "", true},
		{"", "*", true},
		{"abc", "*", true},
		{"abc", "a*c", true},
		{"abc", "a?c", true},
		{"ac", "a?c", false},
		{"abcbc", "a*bc", true},
		{"abcbd", "a*bc", false},
		{"a[b]", "a[b]", true}, // [ is literal, unlike path.Match
		{`a\b`, `a\b`, true},
		{"abc", "**c", true},
		{"abc", "ab", false},
	}
	for _, tt := range tests {
		t.Run(tt.s+" "+tt.p, func(t *testing.T) {
			assert.Equal(t, tt.want, matchPattern(tt.s, tt.p))
		})
	}
}

func TestKeyOptionsAllowsOpen(t *testing.T) {
	o, err := parseLine(t, `permitopen="localhost:8888",permitopen="127.0.0.1:*",permitopen="[::1]:22"`)
	require.NoError(t, err)
	tests := []struct {
		host string
		port uint32
		want bool
	}{
		{"localhost", 8888, true},
		{"localhost", 8889, false},
		{"LOCALHOST", 8888, false}, // literal, as in OpenSSH
		{"127.0.0.1", 1, true},
		{"127.0.0.1", 65535, true},
		{"::1", 22, true},
		{"::1", 23, false},
		{"127.0.0.2", 8888, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, o.AllowsOpen(tt.host, tt.port), "%s:%d", tt.host, tt.port)
	}
	anyHost, err := parseLine(t, `permitopen="*:8888"`)
	require.NoError(t, err)
	assert.True(t, anyHost.AllowsOpen("10.0.0.1", 8888))
	assert.False(t, anyHost.AllowsOpen("10.0.0.1", 22))
	none, err := parseLine(t, "")
	require.NoError(t, err)
	assert.True(t, none.AllowsOpen("anything", 1), "no permitopen: options do not restrict")
}

// TestPermissionsRoundTrip checks the options survive the trip through
// ssh.Permissions, and that anything unexpected there denies.
func TestPermissionsRoundTrip(t *testing.T) {
	tests := []struct {
		opts string
		want grants
	}{
		{"", grants{pty: true, portForwarding: true}},
		{"restrict", grants{}},
		{"restrict,pty", grants{pty: true}},
		{`restrict,port-forwarding,permitopen="localhost:8888",permitopen="[::1]:*"`,
			grants{portForwarding: true, permitOpen: []PermitOpen{{"localhost", 8888}, {"::1", 0}}}},
		{`command="echo x"`, grants{pty: true, portForwarding: true, forceCommand: ptr("echo x")}},
		{`command=""`, grants{pty: true, portForwarding: true, forceCommand: ptr("")}},
	}
	for _, tt := range tests {
		t.Run(tt.opts, func(t *testing.T) {
			o, err := parseLine(t, tt.opts)
			require.NoError(t, err)
			p := o.permissions("SHA256:x", 3)
			assert.Equal(t, "SHA256:x", p.Extensions[extFingerprint])
			assert.Equal(t, "3", p.Extensions[extAuthorizedLine])
			g, err := grantsFrom(p)
			require.NoError(t, err)
			assert.Equal(t, tt.want, g)
		})
	}
	_, err := grantsFrom(nil)
	require.Error(t, err, "nil permissions must not grant")
	_, err = grantsFrom(&ssh.Permissions{CriticalOptions: map[string]string{"source-address": "10.0.0.1"}})
	require.ErrorContains(t, err, "source-address", "an unknown restriction must not be dropped")
	g, err := grantsFrom(&ssh.Permissions{})
	require.NoError(t, err)
	assert.Equal(t, grants{}, g, "no extensions: nothing permitted")
}

func TestDenyOpen(t *testing.T) {
	g := grants{portForwarding: true, permitOpen: []PermitOpen{{"127.0.0.1", 80}}}
	opt, _ := g.denyOpen("127.0.0.1", 80)
	assert.Empty(t, opt)
	opt, why := g.denyOpen("127.0.0.1", 81)
	assert.Equal(t, "permitopen", opt)
	assert.Contains(t, why, "127.0.0.1:81")
	opt, _ = grants{}.denyOpen("127.0.0.1", 80)
	assert.Equal(t, "port-forwarding", opt)
}

func ptr[T any](v T) *T { return &v }
