//go:build tools

// Package kwok only records the binary that testbin builds.
package kwok

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
