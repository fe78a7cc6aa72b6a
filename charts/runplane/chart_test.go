// Package chart_test tests the runplane Helm chart: helm lint, golden
// rendered manifests, the values schema and the chart's own checks, that the
// webhook configuration and the scheduler configuration mirror the Go code
// that defines them, that the bundled NATS configuration loads, that every
// container's flags exist in its binary, and (install_test.go) that every
// object is accepted by a real kube-apiserver, that a real helm install and
// upgrade work, and that RBAC is least-privilege.
//
// Run: go test ./charts/runplane/ (add -update to rewrite the golden files).
// With -short no control plane starts; the helm tests then run only when
// RUNPLANE_TESTBIN_DIR names the testbin directory.
package chart_test

import (
	"bytes"
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/test/cluster"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// releaseNamespace is where the golden renders and the install put runplane.
const releaseNamespace = "runplane-system"

var (
	env    *cluster.Cluster
	binDir string
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		binDir = os.Getenv(cluster.EnvBinDir)
		os.Exit(m.Run())
	}
	cluster.Main(m, cluster.Options{Nodes: []cluster.Node{
		{Name: "gpu-0", GPUs: 8},
		{Name: "cpu-0"},
	}}, func(c *cluster.Cluster) {
		env = c
		binDir = filepath.Dir(c.Binary("helm"))
	})
}

func needHelm(t *testing.T) {
	t.Helper()
	if binDir == "" {
		t.Skip("needs the testbin binaries (helm, kubectl): run without -short or set " + cluster.EnvBinDir)
	}
}

func needCluster(t *testing.T) {
	t.Helper()
	if env == nil {
		t.Skip("needs the local control plane: run without -short")
	}
}

// run runs a testbin binary with helm's state kept out of $HOME.
func run(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, name), args...)
	state := helmState(t)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(state, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(state, "config"),
		"HELM_DATA_HOME="+filepath.Join(state, "data"),
	)
	if env != nil {
		cmd.Env = append(cmd.Env, "KUBECONFIG="+env.Kubeconfig())
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), &cmdError{cmd: name + " " + strings.Join(args, " "), err: err, stderr: stderr.String()}
	}
	return stdout.String(), nil
}

// cmdError is a failed command; Stderr is what it said (without the
// command line, so tests can match its message alone).
type cmdError struct {
	cmd    string
	err    error
	stderr string
}

func (e *cmdError) Error() string { return fmt.Sprintf("%s: %v\n%s", e.cmd, e.err, e.stderr) }
func (e *cmdError) Unwrap() error { return e.err }

var helmStateDir string

func helmState(t *testing.T) string {
	if helmStateDir == "" {
		dir, err := os.MkdirTemp("", "runplane-chart-helm-")
		require.NoError(t, err)
		helmStateDir = dir // removed with the temp dir of the OS; small
	}
	return helmStateDir
}

func mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := run(t, name, args...)
	require.NoError(t, err)
	return out
}

// render runs helm template for the release "runplane" in releaseNamespace.
func render(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return run(t, "helm", append([]string{"template", "runplane", ".", "--namespace", releaseNamespace, "--kube-version", cluster.KubernetesVersion}, args...)...)
}

func mustRender(t *testing.T, args ...string) string {
	t.Helper()
	out, err := render(t, args...)
	require.NoError(t, err)
	return out
}

// object is one rendered manifest.
type object struct {
	raw  string
	data map[string]any
}

func (o object) kind() string { s, _ := o.data["kind"].(string); return s }
func (o object) name() string {
	m, _ := o.data["metadata"].(map[string]any)
	s, _ := m["name"].(string)
	return s
}

// into decodes the object into a typed API object.
func (o object) into(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, yaml.Unmarshal([]byte(o.raw), v), "decoding %s %s", o.kind(), o.name())
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

func parse(t *testing.T, manifests string) []object {
	t.Helper()
	var out []object
	for _, doc := range docSep.Split(manifests, -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var data map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(doc), &data), "rendered YAML does not parse:\n%s", doc)
		out = append(out, object{raw: doc, data: data})
	}
	return out
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func find(t *testing.T, objs []object, kind, name string) object {
	t.Helper()
	for _, o := range objs {
		if o.kind() == kind && o.name() == name {
			return o
		}
	}
	t.Fatalf("no %s %s rendered", kind, name)
	return object{}
}

