package lanesbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard"
	_ "github.com/switchyard-dev/switchyard/adapters/all" // every adapter's URL scheme
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/lanes"
)

// Tenants of S4.
const (
	NoisyTenant = "noisy"
	QuietTenant = "quiet"
)

// Scenario is one shape of load.
type Scenario struct {
	// Name labels the scenario in reports.
	Name string
	// BatchTasks are queued in the batch lane before the window starts,
	// each sleeping BatchDuration. With QuietTasks > 0 they belong to
	// NoisyTenant.
	BatchTasks    int
	BatchDuration time.Duration
	// InteractiveRate tasks per second arrive in the interactive lane,
	// evenly spaced, throughout the window, each sleeping
	// InteractiveDuration. 0: none.
	InteractiveRate     float64
	InteractiveDuration time.Duration
	// QuietTasks, when > 0, are queued in the batch lane for QuietTenant
	// right after the BatchTasks, with the same duration (S4).
	QuietTasks int
}

// The scenarios.
var (
	S1 = Scenario{Name: "S1 light", BatchTasks: 10000, BatchDuration: 20 * time.Millisecond, InteractiveRate: 20, InteractiveDuration: 20 * time.Millisecond}
	S2 = Scenario{Name: "S2 LLM-like", BatchTasks: 400, BatchDuration: time.Second, InteractiveRate: 5, InteractiveDuration: 50 * time.Millisecond}
	S3 = Scenario{Name: "S3 overload", BatchTasks: 10000, BatchDuration: 20 * time.Millisecond, InteractiveRate: 400, InteractiveDuration: 20 * time.Millisecond}
	S4 = Scenario{Name: "S4 tenants", BatchTasks: 10000, BatchDuration: 20 * time.Millisecond, QuietTasks: 100}
)

// Scenarios returns S1–S4.
func Scenarios() []Scenario { return []Scenario{S1, S2, S3, S4} }

func (s Scenario) validate() error {
	if s.BatchTasks < 0 || s.QuietTasks < 0 || s.InteractiveRate < 0 || s.BatchDuration < 0 || s.InteractiveDuration < 0 {
		return broker.Invalidf("lanesbench: scenario %q has a negative count, rate or duration", s.Name)
	}
	if s.InteractiveRate > 10000 {
		return broker.Invalidf("lanesbench: scenario %q: interactive rate %v/s is beyond what the generator paces", s.Name, s.InteractiveRate)
	}
	return nil
}

// BenchLanes returns the benchmark's lanes: lanes.Defaults with the
// scheduled lane reserving nothing, so 8 slots split into interactive's 2
// reserved and 6 shared.
func BenchLanes() []lanes.Lane {
	l := lanes.Defaults()
	for i := range l {
		if l[i].Name == lanes.Scheduled {
			l[i].Reserved = 0
		}
	}
	return l
}

// Options tune a run. A nil *Options means every default.
type Options struct {
	// Duration is the measured window of each phase. Defaults to 30s, the
	// issue's figure.
	Duration time.Duration
	// Slots is the server's handler slots. Defaults to 8.
	Slots int
	// Lanes defaults to BenchLanes().
	Lanes []lanes.Lane
	// Prefetch is the server's per-lane prefetch (scheduler.Config.Prefetch):
	// how many tasks of each lane the policy sees waiting. Defaults to the
	// scheduler's default (2).
	Prefetch int
	// Grace is how long after the window the runner waits for interactive
	// (and S4 quiet) tasks enqueued in it to start before measuring.
	// Defaults to 2s.
	Grace time.Duration
	// FairShards makes the batch lane fair between tenants with that many
	// shards (broker.Options.Fair). 0 means 8 in scenarios with two tenants
	// (S4) and a plain lane otherwise; a negative value means a plain lane
	// always (S4 then measures FIFO across tenants).
	FairShards int
	// Logger receives the runtime's logs. Defaults to discarding them.
	Logger *slog.Logger
}

