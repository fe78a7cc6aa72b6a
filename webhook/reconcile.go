package webhook

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// configReconciler keeps the webhook configuration objects (whole objects
// when managing them, else only their caBundle) and repairs drift at once.
// It is a manager Runnable; ready says the last pass succeeded.
type configReconciler struct {
	client kubernetes.Interface
	// objects is the manager's cache, which keeps of the two kinds only
	// the objects named Webhooks.Name (cacheOptions).
	objects  ctrlcache.Informers
	cfg      Config
	log      *slog.Logger
	ready    *atomic.Bool
	caBundle func() []byte
	mu       sync.Mutex // one pass at a time: the Runnable's and a renewal's
}

// Start reconciles now, whenever either object changes, and every Resync,
// until ctx ends.
func (r *configReconciler) Start(ctx context.Context) error {
	trigger, stop, err := r.watch(ctx)
	if err != nil {
		return err
	}
	defer stop()
	resync := time.NewTicker(r.cfg.Webhooks.Resync.Duration)
	defer resync.Stop()
	for {
		if err := r.reconcile(ctx); err != nil {
			// The first admissions may fail TLS until a pass succeeds.
			r.log.Error("webhook configurations", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-resync.C:
		case <-trigger:
		}
	}
}

// reconcile brings both objects in line with the current caBundle.
func (r *configReconciler) reconcile(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.apply(ctx, r.caBundle()); err != nil {
		return err
	}
	if r.cfg.Webhooks.Manage {
		if err := r.applyPolicies(ctx); err != nil {
			return err
		}
	}
	r.ready.Store(true)
	return nil
}

// watch signals when either configuration object changes, so drift (say a
// reinstall that reset the caBundle) is repaired at once; stop removes its
// handlers (the cache outlives the Runnable at shutdown).
func (r *configReconciler) watch(ctx context.Context) (<-chan struct{}, func(), error) {
	ch := make(chan struct{}, 1)
	poke := func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { poke() }, UpdateFunc: func(any, any) { poke() }, DeleteFunc: func(any) { poke() },
	}
	var stops []func()
	stop := func() {
		for _, s := range stops {
			s()
		}
	}
	for _, obj := range []client.Object{&admissionregistrationv1.MutatingWebhookConfiguration{}, &admissionregistrationv1.ValidatingWebhookConfiguration{}} {
		// Not waiting for its sync: the passes start now, and the
		// handler gets every object the informer lists.
		inf, err := r.objects.GetInformer(ctx, obj, ctrlcache.BlockUntilSynced(false))
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("webhook configurations: informer of %T: %w", obj, err)
		}
		reg, err := inf.AddEventHandler(handler)
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("webhook configurations: watching %T: %w", obj, err)
		}
		stops = append(stops, func() {
			if err := inf.RemoveEventHandler(reg); err != nil {
				r.log.Warn("webhook configurations: removing a watch handler", "error", err)
			}
		})
	}
	return ch, stop, nil
}

// service is where managed configurations send admission without a
// Webhooks.URL: the configured Service (nil with a URL, and unmanaged: the
// chart's objects name it).
func (r *configReconciler) service() *admissionregistrationv1.ServiceReference {
	if !r.cfg.Webhooks.Manage || r.cfg.Webhooks.URL != "" {
		return nil
	}
	return &admissionregistrationv1.ServiceReference{Namespace: r.cfg.Namespace, Name: r.cfg.Service.Name, Port: &r.cfg.Service.Port}
}

func (r *configReconciler) apply(ctx context.Context, caBundle []byte) error {
	want, wantV := Configurations(ConfigurationOptions{
		Name: r.cfg.Webhooks.Name, Namespace: r.cfg.Namespace,
		URL: r.cfg.Webhooks.URL, Service: r.service(), CABundle: caBundle,
	})
	mapi := r.client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	err := reconcileObject(ctx, r, "MutatingWebhookConfiguration", want, caBundle, mapi.Get, mapi.Create, mapi.Update,
		func(c *admissionregistrationv1.MutatingWebhookConfiguration) *[]admissionregistrationv1.MutatingWebhook {
			return &c.Webhooks
		},
		func(w *admissionregistrationv1.MutatingWebhook) *admissionregistrationv1.WebhookClientConfig {
			return &w.ClientConfig
		})
	if err != nil {
		return err
	}
	vapi := r.client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	return reconcileObject(ctx, r, "ValidatingWebhookConfiguration", wantV, caBundle, vapi.Get, vapi.Create, vapi.Update,
		func(c *admissionregistrationv1.ValidatingWebhookConfiguration) *[]admissionregistrationv1.ValidatingWebhook {
			return &c.Webhooks
		},
		func(w *admissionregistrationv1.ValidatingWebhook) *admissionregistrationv1.WebhookClientConfig {
			return &w.ClientConfig
		})
}

// reconcileObject creates the configuration when runplane manages it, and
// otherwise brings the existing one in line: its webhooks (list W) when
// managed and their shape changed, and every caBundle.
func reconcileObject[T interface {
	metav1.Object
	DeepCopy() T
}, W any](ctx context.Context, r *configReconciler, kind string, want T, caBundle []byte,
	get func(context.Context, string, metav1.GetOptions) (T, error),
	create func(context.Context, T, metav1.CreateOptions) (T, error),
	update func(context.Context, T, metav1.UpdateOptions) (T, error),
	webhooks func(T) *[]W, clientConfig func(*W) *admissionregistrationv1.WebhookClientConfig,
) error {
	name := want.GetName()
	have, err := get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && r.cfg.Webhooks.Manage:
		if _, err := create(ctx, want, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating %s %s: %w", kind, name, err)
		}
		r.log.Info("created "+kind, "name", name)
		return nil
	case apierrors.IsNotFound(err):
		r.log.Warn(kind+" not found; the chart creates it", "name", name)
		return nil
	case err != nil:
		return fmt.Errorf("reading %s %s: %w", kind, name, err)
	}
	next := have.DeepCopy()
	changed := r.cfg.Webhooks.Manage && have.GetAnnotations()[ConfigHashAnnotation] != want.GetAnnotations()[ConfigHashAnnotation]
	if changed {
		*webhooks(next) = *webhooks(want)
		next.SetAnnotations(mergeAnnotations(next.GetAnnotations(), want.GetAnnotations()))
	}
	for i := range *webhooks(next) {
		changed = setCABundle(clientConfig(&(*webhooks(next))[i]), caBundle) || changed
	}
	if !changed {
		return nil
	}
	if _, err := update(ctx, next, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating %s %s: %w", kind, name, err)
	}
	r.log.Info("updated "+kind, "name", name)
	return nil
}

// setCABundle sets a webhook's caBundle and reports whether it changed.
func setCABundle(cc *admissionregistrationv1.WebhookClientConfig, caBundle []byte) bool {
	if bytes.Equal(cc.CABundle, caBundle) {
		return false
	}
	cc.CABundle = caBundle
	return true
}

func mergeAnnotations(have, want map[string]string) map[string]string {
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, want)
	return out
}
