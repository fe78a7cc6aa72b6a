package extender

import (
	"errors"
	"fmt"
	"log/slog"

	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/runplane/runplane/extender/config"
)

// Config configures Start: the settings of runplane-extender's
// configuration file (extender/config, embedded: defaulted and validated
// here, so make dev and tests get the binary's defaults) and the process's
// parts.
type Config struct {
	config.ExtenderConfiguration
	// RESTConfig reaches the API server.
	RESTConfig *rest.Config
	// Logger; slog.Default() when nil.
	Logger *slog.Logger
	// Clock judges Lease expiry and reservation age; the real clock when nil.
	Clock clock.Clock
}

func (c *Config) defaults() error {
	if c.RESTConfig == nil {
		return errors.New("extender config: RESTConfig is required")
	}
	c.Default()
	if err := c.Validate(); err != nil {
		return fmt.Errorf("extender config: %w", err)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	return nil
}
