// Package natssync is how runplane's NATS servers write JetStream to disk:
// the one setting the chart's bundled NATS renders by default
// (nats.bundled.jetstream.syncInterval), make dev and the test kit
// (test/natsauth) and the chaos harness (test/chaos) run, so a figure
// measured in one holds in the others. "Accepted" in runplane is the
// stream's PubAck; with sync_interval always each server fsyncs a write
// (on a replicated stream: its Raft log entry) before it counts towards
// that PubAck, so an accepted invocation is on disk on a quorum of servers
// and survives every server crashing at once. JetStream's own default (a
// sync every 2 minutes) acknowledges writes that are still in the page
// cache.
package natssync

import "strconv"

// Always fsyncs every write before it is acknowledged.
const Always = "always"

// Default is runplane's setting: Always. A duration ("2m", JetStream's
// default) trades the fsync for throughput (test/bench measures both).
const Default = Always

// Config is the jetstream block's line for interval ("always" or a
// duration such as "2m"), quoted: unquoted, nats-server reads 2m as a
// number (2 million).
func Config(interval string) string { return "sync_interval: " + strconv.Quote(interval) }
