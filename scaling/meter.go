package scaling

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/lanes"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// Meter turns what a running system shows into Compute's inputs: task
// durations (from a scheduler's events, Observe) and queue samples (from
// the broker's stats, Sample). The arrival rate follows from flow
// conservation: what arrived in a window is what the queue grew by plus
// what the fleet finished, and the fleet finishes about Busy / p90 tasks a
// second (Little's law, with the p90 standing in for the mean: it
// under-counts finished work a little, and the headroom covers it). It is
// safe for concurrent use.
type Meter struct {
	// Bin is the length of one rate window; the rate is the median of the
	// last three. Defaults to 10s.
	Bin time.Duration
	// Expected gives a lane's p90 duration while the Meter has observed
	// none (an admin process runs no handlers): a configured estimate.
	// Defaults to none.
	Expected map[string]time.Duration

	mu    sync.Mutex
	lanes map[string]*laneMeter
}

type laneMeter struct {
	durs  []time.Duration // last meterDurs finished durations
	rates []float64       // window rates, newest last (at most 6)
	start time.Time       // the current window's first sample
	queue int64           // Ready+InFlight+Delayed then
	last  broker.Stats
	seen  bool
}

const meterDurs = 256

func (m *Meter) lane(name string) *laneMeter {
	if m.lanes == nil {
		m.lanes = map[string]*laneMeter{}
	}
	l := m.lanes[name]
	if l == nil {
		l = &laneMeter{}
		m.lanes[name] = l
	}
	return l
}

// Observe records a finished task's duration on lane.
func (m *Meter) Observe(lane string, d time.Duration) {
	if d <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.lane(lane)
	if len(l.durs) >= meterDurs {
		l.durs = l.durs[1:]
	}
	l.durs = append(l.durs, d)
}

// Observer returns a scheduler.Config.Observer that feeds Observe with the
// durations of finished attempts.
func (m *Meter) Observer() func(scheduler.Event) {
	return func(e scheduler.Event) {
		switch e.Type {
		case scheduler.EventSucceeded, scheduler.EventRetried, scheduler.EventDead, scheduler.EventSnoozed, scheduler.EventCancelled:
			m.Observe(e.Lane, e.Duration)
		}
	}
}

// Sample records the lane's stats at a moment.
func (m *Meter) Sample(st broker.Stats, at time.Time) {
	bin := m.Bin
	if bin <= 0 {
		bin = 10 * time.Second
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.lane(st.Lane)
	q := max(st.Ready, 0) + max(st.InFlight, 0) + max(st.Delayed, 0)
	if !l.seen {
		l.seen, l.start, l.queue, l.last = true, at, q, st
		return
	}
	l.last = st
	span := at.Sub(l.start)
	if span < bin {
		return
	}
	rate := float64(q-l.queue) / span.Seconds()
	if p90 := m.p90(st.Lane, l); p90 > 0 {
		rate += float64(max(st.InFlight, 0)) / p90.Seconds()
	}
	l.rates = append(l.rates, max(rate, 0))
	if len(l.rates) > 6 {
		l.rates = l.rates[1:]
	}
	l.start, l.queue = at, q
}

func (m *Meter) p90(lane string, l *laneMeter) time.Duration {
	if len(l.durs) == 0 {
		return m.Expected[lane]
	}
	s := slices.Clone(l.durs)
	slices.Sort(s)
	return s[len(s)*9/10]
}

// Input returns the lane's input as last measured (Ready, Busy and
// OldestReady from the last Sample; rate and trend from its windows; p90
// from Observe or Expected).
func (m *Meter) Input(lane string) Input {
	bin := m.Bin
	if bin <= 0 {
		bin = 10 * time.Second
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.lane(lane)
	in := Input{Lane: lane, Ready: l.last.Ready, Busy: l.last.InFlight, OldestReady: l.last.OldestReady, P90: m.p90(lane, l)}
	var cur, prev [3]float64
	n := len(l.rates)
	for i := range 3 {
		if n-1-i >= 0 {
			cur[i] = l.rates[n-1-i]
		}
		if n-4-i >= 0 {
			prev[i] = l.rates[n-4-i]
		}
	}
	switch {
	case n >= 6:
		in.ArrivalRate, in.Trend = RateAndTrend(cur, prev, 3*bin)
	case n > 0:
		in.ArrivalRate = l.rates[n-1] // too few windows for a median or a trend
	}
	return in
}

// Scaler computes every lane's signal from a broker, an optional ledger
// (for the fleet) and a Meter. It is safe for concurrent use.
type Scaler struct {
	// Broker is asked for each lane's stats on every call (required).
	Broker *broker.Broker
	// Lanes are the lanes reported, with their objectives and reserved
	// slots. Manual lanes are left out. Defaults to lanes.Defaults().
	Lanes []lanes.Lane
	// Ledger, when set and keeping a server registry, gives the current
	// fleet (Signal.Slots). Defaults to nil.
	Ledger ledger.Ledger
	// Meter accumulates rates and durations between calls. Defaults to a
	// Meter of its own.
	Meter *Meter
	// Policy is Compute's policy.
	Policy Policy
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time

	once sync.Once
}

func (s *Scaler) init() {
	s.once.Do(func() {
		if s.Lanes == nil {
			s.Lanes = lanes.Defaults()
		}
		if s.Meter == nil {
			s.Meter = &Meter{}
		}
		if s.Now == nil {
			s.Now = time.Now
		}
	})
}

// Signals samples every lane now and returns their signals, in lane
// order. A lane whose stats fail is an error: a scaler must not read a
// failure as "no work".
func (s *Scaler) Signals(ctx context.Context) ([]Signal, error) {
	s.init()
	if s.Broker == nil {
		return nil, broker.Invalidf("scaling: no broker")
	}
	fleet := s.fleet(ctx)
	var out []Signal
	for _, l := range s.Lanes {
		if l.Manual {
			continue
		}
		st, err := s.Broker.Stats(ctx, l.Name)
		if err != nil {
			return nil, err
		}
		s.Meter.Sample(st, s.Now())
		in := s.Meter.Input(l.Name)
		in.Objective, in.Reserved, in.Slots = l.WaitObjective, l.Reserved, fleet[l.Name]
		out = append(out, Compute(in, s.Policy))
	}
	return out, nil
}

// Signal returns one lane's signal; an unknown lane is a broker.ErrInvalid
// error.
func (s *Scaler) Signal(ctx context.Context, lane string) (Signal, error) {
	ss, err := s.Signals(ctx)
	if err != nil {
		return Signal{}, err
	}
	for _, sg := range ss {
		if sg.Lane == lane {
			return sg, nil
		}
	}
	return Signal{}, broker.Invalidf("scaling: lane %q is not one of the scaled lanes", lane)
}

// fleet is the live slots serving each lane, from the server registry
// (none without one: Slots is then 0, unknown).
func (s *Scaler) fleet(ctx context.Context) map[string]int {
	out := map[string]int{}
	reg := ledger.ServersOf(s.Ledger)
	if reg == nil {
		return out
	}
	rs, err := reg.ListServers(ctx)
	if err != nil {
		return out
	}
	now := time.Now()
	for _, r := range rs {
		if r.Gone(now) {
			continue
		}
		for _, l := range r.Lanes {
			out[l] += r.Slots
		}
	}
	return out
}
