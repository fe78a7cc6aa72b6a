package sidecar

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/pki"
)

func TestConfigFromEnv(t *testing.T) {
	full := map[string]string{
		api.EnvPool: "echo", api.EnvWorkerName: "echo-abc", api.EnvWorkerNamespace: "team-a",
		api.EnvNATSURL: "nats://nats:4222",
	}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range full {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "<unset>" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	tests := []struct {
		name    string
		env     map[string]string
		wantErr []string // substrings; empty = success
		check   func(t *testing.T, c Config)
	}{
		{name: "defaults", env: full, check: func(t *testing.T, c Config) {
			assert.Equal(t, 1, c.Concurrency)
			assert.Equal(t, api.DefaultFrameworkSocket, c.FrameworkSocket)
			assert.Equal(t, "/invoke", c.InvokePath)
			assert.Equal(t, "/healthz", c.HealthPath)
			assert.Equal(t, api.DefaultSubjectPrefix, c.SubjectPrefix)
			assert.Equal(t, api.DefaultStreamName, c.StreamName)
			assert.Equal(t, ":8091", c.HTTPAddr)
			assert.Equal(t, "127.0.0.1:8092", c.MetricsAddr, "metrics on loopback")
			assert.Equal(t, api.NATSTokenFile, c.NATSTokenFile)
		}},
		{name: "everything set", env: with(api.EnvConcurrency, "4", api.EnvFrameworkSocket, "/s/f.sock", api.EnvFrameworkInvokePath, "/run",
			api.EnvFrameworkHealthPath, "/ok", api.EnvSubjectPrefix, "p", api.EnvStreamName, "S", api.EnvSidecarHTTPAddr, "127.0.0.1:9",
			api.EnvSidecarMetricsAddr, "127.0.0.1:7", api.EnvNATSTokenFile, "/t/token", api.EnvShutdownGraceSeconds, "915"), check: func(t *testing.T, c Config) {
			assert.Equal(t, 915*time.Second, c.ShutdownGrace)
			assert.Equal(t, 4, c.Concurrency)
			assert.Equal(t, "/s/f.sock", c.FrameworkSocket)
			assert.Equal(t, "/run", c.InvokePath)
			assert.Equal(t, "/ok", c.HealthPath)
			assert.Equal(t, "p", c.SubjectPrefix)
			assert.Equal(t, "S", c.StreamName)
			assert.Equal(t, "127.0.0.1:9", c.HTTPAddr)
			assert.Equal(t, "127.0.0.1:7", c.MetricsAddr)
			assert.Equal(t, "/t/token", c.NATSTokenFile)
		}},
		{name: "seed names as fallback", env: with(api.EnvWorkerName, "<unset>", api.EnvSeedWorkerName, "seed-w", api.EnvSeedSocketPath, "/seed.sock"),
			check: func(t *testing.T, c Config) {
				assert.Equal(t, "seed-w", c.WorkerName)
				assert.Equal(t, "/seed.sock", c.FrameworkSocket)
			}},
		{name: "nothing set", env: map[string]string{}, wantErr: []string{api.EnvPool + " must be set", api.EnvWorkerName + " must be set", api.EnvWorkerNamespace + " must be set", api.EnvNATSURL + " must be set"}},
		{name: "concurrency zero", env: with(api.EnvConcurrency, "0"), wantErr: []string{api.EnvConcurrency + `: "0" is not a positive integer`}},
		{name: "shutdown grace zero", env: with(api.EnvShutdownGraceSeconds, "0"), wantErr: []string{api.EnvShutdownGraceSeconds + `: "0" is not a positive integer`}},
		{name: "concurrency text", env: with(api.EnvConcurrency, "two"), wantErr: []string{api.EnvConcurrency + `: "two" is not a positive integer`}},
		{name: "NATS TLS", env: with(api.EnvNATSCA, "-----BEGIN CERTIFICATE-----", api.EnvNATSServerName, "nats.example"), check: func(t *testing.T, c Config) {
			assert.Equal(t, "-----BEGIN CERTIFICATE-----", string(c.NATSCA))
			assert.Equal(t, "nats.example", c.NATSServerName)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ConfigFromEnv(func(k string) string { return tt.env[k] })
			if len(tt.wantErr) > 0 {
				require.Error(t, err, "no error, want %v", tt.wantErr)
				for _, w := range tt.wantErr {
					assert.Contains(t, err.Error(), w)
				}
				return
			}
			require.NoError(t, err)
			tt.check(t, c)
		})
	}
}

func testCA(t *testing.T) []byte {
	ca, err := pki.NewCA("test", time.Now(), time.Hour)
	require.NoError(t, err)
	return ca.CertPEM
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Pool: "p", WorkerName: "w", WorkerNamespace: "ns", Concurrency: 1, NATSURL: "nats://x", FrameworkSocket: "/f.sock", HTTPAddr: ":8091"}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{name: "valid", mutate: func(*Config) {}},
		{name: "pool with dot", mutate: func(c *Config) { c.Pool = "a.b" }, wantErr: api.EnvPool + ` "a.b" must not contain`},
		{name: "worker with wildcard", mutate: func(c *Config) { c.WorkerName = "w*" }, wantErr: api.EnvWorkerName + ` "w*" must not contain`},
		{name: "relative invoke path", mutate: func(c *Config) { c.InvokePath = "invoke" }, wantErr: api.EnvFrameworkInvokePath + `: "invoke" must start with /`},
		{name: "bad http addr", mutate: func(c *Config) { c.HTTPAddr = "8091" }, wantErr: api.EnvSidecarHTTPAddr + `: "8091" is not host:port`},
		{name: "no concurrency", mutate: func(c *Config) { c.Concurrency = 0 }, wantErr: api.EnvConcurrency + ": 0 is not a positive integer"},
		// The Pod is the tenant's: its metrics are not served to the network.
		{name: "metrics on every interface", mutate: func(c *Config) { c.MetricsAddr = ":8092" }, wantErr: api.EnvSidecarMetricsAddr + `: metrics address ":8092": only a loopback address`},
		{name: "metrics on the Pod's address", mutate: func(c *Config) { c.MetricsAddr = "10.1.2.3:8092" }, wantErr: "only a loopback address"},
		{name: "metrics on loopback", mutate: func(c *Config) { c.MetricsAddr = "[::1]:8092" }},
		{name: "NATS TLS", mutate: func(c *Config) { c.NATSCA, c.NATSServerName = testCA(t), "nats.example" }},
		{name: "NATS server name without a CA", mutate: func(c *Config) { c.NATSServerName = "nats.example" }, wantErr: api.EnvNATSCA + ", " + api.EnvNATSServerName + ": NATS TLS: a server name without a CA"},
		{name: "NATS CA without a name", mutate: func(c *Config) { c.NATSCA = testCA(t) }, wantErr: "the server name to verify must be set"},
		{name: "NATS CA not PEM", mutate: func(c *Config) { c.NATSCA, c.NATSServerName = []byte("x"), "nats.example" }, wantErr: "no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mutate(&c)
			_, err := c.withDefaults()
			if tt.wantErr == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tt.wantErr)
			}
		})
	}
}

func TestIsAttemptOf(t *testing.T) {
	for _, tt := range []struct {
		id, inv string
		want    bool
	}{
		{"abc.1", "abc", true}, {"abc.12", "abc", true}, {"abc.1", "ab", false}, {"abc", "abc", false}, {"abc.x", "abc", false}, {"abcd.1", "abc", false},
	} {
		assert.Equal(t, tt.want, isAttemptOf(tt.id, tt.inv), "isAttemptOf(%q, %q)", tt.id, tt.inv)
	}
}
