package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// NetworkPolicy on the real nodes: every real node enforces NetworkPolicy,
// AdminNetworkPolicy and BaselineAdminNetworkPolicy with
// sigs.k8s.io/kube-network-policies (test/testbin/node/netpol), which judges
// the first packet of each connection in userspace from an nfqueue and
// drops what the policies deny.
//
// How packets reach it. Upstream queues them with nftables "queue" rules,
// which need CONFIG_NFT_QUEUE; the kernels of our machines lack it (the
// rules fail to load: "Could not process rule: No such file or directory"),
// so upstream's rules never exist here. The node's namespace queues instead
// with iptables (iptables-nft runs the xt NFQUEUE target through nft_compat,
// which needs only CONFIG_NETFILTER_XT_TARGET_NFQUEUE): netpolRules, in the
// mangle table's POSTROUTING, which sees Pod→Pod traffic on the node's
// bridge (br_netfilter, bridge-nf-call-iptables is on in a new namespace) and
// routed traffic after kube-proxy's DNAT (the real destination Pod) and
// before its masquerade (the real source Pod). They skip, as upstream's do,
// the node's own processes (uid 0: kubelet probes, kube-proxy, the
// enforcer's apiserver connection; so also hostNetwork Pods running as
// root) and established connections. POSTROUTING never sees what Pods send
// the node itself (its InternalIP: the kubelet; addresses on its loopback,
// such as a metadata listener at 169.254.169.254): that goes to INPUT,
// where the same rules queue new connections arriving from the Pods'
// bridge (upstream's postrouting hook misses them too). No
// --queue-bypass: with the enforcer gone, new connections of Pods are
// dropped, never let through unjudged.
//
// The enforcer runs in the node's namespace beside kube-proxy (nodeScript)
// with -admin-network-policy and -baseline-admin-network-policy, logging to
// kube-network-policies.log in the node's dir, every verdict included (-v=2). Its
// identity is the client certificate user netpolUser, bound to the read-only
// ClusterRole it needs (netpolRBAC); its kubeconfig is netpol.kubeconfig.
// The cluster installs the network-policy-api CRDs it watches (the
// experimental channel, of the version node.sh built it against) before the
// nodes start, and a node is Ready only once its enforcer has bound the
// queue.

const (
	// netpolQueue is the nfqueue the nodes queue new connections to.
	netpolQueue = 100
	// netpolUser is the enforcer's user name (its client certificate's CN).
	netpolUser = "runplane:kube-network-policies"
	// podBridge is the node's CNI bridge (cniConfig), the Pods' gateway.
	podBridge = "cni0"
)

