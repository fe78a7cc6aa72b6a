package chart_test

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
	cconfig "github.com/runplane/runplane/controllers/config"
	"github.com/runplane/runplane/extender"
	econfig "github.com/runplane/runplane/extender/config"
	"github.com/runplane/runplane/extender/profile"
	"github.com/runplane/runplane/internal/bootstrapsecret"
	"github.com/runplane/runplane/internal/cmdline"
	"github.com/runplane/runplane/internal/configfile"
	"github.com/runplane/runplane/internal/natssync"
	"github.com/runplane/runplane/internal/natstls"
	"github.com/runplane/runplane/internal/pki"
	"github.com/runplane/runplane/internal/priorityclass"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/config"
	"github.com/runplane/runplane/queue/stream"
	"github.com/runplane/runplane/test/cluster"
	wconfig "github.com/runplane/runplane/webhook/config"
)

func toYAML(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// schedulerConfig decodes the rendered runplane-scheduler ConfigMap.
func schedulerConfig(t *testing.T, objs []object) *configv1.KubeSchedulerConfiguration {
	t.Helper()
	var cm corev1.ConfigMap
	find(t, objs, "ConfigMap", "runplane-scheduler").into(t, &cm)
	var cfg configv1.KubeSchedulerConfiguration
	require.NoError(t, yaml.UnmarshalStrict([]byte(cm.Data["config.yaml"]), &cfg), "scheduler config.yaml:\n%s", cm.Data["config.yaml"])
	return &cfg
}

// TestSchedulerConfigMirrorsGo: the chart's KubeSchedulerConfiguration is
// what profile.SchedulerConfig builds for the extender in the same Pod.
func TestSchedulerConfigMirrorsGo(t *testing.T) {
	needHelm(t)
	for _, c := range []struct {
		name    string
		args    []string
		options profile.Options
	}{
		{"default", nil, profile.Options{}},
		{"full", []string{"--values", "testdata/values-full.yaml"}, profile.Options{Weight: 300, HTTPTimeout: 20 * time.Second,
			ManagedResources: []string{"nvidia.com/mig-1g.10gb"}, DRA: true}},
		{"extended resources only", []string{"--set", "catalog.specs.g1\\.1.gpu=1", "--set", "catalog.specs.g1\\.1.cpu=4", "--set", "catalog.specs.g1\\.1.memory=16Gi"}, profile.Options{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := schedulerConfig(t, parse(t, mustRender(t, c.args...)))
			o := c.options
			o.URLPrefix, o.CAFile = "https://127.0.0.1:8443", "/etc/runplane-extender/tls/ca.crt"
			o.LeaderElect, o.LeaseNamespace = true, releaseNamespace
			want, err := profile.SchedulerConfig(o)
			require.NoError(t, err)
			assert.True(t, apiequality.Semantic.DeepEqual(got, want), "scheduler config differs from profile.SchedulerConfig.\nchart:\n%s\ngo:\n%s", toYAML(got), toYAML(want))
		})
	}
}

// TestSchedulerConfigRunsInKubeScheduler: the real kube-scheduler v1.37.2
// accepts the rendered configuration, including the extender's TLS (a CA
// like the one the extender's init container writes per Pod).
func TestSchedulerConfigRunsInKubeScheduler(t *testing.T) {
	needHelm(t)
	needCluster(t)
	objs := parse(t, mustRender(t))
	cfg := schedulerConfig(t, objs)
	dir := t.TempDir()
	caPEM, err := extender.WriteSelfSignedCert(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), []string{"127.0.0.1"})
	require.NoError(t, err)
	caFile := filepath.Join(dir, "ca.crt")
	require.NoError(t, os.WriteFile(caFile, caPEM, 0o600))
	cfg.Extenders[0].TLSConfig.CAFile = caFile
	p, err := env.StartScheduler(t.Context(), cfg)
	require.NoError(t, err, "kube-scheduler did not start with the chart's configuration")
	p.Stop()
}

