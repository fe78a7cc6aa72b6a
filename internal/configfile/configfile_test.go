package configfile

import (
	"cmp"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestConfiguration is the smallest configuration (its kind is its name):
// one defaulted key and one validated one.
type TestConfiguration struct {
	metav1.TypeMeta `json:",inline"`
	Name            string `json:"name,omitempty"`
	Nested          struct {
		Replicas int `json:"replicas,omitempty"`
	} `json:"nested"`
}

func (c *TestConfiguration) Default() { c.Name = cmp.Or(c.Name, "default") }

func (c *TestConfiguration) Validate() error {
	if c.Nested.Replicas < 0 {
		return errors.New("nested.replicas: want ≥ 0")
	}
	return nil
}

func TestDecode(t *testing.T) {
	header := "apiVersion: runplane.io/v1alpha1\nkind: TestConfiguration\n"
	for _, tc := range []struct {
		name, doc, err string
		want           *TestConfiguration
	}{
		{name: "defaults", doc: header, want: New[TestConfiguration]()},
		{name: "set", doc: header + "name: x\nnested:\n  replicas: 2\n", want: func() *TestConfiguration {
			c := New[TestConfiguration]()
			c.Name, c.Nested.Replicas = "x", 2
			return c
		}()},
		{name: "JSON", doc: `{"apiVersion": "runplane.io/v1alpha1", "kind": "TestConfiguration", "name": "j"}`, want: func() *TestConfiguration {
			c := New[TestConfiguration]()
			c.Name = "j"
			return c
		}()},
		{name: "unknown key named by its path", doc: header + "nested:\n  replicsa: 2\n", err: `unknown field "nested.replicsa"`},
		{name: "duplicate key", doc: header + "name: a\nname: b\n", err: `"name" already set`},
		{name: "another kind", doc: "apiVersion: runplane.io/v1alpha1\nkind: QueueConfiguration\n", err: `kind "QueueConfiguration": want runplane.io/v1alpha1, TestConfiguration`},
		{name: "no kind", doc: "name: x\n", err: `apiVersion "", kind "": want`},
		{name: "invalid", doc: header + "nested:\n  replicas: -1\n", err: "nested.replicas: want ≥ 0"},
		{name: "wrong type", doc: header + "nested:\n  replicas: many\n", err: "replicas"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Decode[TestConfiguration]([]byte(tc.doc))
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, c)
		})
	}
}

// TestLoadWriteFile: a written configuration loads back equal; errors name
// the kind and the file.
func TestLoadWriteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	c := New[TestConfiguration]()
	c.Nested.Replicas = 3
	require.NoError(t, WriteFile(path, c))
	got, err := Load[TestConfiguration](path)
	require.NoError(t, err)
	assert.Equal(t, c, got)

	_, err = Load[TestConfiguration](filepath.Join(t.TempDir(), "none.yaml"))
	require.ErrorContains(t, err, "TestConfiguration: open ")
	c.Nested.Replicas = -1
	require.NoError(t, WriteFile(path, c))
	_, err = Load[TestConfiguration](path)
	require.ErrorContains(t, err, "TestConfiguration "+path+": nested.replicas")
}

// TestFromFile: no path is the defaults; a path is its file.
func TestFromFile(t *testing.T) {
	c, err := FromFile[TestConfiguration]("")
	require.NoError(t, err)
	assert.Equal(t, New[TestConfiguration](), c)
	_, err = FromFile[TestConfiguration](filepath.Join(t.TempDir(), "none.yaml"))
	require.ErrorContains(t, err, "TestConfiguration: open ")
}
