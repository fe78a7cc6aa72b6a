// Package configfiletest is the config packages' one test kit: a table of
// documents, each decoded as the binary decodes its file (configfile.Decode)
// and either refused with an error naming its key and allowed values, or
// checked; and the check every configuration's defaults owe (applying them
// again changes nothing, as a binary defaulting a loaded file once more).
package configfiletest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/configfile"
)

// Case is one document: Err is a part of the error it is refused with, or
// Check looks at what it decodes to.
type Case[T any] struct {
	Name, Doc, Err string
	Check          func(t *testing.T, c *T)
}

// Decode runs every case as a subtest, then checks that T's defaults apply
// once: defaulting New's result again leaves it equal.
func Decode[T any, P configfile.Object[T]](t *testing.T, cases []Case[T]) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			c, err := configfile.Decode[T, P]([]byte(tc.Doc))
			if tc.Err != "" {
				require.ErrorContains(t, err, tc.Err)
				return
			}
			require.NoError(t, err)
			require.NotNil(t, tc.Check, "a case that decodes checks what it decodes to")
			tc.Check(t, c)
		})
	}
	t.Run("defaults apply once", func(t *testing.T) {
		again := configfile.New[T, P]()
		P(again).Default()
		assert.Equal(t, configfile.New[T, P](), again)
	})
}
