package switchyard

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/lanes"
)

// Cron enqueues tasks on cron schedules, exactly one task per tick however
// many processes run the same schedules.
//
// # Exactly once per tick
//
// Every process that runs a Cron computes the same ticks (the schedule's
// times, in one time zone) and enqueues each tick's task with the
// idempotency key
//
//	cron/<name>/<tick time in UTC, RFC 3339>     e.g. cron/nightly-report/2026-11-29T02:00:00Z
//
// (TickKey). The first Enqueue of a tick creates the task; every other
// process's Enqueue of the same tick is a duplicate and is dropped. That
// holds across processes when the deduplication is shared: a Client with a
// ledger (ClientConfig.Ledger, which deduplicates keys until the task is
// pruned), or a broker that deduplicates natively (the embedded broker,
// SQS FIFO) or through a shared broker.Options.Dedup store (the ledger).
// broker.NewMemoryDedup, the default for brokers without native
// deduplication, covers one process only. (With a ledger on a broker that
// deduplicates through Options.Dedup, a tick enqueued by two processes at
// once may reach the broker twice under one task ID: Client.Enqueue
// re-publishes a still-queued task it finds by key, in case its creator
// died before publishing. The ledger still holds one task, and a Server
// with the ledger runs it once.) Processes must agree on each
// schedule's name, spec, time zone (CronOpts.Location), args and tenant
// (keys are scoped by tenant); their clocks may differ by less than the
// interval between ticks.
//
// # Specs
//
// Specs are read by github.com/robfig/cron/v3's parser (its runner is not
// used): five fields (minute hour day-of-month month day-of-week), an
// optional leading seconds field (six fields), descriptors such as
// @hourly, @daily, @weekly, and a CRON_TZ=Zone prefix that overrides
// CronOpts.Location for one spec. @every is refused: its ticks count from
// when each process started, so processes would not agree on them.
//
// # Missed ticks (catch-up)
//
// Start (and Add after Start) looks back CronOpts.CatchUp (1 h by default)
// and enqueues the ticks it finds there: a tick missed while no process
// ran is enqueued when one starts, and ticks another process already
// enqueued are dropped as duplicates. The same applies when the loop
// itself falls behind (a suspended process, a clock jump): every tick since
// the last one handled is enqueued, but never one older than the catch-up
// window. Either way at most CronOpts.MaxCatchUp ticks per schedule (10 by
// default), the most recent, are enqueued at once; the older ones are
// counted in CronStats.Skipped and logged. A schedule added for the first
// time also gets the ticks of the window: set CatchUp negative for no
// look-back at Start (the loop's own lag is then still caught up, within
// one hour). The window must be shorter than how long the deduplication
// remembers a key (the ledger: until Prune removes the task; the embedded
// broker: 24 h), or an old tick could be enqueued twice.
//
// # Tasks
//
// A tick's task is enqueued with the options given to Add, plus the key,
// the lane "scheduled" unless the options or the args name another, and
// metadata cron=<name> and cron_tick=<tick, RFC 3339>. A failed Enqueue is
// retried with backoff (1 s doubling to 1 min) until it succeeds or the
// tick leaves the catch-up window; ticks of other schedules go on.
//
// # Use
//
//	c, _ := switchyard.NewCron(client, nil) // client has a ledger
//	c.Add("nightly-report", "0 2 * * *", ReportArgs{}, &switchyard.EnqueueOpts{Lane: "batch"})
//	c.Add("heartbeat", "*/10 * * * * *", PingArgs{}, nil) // every 10 s, lane scheduled
//	c.Start(ctx)
//	defer c.Stop()
//
// Tests inject CronOpts.Clock to run simulated time (see cron_test.go).
type Cron struct {
	client     *Client
	clock      Clock
	loc        *time.Location
	catchUp    time.Duration // look-back at Start; ≤ 0: none
	window     time.Duration // the loop's catch-up window
	maxCatchUp int
	timeout    time.Duration
	logger     *slog.Logger

	mu      sync.Mutex
	entries map[string]*cronEntry
	started bool
	stopped bool
	changed chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}

	enqueued, duplicates, failed, skipped atomic.Int64
}

