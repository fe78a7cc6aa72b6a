package realnode

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/hack/images"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/webhook/mutate"
)

// devboxScript is the main container's command: it reports what it sees
// (its GPU devices, their IDs, its cgroups) and then sleeps, as a dev box does.
const devboxScript = `echo "devices: $(ls /dev | grep nvidia | tr '\n' ' ')"; echo "visible: $NVIDIA_VISIBLE_DEVICES"; ` +
	`echo "cgroup: $(cat /proc/self/cgroup | sort | tr '\n' ' ')"; echo started; exec sleep 3600`

// An SSH session into a real Pod runs inside its main container: the shell
// (with a PTY), exec, SFTP and ssh -L all work with the Go client, and a
// session sees exactly the fake GPU the device plugin gave the main
// container, its environment, its volumes and its cgroup (so its limits).
func TestSSHSessionRunsInTheMainContainer(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := env.Client()

	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	signer, err := ssh.NewSignerFromKey(priv)
	require.NoError(t, err)
	_, err = c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "dev-keys"},
		StringData: map[string]string{api.SSHAuthorizedKeysKey: string(ssh.MarshalAuthorizedKey(signer.PublicKey()))}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dev-data"},
		Data: map[string]string{"hello.txt": "from-a-volume\n"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	limits := corev1.ResourceList{api.DefaultGPUResource: resource.MustParse("1"),
		corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "devbox", Labels: map[string]string{api.LabelSSH: api.SSHEnabled},
			Annotations: map[string]string{api.AnnotationSSHAuthorizedKeys: "dev-keys"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "main", Image: images.UserRef, ImagePullPolicy: corev1.PullNever,
				Command:      []string{"sh", "-c", devboxScript},
				Env:          []corev1.EnvVar{{Name: "DEVBOX_ENV", Value: "from-the-pod-spec"}},
				Resources:    corev1.ResourceRequirements{Limits: limits, Requests: limits},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "work", MountPath: "/work"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "dev-data"}}}},
				{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
			NodeSelector:                  map[string]string{cluster.RealNodeLabel: "true"},
			Tolerations:                   []corev1.Toleration{cluster.RealNodeToleration},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
		},
	}
	created, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.CoreV1().Pods(ns).Delete(context.Background(), "devbox", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	// No SSH sidecar: the install container, then the launcher in front
	// of the main container's command.
	require.Len(t, created.Spec.InitContainers, 1)
	require.Equal(t, mutate.SSHInstallContainerName, created.Spec.InitContainers[0].Name)
	require.Equal(t, []string{"sh", "-c", devboxScript}, created.Spec.Containers[0].Command[len(created.Spec.Containers[0].Command)-3:])

	// What the main container itself sees, from its own log.
	log := logsWhen(t, ctx, ns, "devbox", "started")
	mainDevs, mainVisible, mainCgroup := field(log, "devices"), field(log, "visible"), field(log, "cgroup")
	require.Len(t, strings.Fields(mainDevs), 1, "the main container has one fake GPU; log:\n%s", log)
	require.NotEmpty(t, mainVisible, "log:\n%s", log)

	var podIP string
	require.NoError(t, wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, "devbox", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		podIP = p.Status.PodIP
		return podIP != "" && p.Status.Phase == corev1.PodRunning, nil
	}), "the Pod never ran")
	addr := net.JoinHostPort(podIP, fmt.Sprint(api.SSHPort))
	var client *ssh.Client
	require.NoError(t, wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		// The host key is the Pod's own, generated at its start: trust on
		// first use, then pinned for the rest of the test.
		cl, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{User: "dev", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
			HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 5 * time.Second})
		if err != nil {
			return false, nil
		}
		client = cl
		return true, nil
	}), "no SSH server at %s", addr)
	defer client.Close()

	run := func(t *testing.T, cmd string) string {
		t.Helper()
		s, err := client.NewSession()
		require.NoError(t, err)
		defer s.Close()
		out, err := s.CombinedOutput(cmd)
		require.NoError(t, err, "%s: %s", cmd, out)
		return strings.TrimSpace(string(out))
	}

	t.Run("gpu", func(t *testing.T) {
		sorted := func(s string) []string { f := strings.Fields(s); sort.Strings(f); return f }
		assert.Equal(t, sorted(mainDevs), sorted(run(t, `ls /dev | grep nvidia`)), "the session's GPU devices")
		assert.Equal(t, mainVisible, run(t, `echo $NVIDIA_VISIBLE_DEVICES`), "the session's NVIDIA_VISIBLE_DEVICES")
	})
	t.Run("env", func(t *testing.T) {
		assert.Equal(t, "from-the-pod-spec", run(t, `echo $DEVBOX_ENV`))
	})
	t.Run("mounts", func(t *testing.T) {
		assert.Equal(t, "from-a-volume", run(t, `cat /data/hello.txt`))
	})
	t.Run("cgroup and limits", func(t *testing.T) {
		cg := run(t, `cat /proc/self/cgroup | sort | tr '\n' ' '`)
		assert.Equal(t, mainCgroup, cg, "the session is in the main container's cgroups")
		assert.Equal(t, "268435456", run(t, `cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes`), "memory limit 256Mi")
		assert.Equal(t, "50000", run(t, `(cat /sys/fs/cgroup/cpu.max 2>/dev/null || cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) | cut -d' ' -f1`), "CPU limit 500m (quota per 100ms)")
	})
	t.Run("launcher is the container's init", func(t *testing.T) {
		assert.Contains(t, run(t, `tr '\0' ' ' < /proc/1/cmdline`), mutate.SSHBinaryDir+"/runplane-ssh --launch")
		// The user's command runs as the launcher's child.
		assert.Contains(t, run(t, `for p in /proc/[0-9]*; do [ "$(cut -d' ' -f4 $p/stat)" = 1 ] && tr '\0' ' ' < $p/cmdline && echo; done; true`), "sleep 3600")
	})
	t.Run("shell with a pty", func(t *testing.T) {
		s, err := client.NewSession()
		require.NoError(t, err)
		defer s.Close()
		require.NoError(t, s.RequestPty("xterm", 40, 120, ssh.TerminalModes{}))
		stdin, err := s.StdinPipe()
		require.NoError(t, err)
		stdout, err := s.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, s.Shell())
		_, err = io.WriteString(stdin, "echo tty=$(tty) sum=$((40+2)); exit\n")
		require.NoError(t, err)
		out, _ := io.ReadAll(stdout)
		assert.Contains(t, string(out), "sum=42")
		assert.Contains(t, string(out), "tty=/dev/pts/")
		require.NoError(t, s.Wait())
	})
	t.Run("sftp", func(t *testing.T) {
		sc, err := sftp.NewClient(client)
		require.NoError(t, err)
		defer sc.Close()
		f, err := sc.Create("/work/uploaded.txt")
		require.NoError(t, err)
		_, err = f.Write([]byte("via-sftp\n"))
		require.NoError(t, err)
		require.NoError(t, f.Close())
		assert.Equal(t, "via-sftp", run(t, `cat /work/uploaded.txt`))
		r, err := sc.Open("/data/hello.txt")
		require.NoError(t, err)
		data, err := io.ReadAll(r)
		require.NoError(t, err)
		r.Close()
		assert.Equal(t, "from-a-volume\n", string(data))
	})
	t.Run("ssh -L", func(t *testing.T) {
		run(t, `httpd -p 127.0.0.1:8080 -h /data`) // busybox httpd goes to the background
		var conn net.Conn
		require.Eventually(t, func() bool {
			conn, err = client.Dial("tcp", "127.0.0.1:8080")
			return err == nil
		}, 30*time.Second, 100*time.Millisecond, "forward to the Pod's 127.0.0.1:8080: %v", err)
		defer conn.Close()
		_, err = io.WriteString(conn, "GET /hello.txt HTTP/1.0\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, "from-a-volume\n", string(body))
	})
}

// field is the value of the log line "<name>: <value>", trimmed.
func field(log, name string) string {
	for _, line := range strings.Split(log, "\n") {
		if v, ok := strings.CutPrefix(line, name+": "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