// TestCatalogParses: the catalog ConfigMap the chart renders from values is
// read by the catalog package the webhook and the extender use.
func TestCatalogParses(t *testing.T) {
	needHelm(t)
	for _, c := range []struct {
		name  string
		args  []string
		specs []string
	}{
		{"default", nil, nil},
		{"full", []string{"--values", "testdata/values-full.yaml"}, []string{"g1.1", "h100.8", "h100.dra2", "mig.1g", "mig.dra"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var cm corev1.ConfigMap
			find(t, parse(t, mustRender(t, c.args...)), "ConfigMap", api.CatalogConfigMap).into(t, &cm)
			cat, err := catalog.Parse(cm.Data)
			require.NoError(t, err, "catalog.Parse")
			require.Equal(t, strings.Join(c.specs, ","), strings.Join(cat.Names(), ","), "catalog specs")
		})
	}
}

// TestNATSConfigLoads: nats-server v2.15 accepts the bundled configuration
// of one and of three servers (nats-server -t checks it and exits), laid
// out as the StatefulSet mounts it: the ConfigMap's nats.conf next to the
// trust Secret's trust.conf, which it includes, as the queue generates it
// (bootstrapsecret.NATSTrust) with the resolver dir the chart gives the
// queue, on the NATS data volume.
func TestNATSConfigLoads(t *testing.T) {
	needHelm(t)
	for _, c := range []struct {
		name string
		args []string
		want []string
		// replicas: what the queue's streams and buckets get.
		replicas string
	}{
		// The default: three servers, fsyncing as make dev and the test kit do.
		{"default", nil, []string{`include "../trust/trust.conf"`, "cluster {", "$NATS_ROUTE_2", natssync.Config(natssync.Default)}, "3"},
		{"single", []string{"--set", "nats.bundled.replicas=1"}, []string{`include "../trust/trust.conf"`, "max_file_store: 10Gi", natssync.Config(natssync.Always)}, "1"},
		{"cluster", []string{"--values", "testdata/values-full.yaml"}, []string{`include "../trust/trust.conf"`, "cluster {", "password: $NATS_ROUTE_PASSWORD", "$NATS_ROUTE_2"}, "3"},
		{"fsync traded", []string{"--set", "nats.bundled.jetstream.syncInterval=2m"}, []string{natssync.Config("2m")}, "3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs := parse(t, mustRender(t, c.args...))
			var cm corev1.ConfigMap
			find(t, objs, "ConfigMap", "runplane-nats").into(t, &cm)
			conf := cm.Data["nats.conf"]
			for _, w := range c.want {
				assert.Contains(t, conf, w)
			}
			// Operator mode only: accounts and users come from trust.conf.
			for _, stale := range []string{"accounts {", "auth_callout", "$NATS_QUEUE_PASSWORD", "$NATS_CALLOUT_ISSUER"} {
				assert.NotContains(t, conf, stale)
			}
			var sts appsv1.StatefulSet
			find(t, objs, "StatefulSet", "runplane-nats").into(t, &sts)
			pod := sts.Spec.Template.Spec
			mounts := map[string]string{}
			for _, m := range pod.Containers[0].VolumeMounts {
				mounts[m.Name] = m.MountPath
			}
			var trustVol *corev1.SecretVolumeSource
			for _, v := range pod.Volumes {
				if v.Name == "trust" {
					trustVol = v.Secret
				}
			}
			require.NotNil(t, trustVol, "no Secret volume trust")
			require.Equal(t, "runplane-nats-trust", trustVol.SecretName)
			require.Equal(t, []corev1.KeyToPath{{Key: bootstrapsecret.TrustConfigKey, Path: "trust.conf"}}, trustVol.Items,
				"only trust.conf: the secret every key is derived from stays with the queue")
			require.Equal(t, []string{"--config", mounts["config"] + "/nats.conf"}, pod.Containers[0].Args)

			// TLS: the Secret the queue keeps, without the CA's key; the
			// configuration is natstls's, for clients and for routes.
			var tlsVol *corev1.SecretVolumeSource
			for _, v := range pod.Volumes {
				if v.Name == "tls" {
					tlsVol = v.Secret
				}
			}
			require.NotNil(t, tlsVol, "no Secret volume tls")
			require.ElementsMatch(t, []corev1.KeyToPath{{Key: "tls.crt", Path: "tls.crt"}, {Key: "tls.key", Path: "tls.key"}, {Key: pki.KeyCABundle, Path: pki.KeyCABundle}},
				tlsVol.Items, "the certificate, its key and the CA bundle: the CA's key stays with the queue")
			files := natstls.ServerFiles{Cert: mounts["tls"] + "/tls.crt", Key: mounts["tls"] + "/tls.key", CA: mounts["tls"] + "/" + pki.KeyCABundle}
			assert.Contains(t, conf, natstls.ServerConfig(files), "the client port's TLS is natstls.ServerConfig's")
			if strings.Contains(conf, "cluster {") {
				assert.Contains(t, conf, indent(natstls.RouteConfig(files), "  "), "the routes' TLS is natstls.RouteConfig's")
			}

			// The queue writes trust.conf with its nats.bootstrap.resolverDir,
			// which must be on the NATS data volume.
			qc := queueConfig(t, objs)
			resolverDir := qc.NATS.Bootstrap.ResolverDir
			require.True(t, strings.HasPrefix(resolverDir, mounts["data"]+"/"), "the queue's nats.bootstrap.resolverDir %q is not on the NATS data volume %s", resolverDir, mounts["data"])
			require.Equal(t, c.replicas, strconv.Itoa(qc.Stream.Replicas), "the queue's streams and buckets follow the servers")
			require.Equal(t, tlsVol.SecretName, qc.NATS.Bootstrap.TLSSecret, "the queue keeps the Secret the servers mount")
			// The certificate the queue issues for its nats.bootstrap.tlsDNSNames.
			bundle, err := pki.Renew(nil, pki.Options{Name: "runplane-nats", DNSNames: qc.NATS.Bootstrap.TLSDNSNames, ClientAuth: true})
			require.NoError(t, err)
			leaf, err := pki.ParseCert(bundle.CertPEM)
			require.NoError(t, err)
			covers := func(name string) {
				t.Helper()
				roots := x509.NewCertPool()
				roots.AppendCertsFromPEM(bundle.CABundle)
				_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
				assert.NoError(t, err, "the certificate does not cover %s", name)
			}
			// What the clients verify: the queue's and the webhook's (the
			// sidecars') server name.
			require.Equal(t, qc.NATS.ServerName, webhookConfig(t, objs).Injection.NATSServerName)
			covers(qc.NATS.ServerName)
			u, err := url.Parse(qc.NATS.URL)
			require.NoError(t, err)
			covers(u.Hostname())

			// The Pod's file system, moved under root.
			root := t.TempDir()
			conf = strings.ReplaceAll(conf, "/data/jetstream", root+"/data/jetstream")
			conf = strings.ReplaceAll(conf, "/var/run/nats/", root+"/var/run/nats/")
			conf = strings.ReplaceAll(conf, mounts["tls"]+"/", root+mounts["tls"]+"/")
			trust, err := bootstrapsecret.NATSTrust(root+resolverDir, queue.WorkerExports(stream.Config{}))()
			require.NoError(t, err)
			for dir, file := range map[string]map[string][]byte{
				mounts["config"]: {"nats.conf": []byte(conf)},
				mounts["trust"]:  {"trust.conf": trust[bootstrapsecret.TrustConfigKey]},
				mounts["tls"]:    {"tls.crt": bundle.CertPEM, "tls.key": bundle.KeyPEM, pki.KeyCABundle: bundle.CABundle},
				mounts["data"]:   nil,
				mounts["run"]:    nil,
			} {
				require.NotEmpty(t, dir, "a volume mount of the nats container is missing (mounts %v)", mounts)
				require.NoError(t, os.MkdirAll(root+dir, 0o700))
				for name, data := range file {
					require.NoError(t, os.WriteFile(filepath.Join(root+dir, name), data, 0o600))
				}
			}
			env := []string{"POD_NAME=runplane-nats-0"}
			if strings.Contains(conf, "cluster {") {
				// The route password and the routes come from the StatefulSet's
				// environment (the Secret the queue creates), never the ConfigMap.
				vars := map[string]corev1.EnvVar{}
				for _, e := range pod.Containers[0].Env {
					vars[e.Name] = e
				}
				require.Equal(t, "runplane-nats-route", vars["NATS_ROUTE_PASSWORD"].ValueFrom.SecretKeyRef.Name)
				const password = "ROUTEPASSWORD234567"
				env = append(env, "NATS_ROUTE_PASSWORD="+password)
				for i := range 3 {
					name := fmt.Sprintf("NATS_ROUTE_%d", i)
					require.Contains(t, vars[name].Value, "nats-route://route:$(NATS_ROUTE_PASSWORD)@runplane-nats-"+strconv.Itoa(i)+".")
					// A route dials its peer by this name and verifies it.
					ru, err := url.Parse(vars[name].Value)
					require.NoError(t, err)
					covers(ru.Hostname())
					env = append(env, name+"="+strings.ReplaceAll(vars[name].Value, "$(NATS_ROUTE_PASSWORD)", password))
				}
			}
			path := filepath.Join(root+mounts["config"], "nats.conf")
			cmd := exec.CommandContext(t.Context(), filepath.Join(binDir, "nats-server"), "-t", "-c", path)
			cmd.Env = append(os.Environ(), env...)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "nats-server -t rejects the configuration:\n%s\n%s", out, conf)
		})
	}
}

