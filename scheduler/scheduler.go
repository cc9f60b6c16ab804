package scheduler

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/lanes"
	"github.com/switchyard-dev/switchyard/ledger"
)

// Scheduler is the worker runtime: it pulls tasks from every lane's queue,
// gives free slots to lanes by the lane policy, runs handlers with leases
// and heartbeats, applies the retry policy and dead-letters what cannot
// succeed. It knows nothing of which broker it runs on.
type Scheduler struct {
	b      *broker.Broker
	cfg    *Config
	policy *lanes.Policy

	mu       sync.Mutex
	handlers map[string]handlerEntry
	lanes    map[string]*laneState
	order    []string // lane names in policy order
	used     int      // slots in use
	running  []*task  // each at its task.slot
	started  bool
	stopping bool

	wake      chan struct{} // something changed: a delivery arrived, a slot freed
	idle      chan runItem  // workers waiting for their next task (workers.go)
	opTimeout time.Duration // opTimeout; tests shorten it
	fetchCtx  context.Context
	stopFetch context.CancelFunc
	// recvCtx is the receives' context. Stop does not cancel it with
	// fetchCtx: a receive already sent may have taken messages from the
	// broker (SQS leases them before its response is read), and a
	// cancelled one drops them until their leases end. Stop lets receives
	// in flight finish (each is bounded by Config.PollWait) and gives back
	// what they bring; it cancels them only after receiveGrace more, or
	// when its own context ends.
	recvCtx  context.Context
	stopRecv context.CancelFunc
	runCtx   context.Context
	fetchWG  sync.WaitGroup
	runWG    sync.WaitGroup
	loopWG   sync.WaitGroup
	stopOnce sync.Once
	stopped  chan struct{}
	acks     *acker
	hist     history // per-lane, per-minute counts for ledger.History (history.go)
	// countHist: the ledger keeps a history, so hist is written somewhere;
	// without one, counting would only fill hist up to its bound.
	countHist bool
}

type handlerEntry struct {
	fn   HandlerFunc
	opts HandlerOpts
}

type laneState struct {
	def     lanes.Lane
	buf     []*task // received, not started
	running int     // slots in use
	paused  bool    // by Pause, in this process
	// ledgerPaused: paused through the ledger (ledger.LaneControls), as of
	// the last poll. The lane is paused while either is set.
	ledgerPaused bool
	more         chan struct{} // room in buf, or resumed

	// Recent task durations, for the policy's lending rule (LaneState.P90).
	durs    [durWindow]time.Duration
	scratch [durWindow]time.Duration // recordDuration's working copy
	ndurs   int                      // how many were recorded in all
	p90     time.Duration            // recomputed every durEvery completions
}

const (
	durWindow = 128
	durEvery  = 16
)

// recordDuration notes a finished task's duration; callers hold s.mu.
func (l *laneState) recordDuration(d time.Duration) {
	l.durs[l.ndurs%durWindow] = d
	l.ndurs++
	if l.ndurs%durEvery != 0 && l.ndurs > durEvery {
		return
	}
	n := min(l.ndurs, durWindow)
	if n < durEvery {
		l.p90 = 0 // too few to say: the lane does not borrow yet
		return
	}
	a := l.scratch[:n]
	copy(a, l.durs[:n])
	l.p90 = nthDuration(a, (n*9)/10)
}

