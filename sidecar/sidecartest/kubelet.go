package sidecartest

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// Kubelet plays the kubelet of a cluster without one (kube-apiserver
// only) for a pool's worker Pods: it runs a Worker for every Running Pod
// the selector matches in the namespace, and kills it when its Pod is
// deleted (the tests' Pods have no termination grace).
type Kubelet struct {
	Client    kubernetes.Interface
	Namespace string
	Selector  string
	// Config is the worker of pod (Name defaults to the Pod's).
	Config func(pod *corev1.Pod) (Config, error)
	// OnPod, when set, sees the Pod of every event.
	OnPod func(pod *corev1.Pod)
	// OnError, when set, hears why a Pod's worker did not start (the
	// Pod's next event tries again).
	OnError func(error)

	mu    sync.Mutex
	procs map[string]*Worker
	gone  []*Worker
}

// Run watches the Pods until ctx ends, then ends every worker it ran.
func (k *Kubelet) Run(ctx context.Context) {
	defer k.closeAll()
	for ctx.Err() == nil {
		w, err := k.Client.CoreV1().Pods(k.Namespace).Watch(ctx, metav1.ListOptions{LabelSelector: k.Selector})
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		for ev := range w.ResultChan() {
			if pod, ok := ev.Object.(*corev1.Pod); ok {
				k.event(ctx, pod, ev.Type == watch.Deleted || pod.DeletionTimestamp != nil)
			}
		}
	}
}

func (k *Kubelet) event(ctx context.Context, pod *corev1.Pod, gone bool) {
	if k.OnPod != nil {
		k.OnPod(pod)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.procs == nil {
		k.procs = map[string]*Worker{}
	}
	wk := k.procs[pod.Name]
	switch {
	case gone && wk != nil:
		if err := wk.Kill(); err != nil {
			k.report(err)
		}
		delete(k.procs, pod.Name)
		k.gone = append(k.gone, wk)
	case !gone && wk == nil && pod.Status.Phase == corev1.PodRunning:
		cfg, err := k.Config(pod)
		if err != nil {
			k.report(fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err))
			return
		}
		if cfg.Name == "" {
			cfg.Name = pod.Name
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		nw, err := Start(sctx, cfg)
		if err != nil {
			k.report(fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err))
			return
		}
		k.procs[pod.Name] = nw
	}
}

func (k *Kubelet) report(err error) {
	if k.OnError != nil {
		k.OnError(err)
	}
}

// Running reports whether the worker of Pod name runs.
func (k *Kubelet) Running(name string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.procs[name] != nil
}

// Count is how many workers run.
func (k *Kubelet) Count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.procs)
}

func (k *Kubelet) closeAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, w := range k.procs {
		k.gone = append(k.gone, w)
	}
	k.procs = nil
	var wg sync.WaitGroup
	for _, w := range k.gone {
		wg.Go(func() {
			if err := w.Close(); err != nil {
				k.report(err)
			}
		})
	}
	wg.Wait()
	k.gone = nil
}
