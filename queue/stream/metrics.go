package stream

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector reports, at each scrape, how full the Store's JetStream
// resources and the account are: bytes and messages stored against their
// bounds, so an alert fires before a full store starts refusing work.
// Each scrape reads the stream, bucket and account info (one request each,
// within timeout); a resource that does not answer is left out of that
// scrape and counted in runplane_queue_store_up 0.
func (s *Store) Collector(timeout time.Duration) prometheus.Collector {
	return &collector{s: s, timeout: timeout}
}

var (
	storeBytes = prometheus.NewDesc("runplane_queue_store_bytes",
		"Bytes stored by a JetStream resource of the queue (store: invocations, results, records) or by its NATS account (store: account).", []string{"store"}, nil)
	storeMessages = prometheus.NewDesc("runplane_queue_store_messages",
		"Messages (Records for records) stored by a JetStream resource of the queue.", []string{"store"}, nil)
	storeMaxBytes = prometheus.NewDesc("runplane_queue_store_max_bytes",
		"Bound of runplane_queue_store_bytes (absent when unbounded). At the bound new invocations are refused (503); none stored is dropped.", []string{"store"}, nil)
	storeUp = prometheus.NewDesc("runplane_queue_store_up",
		"1 when the resource's info could be read at this scrape.", []string{"store"}, nil)
)

type collector struct {
	s       *Store
	timeout time.Duration
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{storeBytes, storeMessages, storeMaxBytes, storeUp} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	report := func(store string, bytes, msgs uint64, max int64, err error) {
		if err != nil {
			ch <- prometheus.MustNewConstMetric(storeUp, prometheus.GaugeValue, 0, store)
			return
		}
		ch <- prometheus.MustNewConstMetric(storeUp, prometheus.GaugeValue, 1, store)
		ch <- prometheus.MustNewConstMetric(storeBytes, prometheus.GaugeValue, float64(bytes), store)
		if msgs > 0 || store != "account" {
			ch <- prometheus.MustNewConstMetric(storeMessages, prometheus.GaugeValue, float64(msgs), store)
		}
		if max > 0 {
			ch <- prometheus.MustNewConstMetric(storeMaxBytes, prometheus.GaugeValue, float64(max), store)
		}
	}
	if info, err := c.s.Stream.Info(ctx); err == nil {
		report("invocations", info.State.Bytes, info.State.Msgs, info.Config.MaxBytes, nil)
	} else {
		report("invocations", 0, 0, 0, err)
	}
	if info, err := c.s.Results.Info(ctx); err == nil {
		report("results", info.State.Bytes, info.State.Msgs, info.Config.MaxBytes, nil)
	} else {
		report("results", 0, 0, 0, err)
	}
	if st, err := c.s.Records.Status(ctx); err == nil {
		// A bucket's status carries its stream's info.
		var max int64 = -1
		if ks, ok := st.(*jetstream.KeyValueBucketStatus); ok {
			max = ks.StreamInfo().Config.MaxBytes
		}
		report("records", st.Bytes(), st.Values(), max, nil)
	} else {
		report("records", 0, 0, 0, err)
	}
	if ai, err := c.s.JS.AccountInfo(ctx); err == nil {
		report("account", ai.Store, 0, ai.Limits.MaxStore, nil)
	} else {
		report("account", 0, 0, 0, err)
	}
}
