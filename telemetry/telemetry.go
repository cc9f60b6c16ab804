package telemetry

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/lanes"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// Config configures a Telemetry. A nil *Config means every default; every
// field documents its default.
type Config struct {
	// Namespace is the value of the switchyard_namespace label on every
	// series, so several namespaces (one Telemetry each) can share one
	// registry. Defaults to "default".
	Namespace string
	// Broker, when set, is asked for lane depths (Broker.Stats) on every
	// scrape. Defaults to nil: no lane gauges.
	Broker *broker.Broker
	// Lanes are the lanes whose depths are reported, and their objectives
	// (Lane.WaitObjective, exported as switchyard_lane_wait_objective_seconds
	// for the alert rules). Lanes the broker lists (Broker.Lanes) are
	// reported too. Defaults to lanes.Defaults().
	Lanes []lanes.Lane
	// Objectives override Lane.WaitObjective per lane name (a lane with no
	// objective, e.g. batch by default, can be given one here; zero removes
	// one). Defaults to none.
	Objectives map[string]time.Duration
	// StatsTimeout bounds the Broker.Stats calls of one scrape (all lanes
	// together; they run in parallel). A lane whose call fails or times out
	// is left out of that scrape and counted in
	// switchyard_broker_stats_errors_total. Defaults to 5s.
	StatsTimeout time.Duration
	// Registry is where the collector registers. Defaults to a new
	// registry of its own, served by Handler.
	Registry *prometheus.Registry
	// Buckets are the handler duration histogram's buckets in seconds.
	// Defaults to 5 ms … 10 min, roughly ×2.5 apart.
	Buckets []float64
	// MaxLabelValues caps the distinct kinds and lanes that get series of
	// their own; later ones are counted under "_other", so a flood of
	// unknown kinds cannot explode the series count. Defaults to 200.
	MaxLabelValues int
	// TracerProvider makes the spans. Defaults to otel.GetTracerProvider()
	// (a no-op until the program sets one).
	TracerProvider trace.TracerProvider
	// Propagator carries trace context in message headers. Defaults to W3C
	// trace context (propagation.TraceContext).
	Propagator propagation.TextMapPropagator
	// RecordErrorText puts a failed attempt's error message on its span.
	// Defaults to false: only the error's type is recorded, because handler
	// error text can quote arguments.
	RecordErrorText bool
}

// Telemetry is a Prometheus collector for one namespace and the tracing
// glue for its clients and servers. It is safe for concurrent use.
type Telemetry struct {
	cfg    Config
	reg    *prometheus.Registry
	m      *metrics
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// New builds a Telemetry and registers its collector. It fails with an error
// matching broker.ErrInvalid for a bad configuration, and with the
// registry's error when the namespace is already registered there.
func New(cfg *Config) (*Telemetry, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	if c.Lanes == nil {
		c.Lanes = lanes.Defaults()
	}
	for _, l := range c.Lanes {
		if err := broker.ValidateName("telemetry: lane name", l.Name); err != nil {
			return nil, err
		}
	}
	for name, d := range c.Objectives {
		if err := broker.ValidateName("telemetry: objective lane", name); err != nil {
			return nil, err
		}
		if d < 0 {
			return nil, broker.Invalidf("telemetry: objective of lane %s is negative (%s)", name, d)
		}
	}
	if c.StatsTimeout < 0 {
		return nil, broker.Invalidf("telemetry: StatsTimeout is negative (%s)", c.StatsTimeout)
	}
	if c.StatsTimeout == 0 {
		c.StatsTimeout = 5 * time.Second
	}
	if c.Buckets == nil {
		c.Buckets = DefaultBuckets
	}
	for i := 1; i < len(c.Buckets); i++ {
		if c.Buckets[i] <= c.Buckets[i-1] {
			return nil, broker.Invalidf("telemetry: buckets must be increasing")
		}
	}
	if c.MaxLabelValues < 0 {
		return nil, broker.Invalidf("telemetry: MaxLabelValues is negative (%d)", c.MaxLabelValues)
	}
	if c.MaxLabelValues == 0 {
		c.MaxLabelValues = 200
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.Propagator == nil {
		c.Propagator = propagation.TraceContext{}
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	t := &Telemetry{cfg: c, reg: c.Registry, prop: c.Propagator,
		tracer: c.TracerProvider.Tracer(instrumentationName)}
	t.m = newMetrics(&t.cfg)
	if err := t.reg.Register(t.m); err != nil {
		return nil, err
	}
	return t, nil
}

// DefaultBuckets are the default handler duration buckets, in seconds.
var DefaultBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 25, 60, 150, 300, 600}

// instrumentationName names the tracer (the instrumentation scope).
const instrumentationName = "github.com/switchyard-dev/switchyard/telemetry"

// Handler serves the registry in the Prometheus exposition format: mount it
// at /metrics.
func (t *Telemetry) Handler() http.Handler {
	return promhttp.HandlerFor(t.reg, promhttp.HandlerOpts{})
}

// Registry returns the registry the collector is registered with.
func (t *Telemetry) Registry() *prometheus.Registry { return t.reg }

// Unregister removes the collector from its registry (for a namespace that
// goes away). It reports whether it was registered.
func (t *Telemetry) Unregister() bool { return t.reg.Unregister(t.m) }

// Observer returns the function to set as scheduler.Config.Observer
// (ServerConfig.Observer): it counts task events.
func (t *Telemetry) Observer() func(scheduler.Event) { return t.m.observe }

// Middleware returns the handler middleware to put in
// scheduler.Config.Middleware (ServerConfig.Middleware): it starts a span
// per attempt, as a child of the enqueue span found in the task's headers,
// and measures handler durations.
func (t *Telemetry) Middleware() scheduler.Middleware {
	trace, measure := t.traceMiddleware(), t.m.middleware()
	return func(next scheduler.HandlerFunc) scheduler.HandlerFunc {
		return trace(measure(next))
	}
}

// BreakerStateChange returns the function to set as
// limits.BreakerConfig.OnStateChange: it exports each breaker's state
// (switchyard_breaker_state) and counts transitions. Dependency names
// become label values: keep tenants and secrets out of them.
func (t *Telemetry) BreakerStateChange() func(dependency, from, to string) {
	return t.m.breakerChange
}

// BeforePublish returns the function to set as
// switchyard.ClientConfig.BeforePublish: it records an enqueue span and
// injects its trace context into the message headers.
func (t *Telemetry) BeforePublish() func(ctx context.Context, m *broker.Message) {
	return t.beforePublish
}

// Instrument adds the Observer and the Middleware to a server
// configuration, keeping an Observer already set (both are called) and
// putting the middleware outermost. cfg must not be nil.
func (t *Telemetry) Instrument(cfg *switchyard.ServerConfig) {
	obs := t.Observer()
	if prev := cfg.Observer; prev != nil {
		cfg.Observer = func(e scheduler.Event) { obs(e); prev(e) }
	} else {
		cfg.Observer = obs
	}
	cfg.Middleware = append([]scheduler.Middleware{t.Middleware()}, cfg.Middleware...)
}

// InstrumentClient sets BeforePublish on a client configuration, calling an
// existing one first. cfg must not be nil.
func (t *Telemetry) InstrumentClient(cfg *switchyard.ClientConfig) {
	bp := t.BeforePublish()
	if prev := cfg.BeforePublish; prev != nil {
		cfg.BeforePublish = func(ctx context.Context, m *broker.Message) { prev(ctx, m); bp(ctx, m) }
	} else {
		cfg.BeforePublish = bp
	}
}
