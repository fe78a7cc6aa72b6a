package extender

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

// The clientset speaks protobuf unless the caller chose a content type;
// the caller's config is never changed (the manager keeps JSON-capable
// clients for other types).
func TestClientSpeaksProtobuf(t *testing.T) {
	tests := []struct {
		name, contentType, want string
	}{
		{"default", "", runtime.ContentTypeProtobuf},
		{"caller's choice kept", runtime.ContentTypeJSON, runtime.ContentTypeJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := &rest.Config{Host: "https://127.0.0.1:6443", ContentConfig: rest.ContentConfig{ContentType: tt.contentType}}
			got := protobuf(rc)
			assert.Equal(t, tt.want, got.ContentType)
			assert.Equal(t, tt.contentType, rc.ContentType, "the caller's config changed")
			if tt.contentType == "" {
				assert.Equal(t, runtime.ContentTypeProtobuf+","+runtime.ContentTypeJSON, got.AcceptContentTypes)
			}
		})
	}
}
