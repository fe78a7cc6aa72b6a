package sshserver

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// KeyOptions are the restrictions an authorized_keys line puts on its key,
// with OpenSSH sshd(8) "AUTHORIZED_KEYS FILE FORMAT" semantics. The zero
// value is NOT a valid policy: use ParseKeyOptions, which starts from
// OpenSSH's defaults (PTY and port forwarding allowed).
type KeyOptions struct {
	// PTY allows pty-req (no-pty and restrict clear it, pty sets it).
	PTY bool
	// PortForwarding allows direct-tcpip and tcpip-forward
	// (no-port-forwarding and restrict clear it, port-forwarding sets it).
	PortForwarding bool
	// ForceCommand, when HasForceCommand, replaces every shell, exec and
	// subsystem request; the client's command goes in SSH_ORIGINAL_COMMAND.
	ForceCommand    string
	HasForceCommand bool
	// From is the from= pattern list; nil allows any client address.
	From []string
	// PermitOpen limits direct-tcpip to these targets; nil allows any
	// target the server's own rules allow.
	PermitOpen []PermitOpen
}

// PermitOpen is one permitopen="host:port" target. Port 0 is the "*"
// wildcard. Host is compared literally (no name lookup, no patterns), as
// OpenSSH does, except that "*" matches any host.
type PermitOpen struct {
	Host string
	Port uint32
}

// internalSFTP is the forced command that serves the built-in SFTP server,
// as OpenSSH's command="internal-sftp" does.
const internalSFTP = "internal-sftp"

// OptionError says why an authorized_keys line's options refuse its key.
// Reason is a metric label: "unsupported_option" for an option this server
// does not implement, "invalid_option" for one it cannot parse.
type OptionError struct {
	Reason string
	Option string // the option's name only: values may carry secrets
	Detail string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("option %q: %s", e.Option, e.Detail)
}

const (
	reasonUnsupported = "unsupported_option"
	reasonInvalid     = "invalid_option"
	reasonMalformed   = "malformed"
)

// unsupported lists the OpenSSH options this server does not implement, with
// why. A line carrying one is refused: ignoring a restriction would grant
// more than the file says.
var unsupported = map[string]string{
	"cert-authority":    "certificate authorities are not supported",
	"principals":        "certificate principals are not supported",
	"tunnel":            "tun device forwarding is not supported",
	"expiry-time":       "key expiry is not implemented",
	"environment":       "setting environment variables from keys is refused",
	"permitlisten":      "remote forward listen restrictions are not implemented",
	"touch-required":    "FIDO touch policy options are not implemented",
	"no-touch-required": "FIDO touch policy options are not implemented",
	"verify-required":   "FIDO user verification is not implemented",
}

// ParseKeyOptions evaluates the options of one authorized_keys line, as
// ssh.ParseAuthorizedKey returns them (split at unquoted commas, quotes
// kept). Names are case-insensitive; flags apply left to right, so
// "restrict,pty" allows a PTY and "pty,restrict" does not. Any option this
// server does not implement, or cannot parse, is an *OptionError: the
// caller must refuse the line.
func ParseKeyOptions(opts []string) (KeyOptions, error) {
	o := KeyOptions{PTY: true, PortForwarding: true}
	for _, opt := range opts {
		name, value, hasValue := strings.Cut(opt, "=")
		name = strings.ToLower(name)
		if reason, ok := unsupported[name]; ok {
			return KeyOptions{}, &OptionError{Reason: reasonUnsupported, Option: name, Detail: reason}
		}
		if flag, ok := flagOption(&o, name); ok {
			if hasValue {
				return KeyOptions{}, &OptionError{Reason: reasonInvalid, Option: name, Detail: "takes no value"}
			}
			*flag.field = flag.value
			continue
		}
		if !isValueOption(name) {
			return KeyOptions{}, &OptionError{Reason: reasonUnsupported, Option: name, Detail: "unknown option"}
		}
		if !hasValue {
			return KeyOptions{}, &OptionError{Reason: reasonInvalid, Option: name, Detail: `needs a value: ` + name + `="..."`}
		}
		v, err := dequote(value)
		if err != nil {
			return KeyOptions{}, &OptionError{Reason: reasonInvalid, Option: name, Detail: err.Error()}
		}
		if err := o.setValue(name, v); err != nil {
			return KeyOptions{}, &OptionError{Reason: reasonInvalid, Option: name, Detail: err.Error()}
		}
	}
	return o, nil
}

