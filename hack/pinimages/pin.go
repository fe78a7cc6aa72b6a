// Package pinimages pins the chart's third-party images by digest: it asks
// each image's registry for the digest its tag names now
// (go-containerregistry's remote.Head, the registry's HEAD on the
// manifest) and writes it into values.yaml in place, comments kept, so the
// chart renders repository:tag@digest and a moved tag changes nothing a
// cluster runs. `make pin-images` runs it when a release is cut (it needs
// the registries; this repository's CI has none).
package pinimages

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"gopkg.in/yaml.v3"
)

// Resolve is the digest ref's tag names now.
type Resolve func(ctx context.Context, ref string) (string, error)

// Registries resolves against the images' registries, anonymously (the
// images are public). Insecure allows plain HTTP (a local registry).
type Registries struct {
	Insecure bool
	Options  []remote.Option
}

// Resolve is a Resolve.
func (r Registries) Resolve(ctx context.Context, ref string) (string, error) {
	var nameOpts []name.Option
	if r.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	parsed, err := name.ParseReference(ref, nameOpts...)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", ref, err)
	}
	d, err := remote.Head(parsed, append([]remote.Option{remote.WithContext(ctx)}, r.Options...)...)
	if err != nil {
		return "", fmt.Errorf("digest of %s: %w", ref, err)
	}
	return d.Digest.String(), nil
}

// Images are the values pinned: a map with repository, tag and digest, or
// (pauseImage) one reference string.
var Images = []string{"scheduler.image", "nats.bundled.image", "webhook.pauseImage"}

// Pin returns values with every one of Images pinned to what resolve says
// its tag names; the rest of the file is unchanged byte for byte.
func Pin(ctx context.Context, values []byte, resolve Resolve) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	lines := bytes.Split(values, []byte("\n"))
	for _, path := range Images {
		n := lookup(&doc, strings.Split(path, "."))
		if n == nil {
			return nil, fmt.Errorf("values: no %s", path)
		}
		switch n.Kind {
		case yaml.ScalarNode: // repository:tag[@digest]
			ref, _, _ := strings.Cut(n.Value, "@")
			d, err := resolve(ctx, ref)
			if err != nil {
				return nil, err
			}
			if err := replaceScalar(lines, n, ref+"@"+d); err != nil {
				return nil, fmt.Errorf("values: %s: %w", path, err)
			}
		case yaml.MappingNode:
			repo, tag, digest := lookup(n, []string{"repository"}), lookup(n, []string{"tag"}), lookup(n, []string{"digest"})
			if repo == nil || tag == nil || digest == nil {
				return nil, fmt.Errorf("values: %s needs repository, tag and digest", path)
			}
			d, err := resolve(ctx, repo.Value+":"+tag.Value)
			if err != nil {
				return nil, err
			}
			if err := replaceScalar(lines, digest, d); err != nil {
				return nil, fmt.Errorf("values: %s.digest: %w", path, err)
			}
		default:
			return nil, fmt.Errorf("values: %s is neither an image map nor a reference", path)
		}
	}
	return bytes.Join(lines, []byte("\n")), nil
}

// lookup follows keys through mappings from n (a document or a mapping).
func lookup(n *yaml.Node, keys []string) *yaml.Node {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	for _, k := range keys {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}

// replaceScalar rewrites the scalar n on its line: the text from its column
// to the end of the value (a comment after it stays), double-quoted.
func replaceScalar(lines [][]byte, n *yaml.Node, value string) error {
	if n.Line < 1 || n.Line > len(lines) {
		return fmt.Errorf("line %d out of range", n.Line)
	}
	line := lines[n.Line-1]
	start := n.Column - 1
	end := start + len(n.Value)
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		end += 2
	}
	if start < 0 || end > len(line) {
		return fmt.Errorf("line %d: value not where the parser put it", n.Line)
	}
	var out []byte
	out = append(out, line[:start]...)
	out = append(out, fmt.Sprintf("%q", value)...)
	out = append(out, line[end:]...)
	lines[n.Line-1] = out
	return nil
}