type cronEntry struct {
	name  string
	spec  string
	sched cron.Schedule
	args  TaskArgs
	opts  EnqueueOpts
	// last: every tick at or before it has been handled. Set by Start
	// (or by Add after Start); then only the loop reads and writes it.
	last time.Time
}

// Clock is Cron's time source; tests inject a simulated one.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// At returns a channel that receives once the clock reads t or later
	// (at once if it already does). The channel need not be drained.
	At(t time.Time) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
func (systemClock) At(t time.Time) <-chan time.Time {
	return time.After(time.Until(t))
}

// SystemClock is the real clock, the default.
var SystemClock Clock = systemClock{}

// CronOpts configure a Cron. A nil *CronOpts means every default.
type CronOpts struct {
	// Clock defaults to SystemClock.
	Clock Clock
	// Location is the time zone specs are read in (a spec's CRON_TZ=
	// prefix overrides it). Every process running the same schedules must
	// use the same. Defaults to UTC.
	Location *time.Location
	// CatchUp is how far back Start (and Add after Start) looks for missed
	// ticks, and the oldest tick the loop still enqueues after falling
	// behind. Defaults to 1 h. Negative: no look-back at Start (the loop's
	// lag is caught up within 1 h).
	CatchUp time.Duration
	// MaxCatchUp is the most ticks per schedule enqueued at once (the most
	// recent ones). Defaults to 10.
	MaxCatchUp int
	// EnqueueTimeout bounds one Enqueue. Defaults to 30 s.
	EnqueueTimeout time.Duration
	// Logger receives failures and skipped ticks. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

const defaultCatchUp = time.Hour

// CronStats counts what a Cron did since NewCron.
type CronStats struct {
	// Enqueued counts ticks whose Enqueue reported a new task.
	Enqueued int64
	// Duplicates counts ticks whose Enqueue reported a duplicate: already
	// enqueued by another process or before a restart, and dropped.
	// Enqueued + Duplicates is the number of ticks handled. (With a
	// ledger, when two processes enqueue a tick at the same moment, both
	// may see Duplicate: Client.Enqueue re-publishes a still-queued task
	// for the one that found it, and if that re-publish reaches the
	// broker first, the creator's own publish is reported as a
	// duplicate. The task still exists exactly once.)
	Duplicates int64
	// Failed counts failed Enqueue calls (each is retried).
	Failed int64
	// Skipped counts missed ticks beyond MaxCatchUp, never enqueued.
	Skipped int64
}

// cronParser reads 5-field specs, 6 with seconds first, and descriptors.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// NewCron returns a Cron enqueuing through client. opts may be nil.
func NewCron(client *Client, opts *CronOpts) (*Cron, error) {
	if client == nil {
		return nil, broker.Invalidf("switchyard: cron: nil client")
	}
	var o CronOpts
	if opts != nil {
		o = *opts
	}
	if o.MaxCatchUp < 0 {
		return nil, broker.Invalidf("switchyard: cron: MaxCatchUp must not be negative, got %d", o.MaxCatchUp)
	}
	if o.EnqueueTimeout < 0 {
		return nil, broker.Invalidf("switchyard: cron: EnqueueTimeout must not be negative, got %v", o.EnqueueTimeout)
	}
	c := &Cron{
		client: client, clock: o.Clock, loc: o.Location, catchUp: o.CatchUp, maxCatchUp: o.MaxCatchUp,
		timeout: o.EnqueueTimeout, logger: o.Logger,
		entries: map[string]*cronEntry{},
		changed: make(chan struct{}, 1),
	}
	if c.clock == nil {
		c.clock = SystemClock
	}
	if c.loc == nil {
		c.loc = time.UTC
	}
	if c.catchUp == 0 {
		c.catchUp = defaultCatchUp
	}
	c.window = c.catchUp
	if c.catchUp < 0 {
		c.window = defaultCatchUp
	}
	if c.maxCatchUp == 0 {
		c.maxCatchUp = 10
	}
	if c.timeout == 0 {
		c.timeout = 30 * time.Second
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return c, nil
}

// parseCronSpec parses spec as Cron does.
func parseCronSpec(spec string) (sched cron.Schedule, err error) {
	spec = strings.TrimSpace(spec)
	if (strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=")) && !strings.Contains(spec, " ") {
		return nil, broker.Invalidf("switchyard: cron spec %q has a time zone but no schedule", spec)
	}
	defer func() {
		if r := recover(); r != nil { // the parser must not take the process down
			sched, err = nil, broker.Invalidf("switchyard: cron spec %q: %v", spec, r)
		}
	}()
	s, err := cronParser.Parse(spec)
	if err != nil {
		return nil, broker.Invalidf("switchyard: cron spec %q: %v", spec, err)
	}
	if _, ok := s.(cron.ConstantDelaySchedule); ok {
		return nil, broker.Invalidf("switchyard: cron spec %q: @every counts from each process's start, so processes would not agree on ticks; use a cron expression", spec)
	}
	return s, nil
}

// TickKey is the idempotency key of schedule name's task for tick.
func TickKey(name string, tick time.Time) string {
	return "cron/" + name + "/" + tick.UTC().Format(time.RFC3339)
}

// Add schedules args to be enqueued with opts (which may be nil) on every
// tick of spec. name identifies the schedule in idempotency keys: the same
// schedule must have the same name in every process. opts must not set
// IdempotencyKey (each tick gets its own) nor RunAt (Delay is allowed).
// Add may be called before or after Start.
func (c *Cron) Add(name, spec string, args TaskArgs, opts *EnqueueOpts) error {
	if err := broker.ValidateName("cron schedule name", name); err != nil {
		return err
	}
	if args == nil {
		return broker.Invalidf("switchyard: cron %s: nil task args", name)
	}
	sched, err := parseCronSpec(spec)
	if err != nil {
		return err
	}
	var o EnqueueOpts
	if opts != nil {
		o = *opts
	}
	if o.IdempotencyKey != "" {
		return broker.Invalidf("switchyard: cron %s: opts.IdempotencyKey must be empty (each tick gets cron/<name>/<tick>)", name)
	}
	if !o.RunAt.IsZero() {
		return broker.Invalidf("switchyard: cron %s: opts.RunAt must be zero (use Delay to delay each tick's task)", name)
	}
	lane := o.Lane
	if a, ok := args.(ArgsWithOpts); ok && lane == "" {
		lane = a.EnqueueOpts().Lane
	}
	if lane == "" {
		o.Lane = lanes.Scheduled
	}
	o.Metadata = copyMeta(o.Metadata)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return broker.Invalidf("switchyard: cron %s: Add after Stop", name)
	}
	if _, dup := c.entries[name]; dup {
		return broker.Invalidf("switchyard: cron schedule %q added twice", name)
	}
	e := &cronEntry{name: name, spec: spec, sched: sched, args: args, opts: o}
	if c.started {
		e.last = c.startFrom()
	}
	c.entries[name] = e
	select {
	case c.changed <- struct{}{}:
	default:
	}
	return nil
}

func copyMeta(m map[string]string) map[string]string {
	c := make(map[string]string, len(m)+2)
	for k, v := range m {
		c[k] = v
	}
	return c
}

// Start runs the schedules until Stop or until ctx ends. It returns at
// once.
func (c *Cron) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return broker.Invalidf("switchyard: cron started twice")
	}
	c.started = true
	from := c.startFrom()
	for _, e := range c.entries {
		e.last = from
	}
	ctx, c.cancel = context.WithCancel(ctx)
	c.done = make(chan struct{})
	go c.loop(ctx)
	return nil
}

