package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/stretchr/testify/require"
)

// fakeBinaries links this test's own executable under each name, standing
// in for the static binaries (the real ones are built by BuildBinaries): a
// Go binary, so it has the build information an SBOM is made of.
func fakeBinaries(t *testing.T, names ...string) string {
	self, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	for _, n := range names {
		// A copy where the test binary is on another file system than the
		// temp dir (hack/gotest.sh keeps it in a cache).
		if err := os.Link(self, filepath.Join(dir, n)); err != nil {
			copyExecutable(t, self, filepath.Join(dir, n))
		}
	}
	return dir
}

// imageFiles reads an image's flattened filesystem: path → header.
func imageFiles(t *testing.T, im Image) map[string]*tar.Header {
	rc := mutate.Extract(im.Image)
	defer rc.Close()
	tr := tar.NewReader(rc)
	files := map[string]*tar.Header{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		require.NoError(t, err)
		files["/"+filepath.Clean(hdr.Name)] = hdr
	}
}

func TestRunplaneImage(t *testing.T) {
	bin := fakeBinaries(t, runplaneBinaries...)
	im, err := Runplane(t.TempDir(), bin, RunplaneRef, "v9")
	require.NoError(t, err)
	cf, err := im.Image.ConfigFile()
	require.NoError(t, err)
	require.Equal(t, "65532:65532", cf.Config.User)
	require.Equal(t, "linux", cf.OS)
	require.Equal(t, "v9", cf.Config.Labels["org.opencontainers.image.version"])
	require.Equal(t, "runplane", cf.Config.Labels["org.opencontainers.image.title"])
	files := imageFiles(t, im)
	for _, b := range runplaneBinaries {
		hdr := files["/usr/local/bin/"+b]
		require.NotNil(t, hdr, b)
		require.Equal(t, int64(0o755), hdr.Mode, b)
	}
	require.Equal(t, int64(0o1777), files["/tmp"].Mode)
	require.Equal(t, 65532, files["/home/nonroot"].Uid)
	require.NotNil(t, files[SBOMPath], "the image carries its SBOM")
}

// TestRunplaneImageSBOM: the SBOM (CycloneDX, decoded by the library that
// wrote it) names every binary with its SHA-256 and the modules linked into
// it with purls, and the same binaries give the same bytes (the image's
// digest stays reproducible).
func TestRunplaneImageSBOM(t *testing.T) {
	// A real main (a test binary records no modules): this package's command.
	built := filepath.Join(t.TempDir(), "runplane-images")
	out, err := exec.Command("go", "build", "-o", built, "./cmd/runplane-images").CombinedOutput()
	require.NoError(t, err, "%s", out)
	bin := t.TempDir()
	for _, n := range runplaneBinaries {
		require.NoError(t, os.Link(built, filepath.Join(bin, n)))
	}
	im, err := Runplane(t.TempDir(), bin, RunplaneRef, "v9")
	require.NoError(t, err)
	var bom cdx.BOM
	require.NoError(t, cdx.NewBOMDecoder(bytes.NewReader(im.SBOM), cdx.BOMFileFormatJSON).Decode(&bom))
	require.Equal(t, "runplane", bom.Metadata.Component.Name)
	require.Equal(t, "v9", bom.Metadata.Component.Version)
	apps, libs := map[string]cdx.Component{}, map[string]cdx.Component{}
	for _, c := range *bom.Components {
		switch c.Type {
		case cdx.ComponentTypeApplication:
			apps[c.Name] = c
		case cdx.ComponentTypeLibrary:
			libs[c.Name] = c
		}
	}
	require.Len(t, apps, len(runplaneBinaries))
	for _, b := range runplaneBinaries {
		require.Contains(t, apps, b)
		require.Len(t, (*apps[b].Hashes)[0].Value, 64, "%s: SHA-256", b)
	}
	ggcr := libs["github.com/google/go-containerregistry"]
	require.Regexp(t, `^pkg:golang/github\.com/google/go-containerregistry@v0\.`, ggcr.PackageURL, "a module the binary links")
	require.Len(t, *bom.Dependencies, len(runplaneBinaries))
	std := "pkg:golang/stdlib@" + strings.TrimPrefix(runtime.Version(), "go")
	require.Equal(t, std, libs["stdlib"].PackageURL, "the toolchain, so scanners match Go's own CVEs")
	require.Contains(t, *(*bom.Dependencies)[0].Dependencies, std)

	again, err := SBOM(bin, runplaneBinaries, "v9")
	require.NoError(t, err)
	require.Equal(t, im.SBOM, again)
	_, err = SBOM(fakeScripts(t, "not-go"), []string{"not-go"}, "v9")
	require.ErrorContains(t, err, "build information of")
}

