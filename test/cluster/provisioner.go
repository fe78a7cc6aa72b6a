package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// runProvisioner binds every unbound PVC to a new hostPath PV under root:
// the PV carries a claimRef to the PVC, and kube-controller-manager's binder
// completes the binding. It stands in for a storage provisioner, which the
// local cluster lacks.
func runProvisioner(ctx context.Context, client kubernetes.Interface, root string, logf func(string, ...any)) {
	factory := informers.NewSharedInformerFactory(client, 0)
	pvcs := factory.Core().V1().PersistentVolumeClaims().Informer()
	work := make(chan *corev1.PersistentVolumeClaim, 1024)
	enqueue := func(obj any) {
		if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok && pvc.Spec.VolumeName == "" && pvc.DeletionTimestamp == nil {
			select {
			case work <- pvc:
			case <-ctx.Done():
			}
		}
	}
	_, _ = pvcs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	})
	factory.Start(ctx.Done())
	for {
		select {
		case <-ctx.Done():
			factory.Shutdown()
			return
		case pvc := <-work:
			if err := provision(ctx, client, root, pvc); err != nil && ctx.Err() == nil {
				logf("provisioner: %v (retrying)", err)
				go func() {
					select {
					case <-time.After(time.Second):
						enqueue(pvc)
					case <-ctx.Done():
					}
				}()
			}
		}
	}
}

func provision(ctx context.Context, client kubernetes.Interface, root string, pvc *corev1.PersistentVolumeClaim) error {
	name := "pv-" + string(pvc.UID)
	path := filepath.Join(root, pvc.Namespace, pvc.Name+"-"+string(pvc.UID)[:8])
	if err := os.MkdirAll(path, 0o777); err != nil {
		return fmt.Errorf("creating volume dir for %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	// World-writable despite the umask, as local-path provisioners make
	// them: the kubelet applies no fsGroup to hostPath volumes, and Pods on
	// real nodes write them as non-root (the copier runs as UID 65532).
	if err := os.Chmod(path, 0o777); err != nil {
		return fmt.Errorf("opening volume dir for %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if size.IsZero() {
		size = resource.MustParse("1Gi")
	}
	modes := pvc.Spec.AccessModes
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	class := ""
	if pvc.Spec.StorageClassName != nil {
		class = *pvc.Spec.StorageClassName
	}
	hostPathType := corev1.HostPathDirectoryOrCreate
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"runplane.io/local-provisioner": "true"}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   modes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              class,
			VolumeMode:                    pvc.Spec.VolumeMode,
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID,
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &hostPathType},
			},
		},
	}
	if _, err := client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating PV for %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	return nil
}