var metricRef = regexp.MustCompile(`\b(runplane_[a-z0-9_]+)`)

// TestDashboardMetricsExist: every metric the dashboard queries is defined
// by the queue, the extender, the webhook or internal/ (NATS, caller review), so a renamed metric fails here
// rather than leaving an empty panel.
func TestDashboardMetricsExist(t *testing.T) {
	panels := dashboardPanels(t)
	defined := map[string]bool{}
	root, err := cluster.RepoRoot()
	require.NoError(t, err)
	for _, dir := range []string{"queue", "extender", "webhook", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range regexp.MustCompile(`"(runplane_[a-z0-9_]+)"`).FindAllStringSubmatch(string(src), -1) {
				defined[m[1]] = true
			}
			return nil
		})
		require.NoError(t, err)
	}
	used := 0
	for _, p := range panels {
		for _, tg := range p.Targets {
			for _, m := range metricRef.FindAllString(tg.Expr, -1) {
				used++
				name := m
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if base, ok := strings.CutSuffix(m, suffix); ok && defined[base] {
						name = base
					}
				}
				assert.True(t, defined[name], "panel %q queries %s, which no non-test Go file of queue/, extender/, webhook/ or internal/ defines", p.Title, m)
			}
		}
	}
	require.NotZero(t, used, "the dashboard queries no runplane metric")
}

