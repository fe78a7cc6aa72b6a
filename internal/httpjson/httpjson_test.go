package httpjson

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadBody: a body is read whole, into a buffer of its declared size
// when that is within the limit; one shorter than it says is an error.
func TestReadBody(t *testing.T) {
	for _, tc := range []struct {
		name          string
		body          string
		length, limit int64
		wantCap       int
		err           error
	}{
		{name: "declared", body: "abc", length: 3, limit: 10, wantCap: 3},
		{name: "at the limit", body: "abc", length: 3, limit: 3, wantCap: 3},
		{name: "not declared", body: "abc", length: -1, limit: 10},
		{name: "declared past the limit: read as it comes", body: "abc", length: 1 << 40, limit: 10},
		{name: "shorter than declared", body: "ab", length: 3, limit: 10, err: io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := ReadBody(strings.NewReader(tc.body), tc.length, tc.limit)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.body, string(b))
			if tc.wantCap > 0 {
				assert.Equal(t, tc.wantCap, cap(b))
			}
		})
	}
}

func TestWrite(t *testing.T) {
	cases := []struct {
		name     string
		write    func(http.ResponseWriter)
		wantCode int
		wantType string
		wantBody string
		declared bool // the body's length is in Content-Length
	}{
		{name: "value", write: func(w http.ResponseWriter) { Write(w, http.StatusAccepted, map[string]int{"n": 1}) },
			wantCode: 202, wantType: "application/json", wantBody: `{"n":1}` + "\n"},
		{name: "encoded", write: func(w http.ResponseWriter) { WriteEncoded(w, http.StatusOK, []byte(`{"n":1}`)) },
			wantCode: 200, wantType: "application/json", wantBody: `{"n":1}` + "\n", declared: true},
		{name: "error", write: func(w http.ResponseWriter) { Error(w, http.StatusBadRequest, `field "mode": want sync or async`) },
			wantCode: 400, wantType: "application/json", wantBody: `{"error":"field \"mode\": want sync or async"}` + "\n"},
		{name: "problem", write: func(w http.ResponseWriter) {
			r := httptest.NewRequest(http.MethodGet, "/v1/x?y=1", nil)
			WriteProblem(w, http.StatusConflict, NewProblem(r, http.StatusConflict, "taken"))
		}, wantCode: 409, wantType: ProblemContentType,
			wantBody: `{"type":"about:blank","title":"Conflict","status":409,"detail":"taken","instance":"/v1/x","error":"taken"}` + "\n"},
		{name: "problem with extensions", write: func(w http.ResponseWriter) {
			WriteProblem(w, http.StatusTooManyRequests, struct {
				Problem
				Max int `json:"max"`
			}{NewProblem(nil, http.StatusTooManyRequests, "full"), 3})
		}, wantCode: 429, wantType: ProblemContentType,
			wantBody: `{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"full","error":"full","max":3}` + "\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			tc.write(rec)
			assert.Equal(t, tc.wantCode, rec.Code)
			assert.Equal(t, tc.wantType, rec.Header().Get("Content-Type"))
			assert.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
			assert.Equal(t, tc.wantBody, rec.Body.String())
			if tc.declared {
				assert.Equal(t, strconv.Itoa(len(tc.wantBody)), rec.Header().Get("Content-Length"))
			}
		})
	}
}
