package rawjson

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWithField(t *testing.T) {
	for _, tc := range []struct {
		name, obj, value, want string
		err                    bool
	}{
		{name: "added last", obj: `{"a":1}`, value: `{"b":[1,2]}`, want: `{"a":1,"payload":{"b":[1,2]}}`},
		{name: "empty object", obj: `{}`, value: `"x"`, want: `{"payload":"x"}`},
		{name: "written as it is", obj: `{"a":1}`, value: `{ "html": "<&>" }`, want: `{"a":1,"payload":{ "html": "<&>" }}`},
		{name: "no value: omitted", obj: `{"a":1}`, value: ``, want: `{"a":1}`},
		{name: "not an object", obj: `[1]`, value: `1`, err: true},
		{name: "nothing", obj: ``, value: `1`, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := WithField([]byte(tc.obj), "payload", []byte(tc.value))
			if tc.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(got))
			assert.True(t, json.Valid(got))
		})
	}
}
