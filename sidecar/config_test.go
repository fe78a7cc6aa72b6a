package sidecar

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/api"
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
			if c.Concurrency != 1 || c.FrameworkSocket != api.DefaultFrameworkSocket || c.InvokePath != "/invoke" || c.HealthPath != "/healthz" ||
				c.SubjectPrefix != api.DefaultSubjectPrefix || c.StreamName != api.DefaultStreamName || c.HTTPAddr != ":8091" {
				t.Errorf("defaults = %+v", c)
			}
		}},
		{name: "everything set", env: with(api.EnvConcurrency, "4", api.EnvFrameworkSocket, "/s/f.sock", api.EnvFrameworkInvokePath, "/run",
			api.EnvFrameworkHealthPath, "/ok", api.EnvSubjectPrefix, "p", api.EnvStreamName, "S", api.EnvSidecarHTTPAddr, "127.0.0.1:9",
			api.EnvNATSCredentialsDir, "/creds"), check: func(t *testing.T, c Config) {
			if c.Concurrency != 4 || c.FrameworkSocket != "/s/f.sock" || c.InvokePath != "/run" || c.HealthPath != "/ok" ||
				c.SubjectPrefix != "p" || c.StreamName != "S" || c.HTTPAddr != "127.0.0.1:9" || c.NATSCredentialsDir != "/creds" {
				t.Errorf("config = %+v", c)
			}
		}},
		{name: "seed names as fallback", env: with(api.EnvWorkerName, "<unset>", api.EnvSeedWorkerName, "seed-w", api.EnvSeedSocketPath, "/seed.sock"),
			check: func(t *testing.T, c Config) {
				if c.WorkerName != "seed-w" || c.FrameworkSocket != "/seed.sock" {
					t.Errorf("config = %+v", c)
				}
			}},
		{name: "nothing set", env: map[string]string{}, wantErr: []string{api.EnvPool + " must be set", api.EnvWorkerName + " must be set", api.EnvWorkerNamespace + " must be set", api.EnvNATSURL + " must be set"}},
		{name: "concurrency zero", env: with(api.EnvConcurrency, "0"), wantErr: []string{api.EnvConcurrency + `: "0" is not a positive integer`}},
		{name: "concurrency text", env: with(api.EnvConcurrency, "two"), wantErr: []string{api.EnvConcurrency + `: "two" is not a positive integer`}},
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mutate(&c)
			_, err := c.withDefaults()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatal(err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestConsumerName(t *testing.T) {
	for _, tt := range []struct{ pool, worker, want string }{
		{"echo", "echo-7d9f-abc", "echo_echo-7d9f-abc"},
		{"my_pool", "w", "my_pool_w"},
	} {
		if got := ConsumerName(tt.pool, tt.worker); got != tt.want {
			t.Errorf("ConsumerName(%q, %q) = %q, want %q", tt.pool, tt.worker, got, tt.want)
		}
	}
}

func TestIsAttemptOf(t *testing.T) {
	for _, tt := range []struct {
		id, inv string
		want    bool
	}{
		{"abc.1", "abc", true}, {"abc.12", "abc", true}, {"abc.1", "ab", false}, {"abc", "abc", false}, {"abc.x", "abc", false}, {"abcd.1", "abc", false},
	} {
		if got := isAttemptOf(tt.id, tt.inv); got != tt.want {
			t.Errorf("isAttemptOf(%q, %q) = %v, want %v", tt.id, tt.inv, got, tt.want)
		}
	}
}
