package images

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// SBOMPath is where the runplane image carries its own SBOM.
const SBOMPath = "/usr/share/runplane/sbom.cdx.json"

// SBOM is a CycloneDX 1.6 JSON bill of materials of the Go binaries in
// binDir named binaries: each binary (an application with its SHA-256 and
// Go toolchain) and every module it links (a library with its purl and
// module checksum), from the build information the Go linker embeds
// (debug/buildinfo), so it lists exactly what was compiled in. It has no
// timestamp or random serial number: the same binaries give the same bytes,
// and the image that carries it keeps a reproducible digest.
func SBOM(binDir string, binaries []string, version string) ([]byte, error) {
	bom := cdx.NewBOM()
	bom.Metadata = &cdx.Metadata{Component: &cdx.Component{
		BOMRef: "pkg:oci/runplane@" + version, Type: cdx.ComponentTypeContainer, Name: "runplane", Version: version,
	}}
	libs := map[string]cdx.Component{}
	var apps []cdx.Component
	var deps []cdx.Dependency
	for _, name := range binaries {
		path := filepath.Join(binDir, name)
		info, err := buildinfo.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("SBOM: build information of %s: %w", path, err)
		}
		sum, err := fileSHA256(path)
		if err != nil {
			return nil, fmt.Errorf("SBOM: %w", err)
		}
		app := cdx.Component{
			BOMRef: "runplane-binary:" + name, Type: cdx.ComponentTypeApplication, Name: name, Version: version,
			Hashes:     &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: sum}},
			Properties: &[]cdx.Property{{Name: "go:toolchain", Value: info.GoVersion}, {Name: "go:main", Value: info.Path}},
		}
		var uses []string
		for _, m := range info.Deps {
			if m.Replace != nil {
				m = m.Replace
			}
			purl := "pkg:golang/" + m.Path + "@" + m.Version
			c := cdx.Component{BOMRef: purl, Type: cdx.ComponentTypeLibrary, Name: m.Path, Version: m.Version, PackageURL: purl}
			if m.Sum != "" {
				c.Properties = &[]cdx.Property{{Name: "go:sum", Value: m.Sum}}
			}
			libs[purl] = c
			uses = append(uses, purl)
		}
		apps = append(apps, app)
		deps = append(deps, cdx.Dependency{Ref: app.BOMRef, Dependencies: &uses})
	}
	components := apps
	for _, purl := range slices.Sorted(maps.Keys(libs)) {
		components = append(components, libs[purl])
	}
	slices.SortStableFunc(components[:len(apps)], func(a, b cdx.Component) int { return cmp.Compare(a.Name, b.Name) })
	bom.Components = &components
	bom.Dependencies = &deps
	var out bytes.Buffer
	enc := cdx.NewBOMEncoder(&out, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	if err := enc.Encode(bom); err != nil {
		return nil, fmt.Errorf("SBOM: encoding: %w", err)
	}
	return out.Bytes(), nil
}

func fileSHA256(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:]), nil
}
