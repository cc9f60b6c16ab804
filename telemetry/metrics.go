package telemetry

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// Label names. The namespace label is not called "namespace" because
// Kubernetes service discovery commonly attaches a label of that name to
// every scraped series, which would clash.
const (
	labelNamespace = "switchyard_namespace"
	labelLane      = "lane"
	labelKind      = "kind"
	labelReason    = "reason"
	labelOutcome   = "outcome"
	labelOp        = "op"
	labelDep       = "dependency"
	labelState     = "state"
)

// breakerStates are the states limits.Breakers reports.
var breakerStates = []string{"closed", "half-open", "open"}

// otherLabel stands for the kinds and lanes beyond Config.MaxLabelValues. It
// starts with punctuation, so it can never be a real kind or lane name.
const otherLabel = "_other"

// metrics is the collector of one namespace.
type metrics struct {
	cfg *Config
	// kinds, lanes and deps cap the label values that get series of their
	// own.
	kinds, lanes, deps *capper

	// Lane gauges, read from the broker on each scrape.
	ready, inFlight, delayed, dead, oldest, objective, up, statsSeconds *prometheus.Desc

	// Event counters (Observer), by lane and kind.
	started, processed, succeeded, retried, snoozed, cancelled, awaiting,
	duplicates, returned, extendFailures, leasesLost *prometheus.CounterVec
	// deadLettered is by lane, kind and reason.
	deadLettered *prometheus.CounterVec
	// brokerErrors counts failed Stats and Lanes calls, by op.
	brokerErrors *prometheus.CounterVec

	// Middleware measurements, by lane and kind (and outcome).
	duration *prometheus.HistogramVec
	running  *prometheus.GaugeVec

	// Circuit breakers (limits.BreakerConfig.OnStateChange), by dependency.
	breakerState       *prometheus.GaugeVec
	breakerTransitions *prometheus.CounterVec
}

func newMetrics(cfg *Config) *metrics {
	cl := prometheus.Labels{labelNamespace: cfg.Namespace}
	lane := []string{labelLane}
	gauge := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("switchyard_lane_"+name, help, lane, cl)
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_" + name, Help: help, ConstLabels: cl},
			append([]string{labelLane, labelKind}, labels...))
	}
	return &metrics{
		cfg:   cfg,
		kinds: newCapper(cfg.MaxLabelValues),
		lanes: newCapper(cfg.MaxLabelValues),
		deps:  newCapper(cfg.MaxLabelValues),

		ready:     gauge("ready", "Tasks of the lane that can be delivered now."),
		inFlight:  gauge("in_flight", "Tasks of the lane leased to a worker."),
		delayed:   gauge("delayed", "Tasks of the lane that become ready later (run-at, retry backoff)."),
		dead:      gauge("dead_lettered", "Tasks in the lane's dead-letter queue."),
		oldest:    gauge("oldest_ready_age_seconds", "How long the lane's oldest ready task has been ready; 0 when none is. Absent when the broker cannot tell."),
		objective: gauge("wait_objective_seconds", "The lane's start-latency objective (lanes.Lane.WaitObjective or Config.Objectives); absent when it has none."),
		up: prometheus.NewDesc("switchyard_broker_up",
			"1 when every broker call of this scrape (Lanes, Stats) succeeded within the timeout, else 0.", nil, cl),
		statsSeconds: prometheus.NewDesc("switchyard_broker_stats_duration_seconds",
			"How long this scrape's broker calls took.", nil, cl),

		started:        counter("tasks_started_total", "Attempts started (a handler was called)."),
		processed:      counter("tasks_processed_total", "Deliveries settled with an outcome: succeeded, retried, snoozed, cancelled, awaiting review or dead-lettered."),
		succeeded:      counter("tasks_succeeded_total", "Tasks completed."),
		retried:        counter("tasks_retried_total", "Failed attempts scheduled for another try."),
		snoozed:        counter("tasks_snoozed_total", "Attempts that snoozed (re-delayed without spending an attempt)."),
		cancelled:      counter("tasks_cancelled_total", "Tasks cancelled by their handler."),
		awaiting:       counter("tasks_awaiting_review_total", "Tasks parked for a reviewer."),
		deadLettered:   counter("tasks_dead_lettered_total", "Tasks moved to the dead-letter queue, by reason.", labelReason),
		duplicates:     counter("tasks_duplicate_deliveries_total", "Deliveries not run because the task had finished or was running elsewhere."),
		returned:       counter("tasks_returned_total", "Deliveries given back unfinished (shutdown, ledger unavailable)."),
		extendFailures: counter("lease_extension_failures_total", "Lease extensions (heartbeats) that failed."),
		leasesLost:     counter("leases_lost_total", "Leases lost to another worker while a task ran."),
		brokerErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_broker_errors_total",
			Help: "Failed or timed-out broker calls made for metrics, by op (stats, lanes).", ConstLabels: cl}, []string{labelOp}),

		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "switchyard_handler_duration_seconds",
			Help: "Handler run time per attempt, by outcome (ok, error, panic).", ConstLabels: cl, Buckets: cfg.Buckets},
			[]string{labelLane, labelKind, labelOutcome}),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "switchyard_handlers_running",
			Help: "Handlers running now.", ConstLabels: cl}, []string{labelLane, labelKind}),

		breakerState: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "switchyard_breaker_state",
			Help:        "1 for the circuit breaker's current state (closed, half-open, open), 0 for the others; from its last transition.",
			ConstLabels: cl}, []string{labelDep, labelState}),
		breakerTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_breaker_transitions_total",
			Help: "Circuit breaker transitions, by the state entered.", ConstLabels: cl}, []string{labelDep, labelState}),
	}
}