// TestRenderIsStable: the chart generates no key material, so two renders
// of the same values are byte-identical (what GitOps tools such as Argo CD
// need: a render without a cluster that does not drift); the Secrets runplane
// needs are created at run time (the queue, the webhook, the extender's init
// container) or issued by cert-manager.
func TestRenderIsStable(t *testing.T) {
	needHelm(t)
	for _, c := range renderCases {
		t.Run(c.name, func(t *testing.T) {
			first, second := mustRender(t, c.args...), mustRender(t, c.args...)
			require.Equal(t, first, second, "two renders differ:\n%s", firstDiff(first, second))
			for _, o := range parse(t, first) {
				assert.NotEqual(t, "Secret", o.kind(), "Secret %s rendered: the chart renders no Secret", o.name())
			}
		})
	}
}

type renderCase struct {
	name string
	args []string
}

// Capabilities the golden renders assume: ServiceMonitors are rendered only
// when the cluster serves monitoring.coreos.com/v1.
var withMonitoring = []string{"--api-versions", "monitoring.coreos.com/v1/ServiceMonitor", "--api-versions", "monitoring.coreos.com/v1/PodMonitor", "--api-versions", "cert-manager.io/v1"}

var renderCases = []renderCase{
	{"default", nil},
	{"full", append([]string{"--values", "testdata/values-full.yaml"}, withMonitoring...)},
	{"external-nats", []string{"--values", "testdata/values-external.yaml"}},
}

func TestLint(t *testing.T) {
	needHelm(t)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"default", nil},
		{"full", []string{"--values", "testdata/values-full.yaml"}},
		{"external-nats", []string{"--values", "testdata/values-external.yaml"}},
		{"install", []string{"--values", "testdata/values-install.yaml"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := mustRun(t, "helm", append([]string{"lint", "--strict", "--namespace", releaseNamespace, "."}, c.args...)...)
			require.True(t, strings.Contains(out, "0 chart(s) failed"), "helm lint:\n%s", out)
		})
	}
}

func TestGolden(t *testing.T) {
	needHelm(t)
	for _, c := range renderCases {
		t.Run(c.name, func(t *testing.T) {
			got := mustRender(t, c.args...)
			path := filepath.Join("testdata", "golden", c.name+".yaml")
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
				return
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "%v (run with -update to create it)", err)
			require.Equal(t, string(want), got, "%s differs from the render (run with -update to accept):\n%s", path, firstDiff(string(want), got))
		})
	}
}

// firstDiff shows the first differing line with some context.
func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			from := max(0, i-3)
			return fmt.Sprintf("line %d:\n  want: %q\n  got:  %q\ncontext (got):\n%s", i+1, wl, gl, strings.Join(g[from:min(len(g), i+3)], "\n"))
		}
	}
	return "(no line differs)"
}

