package admgen

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestChartTemplatesAreGenerated: the chart's admission templates are what
// the generator writes from the Go definitions (make generate), so the
// chart and webhook -manage-webhooks install the same objects.
// TestAdmissionTemplatesRenderGo (charts/runplane) checks the values the
// chart fills in.
func TestChartTemplatesAreGenerated(t *testing.T) {
	files, err := Files()
	require.NoError(t, err)
	require.Len(t, files, 2)
	for path, want := range files {
		have, err := os.ReadFile(filepath.Join("..", "..", "charts", "runplane", path))
		require.NoError(t, err)
		assert.Empty(t, firstDiff(string(want), string(have)), "charts/runplane/%s is not what hack/admgen writes from the webhook's Go definitions: run make generate", path)
	}
}

// firstDiff is the first line where have differs from want, or "".
func firstDiff(want, have string) string {
	w, h := strings.Split(want, "\n"), strings.Split(have, "\n")
	for i := range max(len(w), len(h)) {
		var wl, hl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(h) {
			hl = h[i]
		}
		if wl != hl {
			return fmt.Sprintf("line %d:\n  generated: %q\n  committed: %q", i+1, wl, hl)
		}
	}
	return ""
}

// TestRenderRefuses: a string the chart would read as a template action,
// or one the generator cannot quote, fails the generation instead of
// reaching the chart.
func TestRenderRefuses(t *testing.T) {
	for _, s := range []string{"object.x == '{{'", "a `b` " + phNamespace} {
		_, err := render(s, &raws{inlines: map[string]string{}, blocks: map[string]func(int) string{}})
		assert.Error(t, err, s)
	}
}