// netpolRules are the iptables rules (table mangle) that queue the first
// packet of every connection the node forwards, or its Pods open to the
// node, to the enforcer.
var netpolRules = [][]string{
	{"-A", "POSTROUTING", "-m", "owner", "--uid-owner", "0", "-j", "RETURN"},
	{"-A", "POSTROUTING", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"},
	{"-A", "POSTROUTING", "-j", "NFQUEUE", "--queue-num", strconv.Itoa(netpolQueue)},
	{"-A", "INPUT", "-i", podBridge, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"},
	{"-A", "INPUT", "-i", podBridge, "-j", "NFQUEUE", "--queue-num", strconv.Itoa(netpolQueue)},
}

// netpolScript installs netpolRules in the current network namespace,
// after checking that bridged traffic goes through iptables.
func netpolScript() string {
	var b strings.Builder
	b.WriteString("set -e\n")
	// Without it Pod-to-Pod traffic on the node's bridge skips iptables. A
	// new namespace has it on (per namespace since Linux 5.3); never set
	// here, where an older kernel would change the host's.
	b.WriteString(`test "$(cat /proc/sys/net/bridge/bridge-nf-call-iptables)" = 1 || ` +
		`{ echo "net.bridge.bridge-nf-call-iptables is 0 in a new network namespace" >&2; exit 1; }` + "\n")
	for _, r := range netpolRules {
		b.WriteString("iptables -w -t mangle " + strings.Join(r, " ") + "\n")
	}
	return b.String()
}

// netpolSupport checks in a throwaway network namespace that the kernel
// and iptables take the node's rules.
func netpolSupport() error {
	if _, err := os.Stat("/proc/sys/net/bridge/bridge-nf-call-iptables"); err != nil {
		return errors.New("real nodes enforce NetworkPolicy on traffic of their Pods' bridge, which needs br_netfilter " +
			"(CONFIG_BRIDGE_NETFILTER; modprobe br_netfilter): /proc/sys/net/bridge/bridge-nf-call-iptables is missing")
	}
	out, err := exec.Command("unshare", "--net", "--", "sh", "-c", netpolScript()).CombinedOutput()
	if err != nil {
		return fmt.Errorf("real nodes enforce NetworkPolicy by queueing new connections with iptables "+
			"(owner and conntrack matches, NFQUEUE target: CONFIG_NETFILTER_XT_MATCH_OWNER, CONFIG_NETFILTER_XT_MATCH_CONNTRACK, "+
			"CONFIG_NETFILTER_XT_TARGET_NFQUEUE, CONFIG_NETFILTER_NETLINK_QUEUE), and this kernel or iptables refused them: %w: %s", err, out)
	}
	return nil
}

// netpolRBAC lets netpolUser read what the enforcer watches and record events.
func netpolRBAC() (*rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding) {
	read := []string{"get", "list", "watch"}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: netpolUser},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "namespaces", "nodes"}, Verbs: read},
			{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: read},
			{APIGroups: []string{"policy.networking.k8s.io"}, Resources: []string{"adminnetworkpolicies", "baselineadminnetworkpolicies"}, Verbs: read},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: netpolUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: netpolUser},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: netpolUser}},
	}
	return role, binding
}

// setUpNetworkPolicy installs the network-policy-api CRDs from the node
// binaries' dir and the enforcer's RBAC.
func (c *Cluster) setUpNetworkPolicy(ctx context.Context, bin string) error {
	role, binding := netpolRBAC()
	if _, err := c.client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRole %s: %w", role.Name, err)
	}
	if _, err := c.client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRoleBinding %s: %w", binding.Name, err)
	}
	files, err := filepath.Glob(filepath.Join(bin, "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no network-policy-api CRDs in %s/crds (test/testbin/node.sh copies them)", bin)
	}
	dyn, err := dynamic.NewForConfig(c.restConfig)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	for _, f := range files {
		crd, err := readObject(f)
		if err != nil {
			return err
		}
		if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating CRD %s: %w", crd.GetName(), err)
		}
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			got, err := crds.Get(ctx, crd.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, cond := range conds {
				if m, ok := cond.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s never Established: %w", crd.GetName(), err)
		}
	}
	return nil
}

// readObject decodes the one YAML object of file f.
func readObject(f string) (*unstructured.Unstructured, error) {
	data, err := os.ReadFile(f)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", f, err)
	}
	obj := &unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	if err := dec.Decode(&obj.Object); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("decoding %s: %w", f, err)
	}
	if obj.GetName() == "" {
		return nil, fmt.Errorf("%s: no object", f)
	}
	return obj, nil
}

// netpolKubeconfig writes the enforcer's kubeconfig: the apiserver as the
// node reaches it, netpolUser's client certificate.
func (c *Cluster) netpolKubeconfig(apiserverURL, path string) error {
	cfg := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"local": {Server: apiserverURL, TLSServerName: apiserverName, CertificateAuthorityData: c.pki.caPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"netpol": {ClientCertificateData: c.pki.netpolCertPEM, ClientKeyData: c.pki.netpolKeyPEM}},
		Contexts:       map[string]*clientcmdapi.Context{"local": {Cluster: "local", AuthInfo: "netpol"}},
		CurrentContext: "local",
	}
	if err := clientcmd.WriteToFile(cfg, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// netpolBound says whether the enforcer has bound netpolQueue in the
// network namespace of process pid.
func netpolBound(pid int) error {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "net", "netfilter", "nfnetlink_queue"))
	if err != nil {
		return fmt.Errorf("no nfqueue bound yet: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == strconv.Itoa(netpolQueue) {
			return nil
		}
	}
	return fmt.Errorf("nfqueue %d not bound", netpolQueue)
}