var flagLine = regexp.MustCompile(`(?m)^\s+(?:-[A-Za-z], )?--?([A-Za-z0-9][-A-Za-z0-9_.]*)`)

// TestContainerFlagsExist: every flag the chart passes to a runplane binary
// or to kube-scheduler is one that binary defines, so the chart and the
// mains cannot drift apart silently. runplane's binaries in the chart are
// configuration binaries (cmdline.Configuration: --config and the log
// flags; their settings are compared as structures:
// Test*ConfigurationIsDefault), so their arguments are parsed as
// Configuration parses them (cmdline.CheckConfigurationArgs), values
// included, without building them; TestEveryBinaryFailsInJSON runs each
// built binary with -config. kube-scheduler's flags are read from its -h.
func TestContainerFlagsExist(t *testing.T) {
	needHelm(t)
	out, _ := exec.CommandContext(t.Context(), filepath.Join(binDir, "kube-scheduler"), "-h").CombinedOutput() // -h exits non-zero
	scheduler := map[string]bool{}
	for _, m := range flagLine.FindAllStringSubmatch(string(out), -1) {
		scheduler[m[1]] = true
	}
	require.NotEmpty(t, scheduler, "kube-scheduler -h lists no flags:\n%s", out)
	for _, c := range renderCases {
		t.Run(c.name, func(t *testing.T) {
			for _, o := range parse(t, mustRender(t, c.args...)) {
				if o.kind() != "Deployment" {
					continue
				}
				var d appsv1.Deployment
				o.into(t, &d)
				for _, ctr := range d.Spec.Template.Spec.Containers {
					argv := append(append([]string{}, ctr.Command...), ctr.Args...)
					switch {
					case len(argv) == 0:
					case strings.HasPrefix(argv[0], "runplane-"):
						// The command is a binary of cmd/ that reads its
						// command line with cmdline.Configuration, which
						// CheckConfigurationArgs parses as it does.
						main, err := os.ReadFile(filepath.Join("..", "..", "cmd", argv[0], "main.go"))
						if assert.NoError(t, err, "Deployment %s container %s runs %s, which is no binary of cmd/", d.Name, ctr.Name, argv[0]) {
							assert.Contains(t, string(main), "cmdline.Configuration[", "cmd/%s does not read its command line with cmdline.Configuration", argv[0])
						}
						assert.NoError(t, cmdline.CheckConfigurationArgs(argv[0], argv[1:]), "Deployment %s container %s", d.Name, ctr.Name)
					case argv[0] == "kube-scheduler":
						for _, a := range argv[1:] {
							name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
							assert.True(t, scheduler[name], "Deployment %s container %s passes %s, which kube-scheduler does not define", d.Name, ctr.Name, a)
						}
					}
				}
			}
		})
	}
}

