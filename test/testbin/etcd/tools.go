//go:build tools

// Package etcd only records the binary that testbin builds.
package etcd

import (
	_ "go.etcd.io/etcd/server/v3"
)
