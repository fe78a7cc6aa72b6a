package images

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// References of the standard images. The runplane image's is the chart's
// default repository with the tag "dev"; the others are test images that
// exist only where they were imported (runplane.local is no registry).
const (
	RunplaneRef = "ghcr.io/runplane/runplane:dev"
	PauseRef    = "runplane.local/pause:1"
	EchoRef     = "runplane.local/framework-echo:dev"
	UserRef     = "runplane.local/user:dev"
	CoreDNSRef  = "runplane.local/coredns:1"
)

// Binaries of the runplane image, all under /usr/local/bin.
var runplaneBinaries = []string{
	"runplane-webhook", "runplane-extender", "runplane-controller", "runplane-queue", "runplane-sidecar",
	"runplane-ssh", "runplane-copy", "runplane-accessor", "runplane-invoke", "framework-echo",
}

// nonroot is the runplane image's user (api.ImageUID; distroless's nonroot).
const nonroot = 65532

// BuildBinaries builds the named runplane binaries (cmd/<name>, or
// "pause"; every one and pause when none is named) of the repository at
// root as static executables into out.
func BuildBinaries(ctx context.Context, root, out string, names ...string) error {
	pkgs := []string{"./cmd/...", "./hack/images/pause"}
	if len(names) > 0 {
		pkgs = pkgs[:0]
		for _, n := range names {
			if n == "pause" {
				pkgs = append(pkgs, "./hack/images/pause")
				continue
			}
			pkgs = append(pkgs, "./cmd/"+n)
		}
	}
	args := append([]string{"build", "-trimpath", "-ldflags", "-s -w", "-o", out + string(filepath.Separator)}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w\n%s", strings.Join(pkgs, " "), err, msg)
	}
	return nil
}

// Runplane is the image the chart runs and the webhook injects: every
// binary, user 65532, OCI labels.
func Runplane(tmp, binDir, ref, version string) (Image, error) {
	files := baseFiles(nonroot)
	for _, b := range runplaneBinaries {
		files = append(files, File{Path: "/usr/local/bin/" + b, Source: filepath.Join(binDir, b)})
	}
	// The queue and the controllers talk TLS to the apiserver and to NATS
	// with their own CAs; a host CA bundle is added for anything else.
	if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		files = append(files, File{Path: "/etc/ssl/certs/ca-certificates.crt", Source: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o644})
	}
	sbom, err := SBOM(binDir, runplaneBinaries, version)
	if err != nil {
		return Image{}, err
	}
	files = append(files, File{Path: SBOMPath, Data: sbom, Mode: 0o644})
	img, err := Build(tmp, Spec{
		Ref: ref, Files: files, User: fmt.Sprintf("%d:%d", nonroot, nonroot), WorkingDir: "/home/nonroot",
		Labels: map[string]string{
			"org.opencontainers.image.title":       "runplane",
			"org.opencontainers.image.description": "runplane: every binary (" + strings.Join(runplaneBinaries, ", ") + ")",
			"org.opencontainers.image.source":      "https://github.com/runplane/runplane",
			"org.opencontainers.image.version":     version,
		},
	})
	return Image{Ref: ref, Image: img, SBOM: sbom}, err
}

// Pause holds Pod sandboxes and stock placeholders.
func Pause(tmp, binDir string) (Image, error) {
	img, err := Build(tmp, Spec{
		Ref: PauseRef, Files: []File{{Path: "/pause", Source: filepath.Join(binDir, "pause")}},
		User: "65535:65535", Entrypoint: []string{"/pause"},
		Labels: map[string]string{"org.opencontainers.image.title": "runplane test pause"},
	})
	return Image{Ref: PauseRef, Image: img}, err
}