// TestPriorityClassesMatchDev: the chart's default PriorityClasses are the
// ones make dev creates (internal/priorityclass), field for field.
func TestPriorityClassesMatchDev(t *testing.T) {
	needHelm(t)
	objs := parse(t, mustRender(t))
	for _, want := range priorityclass.Defaults() {
		var got schedulingv1.PriorityClass
		find(t, objs, "PriorityClass", want.Name).into(t, &got)
		assert.Equal(t, want.Value, got.Value, want.Name)
		assert.Equal(t, *want.PreemptionPolicy, *got.PreemptionPolicy, want.Name)
		assert.Equal(t, want.Description, got.Description, want.Name)
		assert.Equal(t, want.GlobalDefault, got.GlobalDefault, want.Name)
	}
}

// TestOwnPodsAboveEveryTier: every Pod runplane runs (its Deployments and
// StatefulSets) has runplane-system, whose value is above every workload
// tier the chart renders.
func TestOwnPodsAboveEveryTier(t *testing.T) {
	needHelm(t)
	objs := parse(t, mustRender(t))
	var system schedulingv1.PriorityClass
	find(t, objs, "PriorityClass", api.PriorityClassSystem).into(t, &system)
	workloads := 0
	for _, o := range objs {
		switch o.kind() {
		case "PriorityClass":
			var pc schedulingv1.PriorityClass
			o.into(t, &pc)
			if pc.Name != api.PriorityClassSystem {
				assert.Less(t, pc.Value, system.Value, pc.Name)
			}
		case "Deployment", "StatefulSet":
			var w struct {
				Spec struct {
					Template corev1.PodTemplateSpec `json:"template"`
				} `json:"spec"`
			}
			o.into(t, &w)
			if w.Spec.Template.Labels[api.LabelStock] != "" || w.Spec.Template.Labels[api.LabelPool] != "" {
				continue // placeholders have runplane-stock; helm test's pool is a workload
			}
			workloads++
			assert.Equal(t, api.PriorityClassSystem, w.Spec.Template.Spec.PriorityClassName, o.name())
		}
	}
	assert.GreaterOrEqual(t, workloads, 5, "webhook, scheduler, queue, controller, NATS")
}