func (o *Options) withDefaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Duration <= 0 {
		c.Duration = 30 * time.Second
	}
	if c.Slots <= 0 {
		c.Slots = 8
	}
	if c.Lanes == nil {
		c.Lanes = BenchLanes()
	}
	if c.Grace <= 0 {
		c.Grace = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// Waits summarises the start waits of one group of tasks.
type Waits struct {
	Enqueued int
	Started  int
	P50, P99 time.Duration
	Max      time.Duration
	// Censored reports that some tasks had not started when measured: they
	// count with the wait they had then, so the figures are lower bounds.
	Censored bool
}

// Phase is one run of a scenario: with its backlog or the idle baseline.
type Phase struct {
	// Interactive are the interactive lane's waits.
	Interactive Waits
	// Quiet are S4's quiet tenant's waits.
	Quiet Waits
	// BatchQueued is the backlog queued before the window (S4: both
	// tenants).
	BatchQueued int
	// BatchStarted counts batch tasks started within the window.
	BatchStarted int
	// BatchLongestGap is the longest time within the window without a
	// batch start while batch work waited.
	BatchLongestGap time.Duration
	// BatchShare is the slot-time batch handlers held in the window over
	// Slots × window.
	BatchShare float64
	// InteractiveShare is the same for the interactive lane.
	InteractiveShare float64
	// Preload is how long publishing the backlog took.
	Preload time.Duration
}

// Report is one scenario's figures.
type Report struct {
	Scenario Scenario
	// Broker is the broker URL with credentials redacted, or "embedded
	// (temp file)".
	Broker   string
	Duration time.Duration
	Slots    int
	Load     Phase
	Idle     Phase
}

// InteractiveRatio is the load phase's interactive p99 over the idle
// baseline's (0 when either is missing).
func (r Report) InteractiveRatio() float64 {
	return ratio(r.Load.Interactive.P99, r.Idle.Interactive.P99)
}

// QuietRatio is S4's quiet tenant p99 over its idle baseline.
func (r Report) QuietRatio() float64 { return ratio(r.Load.Quiet.P99, r.Idle.Quiet.P99) }

func ratio(a, b time.Duration) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// work is the benchmark task's arguments.
type work struct {
	Enq int64         `json:"e"` // enqueue time, Unix nanoseconds
	Dur time.Duration `json:"d"` // how long the handler sleeps
}

// Kind implements switchyard.TaskArgs.
func (work) Kind() string { return "lanesbench.sleep" }

// Task groups.
const (
	gInteractive = iota
	gBatch
	gQuiet
	nGroups
)

type record struct {
	group      int
	enq, start time.Time
	end        time.Time // zero while running
}

type recorder struct {
	mu   sync.Mutex
	recs []record
}

func (r *recorder) started(g int, enq, start time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, record{group: g, enq: enq, start: start})
	return len(r.recs) - 1
}

func (r *recorder) ended(i int, t time.Time) {
	r.mu.Lock()
	r.recs[i].end = t
	r.mu.Unlock()
}

func (r *recorder) snapshot() []record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.recs)
}

func (r *recorder) count(g int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, x := range r.recs {
		if x.group == g {
			n++
		}
	}
	return n
}

// Run runs scenario s on brokerURL ("" for the embedded broker in a fresh
// temporary file per phase): the idle baseline, then the load phase.
func Run(ctx context.Context, brokerURL string, s Scenario, opts *Options) (Report, error) {
	o := opts.withDefaults()
	if err := s.validate(); err != nil {
		return Report{}, err
	}
	if err := lanes.Validate(o.Slots, o.Lanes); err != nil {
		return Report{}, err
	}
	rep := Report{Scenario: s, Broker: "embedded (temp file)", Duration: o.Duration, Slots: o.Slots}
	if brokerURL != "" {
		u, err := url.Parse(brokerURL)
		if err != nil {
			return Report{}, broker.Invalidf("lanesbench: broker URL does not parse")
		}
		rep.Broker = broker.Redact(u)
	}
	var err error
	if rep.Idle, err = runPhase(ctx, brokerURL, s, o, false); err != nil {
		return rep, fmt.Errorf("lanesbench: %s idle: %w", s.Name, err)
	}
	if rep.Load, err = runPhase(ctx, brokerURL, s, o, true); err != nil {
		return rep, fmt.Errorf("lanesbench: %s load: %w", s.Name, err)
	}
	return rep, nil
}

