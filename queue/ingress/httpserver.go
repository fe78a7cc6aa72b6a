package ingress

import (
	"net/http"
	"time"
)

// HTTPServer is the http.Server the ingress is served by: its handler and
// the timeouts that bound what a caller may hold.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
}