// startFrom is where a schedule's ticks start when it begins to run: the
// ticks after it are enqueued.
func (c *Cron) startFrom() time.Time {
	now := c.clock.Now()
	if c.catchUp > 0 {
		return now.Add(-c.catchUp)
	}
	return now
}

// Stop stops the loop and waits for it to return (an Enqueue in progress
// is cancelled). It is safe to call twice, and before Start.
func (c *Cron) Stop() {
	c.mu.Lock()
	c.stopped = true
	cancel, done := c.cancel, c.done
	c.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// Stats returns the counters.
func (c *Cron) Stats() CronStats {
	return CronStats{Enqueued: c.enqueued.Load(), Duplicates: c.duplicates.Load(), Failed: c.failed.Load(), Skipped: c.skipped.Load()}
}

func (c *Cron) loop(ctx context.Context) {
	defer close(c.done)
	backoff := time.Second
	for {
		now := c.clock.Now()
		next, failed := c.runDue(ctx, now)
		if ctx.Err() != nil {
			return
		}
		var wake <-chan time.Time
		switch {
		case failed:
			wake = c.clock.At(now.Add(backoff))
			backoff = min(2*backoff, time.Minute)
		case !next.IsZero():
			backoff = time.Second
			wake = c.clock.At(next)
		}
		select {
		case <-ctx.Done():
			return
		case <-c.changed:
		case <-wake: // nil when no schedule has a next tick
		}
	}
}

// runDue enqueues every schedule's due ticks and returns the earliest next
// tick, and whether an Enqueue failed.
func (c *Cron) runDue(ctx context.Context, now time.Time) (next time.Time, failed bool) {
	c.mu.Lock()
	entries := make([]*cronEntry, 0, len(c.entries))
	for _, e := range c.entries {
		entries = append(entries, e)
	}
	c.mu.Unlock()
	slices.SortFunc(entries, func(a, b *cronEntry) int { return strings.Compare(a.name, b.name) })
	for _, e := range entries {
		if ctx.Err() != nil {
			return next, failed
		}
		if !c.runEntry(ctx, e, now) {
			failed = true
		}
		if n := e.sched.Next(e.last.In(c.loc)); !n.IsZero() && (next.IsZero() || n.Before(next)) {
			next = n
		}
	}
	return next, failed
}

// runEntry enqueues e's ticks in (e.last, now], at most maxCatchUp of them
// and none older than the window; false if an Enqueue failed.
func (c *Cron) runEntry(ctx context.Context, e *cronEntry, now time.Time) bool {
	from := e.last
	if floor := now.Add(-c.window); from.Before(floor) {
		from = floor
	}
	var due []time.Time
	skipped := 0
	for t := e.sched.Next(from.In(c.loc)); !t.IsZero() && !t.After(now); t = e.sched.Next(t) {
		if len(due) == c.maxCatchUp {
			due = due[1:]
			skipped++
		}
		due = append(due, t)
	}
	if skipped > 0 {
		c.skipped.Add(int64(skipped))
		c.logger.Warn("switchyard: cron: missed ticks beyond MaxCatchUp are not enqueued",
			"schedule", e.name, "skipped", skipped, "enqueuing", len(due), "from", due[0].UTC().Format(time.RFC3339))
	}
	for _, tick := range due {
		if err := c.enqueue(ctx, e, tick); err != nil {
			if ctx.Err() != nil {
				return true
			}
			c.failed.Add(1)
			c.logger.Warn("switchyard: cron: enqueue failed; retrying", "schedule", e.name, "tick", tick.UTC().Format(time.RFC3339), "error", err)
			e.last = tick.Add(-time.Nanosecond)
			return false
		}
		e.last = tick
	}
	if now.After(e.last) {
		e.last = now
	}
	return true
}

func (c *Cron) enqueue(ctx context.Context, e *cronEntry, tick time.Time) error {
	o := e.opts
	o.IdempotencyKey = TickKey(e.name, tick)
	o.Metadata = copyMeta(e.opts.Metadata)
	o.Metadata["cron"] = e.name
	o.Metadata["cron_tick"] = tick.UTC().Format(time.RFC3339)
	ectx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	r, err := c.client.Enqueue(ectx, e.args, &o)
	if err != nil {
		return fmt.Errorf("switchyard: cron %s tick %s: %w", e.name, tick.UTC().Format(time.RFC3339), err)
	}
	if r.Duplicate {
		c.duplicates.Add(1)
	} else {
		c.enqueued.Add(1)
	}
	return nil
}
