package ingress

import (
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestQuotedBase64: a raw body's payload is the JSON string encoding/json
// makes of its base64.
func TestQuotedBase64(t *testing.T) {
	for _, b := range [][]byte{{0}, {1, 2, 3}, []byte("héllo\x00\xff"), make([]byte, 1000)} {
		want, err := json.Marshal(base64.StdEncoding.EncodeToString(b))
		require.NoError(t, err)
		assert.Equal(t, string(want), string(quotedBase64(b)))
	}
}

// TestValidPayloadAgreesWithDecoding: the streamed check of a binary
// payload refuses exactly what decoding the string and its base64 whole
// refuses.
func TestValidPayloadAgreesWithDecoding(t *testing.T) {
	decoded := func(p []byte) bool {
		var s string
		if json.Unmarshal(p, &s) != nil {
			return false
		}
		_, err := base64.StdEncoding.DecodeString(s)
		return err == nil
	}
	for _, p := range []string{`"AAEC/w=="`, `"AAEC/w="`, `"AAECAw"`, `"AA=C"`, `"QQ==QUJD"`, `""`, `"AAEC` + "\n" + `/w=="`, `"AAEC` + "\r" + `/w=="`,
		`"AAEC` + "\t" + `/w=="`, `"AAEC\/w=="`, `"AAEC\n/w=="`, `"\u0041AEC/w=="`, `"é"`, `123`, `"AAEC`, `AAEC"`, `"`, `"AAEC/w==" `} {
		err := validPayload("application/octet-stream", json.RawMessage(p))
		assert.Equal(t, decoded([]byte(p)), err == nil, "payload %q: %v", p, err)
	}
}
