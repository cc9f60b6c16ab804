package telemetry

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// WatchOutbox registers the gauges of L's transactional outbox (the tasks
// of Client.EnqueueTx and of reliable push waiting to be published) in
// t's registry, read from the ledger on every scrape (bounded by
// Config.StatsTimeout):
//
//   - switchyard_outbox_depth: rows waiting (committed, not yet
//     published);
//   - switchyard_outbox_oldest_age_seconds: how long the oldest has
//     waited (0 when empty) — it grows while the broker is unreachable or
//     no relay runs;
//   - switchyard_outbox_up: 1 when the last scrape read the outbox, else 0
//     (and the two gauges above are absent).
//
// docs/alerts.yml alerts on the oldest age. Every process sharing the
// ledger reports the same values; aggregate with max. It fails with
// broker.ErrInvalid when L has no outbox (ledger.OutboxOf), and with the
// registry's error when the outbox is already watched.
func (t *Telemetry) WatchOutbox(L ledger.Ledger) error {
	o := ledger.OutboxOf(L)
	if o == nil {
		return broker.Invalidf("telemetry: the ledger has no outbox")
	}
	cl := prometheus.Labels{labelNamespace: t.cfg.Namespace}
	c := &outboxCollector{o: o, timeout: t.cfg.StatsTimeout,
		depth:  prometheus.NewDesc("switchyard_outbox_depth", "Outbox rows waiting to be published: committed tasks not yet on the broker.", nil, cl),
		oldest: prometheus.NewDesc("switchyard_outbox_oldest_age_seconds", "How long the oldest outbox row has waited to be published (0 when the outbox is empty).", nil, cl),
		up:     prometheus.NewDesc("switchyard_outbox_up", "1 when the last scrape read the outbox from the ledger, else 0.", nil, cl),
	}
	return t.reg.Register(c)
}

type outboxCollector struct {
	o                 ledger.Outbox
	timeout           time.Duration
	depth, oldest, up *prometheus.Desc
}

func (c *outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.depth
	ch <- c.oldest
	ch <- c.up
}

func (c *outboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	st, err := c.o.OutboxStats(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(st.Depth))
	age := 0.0
	if !st.Oldest.IsZero() {
		age = max(time.Since(st.Oldest).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age)
}
