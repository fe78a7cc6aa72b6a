// Command runplane-images writes runplane's images as one OCI archive
// without a Docker engine (see package images). `make image` runs it with
// -only runplane.
//
//	go run ./hack/images/cmd/runplane-images -out bin/runplane-image.tar [-bin dir] [-only runplane] [-ref ghcr.io/runplane/runplane:dev]
//	go run ./hack/images/cmd/runplane-images -only binaries -bin dir
//
// -only binaries builds the images' static binaries into -bin and writes no
// image: make test's one build of them for every suite (test/runplanebin).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/runplane/runplane/hack/images"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "runplane-images:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("out", "bin/runplane-image.tar", "the OCI archive to write")
	binDir := flag.String("bin", "", "prebuilt static binaries (built from the repository in the working directory when empty)")
	only := flag.String("only", "", `"runplane" writes only the runplane image; "binaries" only builds the static binaries into -bin; empty writes runplane, pause, framework-echo and user`)
	ref := flag.String("ref", images.RunplaneRef, "the runplane image's reference")
	version := flag.String("version", "dev", "the runplane image's org.opencontainers.image.version label")
	busybox := flag.String("busybox", "/bin/busybox", "a static busybox for the user image")
	flag.Parse()
	switch *only {
	case "", "runplane":
	case "binaries":
		if *binDir == "" {
			return errors.New("-only binaries needs -bin, the directory to build into")
		}
		return images.BuildBinaries(context.Background(), ".", *binDir)
	default:
		return fmt.Errorf("-only %q: want \"runplane\", \"binaries\" or empty", *only)
	}
	tmp, err := os.MkdirTemp("", "runplane-images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if *binDir == "" {
		*binDir = tmp + "/bin"
		if err := images.BuildBinaries(context.Background(), ".", *binDir); err != nil {
			return err
		}
	}
	var imgs []images.Image
	if *only == "runplane" {
		img, err := images.Runplane(tmp, *binDir, *ref, *version)
		if err != nil {
			return err
		}
		imgs = append(imgs, img)
	} else {
		if imgs, err = images.Standard(tmp, *binDir, *busybox); err != nil {
			return err
		}
	}
	if err := images.WriteArchive(*out, tmp, imgs...); err != nil {
		return err
	}
	for _, im := range imgs {
		d, err := im.Image.Digest()
		if err != nil {
			return err
		}
		fmt.Printf("%s@%s\n", im.Ref, d)
	}
	fmt.Println("wrote", *out)
	for _, im := range imgs {
		if im.SBOM == nil {
			continue
		}
		// Beside the archive, for a registry's attestation or a scanner.
		path := strings.TrimSuffix(*out, ".tar") + ".cdx.json"
		if err := os.WriteFile(path, im.SBOM, 0o644); err != nil {
			return fmt.Errorf("writing the SBOM: %w", err)
		}
		fmt.Println("wrote", path, "(CycloneDX SBOM of", im.Ref+")")
	}
	return nil
}
