package chart_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/runplane/runplane/queue/shard"
)

// TestQueueRoleNamesEveryLease: the queue's Role lets it get and update
// exactly the Leases it uses — the manager's, the members Lease and,
// sharded, every shard's Lease of queue.activatorShards, plus those of
// queue.previousActivatorShards during an upgrade that changes the count
// (the old replicas renew theirs until the rollout stops them). The names
// come from queue/shard itself. Before, the Role named only the manager's
// Lease: a sharded queue's members writes were refused.
func TestQueueRoleNamesEveryLease(t *testing.T) {
	needHelm(t)
	shardLeases := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, shard.LeaseName(shard.DefaultLeaseName, i, n))
		}
		return out
	}
	members := shard.MembersLeaseName(shard.DefaultLeaseName)
	for _, tc := range []struct {
		shards, previous int
		want             []string
	}{
		{1, 0, []string{members}},
		{6, 0, append([]string{members}, shardLeases(6)...)},
		{3, 2, append(append([]string{members}, shardLeases(3)...), shardLeases(2)...)},
		{3, 3, append([]string{members}, shardLeases(3)...)},
		{1, 4, append([]string{members}, shardLeases(4)...)},
	} {
		t.Run(fmt.Sprintf("%d after %d", tc.shards, tc.previous), func(t *testing.T) {
			objs := parse(t, mustRender(t, "--set", fmt.Sprintf("queue.activatorShards=%d", tc.shards),
				"--set", fmt.Sprintf("queue.previousActivatorShards=%d", tc.previous)))
			var role rbacv1.Role
			find(t, objs, "Role", "runplane-queue").into(t, &role)
			var names []string
			for _, r := range role.Rules {
				for _, res := range r.Resources {
					if res == "leases" && len(r.ResourceNames) > 0 {
						assert.ElementsMatch(t, []string{"get", "update"}, r.Verbs)
						names = append(names, r.ResourceNames...)
					}
				}
			}
			assert.ElementsMatch(t, append([]string{shard.DefaultLeaseName}, tc.want...), names)
		})
	}
}