// TestMetricNamesConsistent: every runplane metric a non-test Go file
// defines is snake_case under runplane_, and "in flight" is spelt in_flight
// everywhere (the sidecar's runplane_sidecar_in_flight and the activator's
// runplane_activator_in_flight once disagreed). A series labelled with a
// pool is labelled with its namespace too: tenants name their pools, and
// two tenants' same-named pools must not be one series (issue #30).
func TestMetricNamesConsistent(t *testing.T) {
	root, err := cluster.RepoRoot()
	require.NoError(t, err)
	nameRE := regexp.MustCompile(`Name:\s*"(runplane_[^"]*)"|NewDesc\(\s*"(runplane_[^"]*)"`)
	valid := regexp.MustCompile(`^runplane_[a-z]+(_[a-z0-9]+)*$`)
	// A vector's options, then its label list; a Desc's name, then its labels.
	labelsRE := regexp.MustCompile(`(?s)New(?:Counter|Gauge|Histogram|Summary)Vec\(.*?Name:\s*"(runplane_[^"]*)".*?\},\s*\[\]string\{([^}]*)\}|NewDesc\(\s*"(runplane_[^"]*)",[^[]*\[\]string\{([^}]*)\}`)
	found, pooled := 0, 0
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, m := range nameRE.FindAllStringSubmatch(string(src), -1) {
			name := m[1] + m[2]
			found++
			assert.Regexp(t, valid, name, "%s: metric name", rel)
			assert.NotContains(t, name, "inflight", "%s: %s: spell it in_flight", rel, name)
		}
		for _, m := range labelsRE.FindAllStringSubmatch(string(src), -1) {
			name, labels := m[1]+m[3], m[2]+m[4]
			if strings.Contains(labels, `"pool"`) {
				pooled++
				assert.Contains(t, labels, `"namespace"`, "%s: %s is labelled with a pool but not its namespace", rel, name)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, found, 20, "the walk found too few metric definitions to be reading the code")
	require.GreaterOrEqual(t, pooled, 15, "the walk found too few per-pool metrics to be reading their labels")
}

// TestDashboardSeparatesTenants: every dashboard query of a per-pool series
// selects the tenant namespace too, and groups by it wherever it groups by
// pool. The queue's series carry the pool's namespace as namespace, which
// the ServiceMonitor's scrape keeps as exported_namespace (namespace is the
// scraped Pod's, the release namespace's).
func TestDashboardSeparatesTenants(t *testing.T) {
	panels := dashboardPanels(t)
	by := regexp.MustCompile(`by \(([^)]*)\)`)
	checked := 0
	for _, p := range panels {
		for _, tg := range p.Targets {
			if !strings.Contains(tg.Expr, `pool=~"$pool"`) {
				continue
			}
			checked++
			assert.Contains(t, tg.Expr, `exported_namespace=~"$tenant"`, "panel %q: %s", p.Title, tg.Expr)
			for _, g := range by.FindAllStringSubmatch(tg.Expr, -1) {
				if strings.Contains(g[1], "pool") {
					assert.Contains(t, g[1], "exported_namespace", "panel %q groups by pool, not by namespace: %s", p.Title, tg.Expr)
				}
			}
		}
	}
	require.Greater(t, checked, 10, "the dashboard queries too few per-pool series to be reading it")
}

// configFile is the configuration file the chart renders for the
// Deployment name (its ConfigMap of the same name), and the Deployment's
// way to it: --config names the ConfigMap's file, and a change restarts
// the Pods (the checksum annotation is the file's).
func configFile(t *testing.T, objs []object, name string) []byte {
	t.Helper()
	return mountedConfig(t, objs, name, name, 0, "checksum/config")
}

// mountedConfig is the configuration file of ConfigMap name, read by
// container ctr of Deployment dep with --config, whose Pods restart on the
// annotation checksum when it changes.
func mountedConfig(t *testing.T, objs []object, name, dep string, ctr int, checksum string) []byte {
	t.Helper()
	var cm corev1.ConfigMap
	find(t, objs, "ConfigMap", name).into(t, &cm)
	var d appsv1.Deployment
	find(t, objs, "Deployment", dep).into(t, &d)
	c := d.Spec.Template.Spec.Containers[ctr]
	var mount string
	for _, m := range c.VolumeMounts {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
				mount = m.MountPath
			}
		}
	}
	require.Contains(t, c.Args, "--config="+mount+"/config.yaml", "%s container %s reads the ConfigMap %s's file", dep, c.Name, name)
	sum := sha256.Sum256([]byte(strings.TrimSuffix(cm.Data["config.yaml"], "\n")))
	require.Equal(t, hex.EncodeToString(sum[:])[:16], d.Spec.Template.Annotations[checksum], "%s restarts when its configuration %s changes", dep, name)
	return []byte(cm.Data["config.yaml"])
}

