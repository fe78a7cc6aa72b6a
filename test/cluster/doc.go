// Package cluster runs a real, local Kubernetes control plane for tests and
// for `make dev`: etcd, kube-apiserver (RBAC, service-account tokens and
// admission webhooks on), kube-controller-manager, kube-scheduler and kwok,
// which fakes the nodes and drives Pods through their lifecycle with its
// stages; a deleted Pod stays Terminating for min(its grace period,
// Options.PodTerminationBound), as a kubelet keeps it (stages/
// pod-delete-graceful.yaml). A small provisioner binds every PVC to a hostPath PV, so Pods and
// Jobs that mount PVCs schedule.
//
// GPUs come as node allocatable (Node.GPUs, nvidia.com/gpu: the device
// plugin's way) and/or through Dynamic Resource Allocation (Node.DRAGPUs: a
// ResourceSlice per node, pool = node name, devices named and attributed as
// NVIDIA's DRA driver names them; dra.go). The DeviceClasses gpu.nvidia.com
// and mig.nvidia.com are installed at Start; kube-scheduler allocates claims
// from the slices, no driver runs for kwok nodes.
//
// Everything listens on free loopback ports and lives in one temp dir. Stop
// stops every process it started; the processes also die with the test
// binary (parent-death signal), so none outlives the run.
//
// Options.RealNodes adds real kubelet + containerd nodes beside the kwok ones
// (root only; see realnode.go and RealNodeSupport), with a fake GPU device
// plugin (package fakegpu), with Options.RealNodeDRA a fake DRA driver
// (package fakedra, realnode_dra.go), and the images of hack/images imported; they
// enforce NetworkPolicy, AdminNetworkPolicy and BaselineAdminNetworkPolicy
// (kube-network-policies, realnode_netpol.go).
//
// The binaries come from test/testbin (see Binaries; the real node's from
// test/testbin/node.sh, see NodeBinaries). Tests in one package
// share one cluster through Main, called from TestMain.
package cluster
