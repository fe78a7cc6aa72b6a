// Package httpjson writes runplane's JSON HTTP answers: a value with its
// status, and errors as {"error": "<message>"}, the one error shape every
// runplane HTTP endpoint (ingress, extender, sidecar, framework helper)
// answers with.
package httpjson

import (
	"encoding/json"
	"net/http"
)

// Write answers with code and v encoded as JSON. An encoding error is
// dropped: the status line is already sent, and the only causes are a
// client that went away or a value that cannot be encoded, which the
// callers' tests rule out.
func Write(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Error answers with code and {"error": msg}.
func Error(w http.ResponseWriter, code int, msg string) {
	Write(w, code, Problem{Error: msg})
}

// Problem is the body of an error answer.
type Problem struct {
	Error string `json:"error"`
}