// phaseURL returns the URL for one phase: a fresh embedded file, or
// brokerURL with a fresh namespace. cleanup removes what it created.
func phaseURL(brokerURL string) (string, func(), error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	ns := "lanesbench" + hex.EncodeToString(b[:])
	if brokerURL == "" {
		dir, err := os.MkdirTemp("", "switchyard-lanesbench-")
		if err != nil {
			return "", nil, err
		}
		return "embedded://" + filepath.Join(dir, "queue.db"), func() { _ = os.RemoveAll(dir) }, nil
	}
	u, err := url.Parse(brokerURL)
	if err != nil {
		return "", nil, broker.Invalidf("lanesbench: broker URL does not parse")
	}
	q := u.Query()
	q.Set("namespace", ns)
	u.RawQuery = q.Encode()
	return u.String(), func() {}, nil
}

func runPhase(ctx context.Context, brokerURL string, s Scenario, o Options, withBacklog bool) (Phase, error) {
	var ph Phase
	u, cleanup, err := phaseURL(brokerURL)
	if err != nil {
		return ph, err
	}
	defer cleanup()
	bo := &broker.Options{Logger: o.Logger}
	if n := o.FairShards; n > 1 || n == 0 && s.QuietTasks > 0 {
		if n == 0 {
			n = 8
		}
		bo.Fair = map[string]int{lanes.Batch: n}
	}
	b, err := broker.Open(ctx, u, bo)
	if err != nil {
		return ph, err
	}
	defer b.Close()
	client, err := switchyard.NewClient(b, nil)
	if err != nil {
		return ph, err
	}
	srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{Slots: o.Slots, Lanes: o.Lanes, Prefetch: o.Prefetch, Logger: o.Logger})
	if err != nil {
		return ph, err
	}
	rec := &recorder{}
	err = switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[work]) error {
		start := time.Now()
		g := gBatch
		switch {
		case t.Lane == lanes.Interactive:
			g = gInteractive
		case t.Tenant == QuietTenant:
			g = gQuiet
		}
		i := rec.started(g, time.Unix(0, t.Args.Enq), start)
		defer func() { rec.ended(i, time.Now()) }()
		timer := time.NewTimer(t.Args.Dur)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
		}
		return nil
	}, nil)
	if err != nil {
		return ph, err
	}

	// The backlog, queued before the server starts.
	pstart := time.Now()
	if withBacklog {
		tenant := ""
		if s.QuietTasks > 0 {
			tenant = NoisyTenant
		}
		if _, err := preload(ctx, b, s.BatchTasks, s.BatchDuration, tenant); err != nil {
			return ph, err
		}
		ph.BatchQueued = s.BatchTasks
	}
	quietEnq, err := preload(ctx, b, s.QuietTasks, s.BatchDuration, QuietTenant)
	if err != nil {
		return ph, err
	}
	ph.BatchQueued += s.QuietTasks
	ph.Preload = time.Since(pstart)

	if err := srv.Start(ctx); err != nil {
		return ph, err
	}
	stopped := false
	defer func() {
		if !stopped {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			_ = srv.StopAndCancel(sctx)
			cancel()
		}
	}()
	t0 := time.Now()
	t1 := t0.Add(o.Duration)

	// Interactive arrivals: arrival i at t0 + i/rate, spread over a few
	// enqueuers so a slow publish does not delay the next arrival; those
	// that cannot be made before the window ends are dropped (Waits.Enqueued
	// counts the ones made).
	var interEnq []time.Time
	var genErr error
	if s.InteractiveRate > 0 {
		interval := time.Duration(float64(time.Second) / s.InteractiveRate)
		n := int(o.Duration / interval)
		const workers = 4
		var wg sync.WaitGroup
		var mu sync.Mutex
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []time.Time
				for i := w; i < n; i += workers {
					at := t0.Add(time.Duration(i) * interval)
					if d := time.Until(at); d > 0 {
						select {
						case <-ctx.Done():
						case <-time.After(d):
						}
					}
					now := time.Now()
					if ctx.Err() != nil || !now.Before(t1) {
						break // arrivals the generator could not make in the window are dropped
					}
					if _, err := client.Enqueue(ctx, work{Enq: now.UnixNano(), Dur: s.InteractiveDuration}, &switchyard.EnqueueOpts{Lane: lanes.Interactive}); err != nil {
						mu.Lock()
						if genErr == nil {
							genErr = err
						}
						mu.Unlock()
						break
					}
					mine = append(mine, now)
				}
				mu.Lock()
				interEnq = append(interEnq, mine...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		if genErr != nil {
			return ph, genErr
		}
	}
	if d := time.Until(t1); d > 0 {
		select {
		case <-ctx.Done():
			return ph, ctx.Err()
		case <-time.After(d):
		}
	}
	// Grace: let the window's interactive and quiet tasks start.
	deadline := time.Now().Add(o.Grace)
	for time.Now().Before(deadline) && (rec.count(gInteractive) < len(interEnq) || rec.count(gQuiet) < s.QuietTasks) {
		time.Sleep(10 * time.Millisecond)
	}
	measured := time.Now()
	recs := rec.snapshot()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	err = srv.StopAndCancel(sctx)
	cancel()
	stopped = true
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return ph, err
	}

	ph.Interactive = waits(recs, gInteractive, interEnq, measured)
	ph.Quiet = waits(recs, gQuiet, quietEnq, measured)
	ph.BatchStarted, ph.BatchLongestGap, ph.BatchShare = batchFigures(recs, ph.BatchQueued, t0, t1, o.Slots)
	ph.InteractiveShare = share(recs, func(g int) bool { return g == gInteractive }, t0, t1, o.Slots)
	return ph, nil
}

