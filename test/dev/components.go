package main

import (
	"context"

	"github.com/runplane/runplane/test/cluster"
)

// stack is the runplane components make dev runs next to the cluster.
type stack struct {
	queueURL string
	stops    []func()
}

func (s *stack) stop() {
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
}

// startComponents starts NATS and the runplane components in-process.
func startComponents(ctx context.Context, c *cluster.Cluster, cfg config) (*stack, error) {
	return &stack{}, nil
}