// TestInvalidValues: bad values fail the render with a message that names
// the key and what is allowed (the schema or the chart's own checks).
func TestInvalidValues(t *testing.T) {
	needHelm(t)
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"nats replicas", []string{"--set", "nats.bundled.replicas=2"}, []string{"/nats/bundled/replicas", "must be one of 1, 3"}},
		{"nats mode", []string{"--set", "nats.mode=embedded"}, []string{"/nats/mode", "'bundled', 'external'"}},
		{"external without url", []string{"--set", "nats.mode=external"}, []string{"nats.external.url is required"}},
		{"stream replicas above servers", []string{"--set", "nats.bundled.replicas=1", "--set", "queue.stream.replicas=3"}, []string{"queue.stream.replicas (3) cannot exceed nats.bundled.replicas (1)"}},
		{"sync interval", []string{"--set", "nats.bundled.jetstream.syncInterval=never"}, []string{"/nats/bundled/jetstream/syncInterval", "does not match pattern"}},
		{"failure policy", []string{"--set", "webhook.failurePolicy=Ignore"}, []string{"/webhook/failurePolicy", "'Fail'"}},
		{"unknown key", []string{"--set", "webhook.replica=2"}, []string{"/webhook", "'replica' not allowed"}},
		{"stock spec not in catalog", []string{"--values", "testdata/values-full.yaml", "--set", "stock.pools[0].spec=g9.9", "--set", "stock.pools[0].replicas=1"},
			[]string{`stock.pools[0].spec "g9.9" is not a spec of catalog.specs (known: g1.1, h100.8, h100.dra2, mig.1g, mig.dra)`}},
		{"external without egress", []string{"--set", "nats.mode=external", "--set", "nats.external.url=nats://nats.messaging:4222",
			"--set", "nats.external.tls.serverName=nats.messaging", "--set-file", "nats.external.tls.caBundle=testdata/ca.crt"},
			[]string{"nats.external.egress.namespace is required"}},
		// An external NATS is verified like the bundled one: its CA and name are required, and
		// what every worker Pod gets may hold no key.
		{"external without a CA", []string{"--values", "testdata/values-external.yaml", "--set", "nats.external.tls.caBundle="},
			[]string{"nats.external.tls.caBundle is required"}},
		{"external CA with a key", []string{"--values", "testdata/values-external.yaml", "--set-file", "nats.external.tls.caBundle=testdata/ca-with-key.pem"},
			[]string{"nats.external.tls.caBundle must hold PEM certificates only"}},
		{"external without a server name", []string{"--values", "testdata/values-external.yaml", "--set", "nats.external.tls.serverName="},
			[]string{"nats.external.tls.serverName is required"}},
		// The values of the NATS auth before operator mode fail by name, not silently.
		{"callout issuer value", []string{"--set", "nats.auth.issuerSeed=SAAGWZT2VLUYKCXZH2GJDEOJAEIDUOT5BUENVHL3MM6ZW27DCEAWLC3E2E"},
			[]string{"/nats/auth", "'issuerSeed' not allowed"}},
		{"queue password value", []string{"--values", "testdata/values-external.yaml", "--set", "nats.external.queuePasswordSecret=q"},
			[]string{"/nats/external", "'queuePasswordSecret' not allowed"}},
		{"trust Secret name", []string{"--set", "nats.auth.trustSecret=Trust"}, []string{"/nats/auth/trustSecret"}},
		// A DRA spec's stock is per tenant namespace (its claim goes to a GPU Pod of its own
		// namespace only); in the shared stock namespace it could never be taken.
		{"DRA stock in the shared namespace", []string{"--values", "testdata/values-full.yaml", "--set-json", "stock.pools[3].namespaces=[]"},
			[]string{`stock.pools[3]: spec "h100.dra2" is a DRA spec`, "its stock in runplane-stock (stock.namespace) could never be taken", "stock.pools[3].namespaces"}},
		{"namespaces of an extended-resource pool", []string{"--values", "testdata/values-full.yaml", "--set", "stock.pools[0].namespaces={team-a}"},
			[]string{`stock.pools[0].namespaces: only for a DRA spec; the stock of "g1.1" (extended resources) is taken by any namespace's GPU Pod from runplane-stock`}},
		{"DRA stock in a platform namespace", []string{"--values", "testdata/values-full.yaml", "--set", "stock.pools[3].namespaces={team-a,kube-system}"},
			[]string{"stock.pools[3].namespaces: kube-system is one of the platform's namespaces"}},
		{"DRA stock in the stock namespace", []string{"--values", "testdata/values-full.yaml", "--set", "stock.pools[3].namespaces={runplane-stock}"},
			[]string{"stock.pools[3].namespaces: runplane-stock is one of the platform's namespaces"}},
		{"DRA stock in an excluded namespace", []string{"--values", "testdata/values-full.yaml", "--set", "stock.pools[3].namespaces={monitoring}"},
			[]string{"stock.pools[3].namespaces: monitoring is one of the platform's namespaces", "or of webhook.excludeNamespaces"}},
		{"DRA stock namespace name", []string{"--values", "testdata/values-full.yaml", "--set", "stock.pools[3].namespaces={Team_A}"},
			[]string{"/stock/pools/3/namespaces/0"}},
		{"stock in release namespace", []string{"--set", "stock.namespace=" + releaseNamespace, "--set", "stock.pools[0].spec=g1.1", "--set", "stock.pools[0].replicas=1"},
			[]string{"stock.namespace must differ from the release namespace"}},
		{"stock above workload", []string{"--set", "priorityClasses.stock.value=5000"}, []string{"priorityClasses.stock.value must be lower than priorityClasses.workload.value"}},
		{"tier above runplane's own Pods", []string{"--set", "priorityClasses.tiers[0].name=urgent", "--set", "priorityClasses.tiers[0].value=1000000"},
			[]string{"priorityClasses.tiers: urgent has value 1000000, at or above priorityClasses.system.value (1000000)"}},
		{"workload above runplane's own Pods", []string{"--set", "priorityClasses.workload.value=2000000"},
			[]string{"priorityClasses.workload.value must be lower than priorityClasses.system.value"}},
		{"catalog stock policy", []string{"--values", "testdata/values-full.yaml", "--set", "catalog.specs.g1\\.1.stock=Sometimes"}, []string{"/catalog/specs/g1.1/stock", "'Preferred', 'Required'"}},
		{"memory is not a quantity", []string{"--set", "webhook.resources.limits.memory=lots"}, []string{"/webhook/resources/limits/memory"}},
		{"duration", []string{"--set", "queue.stream.maxAge=forever"}, []string{"/queue/stream/maxAge"}},
		{"log format", []string{"--set", "logFormat=xml"}, []string{"/logFormat", "'json', 'text'"}},
		{"extender log level", []string{"--set", "scheduler.extender.logLevel=loud"}, []string{"/scheduler/extender/logLevel"}},
		{"catalog resource not managed", []string{"--set", "catalog.specs.m1.gpu=0", "--set", "catalog.specs.m1.cpu=1", "--set", "catalog.specs.m1.memory=1Gi",
			"--set", "catalog.specs.m1.resources.nvidia\\.com/mig-1g\\.10gb=1"},
			[]string{"catalog.specs.m1: resource nvidia.com/mig-1g.10gb is not managed by the runplane extender (managed: nvidia.com/gpu); add it to scheduler.extender.managedResources"}},
		// egress.deniedCIDRs: a range that is not one fails the render by index and value.
		{"denied CIDR without prefix", []string{"--set", "egress.deniedCIDRs={203.0.113.0/24,203.0.113.7}"},
			[]string{`egress.deniedCIDRs[1]: "203.0.113.7" is not a CIDR`}},
		{"denied CIDR octet", []string{"--set", "egress.deniedCIDRs={300.0.0.0/8}"}, []string{`egress.deniedCIDRs[0]: "300.0.0.0/8" is not a CIDR`}},
		{"denied CIDR prefix length", []string{"--set", "egress.deniedCIDRs={10.0.0.0/33}"}, []string{`egress.deniedCIDRs[0]: "10.0.0.0/33" is not a CIDR`}},
		{"denied CIDR name", []string{"--set", "egress.deniedCIDRs={metadata.google.internal/32}"}, []string{`egress.deniedCIDRs[0]: "metadata.google.internal/32" is not a CIDR`}},
		{"denied CIDR two ::", []string{"--set", "egress.deniedCIDRs={2001::db8::/32}"}, []string{`egress.deniedCIDRs[0]: "2001::db8::/32" is not a CIDR`}},
		{"denied CIDR IPv6 group", []string{"--set", "egress.deniedCIDRs={2001:db8:12345::/48}"}, []string{`egress.deniedCIDRs[0]: "2001:db8:12345::/48" is not a CIDR`}},
		{"denied CIDR IPv6 groups", []string{"--set", "egress.deniedCIDRs={1:2:3:4:5:6:7/64}"}, []string{`egress.deniedCIDRs[0]: "1:2:3:4:5:6:7/64" is not a CIDR`}},
		{"denied CIDR in networkPolicy mode", []string{"--set", "egress.enforcement=networkPolicy", "--set", "egress.deniedCIDRs={10.0.0.0}"},
			[]string{`egress.deniedCIDRs[0]: "10.0.0.0" is not a CIDR`}},
		{"NATS CIDR", []string{"--values", "testdata/values-external.yaml", "--set", "nats.external.egress.cidrs={192.168.10.5/32,nats.example/32}"},
			[]string{`nats.external.egress.cidrs[1]: "nats.example/32" is not a CIDR`}},
		{"egress enforcement", []string{"--set", "egress.enforcement=cilium"}, []string{"/egress/enforcement", "'adminNetworkPolicy', 'networkPolicy'"}},
		{"egress priority", []string{"--set", "egress.priority=1001"}, []string{"/egress/priority"}},
		{"DNS port", []string{"--set", "egress.dns.ports={0}"}, []string{"/egress/dns/ports/0"}},
		{"catalog spec without gpu", []string{"--set", "catalog.specs.x1.cpu=1", "--set", "catalog.specs.x1.memory=1Gi"}, []string{"/catalog/specs/x1", "missing property 'gpu'", "missing property 'dra'"}},
		// Values the schema passed that failed at run time (issue #34): each names its key and why.
		{"callback deny CIDR", []string{"--set", "queue.callbacks.denyCIDRs={10.0.0.0/8,10.0.0.300}"},
			[]string{`queue.callbacks.denyCIDRs[1]: "10.0.0.300" is neither a CIDR nor an IP address`, "the queue would refuse it and not start"}},
		{"callback allow CIDR", []string{"--set", "queue.callbacks.allowCIDRs={cluster.local}"}, []string{`queue.callbacks.allowCIDRs[0]: "cluster.local" is neither a CIDR nor an IP address`}},
		{"file store beyond the volume", []string{"--set", "nats.bundled.jetstream.maxFileStore=20Gi"},
			[]string{"nats.bundled.jetstream.maxFileStore (20Gi) is larger than nats.bundled.persistence.size (10Gi)"}},
		{"volume below the file store, decimal", []string{"--set", "nats.bundled.persistence.size=9e9"},
			[]string{"nats.bundled.jetstream.maxFileStore (10Gi) is larger than nats.bundled.persistence.size (9e9)"}},
		{"bucket as large as the store", []string{"--set", "queue.payloads.bucketMaxBytes=10737418240"},
			[]string{"queue.payloads.bucketMaxBytes + queue.stream.chunks.maxBytes (10804527104 bytes, what each namespace reserves) do not fit in nats.bundled.jetstream.maxFileStore (10Gi)"}},
		{"shared streams beyond the store", []string{"--set", "nats.bundled.jetstream.maxFileStore=8Gi"},
			[]string{"queue.stream.maxBytes + queue.recordsMaxBytes + queue.resultsMaxBytes (9663676416 bytes) exceed nats.bundled.jetstream.maxFileStore (8Gi)"}},
		{"namespace body share below one body", []string{"--set", "queue.limits.namespaceMaxBodyBytes=67108864"},
			[]string{"queue.limits.namespaceMaxBodyBytes (67108864) is below the largest request body, 90527064 bytes"}},
		{"namespace body share above the replica's", []string{"--set", "queue.limits.replicaMaxBodyBytes=100000000", "--set", "queue.limits.namespaceMaxBodyBytes=134217728"},
			[]string{"queue.limits.namespaceMaxBodyBytes (134217728) must be at most queue.limits.replicaMaxBodyBytes (100000000)"}},
		{"unbounded namespace body share", []string{"--set", "queue.limits.namespaceMaxBodyBytes=-1"},
			[]string{"queue.limits.namespaceMaxBodyBytes (-1) must be at most queue.limits.replicaMaxBodyBytes (201326592)"}},
		// Schema errors that said only "'not' failed".
		{"tier named as the chart's own", []string{"--set", "priorityClasses.tiers[0].name=runplane-stock", "--set", "priorityClasses.tiers[0].value=10"},
			[]string{"priorityClasses.tiers[0].name: runplane-stock is one of the chart's own PriorityClasses"}},
		{"zero stream bytes", []string{"--set", "queue.stream.maxBytes=0"}, []string{"/queue/stream/maxBytes", "value must be -1", "minimum: got 0, want 1"}},
		{"zero records bytes", []string{"--set", "queue.recordsMaxBytes=0"}, []string{"/queue/recordsMaxBytes", "value must be -1", "minimum: got 0, want 1"}},
		{"zero backlog", []string{"--set", "queue.limits.poolMaxBacklog=0"}, []string{"/queue/limits/poolMaxBacklog", "value must be -1", "minimum: got 0, want 1"}},
		// The default kube-scheduler (the current release) on an older minor of the support window.
		{"scheduler newer than the cluster", []string{"--kube-version", "v1.35.4"},
			[]string{"scheduler.image.tag: " + cluster.KubernetesVersion + " is newer than the cluster's Kubernetes v1.35.4", "set scheduler.image.tag to the cluster's version, e.g. v1.35.4"}},
		{"scheduler newer than a vendor's cluster", []string{"--kube-version", "v1.36.3-gke.1200", "--set", "scheduler.image.tag=v1.37.0"},
			[]string{"scheduler.image.tag: v1.37.0 is newer than the cluster's Kubernetes v1.36.3", "e.g. v1.36.3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := render(t, c.args...)
			require.Error(t, err, "render succeeded; want an error containing %q\n%s", c.want, out)
			var ce *cmdError
			require.ErrorAs(t, err, &ce)
			for _, w := range c.want {
				assert.Contains(t, ce.stderr, w)
			}
			assert.NotContains(t, ce.stderr, "'not' failed", "a schema error that names no reason")
		})
	}
}