// preload publishes n batch tasks of dur for tenant in batches and
// returns their enqueue times.
func preload(ctx context.Context, b *broker.Broker, n int, dur time.Duration, tenant string) ([]time.Time, error) {
	const chunk = 500
	msgs := make([]*broker.Message, 0, chunk)
	var times []time.Time
	for sent := 0; sent < n; {
		msgs = msgs[:0]
		enq := time.Now()
		for i := 0; i < chunk && sent+i < n; i++ {
			body, err := json.Marshal(work{Enq: enq.UnixNano(), Dur: dur})
			if err != nil {
				return nil, err
			}
			times = append(times, enq)
			msgs = append(msgs, &broker.Message{Lane: lanes.Batch, Kind: work{}.Kind(), Body: body, Tenant: tenant})
		}
		rs, err := b.Publish(ctx, msgs...)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			if r.Err != nil {
				return nil, r.Err
			}
		}
		sent += len(msgs)
	}
	return times, nil
}

// waits summarises group g's waits. enq holds the enqueue times of every
// task of the group; those not started by `measured` count with the wait
// they had then, taking the latest enqueue times for them (a lower bound).
func waits(recs []record, g int, enq []time.Time, measured time.Time) Waits {
	w := Waits{Enqueued: len(enq)}
	var ds []time.Duration
	for _, r := range recs {
		if r.group == g {
			ds = append(ds, r.start.Sub(r.enq))
		}
	}
	w.Started = len(ds)
	if missing := len(enq) - w.Started; missing > 0 {
		w.Censored = true
		sorted := slices.Clone(enq)
		slices.SortFunc(sorted, func(a, b time.Time) int { return a.Compare(b) })
		for _, e := range sorted[len(sorted)-missing:] {
			ds = append(ds, max(0, measured.Sub(e)))
		}
	}
	if len(ds) == 0 {
		return w
	}
	slices.Sort(ds)
	w.P50 = Percentile(ds, 0.50)
	w.P99 = Percentile(ds, 0.99)
	w.Max = ds[len(ds)-1]
	return w
}

