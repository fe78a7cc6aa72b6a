package metricsauth

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:8092": true, "127.0.0.2:1": true, "[::1]:8092": true,
		":8092": false, "0.0.0.0:8092": false, "10.0.0.1:8092": false, "[::]:8092": false,
		"localhost:8092": false, // a name: whatever the Pod's resolver says
		"127.0.0.1":      false,
	} {
		err := Loopback(addr)
		assert.Equal(t, ok, err == nil, "%s: %v", addr, err)
	}
}
