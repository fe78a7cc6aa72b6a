package images

import (
	"debug/elf"
	"fmt"
)

// References of the images of the third-party binaries the chart runs,
// built from test/testbin's pinned builds for the real nodes (nothing is
// pulled there).
const (
	NATSRef          = "runplane.local/nats:2.15.3"
	KubeSchedulerRef = "runplane.local/kube-scheduler:v1.37.2"
)

// NATS stands in for the nats image of the chart's bundled NATS: the
// nats-server binary at /nats-server, its entrypoint (as in the official
// image), user 65532.
func NATS(tmp, binary string) (Image, error) {
	return binaryImage(tmp, NATSRef, binary, "/nats-server", []string{"/nats-server"}, "runplane test nats-server")
}

// KubeScheduler stands in for registry.k8s.io/kube-scheduler: the binary at
// /usr/local/bin/kube-scheduler (the chart runs it by name), user 65532.
func KubeScheduler(tmp, binary string) (Image, error) {
	return binaryImage(tmp, KubeSchedulerRef, binary, "/usr/local/bin/kube-scheduler", nil, "runplane test kube-scheduler")
}

func binaryImage(tmp, ref, binary, path string, entrypoint []string, title string) (Image, error) {
	if err := static(binary); err != nil {
		return Image{}, fmt.Errorf("image %s: %w", ref, err)
	}
	img, err := Build(tmp, Spec{
		Ref: ref, Files: append(baseFiles(nonroot), File{Path: path, Source: binary}), User: fmt.Sprintf("%d:%d", nonroot, nonroot), Entrypoint: entrypoint,
		Labels: map[string]string{"org.opencontainers.image.title": title},
	})
	return Image{Ref: ref, Image: img}, err
}

// static refuses a dynamically linked binary: an image here holds the
// binary alone, and test/testbin builds every binary static (cgo off).
func static(binary string) error {
	f, err := elf.Open(binary)
	if err != nil {
		return fmt.Errorf("reading %s: %w", binary, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (it names an ELF interpreter): build it with CGO_ENABLED=0, as test/testbin does", binary)
		}
	}
	return nil
}