// decoded is a rendered configuration file read by its binary's own loader
// (configfile.Decode of the kind its config package defines).
func decoded[T any, P configfile.Object[T]](t *testing.T, b []byte) *T {
	t.Helper()
	c, err := configfile.Decode[T, P](b)
	require.NoError(t, err, "the binary refuses the chart's %s:\n%s", configfile.Kind[T](), b)
	return c
}

// The rendered configurations: the extender's is the runplane-scheduler
// Pod's second container's.
func queueConfig(t *testing.T, objs []object) *config.QueueConfiguration {
	return decoded[config.QueueConfiguration](t, configFile(t, objs, "runplane-queue"))
}

func webhookConfig(t *testing.T, objs []object) *wconfig.WebhookConfiguration {
	return decoded[wconfig.WebhookConfiguration](t, configFile(t, objs, "runplane-webhook"))
}

func controllerConfig(t *testing.T, objs []object) *cconfig.ControllerConfiguration {
	return decoded[cconfig.ControllerConfiguration](t, configFile(t, objs, "runplane-controller"))
}

func extenderConfig(t *testing.T, objs []object) *econfig.ExtenderConfiguration {
	return decoded[econfig.ExtenderConfiguration](t, mountedConfig(t, objs, "runplane-extender", "runplane-scheduler", 1, "checksum/extender-config"))
}

// TestQueueConfigurationIsDefault: every setting the chart renders for the
// queue, beyond the ones only the install knows (its namespace, addresses,
// NATS, the sizes it bounds storage with, callbacks), is the binary's
// default, which make dev (and any run without the chart) gets: the two
// never run with different limits or timeouts. Compared as structures.
func TestQueueConfigurationIsDefault(t *testing.T) {
	needHelm(t)
	got := queueConfig(t, parse(t, mustRender(t)))
	want := configfile.New[config.QueueConfiguration]()
	// What the chart decides.
	want.Namespace, want.Listen, want.Metrics, want.NATS = got.Namespace, got.Listen, got.Metrics, got.NATS
	want.Stream.Replicas, want.Stream.MaxBytes, want.Stream.RecordsMaxBytes = got.Stream.Replicas, got.Stream.MaxBytes, got.Stream.RecordsMaxBytes
	want.Callbacks = got.Callbacks
	assert.Equal(t, want, got, "the chart's queue configuration differs from the binary's defaults beyond what the install decides")
}

