package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	npav1alpha1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/controllers/egress"
	"github.com/runplane/runplane/internal/priorityclass"
	"github.com/runplane/runplane/test/cluster"
)

// bootstrap creates what the chart would before its components run:
// runplane's namespace (and the tests' own), the PriorityClasses as its
// default values render them, and the GPU spec catalog.
func bootstrap(ctx context.Context, c *cluster.Cluster, o Options) error {
	for _, ns := range append([]string{api.DefaultNamespace}, o.Namespaces...) {
		if err := c.CreateNamespace(ctx, ns); err != nil {
			return err
		}
	}
	for _, pc := range priorityclass.Defaults() {
		if _, err := c.Client().SchedulingV1().PriorityClasses().Create(ctx, &pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating PriorityClass %s: %w", pc.Name, err)
		}
	}
	if len(o.Catalog) == 0 {
		return nil
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: api.CatalogConfigMap, Namespace: api.DefaultNamespace}, Data: o.Catalog}
	if _, err := c.Client().CoreV1().ConfigMaps(api.DefaultNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the GPU spec catalog: %w", err)
	}
	return nil
}

// restrictEgress applies the chart's egress restriction: its default
// settings (egress.DefaultSettings, which the chart's values mirror; the
// cluster's CoreDNS listens on their port 53) with this stack's NATS port.
// NATS on a host address that is no Pod's (a real node's) is an external
// NATS at that address (the chart's nats.external.egress.cidrs). On a
// cluster that serves no AdminNetworkPolicy it falls back to
// networkPolicy mode, as the chart's egress.enforcement would have to be
// set there, and says so in the log.
func (s *Stack) restrictEgress(ctx context.Context) (egress.Settings, error) {
	e := egress.DefaultSettings()
	e.NATS.Port = int32(s.NATSPort())
	if host := s.NATS[0].Addr().(*net.TCPAddr).AddrPort().Addr().Unmap(); !host.IsLoopback() {
		e.NATS.CIDRs = []netip.Prefix{netip.PrefixFrom(host, 32)}
	}
	scheme := runtime.NewScheme()
	if err := npav1alpha1.Install(scheme); err != nil {
		return e, err
	}
	cl, err := client.New(s.Cluster.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		return e, fmt.Errorf("egress: %w", err)
	}
	err = egress.ApplyAdminPolicy(ctx, cl, e)
	if errors.Is(err, egress.ErrAdminPolicyNotServed) {
		s.Log.Warn("pool egress falls back to a NetworkPolicy per namespace (egress.enforcement=networkPolicy)", "reason", err)
		e.Enforcement = egress.EnforcementNetworkPolicy
		return e, nil
	}
	if err != nil {
		return e, fmt.Errorf("restricting egress: %w", err)
	}
	return e, nil
}
