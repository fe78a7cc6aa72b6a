package sshserver

import "github.com/prometheus/client_golang/prometheus"

// metrics are the server's Prometheus series. Labels carry outcomes and
// kinds only, never user names, keys, commands or addresses.
type metrics struct {
	connections    *prometheus.CounterVec
	activeConns    prometheus.Gauge
	authAttempts   *prometheus.CounterVec
	sessions       *prometheus.CounterVec
	activeSessions prometheus.Gauge
	forwards       *prometheus.CounterVec
	forwardBytes   *prometheus.CounterVec
	authorizedKeys prometheus.Gauge
	keyReloads     *prometheus.CounterVec
	idleClosed     prometheus.Counter

	refusedLines           *prometheus.GaugeVec
	keyRefusals            *prometheus.CounterVec
	optionDenials          *prometheus.CounterVec
	chansRejected          *prometheus.CounterVec
	unauthRefused          prometheus.Counter
	unauthPerSourceRefused prometheus.Counter
	unauthActive           prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		connections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runplane_ssh_connections_total",
			Help: "SSH connections by handshake result (ok, auth_failed, login_timeout, handshake_error).",
		}, []string{"result"}),
		activeConns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "runplane_ssh_connections_active",
			Help: "Authenticated SSH connections currently open.",
		}),
		authAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runplane_ssh_auth_attempts_total",
			Help: "Authentication attempts by method and result.",
		}, []string{"method", "result"}),
		sessions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runplane_ssh_sessions_total",
			Help: "Sessions started, by kind (shell, exec, sftp).",
		}, []string{"kind"}),
		activeSessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "runplane_ssh_sessions_active",
			Help: "Sessions currently running.",
		}),
		forwards: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runplane_ssh_forwards_total",
			Help: "Port forwarding channels and requests by direction (local, remote) and result.",
		}, []string{"direction", "result"}),
		forwardBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runplane_ssh_forward_bytes_total",
			Help: "Bytes carried by forwarded connections, by direction (local, remote).",
		}, []string{"direction"}),
		authorizedKeys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "runplane_ssh_authorized_keys",
			Help: "Keys currently listed in authorized_keys.",
		}),
		keyReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runplane_ssh_authorized_keys_reloads_total",
			Help: "authorized_keys reloads by result (ok, error).",
		}, []string{"result"}),
		idleClosed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "runplane_ssh_idle_disconnects_total",
			Help: "Connections closed by the idle timeout.",
		}),
		refusedLines: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "runplane_ssh_authorized_keys_refused_lines",
			Help: "authorized_keys lines that grant nothing, by reason (unsupported_option, invalid_option, malformed).",
		}, []string{"reason"}),
		keyRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runplane_ssh_key_refusals_total",
			Help: "Logins with a listed key refused by its authorized_keys line, by reason (from: client address not permitted, options: key only on refused lines).",
		}, []string{"reason"}),
		optionDenials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runplane_ssh_key_option_denials_total",
			Help: "Requests denied by the key's authorized_keys options, by option (pty, port-forwarding, permitopen).",
		}, []string{"option"}),
		chansRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runplane_ssh_channels_rejected_total",
			Help: "Channel opens rejected, by reason (limit: --max-channels reached, unknown_type).",
		}, []string{"reason"}),
		unauthRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "runplane_ssh_unauthenticated_refused_total",
			Help: "Connections closed before the handshake because --max-unauthenticated were already in progress.",
		}),
		unauthPerSourceRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "runplane_ssh_unauthenticated_per_source_refused_total",
			Help: "Connections closed before the handshake because --max-unauthenticated-per-source of the same client address were already in progress.",
		}),
		unauthActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "runplane_ssh_unauthenticated_connections",
			Help: "Connections accepted and not yet authenticated (handshake in progress).",
		}),
	}
	for _, c := range []prometheus.Collector{m.connections, m.activeConns, m.authAttempts, m.sessions,
		m.activeSessions, m.forwards, m.forwardBytes, m.authorizedKeys, m.keyReloads, m.idleClosed,
		m.refusedLines, m.keyRefusals, m.optionDenials, m.chansRejected, m.unauthRefused, m.unauthPerSourceRefused, m.unauthActive} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range []string{reasonUnsupported, reasonInvalid, reasonMalformed} {
		m.refusedLines.WithLabelValues(r).Set(0)
	}
	return m, nil
}
