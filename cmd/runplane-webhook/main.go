// Command runplane-webhook is runplane's admission webhook: flags in,
// webhook.Run (a controller-runtime manager) out.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/cmdline"
	"github.com/runplane/runplane/internal/logging"
	"github.com/runplane/runplane/webhook"
	"github.com/runplane/runplane/webhook/mutate"
)

func main() {
	if err := run(); err != nil {
		cmdline.Exit(err)
	}
}

func run() error {
	def := mutate.DefaultConfig()
	var (
		cfg         webhook.Config
		dnsNames    = flag.String("tls-dns-names", "", "comma-separated DNS names of the serving certificate (default runplane-webhook.<namespace>.svc)")
		ips         = flag.String("tls-ip-addresses", "", "comma-separated IP addresses of the serving certificate")
		serviceName = flag.String("service-name", "runplane-webhook", "Service in front of the webhook (for -manage-webhooks and the default DNS name)")
		servicePort = flag.Int("service-port", 443, "port of that Service")
		pullPolicy  = flag.String("image-pull-policy", "", "pull policy of injected containers (Always, IfNotPresent, Never; default: by tag)")
	)
	flag.StringVar(&cfg.Namespace, "namespace", api.DefaultNamespace, "runplane's namespace (catalog ConfigMap, TLS Secret; excluded from admission)")
	flag.StringVar(&cfg.Addr, "addr", ":9443", "HTTPS admission address")
	flag.StringVar(&cfg.HealthAddr, "probe-addr", ":8081", "plain HTTP address of /healthz and /readyz (0 disables); /metrics is on the HTTPS address, for scrapers RBAC allows get on /metrics")
	flag.StringVar(&cfg.Injection.Image, "image", "", "the runplane image (runplane-sidecar, runplane-ssh); required")
	flag.StringVar(&cfg.Injection.PauseImage, "pause-image", def.PauseImage, "image of stock placeholders")
	flag.Func("stock-namespaces", "comma-separated namespaces where stock placeholders may be created (default: any)", func(v string) error {
		cfg.Injection.StockNamespaces = strings.Split(v, ",")
		return nil
	})
	flag.Func("dra-stock-namespaces", "comma-separated tenant namespaces where placeholders of DRA specs only may be created too (their claims go to GPU Pods of the same namespace)", func(v string) error {
		cfg.Injection.DRAStockNamespaces = strings.Split(v, ",")
		return nil
	})
	cfg.Injection.WorkloadPriorityClasses = def.WorkloadPriorityClasses
	flag.Func("workload-priority-classes", "comma-separated PriorityClasses GPU Pods may name, besides "+api.PriorityClassWorkload+" (the default tier); default "+strings.Join(def.WorkloadPriorityClasses, ","), func(v string) error {
		cfg.Injection.WorkloadPriorityClasses = strings.Split(v, ",")
		return nil
	})
	cfg.Injection.Resources = def.Resources
	flag.Func("sidecar-resources", `requests and limits of injected containers as JSON, by container name (runplane-worker, runplane-ssh-install, runplane-ssh), e.g. {"runplane-worker":{"requests":{"cpu":"50m","memory":"64Mi"},"limits":{"cpu":"1","memory":"256Mi"}}}; a container named replaces its default, one not named keeps it`, func(v string) error {
		r, err := mutate.ParseSidecarResources(v)
		if err != nil {
			return err
		}
		for name, rr := range r {
			cfg.Injection.Resources[name] = rr
		}
		return nil
	})
	flag.StringVar(&cfg.Injection.NATSURL, "nats-url", "", "NATS URL the worker sidecar connects to; required")
	flag.StringVar(&cfg.Injection.NATSServerName, "nats-server-name", "", "the name NATS's certificate carries: worker sidecars verify it, with the CA bundle of the ConfigMap "+api.NATSCAConfigMap+" in -namespace, over TLS first; empty: sidecars dial NATS without TLS")
	flag.StringVar(&cfg.Injection.SubjectPrefix, "subject-prefix", def.SubjectPrefix, "NATS subject prefix")
	flag.StringVar(&cfg.Injection.StreamName, "stream-name", def.StreamName, "JetStream stream name")
	flag.BoolVar(&cfg.TLS.CertManager, "cert-manager", false, "serve the certificate cert-manager mounts in -cert-dir; no Secret, no caBundle patching")
	flag.StringVar(&cfg.TLS.CertDir, "cert-dir", "/var/run/runplane/webhook-tls", "directory of tls.crt and tls.key with -cert-manager")
	flag.StringVar(&cfg.TLS.SecretName, "tls-secret", "runplane-webhook-tls", "Secret holding the self-managed CA and serving certificate")
	flag.DurationVar(&cfg.TLS.CheckInterval, "cert-check-interval", time.Hour, "how often the certificate is checked for renewal")
	flag.StringVar(&cfg.Webhooks.Name, "webhook-config-name", webhook.DefaultConfigurationName, "name of the Mutating- and ValidatingWebhookConfiguration")
	flag.BoolVar(&cfg.Webhooks.Manage, "manage-webhooks", false, "create and update the webhook configurations (otherwise only patch their caBundle)")
	flag.StringVar(&cfg.Webhooks.URL, "webhook-url", "", "with -manage-webhooks: base URL the API server calls instead of the Service")
	cfg.Logger = cmdline.Parse(flag.CommandLine, os.Args[1:], logging.Options{})
	cfg.Injection.ImagePullPolicy = corev1.PullPolicy(*pullPolicy)
	cfg.TLS.DNSNames = split(*dnsNames)
	if len(cfg.TLS.DNSNames) == 0 {
		cfg.TLS.DNSNames = []string{*serviceName + "." + cfg.Namespace + ".svc", *serviceName + "." + cfg.Namespace + ".svc.cluster.local"}
	}
	for _, s := range split(*ips) {
		ip := net.ParseIP(s)
		if ip == nil {
			return fmt.Errorf("-tls-ip-addresses: %q is not an IP address", s)
		}
		cfg.TLS.IPAddresses = append(cfg.TLS.IPAddresses, ip)
	}
	if cfg.Webhooks.Manage && cfg.Webhooks.URL == "" {
		port := int32(*servicePort)
		cfg.Webhooks.Service = &admissionregistrationv1.ServiceReference{Namespace: cfg.Namespace, Name: *serviceName, Port: &port}
	}
	var err error
	if cfg.RESTConfig, err = cmdline.RESTConfig(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return webhook.Run(ctx, cfg)
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