// fakeScripts writes a small executable script per name: not a Go binary.
func fakeScripts(t *testing.T, names ...string) string {
	dir := t.TempDir()
	for _, n := range names {
		require.NoError(t, os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/true "+n), 0o755))
	}
	return dir
}

func TestRunplaneImageMissingBinary(t *testing.T) {
	bin := fakeBinaries(t, "runplane-queue")
	_, err := Runplane(t.TempDir(), bin, RunplaneRef, "dev")
	require.ErrorContains(t, err, "no such file or directory")
}

func TestBuildRejects(t *testing.T) {
	for name, spec := range map[string]Spec{
		"bad reference":  {Ref: "Not A Ref", Files: []File{{Path: "/a", Data: []byte("a")}}},
		"relative path":  {Ref: UserRef, Files: []File{{Path: "a", Data: []byte("a")}}},
		"unclean path":   {Ref: UserRef, Files: []File{{Path: "/a/../b", Data: []byte("a")}}},
		"root as a file": {Ref: UserRef, Files: []File{{Path: "/", Data: []byte("a")}}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Build(t.TempDir(), spec)
			require.Error(t, err)
		})
	}
}

func TestUserImageHasShell(t *testing.T) {
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("no /bin/busybox (Debian busybox-static; hack/install-deps.sh installs it)")
	}
	im, err := User(t.TempDir(), "/bin/busybox")
	require.NoError(t, err)
	files := imageFiles(t, im)
	for _, p := range []string{"/bin/sh", "/bin/ls", "/bin/cat"} {
		require.NotNil(t, files[p], p)
		require.Equal(t, "/bin/busybox", files[p].Linkname, p)
	}
	require.Equal(t, byte(tar.TypeReg), files["/bin/busybox"].Typeflag)
}

// The archive is an OCI layout whose manifests carry the references that
// ctr import names the images after, and reads back to the same digests.
func TestWriteArchiveRoundTrip(t *testing.T) {
	tmp := t.TempDir()
	bin := fakeBinaries(t, append(runplaneBinaries, "pause")...)
	rp, err := Runplane(tmp, bin, RunplaneRef, "dev")
	require.NoError(t, err)
	pause, err := Pause(tmp, bin)
	require.NoError(t, err)
	out := filepath.Join(tmp, "new", "dir", "images.tar")
	require.NoError(t, WriteArchive(out, tmp, rp, pause))

	dir := t.TempDir()
	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		p := filepath.Join(dir, hdr.Name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p, data, 0o644))
	}
	lp, err := layout.FromPath(dir)
	require.NoError(t, err)
	idx, err := lp.ImageIndex()
	require.NoError(t, err)
	m, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, m.Manifests, 2)
	for i, want := range []Image{rp, pause} {
		d, err := want.Image.Digest()
		require.NoError(t, err)
		require.Equal(t, d, m.Manifests[i].Digest)
		require.Equal(t, want.Ref, m.Manifests[i].Annotations["io.containerd.image.name"])
		require.Equal(t, want.Ref, m.Manifests[i].Annotations["org.opencontainers.image.ref.name"])
	}
}

// TestRunplaneImageHasEveryCommand: every command of cmd/ is in the
// runplane image (the chart runs them from it, e.g. `helm test` runs
// runplane-invoke).
func TestRunplaneImageHasEveryCommand(t *testing.T) {
	entries, err := os.ReadDir("../../cmd")
	require.NoError(t, err)
	for _, e := range entries {
		if e.IsDir() {
			require.Contains(t, runplaneBinaries, e.Name(), "cmd/%s is not in the runplane image", e.Name())
		}
	}
}

// TestDynamicBinaryRefused: a dynamically linked binary (/bin/ls, the
// host's libc) gets no image and a clear error; a static Go binary gets
// one holding it alone.
func TestDynamicBinaryRefused(t *testing.T) {
	if _, err := os.Stat("/bin/ls"); err != nil {
		t.Skip("no /bin/ls")
	}
	_, err := NATS(t.TempDir(), "/bin/ls")
	require.ErrorContains(t, err, "/bin/ls is dynamically linked")

	bin := filepath.Join(t.TempDir(), "static")
	out, err := exec.Command("go", "build", "-o", bin, "./pause").CombinedOutput()
	require.NoError(t, err, "%s", out)
	im, err := NATS(t.TempDir(), bin)
	require.NoError(t, err)
	files := imageFiles(t, im)
	require.NotNil(t, files["/nats-server"])
	cf, err := im.Image.ConfigFile()
	require.NoError(t, err)
	require.Equal(t, []string{"/nats-server"}, cf.Config.Entrypoint)
}

// TestSBOMStdlibAndLocalModules: every toolchain is a pkg:golang/stdlib
// component (version without "go", the way scanners match Go's CVEs), and
// a local replace (no version) gets no purl rather than "…@".
func TestSBOMStdlibAndLocalModules(t *testing.T) {
	for _, tc := range []struct {
		goVersion, want string
	}{
		{"go1.24.2", "pkg:golang/stdlib@1.24.2"},
		{"go1.25rc1 X:boringcrypto", "pkg:golang/stdlib@1.25rc1"},
	} {
		c := stdlib(tc.goVersion)
		require.Equal(t, tc.want, c.PackageURL, tc.goVersion)
		require.Equal(t, "stdlib", c.Name)
	}
	local := module(&debug.Module{Path: "example.com/local"})
	require.Empty(t, local.PackageURL)
	require.Equal(t, "example.com/local", local.Name)
	remote := module(&debug.Module{Path: "example.com/m", Version: "v1.2.3", Sum: "h1:x"})
	require.Equal(t, "pkg:golang/example.com/m@v1.2.3", remote.PackageURL)

}

func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, data, 0o755))
}
