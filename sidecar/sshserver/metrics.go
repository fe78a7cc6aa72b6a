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
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		connections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runplane_ssh_connections_total",
			Help: "SSH connections by handshake result (ok, auth_failed, handshake_error).",
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
	}
	for _, c := range []prometheus.Collector{m.connections, m.activeConns, m.authAttempts, m.sessions,
		m.activeSessions, m.forwards, m.forwardBytes, m.authorizedKeys, m.keyReloads, m.idleClosed} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