// TestSchedulerOnEachMinor: on every minor of the support window the chart
// renders with a kube-scheduler no newer than the cluster (the version skew
// policy), the one make test and make test-matrix run under the extender.
func TestSchedulerOnEachMinor(t *testing.T) {
	needHelm(t)
	for _, c := range []struct{ cluster, tag string }{
		{"v1.35.4", "v1.35.4"},
		{"v1.36.3-gke.1200", "v1.36.3"},
		{cluster.KubernetesVersion, ""},
		{"v1.38.0", ""},
		{"v1.35.4", "my-build"},
	} {
		t.Run(c.cluster+" "+c.tag, func(t *testing.T) {
			args := []string{"--kube-version", c.cluster}
			if c.tag != "" {
				args = append(args, "--set", "scheduler.image.tag="+c.tag)
			}
			want := "registry.k8s.io/kube-scheduler:" + cmp.Or(c.tag, cluster.KubernetesVersion)
			assert.Contains(t, mustRender(t, args...), "image: "+want)
		})
	}
}

// TestSecurityContexts: every runplane container runs as non-root with a
// read-only root file system and no capabilities, and no Pod of ours but
// those that talk to the API server gets a ServiceAccount token.
func TestSecurityContexts(t *testing.T) {
	needHelm(t)
	for _, c := range renderCases {
		t.Run(c.name, func(t *testing.T) {
			for _, o := range parse(t, mustRender(t, c.args...)) {
				spec := podSpec(o)
				if spec == nil {
					continue
				}
				psc, _ := spec["securityContext"].(map[string]any)
				assert.Equal(t, true, psc["runAsNonRoot"], "%s %s: pod securityContext.runAsNonRoot is not true", o.kind(), o.name())
				for _, ct := range spec["containers"].([]any) {
					ctr := ct.(map[string]any)
					sc, _ := ctr["securityContext"].(map[string]any)
					caps, _ := sc["capabilities"].(map[string]any)
					drop, _ := caps["drop"].([]any)
					if sc["readOnlyRootFilesystem"] != true || sc["allowPrivilegeEscalation"] != false || len(drop) != 1 || drop[0] != "ALL" {
						t.Errorf("%s %s container %s: securityContext %v; want readOnlyRootFilesystem, no privilege escalation, drop ALL", o.kind(), o.name(), ctr["name"], sc)
					}
				}
			}
		})
	}
}

func podSpec(o object) map[string]any {
	switch o.kind() {
	case "Deployment", "StatefulSet":
	default:
		return nil
	}
	spec, _ := o.data["spec"].(map[string]any)
	tmpl, _ := spec["template"].(map[string]any)
	ps, _ := tmpl["spec"].(map[string]any)
	return ps
}