// nthDuration returns the element that would be at index k were a sorted
// (a quickselect: a is reordered, not sorted).
func nthDuration(a []time.Duration, k int) time.Duration {
	lo, hi := 0, len(a)-1
	for lo < hi {
		// Median of three as the pivot: sorted input stays linear.
		m := lo + (hi-lo)/2
		if a[m] < a[lo] {
			a[m], a[lo] = a[lo], a[m]
		}
		if a[hi] < a[lo] {
			a[hi], a[lo] = a[lo], a[hi]
		}
		if a[hi] < a[m] {
			a[hi], a[m] = a[m], a[hi]
		}
		pivot := a[m]
		i, j := lo, hi
		for i <= j {
			for a[i] < pivot {
				i++
			}
			for a[j] > pivot {
				j--
			}
			if i <= j {
				a[i], a[j] = a[j], a[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return a[k] // between the halves: equal to the pivot
		}
	}
	return a[k]
}

// task is one delivery held by the scheduler, buffered or running.
type task struct {
	d       *broker.Delivery
	cost    int
	started time.Time
	cancel  context.CancelCauseFunc // set while running
	// leaseUntil is when the lease ends as far as this worker knows (Unix
	// nanoseconds; 0 when the broker gave no deadline): the receive's
	// deadline, pushed out by every successful extension. The heartbeat
	// writes it; dispatch reads it before starting a buffered task.
	leaseUntil atomic.Int64
	// run is the ledger attempt this worker runs (0 before BeginRun, or
	// without a ledger): while it is set the heartbeat renews the run's
	// ledger lease. ledgerUntil is that lease's end as far as this worker
	// knows (heartbeat goroutine only).
	run         atomic.Int64
	ledgerUntil time.Time
	// slot is t's index in Scheduler.running while it runs, else -1
	// (guarded by Scheduler.mu).
	slot int
	// rc is the handler's context, job and run state (run.go), filled in
	// by execute, which runs a task once.
	rc runCtx
}

// errLeaseLost is the cause given to a handler's context when its lease
// passed to another worker.
var errLeaseLost = errors.New("scheduler: lease lost")

// errShutdown is the cause given to a handler's context by StopAndCancel.
var errShutdown = errors.New("scheduler: shutting down")

// New returns a scheduler over b. Register handlers with Handle, then
// Start.
func New(b *broker.Broker, cfg *Config) (*Scheduler, error) {
	if b == nil {
		return nil, broker.Invalidf("scheduler: nil broker")
	}
	c := cfg.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	p, err := lanes.NewPolicy(c.Slots, c.Lanes)
	if err != nil {
		return nil, err
	}
	if c.Ledger != nil {
		// Ordering keys on a broker without native ordering follow the
		// ledger's sequencer, shared by every process of the ledger.
		b.AdoptSequencer(ledger.SequencerOf(c.Ledger))
	}
	s := &Scheduler{
		b: b, cfg: c, policy: p,
		handlers:  map[string]handlerEntry{},
		lanes:     map[string]*laneState{},
		wake:      make(chan struct{}, 1),
		idle:      make(chan runItem),
		opTimeout: opTimeout,
		stopped:   make(chan struct{}),
		countHist: ledger.HistoryOf(c.Ledger) != nil,
	}
	for _, l := range c.Lanes {
		s.lanes[l.Name] = &laneState{def: l, more: make(chan struct{}, 1)}
		s.order = append(s.order, l.Name)
	}
	return s, nil
}

// Handle registers fn for kind. It must be called before Start.
func (s *Scheduler) Handle(kind string, fn HandlerFunc, opts *HandlerOpts) error {
	if err := broker.ValidateName("kind", kind); err != nil {
		return err
	}
	if fn == nil {
		return broker.Invalidf("scheduler: nil handler for %s", kind)
	}
	var o HandlerOpts
	if opts != nil {
		o = *opts
	}
	if o.Cost <= 0 {
		o.Cost = 1
	}
	if o.Cost > s.cfg.Slots {
		return broker.Invalidf("scheduler: kind %s costs %d slots, more than the %d there are", kind, o.Cost, s.cfg.Slots)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return broker.Invalidf("scheduler: Handle(%s) after Start", kind)
	}
	if _, dup := s.handlers[kind]; dup {
		return broker.Invalidf("scheduler: kind %s registered twice", kind)
	}
	for i := len(s.cfg.Middleware) - 1; i >= 0; i-- {
		fn = s.cfg.Middleware[i](fn)
	}
	s.handlers[kind] = handlerEntry{fn: fn, opts: o}
	return nil
}

// Broker returns the broker the scheduler pulls from.
func (s *Scheduler) Broker() *broker.Broker { return s.b }

// Config returns the scheduler's effective configuration.
func (s *Scheduler) Config() Config { return *s.cfg }

// Start begins pulling and running tasks. It returns at once; ctx bounds
// nothing after Start returns (use Stop). With a ledger that implements
// ledger.LaneControls, Start first reads the lanes paused there (a failure
// is logged, not fatal), so a lane paused by an operator starts paused.
func (s *Scheduler) Start(ctx context.Context) error {
	lc := s.laneControls()
	if lc != nil {
		if err := s.pollControls(ctx, lc); err != nil {
			s.cfg.Logger.Warn("switchyard: reading lane pauses from the ledger failed; polling again every ControlInterval", "error", err)
		}
	}
	// Listening for cancellations before any task starts (cancel.go).
	cw := s.listenCancels(ctx)
	started := false
	defer func() {
		if !started {
			cw.stop()
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return broker.Invalidf("scheduler: started twice")
	}
	select {
	case <-s.stopped:
		return broker.Invalidf("scheduler: started after Stop")
	default:
	}
	if len(s.handlers) == 0 {
		return broker.Invalidf("scheduler: no handlers registered")
	}
	s.started = true
	s.fetchCtx, s.stopFetch = context.WithCancel(context.WithoutCancel(ctx))
	s.recvCtx, s.stopRecv = context.WithCancel(context.WithoutCancel(ctx))
	// Never cancelled as a whole (cancelAll cancels each running task):
	// a context without cancellation keeps each task's own context from
	// registering with it, a lock and a map write per task start and end.
	s.runCtx = context.WithoutCancel(ctx)
	for _, name := range s.order {
		l := s.lanes[name]
		if l.def.Manual {
			continue
		}
		s.fetchWG.Add(1)
		go s.fetch(l)
	}
	s.acks = newAcker(s)
	s.loopWG.Add(2)
	go s.dispatch()
	go s.heartbeat()
	if lc != nil {
		s.loopWG.Add(1)
		go s.controls(lc)
	}
	if cw != nil {
		s.loopWG.Add(1)
		go s.watchCancels(cw) // cancel.go
	}
	started = true
	if s.cfg.Ledger != nil && s.cfg.Retention > 0 {
		s.loopWG.Add(1)
		go s.prune()
	}
	s.loopWG.Add(1)
	go s.register(ledger.ServersOf(s.cfg.Ledger), s.cfg.Now()) // servers.go
	return nil
}

// Pause stops lane from getting new slots; its running tasks finish. It
// acts in this process only; a pause through the ledger
// (ledger.LaneControls) reaches every scheduler sharing it.
func (s *Scheduler) Pause(lane string) error { return s.setPaused(lane, true) }

// Resume undoes Pause. A lane also paused through the ledger stays paused
// until it is resumed there too.
func (s *Scheduler) Resume(lane string) error { return s.setPaused(lane, false) }

func (s *Scheduler) setPaused(lane string, p bool) error {
	s.mu.Lock()
	l := s.lanes[lane]
	if l == nil {
		s.mu.Unlock()
		return broker.Invalidf("scheduler: unknown lane %q", lane)
	}
	l.paused = p
	s.mu.Unlock()
	signal(l.more)
	s.poke()
	return nil
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (s *Scheduler) poke() { signal(s.wake) }

// fetch keeps lane's buffer topped up. It receives once the buffer is down
// to half of Config.Prefetch (the low-water mark), for as many as fit: under
// load a slot freed at a time would otherwise mean a receive of one message
// at a time. On a broker that caps a receive below that, full receives
// start more receivers beside this loop (fanout.go).
func (s *Scheduler) fetch(l *laneState) {
	defer s.fetchWG.Done()
	ctx := s.fetchCtx
	backoff := 100 * time.Millisecond
	lowWater := s.cfg.Prefetch / 2
	caps := s.b.Capabilities()
	f := &fetchState{batch: caps.MaxBatch, fan: fanOutFor(s.cfg.Prefetch, caps)}
	var pacer receivePacer // see pace.go
	var wait *time.Timer   // the fallback of the wait for room, reused
	for ctx.Err() == nil {
		s.mu.Lock()
		room := s.cfg.Prefetch - len(l.buf) - f.reserved
		low := len(l.buf) <= lowWater
		paused := l.isPaused()
		ask := 0
		if room > 0 && low && !paused && !s.stopping {
			ask = f.ask(room)
			f.reserved += ask
		}
		s.mu.Unlock()
		if ask == 0 {
			if wait == nil {
				wait = time.NewTimer(time.Second)
			} else {
				wait.Reset(time.Second)
			}
			select {
			case <-ctx.Done():
				wait.Stop()
				return
			case <-l.more:
				wait.Stop()
			case <-wait.C:
			}
			continue
		}
		if d := pacer.pause(ask); d > 0 {
			if wait == nil {
				wait = time.NewTimer(d)
			} else {
				wait.Reset(d)
			}
			select {
			case <-ctx.Done():
				wait.Stop()
				s.mu.Lock()
				f.reserved -= ask
				s.mu.Unlock()
				return
			case <-wait.C:
			}
		}
		var more bool
		r, ok := s.receive(l, f, ask, func(r receipt) {
			if more = s.spawn(l, f, ask, r.ds, r.rtt, r.at); more {
				s.fetchWG.Add(1) // Stop waits in fetchWG.Wait, after this loop's own count
			}
		})
		pacer.received(r.at, len(r.ds), ask, r.err)
		if !ok {
			return
		}
		if more {
			go s.receiveMore(l, f)
		}
		if r.err != nil {
			s.cfg.Logger.Warn("switchyard: receive failed", "lane", l.def.Name, "error", r.err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
	}
}

// receipt is one receive's outcome: what came, or its error; how long it
// took and when it returned.
type receipt struct {
	ds  []*broker.Delivery
	err error
	rtt time.Duration
	at  time.Time
}

// receive is one receive of up to ask messages for lane l, which the
// caller has reserved in f: it buffers what comes and starts what the free
// slots take (here rather than by waking the dispatch loop: one goroutine
// wake-up less a receive). then, run under s.mu once the buffer holds the
// receive's messages, is where the fetch loop and the extra receivers
// decide on the next receive (fanout.go). Once the scheduler is stopping
// receive gives what came back at once, unstarted and without spending an
// attempt, and reports false: the caller ends. The receive runs under
// s.recvCtx, which Stop does not cancel at once (see Scheduler.recvCtx).
func (s *Scheduler) receive(l *laneState, f *fetchState, ask int, then func(receipt)) (receipt, bool) {
	sent := time.Now()
	ds, err := s.b.Receive(s.recvCtx, broker.ReceiveRequest{Lane: l.def.Name, Max: ask, Lease: s.cfg.Lease, Wait: s.cfg.PollWait})
	now := time.Now()
	r := receipt{ds: ds, err: err, rtt: now.Sub(sent), at: now}
	s.mu.Lock()
	f.reserved -= ask
	if s.stopping {
		s.mu.Unlock()
		s.returnUnstarted(ds)
		return r, false
	}
	for _, d := range ds {
		l.buf = append(l.buf, newTask(d, s.costOf(d.Kind)))
	}
	then(r)
	s.mu.Unlock()
	s.startReady()
	return r, true
}

// startReady starts buffered tasks while the policy gives them free slots.
func (s *Scheduler) startReady() {
	for {
		it, ok := s.next(nil, nil)
		if !ok {
			return
		}
		s.startRun(it) // workers.go
	}
}

func (s *Scheduler) costOf(kind string) int {
	if h, ok := s.handlers[kind]; ok {
		return h.opts.Cost
	}
	return 1
}

// dispatch gives free slots to lanes by the policy when a lane is
// resumed, a slot is freed outside a worker (RunDelivery), or age
// promotion acts. A worker whose task ends takes the next one itself
// (finishedNext), and a fetch loop starts what its receive brought
// (startReady): neither wakes this loop.
func (s *Scheduler) dispatch() {
	defer s.loopWG.Done()
	tick := time.NewTicker(50 * time.Millisecond) // lets age promotion act without events
	defer tick.Stop()
	for {
		select {
		case <-s.fetchCtx.Done():
			return
		case <-s.wake:
		case <-tick.C:
		}
		s.startReady()
	}
}

// next gives a free slot to the lane the policy picks and takes that
// lane's oldest buffered task, when there is one to start. With done set,
// it first releases the slots of done, a task of lane dl that ended, in
// the same critical section. Callers start the returned task.
func (s *Scheduler) next(dl *laneState, done *task) (runItem, bool) {
	var states [8]lanes.LaneState
	s.mu.Lock()
	if done != nil {
		dl.recordDuration(time.Since(done.started))
		dl.running -= done.cost
		s.used -= done.cost
		s.removeRunning(done)
	}
	for {
		if s.stopping {
			s.mu.Unlock()
			return runItem{}, false
		}
		st := states[:0]
		for _, name := range s.order {
			l := s.lanes[name]
			ls := lanes.LaneState{Name: name, Running: l.running, Waiting: len(l.buf) > 0, Paused: l.isPaused(), P90: l.p90}
			if len(l.buf) > 0 {
				h := l.buf[0].d
				ls.OldestReady = h.EnqueuedAt
				if h.RunAt.After(ls.OldestReady) {
					ls.OldestReady = h.RunAt
				}
				ls.Cost = l.buf[0].cost
			}
			st = append(st, ls)
		}
		name, ok := s.policy.Next(s.cfg.Now(), st)
		if !ok {
			s.mu.Unlock()
			return runItem{}, false
		}
		l := s.lanes[name]
		t := l.buf[0]
		l.buf[0] = nil
		l.buf = l.buf[1:]
		now := time.Now()
		if t.leaseEnded(now) {
			// Its lease ran out while it waited here (the extensions
			// kept failing): the broker may have handed it to another
			// worker, or to this one again. Never start it; its
			// redelivery runs instead, as after leaseLost.
			s.mu.Unlock()
			s.cfg.Logger.Warn("switchyard: lease ran out before the task started", "task", t.d.ID, "lane", t.d.Lane)
			s.observe(Event{Type: EventLeaseLost, TaskID: t.d.ID, Kind: t.d.Kind, Lane: t.d.Lane, Attempt: t.d.Attempt})
			s.mu.Lock()
			continue
		}
		l.running += t.cost
		s.used += t.cost
		ctx, cancel := context.WithCancelCause(s.runCtx)
		t.cancel = cancel
		t.started = now
		s.addRunning(t)
		s.runWG.Add(1)
		// Wake the lane's fetch loop only when it waits for this: the
		// buffer down to the low-water mark.
		low := len(l.buf) <= s.cfg.Prefetch/2
		s.mu.Unlock()
		if low {
			signal(l.more)
		}
		return runItem{ctx, l, t}, true
	}
}

// finished releases t's slots.
func (s *Scheduler) finished(l *laneState, t *task) {
	s.mu.Lock()
	l.recordDuration(time.Since(t.started))
	l.running -= t.cost
	s.used -= t.cost
	s.removeRunning(t)
	s.mu.Unlock()
	t.cancel(nil)
	s.runWG.Done()
	s.poke()
}

// finishedNext releases t's slots and takes the next task to start, if
// any, under one lock: the worker that ran t runs it, without waking the
// dispatch loop and handing it over. When there is none, nothing can
// start now with the slots freed: the dispatch loop need not look again
// (a delivery, a resume or the promotion tick will make it).
func (s *Scheduler) finishedNext(l *laneState, t *task) (runItem, bool) {
	it, ok := s.next(l, t)
	t.cancel(nil)
	s.runWG.Done()
	return it, ok
}

// addRunning records t as running; callers hold s.mu.
func (s *Scheduler) addRunning(t *task) {
	t.slot = len(s.running)
	s.running = append(s.running, t)
}

// removeRunning records that t no longer runs; callers hold s.mu.
func (s *Scheduler) removeRunning(t *task) {
	if !s.isRunning(t) {
		return
	}
	last := len(s.running) - 1
	s.running[t.slot] = s.running[last]
	s.running[t.slot].slot = t.slot
	s.running[last] = nil
	s.running = s.running[:last]
	t.slot = -1
}

// isRunning reports whether t runs; callers hold s.mu.
func (s *Scheduler) isRunning(t *task) bool {
	return t.slot >= 0 && t.slot < len(s.running) && s.running[t.slot] == t
}

// newTask is a received delivery held by the scheduler.
func newTask(d *broker.Delivery, cost int) *task {
	t := &task{d: d, cost: cost, slot: -1}
	t.setLease(d.LeaseDeadline)
	return t
}

// setLease records that the lease ends at until (zero: unknown).
func (t *task) setLease(until time.Time) {
	switch {
	case until.IsZero():
		t.leaseUntil.Store(0)
	case until.Year() >= 2262: // beyond int64 nanoseconds: never ends here
		t.leaseUntil.Store(math.MaxInt64)
	default:
		t.leaseUntil.Store(until.UnixNano())
	}
}

// leaseEnded reports whether the lease is known to have ended by now.
func (t *task) leaseEnded(now time.Time) bool {
	u := t.leaseUntil.Load()
	return u != 0 && now.UnixNano() > u
}

// heartbeat extends the leases of every held delivery.
func (s *Scheduler) heartbeat() {
	defer s.loopWG.Done()
	t := time.NewTicker(s.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-s.stopped:
			return
		case <-t.C:
		}
		s.extendAll()
	}
}

func (s *Scheduler) extendAll() {
	s.mu.Lock()
	var held []*task
	for _, t := range s.running {
		held = append(held, t)
	}
	nrunning := len(held)
	for _, l := range s.lanes {
		held = append(held, l.buf...)
	}
	s.mu.Unlock()
	if len(held) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Heartbeat)
	defer cancel()
	s.extendBroker(ctx, held)
	if s.cfg.Ledger != nil {
		s.renewLedger(ctx, held[:nrunning])
	}
}

// extendBroker extends the broker leases of held, in one call when it can.
func (s *Scheduler) extendBroker(ctx context.Context, held []*task) {
	ds := make([]*broker.Delivery, len(held))
	for i, t := range held {
		ds[i] = t.d
	}
	until := time.Now().Add(s.cfg.Lease)
	if err := s.b.Extend(ctx, s.cfg.Lease, ds...); err == nil {
		for _, t := range held {
			t.setLease(until)
		}
		return
	}
	// Find out which leases are gone, one by one.
	for _, t := range held {
		until := time.Now().Add(s.cfg.Lease)
		err := s.b.Extend(ctx, s.cfg.Lease, t.d)
		switch {
		case err == nil:
			t.setLease(until)
		case errors.Is(err, broker.ErrLeaseLost):
			s.leaseLost(t)
		case t.leaseEnded(time.Now()):
			// Extensions kept failing until the lease ran out: another
			// worker may hold the task now. Stop rather than run on.
			s.cfg.Logger.Warn("switchyard: lease ran out while extensions failed", "task", t.d.ID, "lane", t.d.Lane, "error", err)
			s.leaseLost(t)
		default:
			s.observe(Event{Type: EventExtendFail, TaskID: t.d.ID, Kind: t.d.Kind, Lane: t.d.Lane, Attempt: t.d.Attempt, Err: err})
			s.cfg.Logger.Warn("switchyard: lease extension failed", "task", t.d.ID, "lane", t.d.Lane, "error", err)
		}
	}
}

// renewLedger renews the ledger leases of the running tasks' runs, in one
// write. A run's ledger lease is what keeps every other delivery of its
// task from starting (BeginRun takes a task over only once it passed), so
// it is renewed for as long as the handler runs in this process — even
// after the broker lease was lost and the handler was told to stop, until
// it returns. A run the ledger says is no longer ours is stopped.
func (s *Scheduler) renewLedger(ctx context.Context, running []*task) {
	now := time.Now()
	var (
		leases []ledger.Lease
		ts     []*task
	)
	for _, t := range running {
		if n := t.run.Load(); n > 0 {
			if t.ledgerUntil.IsZero() {
				t.ledgerUntil = t.started.Add(s.cfg.Lease)
			}
			leases = append(leases, ledger.Lease{ID: t.d.ID, Attempt: int(n)})
			ts = append(ts, t)
		}
	}
	if len(leases) == 0 {
		return
	}
	lost, err := s.cfg.Ledger.RenewLeases(ctx, leases, s.cfg.Lease)
	if err != nil {
		for _, t := range ts {
			if now.After(t.ledgerUntil) {
				// Our ledger lease has passed: another delivery may take
				// the task over. Stop rather than run on beside it.
				s.cfg.Logger.Warn("switchyard: ledger lease ran out while renewals failed", "task", t.d.ID, "error", err)
				t.run.Store(0)
				s.leaseLost(t)
			}
		}
		s.cfg.Logger.Warn("switchyard: renewing ledger leases failed", "tasks", len(ts), "error", err)
		return
	}
	gone := make(map[string]bool, len(lost))
	for _, id := range lost {
		gone[id] = true
	}
	for i, t := range ts {
		if gone[t.d.ID] {
			if t.run.Load() == 0 {
				continue // the handler returned meanwhile and its run ended
			}
			if s.cancelledInLedger(ctx, t.d.ID) {
				s.cancelRunning(t.d.ID) // its cancel note was missed (cancel.go)
				continue
			}
			s.cfg.Logger.Warn("switchyard: the ledger says another attempt or an operator holds the task; stopping", "task", t.d.ID, "attempt", leases[i].Attempt)
			t.run.Store(0)
			s.leaseLost(t)
			continue
		}
		t.ledgerUntil = now.Add(s.cfg.Lease)
	}
}

// prune applies Config.Retention to the ledger.
func (s *Scheduler) prune() {
	defer s.loopWG.Done()
	t := time.NewTicker(s.cfg.PruneEvery)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		n, err := s.cfg.Ledger.Prune(ctx, s.cfg.Now().Add(-s.cfg.Retention))
		cancel()
		if err != nil {
			s.cfg.Logger.Warn("switchyard: pruning the ledger failed", "error", err)
		} else if n > 0 {
			s.cfg.Logger.Info("switchyard: pruned finished tasks", "tasks", n, "retention", s.cfg.Retention)
		}
		select {
		case <-s.stopped:
			return
		case <-t.C:
		}
	}
}

// leaseLost cancels a running task whose lease passed to another worker,
// or drops a buffered one.
func (s *Scheduler) leaseLost(t *task) {
	s.mu.Lock()
	running := s.isRunning(t)
	if !running {
		for _, l := range s.lanes {
			for i, b := range l.buf {
				if b == t {
					l.buf = append(l.buf[:i], l.buf[i+1:]...)
					break
				}
			}
		}
	}
	s.mu.Unlock()
	s.observe(Event{Type: EventLeaseLost, TaskID: t.d.ID, Kind: t.d.Kind, Lane: t.d.Lane, Attempt: t.d.Attempt})
	if running && t.cancel != nil {
		t.cancel(errLeaseLost)
	}
}

func (s *Scheduler) observe(e Event) {
	switch e.Type {
	case EventSucceeded, EventRetried, EventDead:
		if !s.countHist {
			break
		}
		s.countEvent(e)
	}
	if s.cfg.Observer != nil {
		s.cfg.Observer(e)
	}
}

// countEvent counts a finished outcome for the ledger's history.
func (s *Scheduler) countEvent(e Event) {
	switch e.Type {
	case EventSucceeded:
		s.hist.count(s.cfg.Now(), e.Lane, true, false, false)
	case EventRetried:
		s.hist.count(s.cfg.Now(), e.Lane, true, true, false)
	case EventDead:
		s.hist.count(s.cfg.Now(), e.Lane, e.ran, e.ran, true)
	}
}

// Stopped is closed when the scheduler has stopped.
func (s *Scheduler) Stopped() <-chan struct{} { return s.stopped }

// Stop shuts down gracefully: it stops fetching, returns tasks received but
// not started (without spending an attempt), lets receives in flight end
// (each within Config.PollWait) and returns what they bring the same way,
// and waits for running tasks until ctx ends; tasks still running then
// are cancelled and returned the same way. Stop is safe to call twice.
func (s *Scheduler) Stop(ctx context.Context) error {
	return s.stop(ctx, false)
}

// StopAndCancel cancels running tasks at once, returns them and the
// unstarted ones without spending attempts, and waits for handlers to
// return (or ctx to end).
func (s *Scheduler) StopAndCancel(ctx context.Context) error {
	return s.stop(ctx, true)
}

func (s *Scheduler) stop(ctx context.Context, cancelNow bool) error {
	s.mu.Lock()
	if !s.started {
		// Never started: nothing to drain, but Stopped must still close.
		select {
		case <-s.stopped:
		default:
			close(s.stopped)
		}
		s.mu.Unlock()
		return nil
	}
	s.stopping = true
	var unstarted []*broker.Delivery
	for _, l := range s.lanes {
		for _, t := range l.buf {
			unstarted = append(unstarted, t.d)
		}
		l.buf = nil
	}
	s.mu.Unlock()
	s.stopOnce.Do(func() {
		s.stopFetch()
	})
	if cancelNow {
		s.cancelAll(errShutdown)
	}
	// Buffered tasks go back first, while receives in flight finish.
	s.returnUnstarted(unstarted)
	s.waitReceives(ctx)
	done := make(chan struct{})
	go func() { s.runWG.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		s.cancelAll(errShutdown)
		err = ctx.Err()
		// Handlers that ignore their context cannot be waited for forever;
		// give them a moment to observe the cancellation.
		select {
		case <-done:
			err = nil
		case <-time.After(5 * time.Second):
		}
	}
	s.acks.close()
	s.mu.Lock()
	select {
	case <-s.stopped:
	default:
		close(s.stopped)
	}
	s.mu.Unlock()
	s.loopWG.Wait()
	return err
}

// receiveGrace is how long Stop waits for the receives in flight beyond
// Config.PollWait, the longest a receive waits for messages, before it
// cancels them (what a cancelled receive had taken may then stay leased
// until its lease ends).
const receiveGrace = 5 * time.Second

// waitReceives waits for the fetch loops and receivers to end: each gives
// back what its receive in flight brings (Scheduler.receive). It cancels
// the receives after Config.PollWait and receiveGrace, or when ctx ends.
func (s *Scheduler) waitReceives(ctx context.Context) {
	defer s.stopRecv()
	done := make(chan struct{})
	go func() { s.fetchWG.Wait(); close(done) }()
	t := time.NewTimer(s.cfg.PollWait + receiveGrace)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-ctx.Done():
	case <-t.C:
	}
	s.cfg.Logger.Warn("switchyard: stopping: cancelling receives still in flight; what they took comes back after its lease")
	s.stopRecv()
	<-done
}

func (s *Scheduler) cancelAll(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.running {
		t.cancel(cause)
	}
}

// returnUnstarted gives deliveries back without spending attempts, a few
// at a time: a broker without a native release re-publishes each one and
// acks it (two round trips a delivery on SQS), and a stopping Server holds
// up to Config.Prefetch a lane.
func (s *Scheduler) returnUnstarted(ds []*broker.Delivery) {
	if len(ds) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	sem := make(chan struct{}, returnConcurrency)
	for _, d := range ds {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := s.b.Release(ctx, d, 0); err != nil {
				s.cfg.Logger.Warn("switchyard: returning an unstarted task failed; it comes back after its lease", "task", d.ID, "error", err)
			}
			s.observe(Event{Type: EventReturned, TaskID: d.ID, Kind: d.Kind, Lane: d.Lane, Attempt: d.Attempt})
		}()
	}
	wg.Wait()
}

// returnConcurrency bounds the releases returnUnstarted has in flight.
const returnConcurrency = 8
