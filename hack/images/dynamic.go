package images

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// libDirs are where the host's shared libraries are looked up.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// sharedLibraries returns the files a dynamically linked binary needs to run
// in an empty image: its ELF interpreter and the shared libraries it needs,
// those libraries' own included (libselinux needs libpcre2, say), copied
// from the host under their host paths. A static binary needs none. The
// control-plane binaries of test/testbin are built with cgo (glibc); the
// standard library reads what ldd would print, without running the binary.
func sharedLibraries(binary string) ([]File, error) {
	var files []File
	seen := map[string]bool{}
	for queue := []string{binary}; len(queue) > 0; queue = queue[1:] {
		libs, interp, err := elfNeeds(queue[0])
		if err != nil {
			return nil, err
		}
		if interp != "" && !seen[interp] {
			seen[interp] = true
			files = append(files, File{Path: interp, Source: interp})
		}
		for _, lib := range libs {
			found := ""
			for _, d := range libDirs {
				if _, err := os.Stat(filepath.Join(d, lib)); err == nil {
					found = filepath.Join(d, lib)
					break
				}
			}
			if found == "" {
				return nil, fmt.Errorf("%s needs %s, which is in none of %v", queue[0], lib, libDirs)
			}
			if !seen[found] {
				seen[found] = true
				files = append(files, File{Path: found, Source: found})
				queue = append(queue, found)
			}
		}
	}
	return files, nil
}

// elfNeeds reads the shared libraries an ELF file names and its
// interpreter ("" when it has none).
func elfNeeds(path string) (libs []string, interp string, _ error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, "", fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return nil, "", fmt.Errorf("reading the interpreter of %s: %w", path, err)
		}
		interp = strings.TrimRight(string(b), "\x00") // NUL-terminated
	}
	if libs, err = f.ImportedLibraries(); err != nil {
		return nil, "", fmt.Errorf("reading the libraries of %s: %w", path, err)
	}
	return libs, interp, nil
}

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
	libs, err := sharedLibraries(binary)
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", ref, err)
	}
	files := append(baseFiles(nonroot), File{Path: path, Source: binary})
	img, err := Build(tmp, Spec{
		Ref: ref, Files: append(files, libs...), User: fmt.Sprintf("%d:%d", nonroot, nonroot), Entrypoint: entrypoint,
		Labels: map[string]string{"org.opencontainers.image.title": title},
	})
	return Image{Ref: ref, Image: img}, err
}