// FrameworkEcho is a serverless worker's user container: the echo framework
// on the unix socket. With busybox set, it also has /bin/sh, ls, cat and
// env, so tests can look inside the running container (kubectl exec).
func FrameworkEcho(tmp, binDir, busybox string) (Image, error) {
	files := append(baseFiles(nonroot), File{Path: "/usr/local/bin/framework-echo", Source: filepath.Join(binDir, "framework-echo")})
	if busybox != "" {
		files = append(files, File{Path: "/bin/busybox", Source: busybox})
		for _, applet := range []string{"sh", "ls", "cat", "env"} {
			files = append(files, File{Path: "/bin/" + applet, Link: "/bin/busybox"})
		}
	}
	img, err := Build(tmp, Spec{
		Ref: EchoRef, Files: files, User: fmt.Sprintf("%d:%d", nonroot, nonroot),
		Entrypoint: []string{"/usr/local/bin/framework-echo"},
		Labels:     map[string]string{"org.opencontainers.image.title": "runplane framework-echo"},
	})
	return Image{Ref: EchoRef, Image: img}, err
}

// User is a small user image: busybox (a static build) with every applet
// linked under its usual path, so SSH sessions and prepare Jobs have a shell
// and coreutils. It runs as root by default, like most user images.
func User(tmp, busybox string) (Image, error) {
	out, err := exec.Command(busybox, "--list-full").Output()
	if err != nil {
		return Image{}, fmt.Errorf("listing %s applets: %w", busybox, err)
	}
	files := baseFiles(0)
	files = append(files, File{Path: "/bin/busybox", Source: busybox}, File{Path: "/root", Dir: true, Mode: 0o700})
	for _, applet := range strings.Fields(string(out)) {
		if p := "/" + applet; p != "/bin/busybox" {
			files = append(files, File{Path: p, Link: "/bin/busybox"})
		}
	}
	img, err := Build(tmp, Spec{
		Ref: UserRef, Files: files, Cmd: []string{"sh"}, WorkingDir: "/root",
		Labels: map[string]string{"org.opencontainers.image.title": "runplane test user image (busybox)"},
	})
	return Image{Ref: UserRef, Image: img}, err
}

// CoreDNS is the real nodes' cluster DNS (test/cluster): the coredns binary
// test/testbin/node.sh builds (only the plugins a cluster DNS needs), user
// 65532.
func CoreDNS(tmp, binary string) (Image, error) {
	img, err := Build(tmp, Spec{
		Ref: CoreDNSRef, Files: append(baseFiles(nonroot), File{Path: "/coredns", Source: binary}),
		User: fmt.Sprintf("%d:%d", nonroot, nonroot), Entrypoint: []string{"/coredns"},
		Labels: map[string]string{"org.opencontainers.image.title": "runplane test cluster DNS (CoreDNS)"},
	})
	return Image{Ref: CoreDNSRef, Image: img}, err
}

// baseFiles are /etc/passwd and /etc/group naming root and nonroot (65532),
// a home for the image's user and a sticky /tmp.
func baseFiles(user int) []File {
	home := "/home/nonroot"
	if user == 0 {
		home = "/root"
	}
	return []File{
		{Path: "/etc/passwd", Data: []byte("root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Path: "/etc/group", Data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
		{Path: home, Dir: true, Mode: 0o755, UID: user, GID: user},
	}
}

// Standard builds the runplane, pause, framework-echo and user images from
// binDir (see BuildBinaries) and the static busybox at busybox.
func Standard(tmp, binDir, busybox string) ([]Image, error) {
	var imgs []Image
	for _, build := range []func() (Image, error){
		func() (Image, error) { return Runplane(tmp, binDir, RunplaneRef, "dev") },
		func() (Image, error) { return Pause(tmp, binDir) },
		func() (Image, error) { return FrameworkEcho(tmp, binDir, busybox) },
		func() (Image, error) { return User(tmp, busybox) },
	} {
		img, err := build()
		if err != nil {
			return nil, err
		}
		imgs = append(imgs, img)
	}
	return imgs, nil
}
