package configfile_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	controllers "github.com/runplane/runplane/controllers/config"
	extender "github.com/runplane/runplane/extender/config"
	"github.com/runplane/runplane/internal/configfile"
	queue "github.com/runplane/runplane/queue/config"
	webhook "github.com/runplane/runplane/webhook/config"
)

// TestKindsArePinned: a file's kind is its Go type's name, so renaming a
// type would change the file format every install has; the kinds the
// chart writes stay these.
func TestKindsArePinned(t *testing.T) {
	assert.Equal(t, "runplane.io/v1alpha1", configfile.APIVersion)
	assert.Equal(t, "ControllerConfiguration", configfile.Kind[controllers.ControllerConfiguration]())
	assert.Equal(t, "WebhookConfiguration", configfile.Kind[webhook.WebhookConfiguration]())
	assert.Equal(t, "ExtenderConfiguration", configfile.Kind[extender.ExtenderConfiguration]())
	assert.Equal(t, "QueueConfiguration", configfile.Kind[queue.QueueConfiguration]())
}