// TestWebhookConfigurationIsDefault: every setting the chart renders for
// the webhook, beyond the ones only the install knows (its namespace,
// ports, image, NATS, stock namespace, certificate), is the binary's
// default, which make dev gets: the sidecars' resources and the priority
// tiers included. Compared as structures; every render case's file loads.
func TestWebhookConfigurationIsDefault(t *testing.T) {
	needHelm(t)
	for _, c := range renderCases[1:] {
		webhookConfig(t, parse(t, mustRender(t, c.args...)))
	}
	got := webhookConfig(t, parse(t, mustRender(t)))
	want := configfile.New[wconfig.WebhookConfiguration]()
	// What the chart decides.
	want.Namespace, want.HealthAddr, want.TLS = got.Namespace, got.HealthAddr, got.TLS
	in := &want.Injection
	in.Image, in.ImagePullPolicy, in.NATSURL, in.NATSServerName = got.Injection.Image, got.Injection.ImagePullPolicy, got.Injection.NATSURL, got.Injection.NATSServerName
	in.StockNamespaces = []string{api.DefaultStockNamespace} // make dev's
	assert.True(t, apiequality.Semantic.DeepEqual(want, got), "the chart's webhook configuration differs from the binary's defaults beyond what the install decides.\nchart:\n%s\ndefaults:\n%s",
		toYAML(got), toYAML(want))
}

// TestControllerConfigurationIsDefault: every setting the chart renders
// for the controller, beyond the ones only the install knows (namespace,
// image, addresses, /metrics certificate, the NATS and DNS endpoints), is
// the binary's default. Compared as structures; every render case's file
// loads.
func TestControllerConfigurationIsDefault(t *testing.T) {
	needHelm(t)
	for _, c := range renderCases[1:] {
		controllerConfig(t, parse(t, mustRender(t, c.args...)))
	}
	got := controllerConfig(t, parse(t, mustRender(t)))
	want := configfile.New[cconfig.ControllerConfiguration]()
	// What the chart decides.
	want.Image, want.Metrics, want.Egress.NATS = got.Image, got.Metrics, got.Egress.NATS
	assert.Equal(t, want, got, "the chart's controller configuration differs from the binary's defaults beyond what the install decides")
}

// TestExtenderConfigurationIsDefault: every setting the chart renders for
// the extender, beyond the ones only the install knows (namespace,
// addresses, certificates, the followed Lease, managed resources, pause
// image, stock namespace), is the binary's default: Lease timings, claim
// timeout, preemption bounds. Compared as structures; every render case's
// file loads, and the init container writes the certificate for its hosts.
func TestExtenderConfigurationIsDefault(t *testing.T) {
	needHelm(t)
	for _, c := range renderCases[1:] {
		extenderConfig(t, parse(t, mustRender(t, c.args...)))
	}
	objs := parse(t, mustRender(t))
	got := extenderConfig(t, objs)
	want := configfile.New[econfig.ExtenderConfiguration]()
	// What the chart decides.
	want.Namespace, want.Addr, want.Metrics, want.TLS = got.Namespace, got.Addr, got.Metrics, got.TLS
	want.LeaderElection.LeaderElect, want.LeaderElection.FollowLease = got.LeaderElection.LeaderElect, got.LeaderElection.FollowLease
	want.ManagedResources, want.ReservationImage, want.Stock.Namespace = got.ManagedResources, got.ReservationImage, got.Stock.Namespace
	assert.Equal(t, want, got, "the chart's extender configuration differs from the binary's defaults beyond what the install decides")
	var dep appsv1.Deployment
	find(t, objs, "Deployment", "runplane-scheduler").into(t, &dep)
	require.Len(t, dep.Spec.Template.Spec.InitContainers, 1)
	assert.Contains(t, dep.Spec.Template.Spec.InitContainers[0].Args, "--config=/etc/runplane/extender/config.yaml", "the init container writes the certificate for the configuration's tls.hosts")
}

// indent prefixes every non-empty line of s.
func indent(s, prefix string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "\n")
}
