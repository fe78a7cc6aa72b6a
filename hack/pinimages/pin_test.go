package pinimages_test

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/hack/pinimages"
)

// TestPinAgainstARegistry: a real registry (go-containerregistry's, in
// process) holds the three images; Pin writes each tag's digest into the
// values, changes nothing else, and pins again after a tag moved.
func TestPinAgainstARegistry(t *testing.T) {
	ctx := context.Background()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	push := func(ref string) string {
		img, err := random.Image(256, 1)
		require.NoError(t, err)
		r, err := name.ParseReference(host+"/"+ref, name.Insecure)
		require.NoError(t, err)
		require.NoError(t, remote.Write(r, img))
		d, err := img.Digest()
		require.NoError(t, err)
		return d.String()
	}
	sched, nats, pause := push("kube-scheduler:v1.37.2"), push("nats:2.15.3"), push("pause:3.10")
	values := strings.ReplaceAll(`# The chart's values.
scheduler:
  image:
    repository: HOST/kube-scheduler
    tag: v1.37.2
    # -- a comment that stays
    digest: ""
    pullPolicy: IfNotPresent
webhook:
  # -- Image of stock placeholder Pods.
  pauseImage: HOST/pause:3.10 # trailing comment
nats:
  bundled:
    image:
      repository: HOST/nats
      tag: 2.15.3
      digest: "sha256:0000000000000000000000000000000000000000000000000000000000000000"
`, "HOST", host)
	// The registry speaks plain HTTP.
	resolve := pinimages.Registries{Insecure: true}.Resolve
	out, err := pinimages.Pin(ctx, []byte(values), resolve)
	require.NoError(t, err)
	want := strings.NewReplacer(
		`    digest: ""`, `    digest: "`+sched+`"`,
		`pauseImage: `+host+`/pause:3.10 #`, `pauseImage: "`+host+`/pause:3.10@`+pause+`" #`,
		`"sha256:0000000000000000000000000000000000000000000000000000000000000000"`, `"`+nats+`"`,
	).Replace(values)
	require.Equal(t, want, string(out))

	// Pinned again after the pause tag moved: the new digest replaces the old.
	moved := push("pause:3.10")
	again, err := pinimages.Pin(ctx, out, resolve)
	require.NoError(t, err)
	require.Contains(t, string(again), `pauseImage: "`+host+`/pause:3.10@`+moved+`" # trailing comment`)

	// A tag the registry does not have: an error naming it, nothing written.
	_, err = pinimages.Pin(ctx, []byte(strings.ReplaceAll(values, "tag: 2.15.3", "tag: 9.9.9")), resolve)
	require.ErrorContains(t, err, "nats:9.9.9")
	_, err = pinimages.Pin(ctx, []byte("scheduler: {}\n"), resolve)
	require.ErrorContains(t, err, "no scheduler.image")
}
