package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runplane/runplane/api"
)

// StreamLeader is the server leading the invocation stream (a cluster
// scenario), asked of any server that answers.
func (s *Stack) StreamLeader(ctx context.Context) (*NATS, error) {
	var last error
	for _, n := range s.NATSCluster {
		if !n.Running() {
			continue
		}
		leader, err := streamLeader(ctx, n.URL)
		if err != nil {
			last = err
			continue
		}
		for _, m := range s.NATSCluster {
			if m.Name == leader {
				return m, nil
			}
		}
		last = fmt.Errorf("stream %s: leader %q is none of the servers", api.DefaultStreamName, leader)
	}
	return nil, fmt.Errorf("stream leader: %w", last)
}

func streamLeader(ctx context.Context, url string) (string, error) {
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second))
	if err != nil {
		return "", err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, api.DefaultStreamName)
	if err != nil {
		return "", err
	}
	if st.CachedInfo().Cluster == nil || st.CachedInfo().Cluster.Leader == "" {
		return "", fmt.Errorf("stream %s has no leader", api.DefaultStreamName)
	}
	return st.CachedInfo().Cluster.Leader, nil
}
