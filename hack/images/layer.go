package images

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one entry of a layer. Exactly one of Source (a host file to copy),
// Data, Link (a symlink target) or Dir is set.
type File struct {
	// Path inside the image, absolute ("/usr/local/bin/runplane-queue").
	Path   string
	Source string
	Data   []byte
	Link   string
	Dir    bool
	// Mode defaults to 0755 for Source files and dirs, 0644 for Data.
	Mode     int64
	UID, GID int
}

// epoch is every entry's mtime, so the same inputs give the same digest.
var epoch = time.Unix(0, 0).UTC()

// Layer writes files into a tar file in dir and returns it as an OCI layer.
// go-containerregistry has no builder from a file list with modes, owners
// and symlinks (crane.Layer takes only contents), so the tar entries are
// written here; everything else (compression, digests, manifests) is the
// library's.
func Layer(dir string, files []File) (v1.Layer, error) {
	f, err := os.CreateTemp(dir, "layer-*.tar")
	if err != nil {
		return nil, fmt.Errorf("creating layer file: %w", err)
	}
	defer f.Close()
	if err := writeTar(f, files); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("writing layer %s: %w", f.Name(), err)
	}
	return tarball.LayerFromFile(f.Name(), tarball.WithMediaType(types.OCILayer))
}

func writeTar(w io.Writer, files []File) error {
	byPath := map[string]File{}
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return fmt.Errorf("layer entry %q: want a clean absolute path", f.Path)
		}
		byPath[f.Path] = f
		// Parent directories first, so every entry has one.
		for d := path.Dir(f.Path); d != "/"; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = File{Path: d, Dir: true}
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	tw := tar.NewWriter(w)
	for _, p := range paths {
		if err := writeEntry(tw, byPath[p]); err != nil {
			return fmt.Errorf("layer entry %s: %w", p, err)
		}
	}
	return tw.Close()
}

func writeEntry(tw *tar.Writer, f File) error {
	hdr := &tar.Header{
		Name: strings.TrimPrefix(f.Path, "/"), Mode: f.Mode, Uid: f.UID, Gid: f.GID,
		ModTime: epoch, Format: tar.FormatPAX,
	}
	switch {
	case f.Dir:
		hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
		if hdr.Mode == 0 {
			hdr.Mode = 0o755
		}
		return tw.WriteHeader(hdr)
	case f.Link != "":
		hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, f.Link, 0o777
		return tw.WriteHeader(hdr)
	case f.Source != "":
		src, err := os.Open(f.Source)
		if err != nil {
			return err
		}
		defer src.Close()
		st, err := src.Stat()
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size()
		if hdr.Mode == 0 {
			hdr.Mode = 0o755
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err = io.Copy(tw, src)
		return err
	default:
		hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(f.Data))
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(f.Data)
		return err
	}
}