func (m *metrics) vecs() []prometheus.Collector {
	return []prometheus.Collector{m.started, m.processed, m.succeeded, m.retried, m.snoozed, m.cancelled, m.awaiting,
		m.deadLettered, m.duplicates, m.returned, m.extendFailures, m.leasesLost, m.brokerErrors, m.duration, m.running, m.breakerState, m.breakerTransitions}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.ready, m.inFlight, m.delayed, m.dead, m.oldest, m.objective, m.up, m.statsSeconds} {
		ch <- d
	}
	for _, v := range m.vecs() {
		v.Describe(ch)
	}
}

// Collect implements prometheus.Collector: it reads the lane depths from the
// broker (bounded by Config.StatsTimeout) and emits every series.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for name, d := range m.objectives() {
		ch <- prometheus.MustNewConstMetric(m.objective, prometheus.GaugeValue, d.Seconds(), name)
	}
	if m.cfg.Broker != nil {
		m.collectLanes(ch)
	}
	for _, v := range m.vecs() {
		v.Collect(ch)
	}
}

// objectives returns the lanes' objectives after overrides.
func (m *metrics) objectives() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, l := range m.cfg.Lanes {
		if l.WaitObjective > 0 {
			out[l.Name] = l.WaitObjective
		}
	}
	for name, d := range m.cfg.Objectives {
		if d > 0 {
			out[name] = d
		} else {
			delete(out, name)
		}
	}
	return out
}

// laneStats is one lane's Stats call result.
type laneStats struct {
	s   broker.Stats
	err error
}

func (m *metrics) collectLanes(ch chan<- prometheus.Metric) {
	b := m.cfg.Broker
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.StatsTimeout)
	defer cancel()
	ok := true

	seen := map[string]bool{}
	var names []string
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	for _, l := range m.cfg.Lanes {
		add(l.Name)
	}
	if listed, can, err := b.Lanes(ctx); can && err != nil {
		ok = false
		m.brokerErrors.WithLabelValues("lanes").Inc()
	} else if can {
		sort.Strings(listed)
		for _, n := range listed {
			if broker.ValidateName("lane", n) == nil {
				add(n)
			}
		}
	}

	// One call per lane, in parallel. The channel is buffered so that a
	// call still running past the timeout (a driver ignoring its context)
	// can finish later without blocking or racing with this scrape.
	results := make(chan laneStats, len(names))
	for _, n := range names {
		go func(lane string) {
			s, err := b.Stats(ctx, lane)
			s.Lane = lane
			results <- laneStats{s: s, err: err}
		}(n)
	}
	age := b.Capabilities().OldestReadyAge
	// A lane past the label cap shares the _other series: sum those.
	var other *broker.Stats
