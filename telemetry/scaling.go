package telemetry

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/scaling"
)

// WatchScaling registers the lanes' scaling signal (package scaling) in
// t's registry, computed on every scrape (bounded by Config.StatsTimeout):
//
//   - switchyard_lane_desired_slots: the worker slots the lane wants
//     (scaling.Signal.Desired) — the gauge to scale a fleet by (KEDA's
//     Prometheus trigger, ECS target tracking; docs/SCALING.md);
//   - switchyard_lane_desired_workers: the same in workers of
//     scaling.Policy.SlotsPerWorker slots;
//   - switchyard_lane_busy_slots: the slots running the lane's tasks now;
//   - switchyard_scaling_up: 1 when the last scrape computed the signal,
//     else 0 (and the gauges above are absent: a failed read is never
//     "no work").
//
// Scrape regularly: the Scaler's arrival rate is measured between calls.
// It fails with broker.ErrInvalid for a nil scaler, and with the
// registry's error when one is already watched.
func (t *Telemetry) WatchScaling(s *scaling.Scaler) error {
	if s == nil {
		return broker.Invalidf("telemetry: nil scaler")
	}
	cl := prometheus.Labels{labelNamespace: t.cfg.Namespace}
	lane := []string{labelLane}
	c := &scalingCollector{s: s, timeout: t.cfg.StatsTimeout,
		desired: prometheus.NewDesc("switchyard_lane_desired_slots", "Worker slots the lane wants, from arrival rate, p90 duration, depth, oldest age and wait objective (docs/SCALING.md).", lane, cl),
		workers: prometheus.NewDesc("switchyard_lane_desired_workers", "switchyard_lane_desired_slots in workers of the scaler's slots per worker.", lane, cl),
		busy:    prometheus.NewDesc("switchyard_lane_busy_slots", "Worker slots running the lane's tasks now.", lane, cl),
		up:      prometheus.NewDesc("switchyard_scaling_up", "1 when the last scrape computed the scaling signal, else 0.", nil, cl),
	}
	return t.reg.Register(c)
}

type scalingCollector struct {
	s                          *scaling.Scaler
	timeout                    time.Duration
	desired, workers, busy, up *prometheus.Desc
}

func (c *scalingCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.desired
	ch <- c.workers
	ch <- c.busy
	ch <- c.up
}

func (c *scalingCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	ss, err := c.s.Signals(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	for _, s := range ss {
		ch <- prometheus.MustNewConstMetric(c.desired, prometheus.GaugeValue, float64(s.Desired), s.Lane)
		ch <- prometheus.MustNewConstMetric(c.workers, prometheus.GaugeValue, float64(s.Workers), s.Lane)
		ch <- prometheus.MustNewConstMetric(c.busy, prometheus.GaugeValue, float64(s.Busy), s.Lane)
	}
}
