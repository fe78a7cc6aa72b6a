package sshserver

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
)

// The ssh.Permissions entries that carry a key's options from the
// PublicKeyCallback to the channel handlers. They follow the OpenSSH
// certificate vocabulary (PROTOCOL.certkeys): restrictions are critical
// options, allowances are extensions, so a missing entry denies.
const (
	critForceCommand   = "force-command"
	critPermitOpen     = "runplane-permitopen" // newline-separated host:port, port may be *
	extPermitPTY       = "permit-pty"
	extPermitPortFwd   = "permit-port-forwarding"
	extFingerprint     = "runplane-key-fp"
	extAuthorizedLine  = "runplane-key-line"
	permitOpenAnyPort  = "*"
	permitOpenListSep  = "\n"
	internalSFTPOrigin = internalSFTP // SSH_ORIGINAL_COMMAND of a forced sftp subsystem
)

// permissions encodes o for ssh.Permissions. fingerprint and line are
// carried for the logs.
func (o KeyOptions) permissions(fingerprint string, line int) *ssh.Permissions {
	p := &ssh.Permissions{
		CriticalOptions: map[string]string{},
		Extensions:      map[string]string{extFingerprint: fingerprint, extAuthorizedLine: strconv.Itoa(line)},
	}
	if o.PTY {
		p.Extensions[extPermitPTY] = ""
	}
	if o.PortForwarding {
		p.Extensions[extPermitPortFwd] = ""
	}
	if o.HasForceCommand {
		p.CriticalOptions[critForceCommand] = o.ForceCommand
	}
	if o.PermitOpen != nil {
		list := make([]string, len(o.PermitOpen))
		for i, po := range o.PermitOpen {
			port := permitOpenAnyPort
			if po.Port != 0 {
				port = strconv.Itoa(int(po.Port))
			}
			list[i] = net.JoinHostPort(po.Host, port)
		}
		p.CriticalOptions[critPermitOpen] = strings.Join(list, permitOpenListSep)
	}
	return p
}

// grants is what an authenticated connection may do, decoded from its
// ssh.Permissions.
type grants struct {
	pty            bool
	portForwarding bool
	forceCommand   *string
	permitOpen     []PermitOpen // nil: no permitopen restriction
}

// grantsFrom decodes permissions written by KeyOptions.permissions. Nil or
// unknown critical options deny everything: a restriction the handlers do
// not understand must not be dropped.
func grantsFrom(p *ssh.Permissions) (grants, error) {
	if p == nil {
		return grants{}, fmt.Errorf("no permissions")
	}
	var g grants
	_, g.pty = p.Extensions[extPermitPTY]
	_, g.portForwarding = p.Extensions[extPermitPortFwd]
	for name, v := range p.CriticalOptions {
		switch name {
		case critForceCommand:
			cmd := v
			g.forceCommand = &cmd
		case critPermitOpen:
			g.permitOpen = []PermitOpen{}
			for _, e := range strings.Split(v, permitOpenListSep) {
				po, err := parsePermitOpen(e)
				if err != nil {
					return grants{}, fmt.Errorf("permitopen %q: %w", e, err)
				}
				g.permitOpen = append(g.permitOpen, po)
			}
		default:
			return grants{}, fmt.Errorf("unknown critical option %q", name)
		}
	}
	return g, nil
}

// denyOpen checks a direct-tcpip request against the key's options. It
// returns the denying option's metric label and a message for the client,
// or "" when the options allow it (the server's own Pod-only rule still
// applies after).
func (g grants) denyOpen(host string, port uint32) (option, why string) {
	if !g.portForwarding {
		return "port-forwarding", "port forwarding is disabled for this key (no-port-forwarding or restrict)"
	}
	if !permitOpenAllows(g.permitOpen, host, port) {
		return "permitopen", fmt.Sprintf("%s is not in this key's permitopen list",
			net.JoinHostPort(host, strconv.Itoa(int(port))))
	}
	return "", ""
}
