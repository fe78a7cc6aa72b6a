package jwtclaims

import (
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecode(t *testing.T) {
	payload := base64.RawURLEncoding.EncodeToString([]byte(`{"exp":1700000000,"aud":["nats.runplane.io"]}`))
	tests := []struct {
		name, token string
		wantErr     string
	}{
		{"a JWT", "h." + payload + ".s", ""},
		{"two parts", "h." + payload, "not a JWT"},
		{"padded base64", "h." + payload + "==.s", "decoding"},
		{"not JSON", "h." + base64.RawURLEncoding.EncodeToString([]byte("nope")) + ".s", "decoding"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c struct {
				Exp int64    `json:"exp"`
				Aud []string `json:"aud"`
			}
			err := Decode(tt.token, &c)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, int64(1700000000), c.Exp)
			require.Equal(t, []string{"nats.runplane.io"}, c.Aud)
		})
	}
}
