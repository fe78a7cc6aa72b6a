package httpjson

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestWrite(t *testing.T) {
	cases := []struct {
		name     string
		write    func(http.ResponseWriter)
		wantCode int
		wantBody string
	}{
		{name: "value", write: func(w http.ResponseWriter) { Write(w, http.StatusAccepted, map[string]int{"n": 1}) },
			wantCode: 202, wantBody: `{"n":1}` + "\n"},
		{name: "error", write: func(w http.ResponseWriter) { Error(w, http.StatusBadRequest, `field "mode": want sync or async`) },
			wantCode: 400, wantBody: `{"error":"field \"mode\": want sync or async"}` + "\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			tc.write(rec)
			assert.Equal(t, tc.wantCode, rec.Code)
			assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			assert.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
			assert.Equal(t, tc.wantBody, rec.Body.String())
		})
	}
}