// Percentile returns the nearest-rank q-quantile (0 < q ≤ 1) of sorted ds;
// 0 for none.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

// batchFigures returns the batch starts within [t0, t1), the longest gap
// between them while batch work waited, and the batch share of slots.
func batchFigures(recs []record, queued int, t0, t1 time.Time, slots int) (started int, gap time.Duration, sh float64) {
	var starts []time.Time
	total := 0
	for _, r := range recs {
		if r.group == gInteractive {
			continue
		}
		total++
		if !r.start.Before(t0) && r.start.Before(t1) {
			starts = append(starts, r.start)
		}
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	started = len(starts)
	if queued > 0 {
		prev := t0
		for _, s := range starts {
			gap = max(gap, s.Sub(prev))
			prev = s
		}
		if total < queued { // backlog remained at the end of the window
			gap = max(gap, t1.Sub(prev))
		}
	}
	sh = share(recs, func(g int) bool { return g != gInteractive }, t0, t1, slots)
	return started, gap, sh
}

// share is the slot-time the groups selected held within [t0, t1) over
// slots × (t1 − t0). Tasks still running count until t1.
func share(recs []record, sel func(int) bool, t0, t1 time.Time, slots int) float64 {
	var held time.Duration
	for _, r := range recs {
		if !sel(r.group) {
			continue
		}
		start, end := r.start, r.end
		if end.IsZero() || end.After(t1) {
			end = t1
		}
		if start.Before(t0) {
			start = t0
		}
		if end.After(start) {
			held += end.Sub(start)
		}
	}
	return float64(held) / (float64(slots) * float64(t1.Sub(t0)))
}

// WriteTable prints reports as a table, one row per scenario.
func WriteTable(w io.Writer, reports []Report) error {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }
	mark := func(c bool) string {
		if c {
			return "≥"
		}
		return ""
	}
	_, err := fmt.Fprintf(w, "%-12s %-22s %-22s %-7s %-13s %-9s %-7s %-30s\n",
		"scenario", "interactive p50/p99", "idle p50/p99", "ratio", "batch started", "max gap", "share", "quiet p99 (idle, ratio)")
	if err != nil {
		return err
	}
	for _, r := range reports {
		l, i := r.Load, r.Idle
		inter, idle, rat := "–", "–", "–"
		if r.Scenario.InteractiveRate > 0 {
			inter = fmt.Sprintf("%s%s/%s%s", mark(l.Interactive.Censored), ms(l.Interactive.P50), mark(l.Interactive.Censored), ms(l.Interactive.P99))
			idle = fmt.Sprintf("%s/%s", ms(i.Interactive.P50), ms(i.Interactive.P99))
			rat = fmt.Sprintf("%.2f×", r.InteractiveRatio())
		}
		quiet := "–"
		if r.Scenario.QuietTasks > 0 {
			quiet = fmt.Sprintf("%s%s (%s, %.1f×) %d/%d started", mark(l.Quiet.Censored), ms(l.Quiet.P99), ms(i.Quiet.P99), r.QuietRatio(), l.Quiet.Started, l.Quiet.Enqueued)
		}
		if _, err := fmt.Fprintf(w, "%-12s %-22s %-22s %-7s %-13s %-9s %-7s %-30s\n", r.Scenario.Name, inter, idle, rat,
			fmt.Sprintf("%d/%d", l.BatchStarted, l.BatchQueued), ms(l.BatchLongestGap), fmt.Sprintf("%.3f", l.BatchShare), quiet); err != nil {
			return err
		}
	}
	return nil
}
