package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-dev/switchyard"
	_ "github.com/switchyard-dev/switchyard/adapters/embedded"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/lanes"
	"github.com/switchyard-dev/switchyard/limits"
	"github.com/switchyard-dev/switchyard/scheduler"
	"github.com/switchyard-dev/switchyard/telemetry"
)

// Task kinds of the known traffic.

type okArgs struct {
	N int `json:"n"`
}

func (okArgs) Kind() string { return "test.ok" }

type flakyArgs struct {
	N int `json:"n"`
}

func (flakyArgs) Kind() string { return "test.flaky" }

type doomedArgs struct {
	Secret string `json:"secret"`
}

func (doomedArgs) Kind() string { return "test.doomed" }

func openBroker(t *testing.T) *broker.Broker {
	t.Helper()
	b, err := broker.Open(context.Background(), "mem://"+conformance.Namespace(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// fastServer is a server configuration with short polls and retries, so the
// tests wait only for the runtime, and a terminal-event channel.
func fastServer(lane string) (*switchyard.ServerConfig, chan scheduler.Event) {
	done := make(chan scheduler.Event, 100)
	cfg := &switchyard.ServerConfig{
		Lanes:    []lanes.Lane{{Name: lane, Weight: 1}},
		Slots:    4,
		Lease:    5 * time.Second,
		PollWait: 20 * time.Millisecond,
		Retry:    scheduler.RetryPolicy{Base: 5 * time.Millisecond, Max: 20 * time.Millisecond, MaxAttempts: 5},
		Observer: func(e scheduler.Event) {
			switch e.Type {
			case scheduler.EventSucceeded, scheduler.EventDead, scheduler.EventCancelled:
				done <- e
			}
		},
	}
	return cfg, done
}

func waitEvents(t *testing.T, done <-chan scheduler.Event, n int) []scheduler.Event {
	t.Helper()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	var got []scheduler.Event
	for len(got) < n {
		select {
		case e := <-done:
			got = append(got, e)
		case <-timeout.C:
			t.Fatalf("only %d of %d tasks finished in time: %+v", len(got), n, got)
		}
	}
	return got
}

// scrape fetches /metrics over HTTP and parses it.
func scrape(t *testing.T, h http.Handler) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return fams, string(body)
}

// series finds the one series of name whose labels include want; ok=false
// when there is none.
func series(fams map[string]*dto.MetricFamily, name string, want map[string]string) (*dto.Metric, bool) {
	f := fams[name]
	if f == nil {
		return nil, false
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, lp := range m.Label {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m, true
	}
	return nil, false
}

func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	m, ok := series(fams, name, want)
	if !ok {
		t.Fatalf("no series %s%v", name, want)
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	t.Fatalf("series %s%v has no value", name, want)
	return 0
}

func expect(t *testing.T, fams map[string]*dto.MetricFamily, want float64, name string, labels ...string) {
	t.Helper()
	if got := value(t, fams, name, labels...); got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

// TestMetricsKnownTraffic drives three tasks that succeed, two that fail
// once and then succeed, and one that fails until it is dead-lettered
// (MaxAttempts 2) through a real server on mem://, leaves two ready and one
// delayed task on a lane nobody serves, and checks /metrics exactly.
func TestMetricsKnownTraffic(t *testing.T) {
	ctx := context.Background()
	b := openBroker(t)
	// The pedantic registry checks that what is collected matches what is
	// described.
	tel, err := telemetry.New(&telemetry.Config{Namespace: "ns1", Broker: b, Registry: prometheus.NewPedanticRegistry(), Lanes: []lanes.Lane{
		{Name: "work", WaitObjective: 2 * time.Second},
		{Name: "held", WaitObjective: time.Minute},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ccfg := &switchyard.ClientConfig{}
	tel.InstrumentClient(ccfg)
	client, err := switchyard.NewClient(b, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	scfg, done := fastServer("work")
	tel.Instrument(scfg)
	srv, err := switchyard.NewServer(b, scfg)
	if err != nil {
		t.Fatal(err)
	}
	must(t, switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[okArgs]) error { return nil }, nil))
	must(t, switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[flakyArgs]) error {
		if tk.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}, nil))
	must(t, switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[doomedArgs]) error {
		return fmt.Errorf("always fails")
	}, nil))

	work := &switchyard.EnqueueOpts{Lane: "work"}
	for i := range 3 {
		enqueue(t, client, okArgs{N: i}, work)
	}
	for i := range 2 {
		enqueue(t, client, flakyArgs{N: i}, work)
	}
	enqueue(t, client, doomedArgs{Secret: "hunter2"}, &switchyard.EnqueueOpts{Lane: "work", MaxAttempts: 2})
	for i := range 2 {
		enqueue(t, client, okArgs{N: 10 + i}, &switchyard.EnqueueOpts{Lane: "held"})
	}
	enqueue(t, client, okArgs{N: 20}, &switchyard.EnqueueOpts{Lane: "held", Delay: time.Hour})

	must(t, srv.Start(ctx))
	waitEvents(t, done, 6)
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	must(t, srv.Stop(stopCtx)) // flushes the batched acks

	fams, text := scrape(t, tel.Handler())
	ns := []string{"switchyard_namespace", "ns1"}
	kl := func(kind string, more ...string) []string {
		return append(append([]string{"lane", "work", "kind", kind}, ns...), more...)
	}

	expect(t, fams, 3, "switchyard_tasks_started_total", kl("test.ok")...)
	expect(t, fams, 4, "switchyard_tasks_started_total", kl("test.flaky")...)
	expect(t, fams, 2, "switchyard_tasks_started_total", kl("test.doomed")...)
	expect(t, fams, 3, "switchyard_tasks_processed_total", kl("test.ok")...)
	expect(t, fams, 4, "switchyard_tasks_processed_total", kl("test.flaky")...)
	expect(t, fams, 2, "switchyard_tasks_processed_total", kl("test.doomed")...)
	expect(t, fams, 3, "switchyard_tasks_succeeded_total", kl("test.ok")...)
	expect(t, fams, 2, "switchyard_tasks_succeeded_total", kl("test.flaky")...)
	expect(t, fams, 2, "switchyard_tasks_retried_total", kl("test.flaky")...)
	expect(t, fams, 1, "switchyard_tasks_retried_total", kl("test.doomed")...)
	expect(t, fams, 1, "switchyard_tasks_dead_lettered_total", kl("test.doomed", "reason", string(broker.ReasonMaxAttempts))...)
	for _, absent := range [][]string{
		{"switchyard_tasks_succeeded_total", "test.doomed"},
		{"switchyard_tasks_retried_total", "test.ok"},
		{"switchyard_tasks_dead_lettered_total", "test.flaky"},
		{"switchyard_tasks_dead_lettered_total", "test.ok"},
	} {
		if _, ok := series(fams, absent[0], map[string]string{"kind": absent[1]}); ok {
			t.Errorf("unexpected series %s{kind=%s}", absent[0], absent[1])
		}
	}
	if f := fams["switchyard_tasks_dead_lettered_total"]; f == nil || len(f.Metric) != 1 {
		t.Errorf("dead-lettered series: %v, want exactly one", f)
	}
	if f := fams["switchyard_leases_lost_total"]; f != nil {
		t.Errorf("lost leases reported in a run that lost none: %v", f)
	}

	// Handler durations: one observation per attempt, by outcome.
	expect(t, fams, 3, "switchyard_handler_duration_seconds", kl("test.ok", "outcome", "ok")...)
	expect(t, fams, 2, "switchyard_handler_duration_seconds", kl("test.flaky", "outcome", "ok")...)
	expect(t, fams, 2, "switchyard_handler_duration_seconds", kl("test.flaky", "outcome", "error")...)
	expect(t, fams, 2, "switchyard_handler_duration_seconds", kl("test.doomed", "outcome", "error")...)
	expect(t, fams, 0, "switchyard_handlers_running", kl("test.ok")...)

	// Lane gauges, read from the broker on scrape.
	lane := func(name string) []string { return append([]string{"lane", name}, ns...) }
	expect(t, fams, 0, "switchyard_lane_ready", lane("work")...)
	expect(t, fams, 0, "switchyard_lane_in_flight", lane("work")...)
	expect(t, fams, 0, "switchyard_lane_delayed", lane("work")...)
	expect(t, fams, 1, "switchyard_lane_dead_lettered", lane("work")...)
	expect(t, fams, 0, "switchyard_lane_oldest_ready_age_seconds", lane("work")...)
	expect(t, fams, 2, "switchyard_lane_ready", lane("held")...)
	expect(t, fams, 0, "switchyard_lane_in_flight", lane("held")...)
	expect(t, fams, 1, "switchyard_lane_delayed", lane("held")...)
	expect(t, fams, 0, "switchyard_lane_dead_lettered", lane("held")...)
	if age := value(t, fams, "switchyard_lane_oldest_ready_age_seconds", lane("held")...); age <= 0 || age > 60 {
		t.Errorf("held lane's oldest ready age = %vs, want a small positive age", age)
	}
	expect(t, fams, 2, "switchyard_lane_wait_objective_seconds", lane("work")...)
	expect(t, fams, 60, "switchyard_lane_wait_objective_seconds", lane("held")...)
	expect(t, fams, 1, "switchyard_broker_up", ns...)

	// No payloads, task IDs or error text in labels.
	for _, bad := range []string{"hunter2", "always fails", "first attempt"} {
		if strings.Contains(text, bad) {
			t.Errorf("/metrics contains %q", bad)
		}
	}
	checkLabelNames(t, fams)
}

// checkLabelNames asserts every series uses only the documented labels.
func checkLabelNames(t *testing.T, fams map[string]*dto.MetricFamily) {
	t.Helper()
	allowed := map[string]bool{"switchyard_namespace": true, "lane": true, "kind": true, "reason": true, "outcome": true, "op": true, "le": true,
		"dependency": true, "state": true}
	var bad []string
	for name, f := range fams {
		for _, m := range f.Metric {
			for _, lp := range m.Label {
				if !allowed[lp.GetName()] {
					bad = append(bad, name+":"+lp.GetName())
				}
			}
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("unexpected labels: %v", bad)
	}
}

// TestMetricsBrokerDown: when the broker's calls fail, the scrape still
// answers, without lane gauges, with broker_up 0 and the errors counted.
func TestMetricsBrokerDown(t *testing.T) {
	b, err := broker.Open(context.Background(), "mem://"+conformance.Namespace(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	tel, err := telemetry.New(&telemetry.Config{Broker: b, Lanes: []lanes.Lane{{Name: "a"}, {Name: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	fams, _ := scrape(t, tel.Handler())
	expect(t, fams, 1, "switchyard_broker_up", "switchyard_namespace", "default")
	expect(t, fams, 0, "switchyard_lane_ready", "lane", "a")
	b.Close()

	fams, _ = scrape(t, tel.Handler())
	expect(t, fams, 0, "switchyard_broker_up", "switchyard_namespace", "default")
	if _, ok := series(fams, "switchyard_lane_ready", nil); ok {
		t.Error("lane gauges reported from a closed broker")
	}
	// Two Stats calls failed (and Lanes, for a driver that lists lanes).
	if got := value(t, fams, "switchyard_broker_errors_total", "op", "stats"); got != 2 {
		t.Errorf("stats errors = %v, want 2", got)
	}
}

// TestMetricsNamespacesShareRegistry: two namespaces on one registry are
// told apart by label; registering one twice fails.
func TestMetricsNamespacesShareRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := telemetry.New(&telemetry.Config{Namespace: "a", Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	bb, err := telemetry.New(&telemetry.Config{Namespace: "b", Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	a.Observer()(scheduler.Event{Type: scheduler.EventSucceeded, Lane: "x", Kind: "k"})
	bb.Observer()(scheduler.Event{Type: scheduler.EventSucceeded, Lane: "x", Kind: "k"})
	bb.Observer()(scheduler.Event{Type: scheduler.EventSucceeded, Lane: "x", Kind: "k"})
	fams, _ := scrape(t, a.Handler())
	expect(t, fams, 1, "switchyard_tasks_succeeded_total", "switchyard_namespace", "a")
	expect(t, fams, 2, "switchyard_tasks_succeeded_total", "switchyard_namespace", "b")
	expect(t, fams, 1, "switchyard_lane_wait_objective_seconds", "switchyard_namespace", "a", "lane", lanes.Scheduled)

	if _, err := telemetry.New(&telemetry.Config{Namespace: "a", Registry: reg}); err == nil {
		t.Error("a second collector for namespace a registered")
	}
	if !bb.Unregister() {
		t.Error("Unregister: was not registered")
	}
	fams, _ = scrape(t, a.Handler())
	if _, ok := series(fams, "switchyard_tasks_succeeded_total", map[string]string{"switchyard_namespace": "b"}); ok {
		t.Error("namespace b still reported after Unregister")
	}
}

// TestMetricsEventsAndCap covers the events the traffic test does not
// produce, and the label cap.
func TestMetricsEventsAndCap(t *testing.T) {
	tel, err := telemetry.New(&telemetry.Config{MaxLabelValues: 2})
	if err != nil {
		t.Fatal(err)
	}
	obs := tel.Observer()
	for _, typ := range []scheduler.EventType{scheduler.EventSnoozed, scheduler.EventCancelled, scheduler.EventAwaiting,
		scheduler.EventDuplicate, scheduler.EventReturned, scheduler.EventExtendFail, scheduler.EventLeaseLost, scheduler.EventLeaseLost} {
		obs(scheduler.Event{Type: typ, Lane: "l", Kind: "k1", TaskID: "task-id-1"})
	}
	obs(scheduler.Event{Type: scheduler.EventDead, Lane: "l", Kind: "k2", Reason: broker.ReasonUnknownKind})
	obs(scheduler.Event{Type: scheduler.EventDead, Lane: "l", Kind: "k3", Reason: broker.ReasonUnknownKind})
	obs(scheduler.Event{Type: scheduler.EventDead, Lane: "l", Kind: "k4", Reason: broker.ReasonUnknownKind})

	fams, text := scrape(t, tel.Handler())
	k1 := []string{"lane", "l", "kind", "k1"}
	expect(t, fams, 1, "switchyard_tasks_snoozed_total", k1...)
	expect(t, fams, 1, "switchyard_tasks_cancelled_total", k1...)
	expect(t, fams, 1, "switchyard_tasks_awaiting_review_total", k1...)
	expect(t, fams, 3, "switchyard_tasks_processed_total", k1...)
	expect(t, fams, 1, "switchyard_tasks_duplicate_deliveries_total", k1...)
	expect(t, fams, 1, "switchyard_tasks_returned_total", k1...)
	expect(t, fams, 1, "switchyard_lease_extension_failures_total", k1...)
	expect(t, fams, 2, "switchyard_leases_lost_total", k1...)
	expect(t, fams, 1, "switchyard_tasks_dead_lettered_total", "kind", "k2", "reason", "unknown_kind")
	expect(t, fams, 2, "switchyard_tasks_dead_lettered_total", "kind", "_other", "reason", "unknown_kind")
	if strings.Contains(text, "task-id-1") {
		t.Error("a task ID appears in /metrics")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]*telemetry.Config{
		"lane name":      {Lanes: []lanes.Lane{{Name: "bad lane"}}},
		"objective":      {Objectives: map[string]time.Duration{"a": -time.Second}},
		"objective lane": {Objectives: map[string]time.Duration{"": time.Second}},
		"timeout":        {StatsTimeout: -1},
		"buckets":        {Buckets: []float64{1, 1}},
		"cap":            {MaxLabelValues: -1},
	} {
		if _, err := telemetry.New(cfg); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}

func enqueue(t *testing.T, c *switchyard.Client, args switchyard.TaskArgs, opts *switchyard.EnqueueOpts) string {
	t.Helper()
	r, err := c.Enqueue(context.Background(), args, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r.ID
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestMetricsBreakerState trips a real limits breaker and reads its state
// from /metrics.
func TestMetricsBreakerState(t *testing.T) {
	tel, err := telemetry.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	br := limits.NewBreakers(limits.BreakerConfig{Failures: 2, Open: time.Hour, OnStateChange: tel.BreakerStateChange()})
	down := errors.New("connection refused")
	for range 3 {
		_, _ = limits.Protect(context.Background(), br, "model-api", func(ctx context.Context) (int, error) { return 0, down })
	}
	if st := br.State("model-api"); st != "open" {
		t.Fatalf("breaker %s, want open", st)
	}
	fams, _ := scrape(t, tel.Handler())
	expect(t, fams, 1, "switchyard_breaker_state", "dependency", "model-api", "state", "open")
	expect(t, fams, 0, "switchyard_breaker_state", "dependency", "model-api", "state", "closed")
	expect(t, fams, 0, "switchyard_breaker_state", "dependency", "model-api", "state", "half-open")
	expect(t, fams, 1, "switchyard_breaker_transitions_total", "dependency", "model-api", "state", "open")
}
