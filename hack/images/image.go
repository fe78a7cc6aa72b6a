package images

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Spec is one image: a single layer of Files on an empty base, and its
// config.
type Spec struct {
	// Ref is the image's full reference ("ghcr.io/runplane/runplane:dev").
	Ref        string
	Files      []File
	User       string
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	Labels     map[string]string
}

// Build turns spec into an OCI image; the layer's tar goes into tmp.
func Build(tmp string, spec Spec) (v1.Image, error) {
	if _, err := name.ParseReference(spec.Ref, name.StrictValidation); err != nil {
		return nil, fmt.Errorf("image %q: %w", spec.Ref, err)
	}
	layer, err := Layer(tmp, spec.Files)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: epoch}
	cf.Config = v1.Config{
		User: spec.User, Entrypoint: spec.Entrypoint, Cmd: spec.Cmd, WorkingDir: spec.WorkingDir,
		Env: append([]string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}, spec.Env...), Labels: spec.Labels,
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	return img, nil
}

// Image is a built image and its reference.
type Image struct {
	Ref   string
	Image v1.Image
	// SBOM is the image's CycloneDX SBOM (also inside it at SBOMPath), for
	// the runplane image; nil for the test images.
	SBOM []byte
}

// WriteLayout writes imgs into an OCI image layout at dir (created or
// appended to). Each manifest carries its reference in both
// org.opencontainers.image.ref.name and io.containerd.image.name, so
// `ctr images import` names the image after it.
func WriteLayout(dir string, imgs ...Image) error {
	p, err := layout.FromPath(dir)
	if err != nil {
		if p, err = layout.Write(dir, empty.Index); err != nil {
			return fmt.Errorf("creating OCI layout %s: %w", dir, err)
		}
	}
	for _, im := range imgs {
		err := p.AppendImage(im.Image, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": im.Ref,
			"io.containerd.image.name":          im.Ref,
		}))
		if err != nil {
			return fmt.Errorf("writing %s into %s: %w", im.Ref, dir, err)
		}
	}
	return nil
}

// WriteArchive writes imgs as one OCI archive (an OCI layout in a tar) at
// path. tmp holds the layout while it is written.
func WriteArchive(path, tmp string, imgs ...Image) error {
	dir, err := os.MkdirTemp(tmp, "layout-")
	if err != nil {
		return fmt.Errorf("creating layout dir: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := WriteLayout(dir, imgs...); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating the archive's directory: %w", err)
	}
	return tarDir(dir, path)
}

// tarDir packs the layout directory (plain files under blobs/, index.json,
// oci-layout) into a tar; go-containerregistry writes layouts to
// directories only.
func tarDir(dir, out string) error {
	var files []File
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		files = append(files, File{Path: "/" + filepath.ToSlash(rel), Source: p, Mode: 0o644})
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading layout %s: %w", dir, err)
	}
	f, err := os.Create(out + ".tmp")
	if err != nil {
		return fmt.Errorf("creating %s: %w", out, err)
	}
	defer f.Close()
	if err := writeTar(f, files); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	return os.Rename(out+".tmp", out)
}
