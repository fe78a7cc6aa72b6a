//go:build tools

// Package nats only records the binary that testbin builds.
package nats

import (
	_ "github.com/nats-io/nats-server/v2"
)