collect:
	for range names {
		var r laneStats
		select {
		case r = <-results:
		case <-ctx.Done():
			ok = false
			m.brokerErrors.WithLabelValues("stats").Inc()
			break collect
		}
		if r.err != nil {
			ok = false
			m.brokerErrors.WithLabelValues("stats").Inc()
			continue
		}
		lane := m.lanes.value(r.s.Lane)
		if lane == otherLabel {
			if other == nil {
				other = &broker.Stats{Lane: otherLabel}
			}
			other.Ready += r.s.Ready
			other.InFlight += r.s.InFlight
			other.Delayed += r.s.Delayed
			other.DeadLettered += r.s.DeadLettered
			other.OldestReady = max(other.OldestReady, r.s.OldestReady)
			continue
		}
		m.emitLane(ch, r.s, age)
	}
	if other != nil {
		m.emitLane(ch, *other, age)
	}
	up := 0.0
	if ok {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(m.up, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(m.statsSeconds, prometheus.GaugeValue, time.Since(start).Seconds())
}

func (m *metrics) emitLane(ch chan<- prometheus.Metric, s broker.Stats, age bool) {
	g := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, s.Lane)
	}
	g(m.ready, float64(s.Ready))
	g(m.inFlight, float64(s.InFlight))
	g(m.delayed, float64(s.Delayed))
	g(m.dead, float64(s.DeadLettered))
	if age {
		g(m.oldest, s.OldestReady.Seconds())
	}
}

// observe is the scheduler Observer.
func (m *metrics) observe(e scheduler.Event) {
	lane, kind := m.lanes.value(e.Lane), m.kinds.value(e.Kind)
	inc := func(v *prometheus.CounterVec) { v.WithLabelValues(lane, kind).Inc() }
	switch e.Type {
	case scheduler.EventStarted:
		inc(m.started)
	case scheduler.EventSucceeded:
		inc(m.processed)
		inc(m.succeeded)
	case scheduler.EventRetried:
		inc(m.processed)
		inc(m.retried)
	case scheduler.EventSnoozed:
		inc(m.processed)
		inc(m.snoozed)
	case scheduler.EventCancelled:
		inc(m.processed)
		inc(m.cancelled)
	case scheduler.EventAwaiting:
		inc(m.processed)
		inc(m.awaiting)
	case scheduler.EventDead:
		inc(m.processed)
		reason := string(e.Reason)
		if reason == "" {
			reason = "unknown"
		}
		m.deadLettered.WithLabelValues(lane, kind, reason).Inc()
	case scheduler.EventDuplicate:
		inc(m.duplicates)
	case scheduler.EventReturned:
		inc(m.returned)
	case scheduler.EventExtendFail:
		inc(m.extendFailures)
	case scheduler.EventLeaseLost:
		inc(m.leasesLost)
	}
}

// middleware measures handler durations and counts running handlers.
func (m *metrics) middleware() scheduler.Middleware {
	return func(next scheduler.HandlerFunc) scheduler.HandlerFunc {
		return func(ctx context.Context, job *scheduler.Job) (res []byte, err error) {
			lane, kind := m.lanes.value(job.Lane), m.kinds.value(job.Kind)
			running := m.running.WithLabelValues(lane, kind)
			running.Inc()
			start := time.Now()
			outcome := "panic" // unless next returns
			defer func() {
				running.Dec()
				m.duration.WithLabelValues(lane, kind, outcome).Observe(time.Since(start).Seconds())
			}()
			res, err = next(ctx, job)
			outcome = "ok"
			if err != nil {
				outcome = "error"
			}
			return res, err
		}
	}
}

// capper lets through the first max distinct values and maps the rest to
// otherLabel.
type capper struct {
	mu   sync.Mutex
	max  int
	seen map[string]struct{}
}

func newCapper(max int) *capper { return &capper{max: max, seen: map[string]struct{}{}} }

func (c *capper) value(v string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[v]; ok {
		return v
	}
	if len(c.seen) >= c.max {
		return otherLabel
	}
	c.seen[v] = struct{}{}
	return v
}

// breakerChange records a circuit breaker transition.
func (m *metrics) breakerChange(dependency, from, to string) {
	dep := m.deps.value(dependency)
	for _, st := range breakerStates {
		v := 0.0
		if st == to {
			v = 1
		}
		m.breakerState.WithLabelValues(dep, st).Set(v)
	}
	m.breakerTransitions.WithLabelValues(dep, to).Inc()
}