type flagSetting struct {
	field *bool
	value bool
}

// flagOption maps a flag option to the field it sets. Options for features
// this server never offers (agent and X11 forwarding, ~/.ssh/rc) are
// accepted: their "no-" forms hold by construction and their positive forms
// grant nothing that exists here. restrict is handled in place.
func flagOption(o *KeyOptions, name string) (flagSetting, bool) {
	var none bool
	switch name {
	case "restrict":
		// restrict also disables agent, X11 and user-rc: never offered.
		o.PTY, o.PortForwarding = false, false
		return flagSetting{field: &none}, true
	case "pty":
		return flagSetting{&o.PTY, true}, true
	case "no-pty":
		return flagSetting{&o.PTY, false}, true
	case "port-forwarding":
		return flagSetting{&o.PortForwarding, true}, true
	case "no-port-forwarding":
		return flagSetting{&o.PortForwarding, false}, true
	case "agent-forwarding", "no-agent-forwarding", "x11-forwarding", "no-x11-forwarding", "user-rc", "no-user-rc":
		return flagSetting{field: &none}, true
	}
	return flagSetting{}, false
}

func isValueOption(name string) bool {
	return name == "command" || name == "from" || name == "permitopen"
}

func (o *KeyOptions) setValue(name, v string) error {
	switch name {
	case "command":
		if o.HasForceCommand {
			return errors.New(`more than one command= option`)
		}
		if strings.HasPrefix(v, internalSFTP+" ") || strings.HasPrefix(v, internalSFTP+"\t") {
			return errors.New("internal-sftp arguments are not supported")
		}
		o.ForceCommand, o.HasForceCommand = v, true
	case "from":
		if o.From != nil {
			return errors.New(`more than one from= option`)
		}
		list, err := parsePatternList(v)
		if err != nil {
			return err
		}
		o.From = list
	case "permitopen":
		p, err := parsePermitOpen(v)
		if err != nil {
			return err
		}
		o.PermitOpen = append(o.PermitOpen, p)
	}
	return nil
}

// dequote undoes OpenSSH's option quoting: the value must be enclosed in
// double quotes, and \" inside stands for a quote. Other backslashes are
// kept, as OpenSSH keeps them.
func dequote(v string) (string, error) {
	if len(v) < 2 || v[0] != '"' {
		return "", errors.New(`value must be in double quotes`)
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		if c == '\\' && i+1 < len(v) && v[i+1] == '"' {
			b.WriteByte('"')
			i++
			continue
		}
		if c == '"' {
			if i != len(v)-1 {
				return "", errors.New("text after the closing quote")
			}
			return b.String(), nil
		}
		b.WriteByte(c)
	}
	return "", errors.New("missing closing quote")
}

func parsePermitOpen(v string) (PermitOpen, error) {
	host, port, err := net.SplitHostPort(v)
	if err != nil || host == "" {
		return PermitOpen{}, fmt.Errorf("want host:port (IPv6 in brackets): %q", v)
	}
	if port == "*" {
		return PermitOpen{Host: host}, nil
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return PermitOpen{}, fmt.Errorf("port %q: want 1-65535 or *", port)
	}
	return PermitOpen{Host: host, Port: uint32(n)}, nil
}

// AllowsOpen reports whether a direct-tcpip request for host:port passes the
// permitopen list (true when there is none).
func (o KeyOptions) AllowsOpen(host string, port uint32) bool {
	return permitOpenAllows(o.PermitOpen, host, port)
}

func permitOpenAllows(list []PermitOpen, host string, port uint32) bool {
	if list == nil {
		return true
	}
	for _, p := range list {
		if (p.Port == 0 || p.Port == port) && (p.Host == "*" || p.Host == host) {
			return true
		}
	}
	return false
}

// AllowsFrom reports whether a client at addr (an IP address, no port)
// passes the from= list (true when there is none).
func (o KeyOptions) AllowsFrom(addr string) bool {
	if o.From == nil {
		return true
	}
	return matchAddrList(addr, o.From)
}
