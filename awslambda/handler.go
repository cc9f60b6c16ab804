package awslambda

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	switchyard "github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/adapters/sqs"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// Options tune a Function. A nil *Options means every default.
type Options struct {
	// Reserve is the time kept before the invocation's deadline for
	// settling: handlers' contexts end this long before it, and a record
	// is started only if its estimate plus Reserve fits. Defaults to 3s.
	Reserve time.Duration
	// Estimate returns how long a task of kind is expected to run. Defaults
	// to the p90 of the kind's last 64 runs in this execution environment
	// (zero before the first).
	Estimate func(kind string) time.Duration
	// Concurrency bounds the records (standard queues) or message groups
	// (FIFO queues) run at once. Defaults to 10.
	Concurrency int
	// MaxBatch bounds the records of one event: later ones are reported
	// failed unstarted. Defaults to 10,000 (the most an event-source
	// mapping sends, with a batching window).
	MaxBatch int
	// Logger defaults to slog.Default(). Bodies are never logged.
	Logger *slog.Logger
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// WithDefaults returns a copy of o (which may be nil) with defaults filled.
func (o *Options) WithDefaults() *Options {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Reserve <= 0 {
		c.Reserve = 3 * time.Second
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 10
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 10000
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &c
}

// Function runs a Server's handlers on SQS events. Build it with New,
// hand its Handle to lambda.Start.
type Function struct {
	s     *scheduler.Scheduler
	b     *broker.Broker
	d     *sqs.Driver
	opts  *Options
	lanes []string
	durs  *durations
}

// New returns a Function over srv, whose broker must be the SQS adapter's
// (the queues the event-source mappings read). Register every handler
// before; do not Start srv (the function runs deliveries itself).
func New(srv *switchyard.Server, opts *Options) (*Function, error) {
	if srv == nil {
		return nil, broker.Invalidf("awslambda: nil server")
	}
	return NewScheduler(srv.Scheduler(), opts)
}

// NewScheduler is New over a scheduler.
func NewScheduler(s *scheduler.Scheduler, opts *Options) (*Function, error) {
	if s == nil {
		return nil, broker.Invalidf("awslambda: nil scheduler")
	}
	b := s.Broker()
	d, ok := b.Driver().(*sqs.Driver)
	if !ok {
		return nil, broker.Invalidf("awslambda: the server's broker is %T, not the SQS adapter", b.Driver())
	}
	f := &Function{s: s, b: b, d: d, opts: opts.WithDefaults(), durs: newDurations()}
	for _, l := range s.Config().Lanes {
		if !l.Manual {
			f.lanes = append(f.lanes, l.Name)
		}
	}
	return f, nil
}

// result is one record's fate in an invocation.
type result struct {
	done bool // settled for good: not reported as a failure
	set  bool // decided (a record still running at the deadline is not)
}

// Handle runs the event's records and reports the ones that must come back
// (see the package documentation). Its error is always nil: failures are
// per record, never the whole batch.
func (f *Function) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	now := f.opts.Now()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = now.Add(15 * time.Minute) // Lambda's longest timeout
	}
	runCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline.Add(-f.opts.Reserve))
	defer cancel()
	// Settling (acks, hand-backs, dead letters) runs in the time Reserve
	// keeps, even when the invocation's own context has ended.
	ctx = context.WithoutCancel(ctx)

	n := len(ev.Records)
	results := make([]result, n)
	var mu sync.Mutex
	set := func(i int, done bool) {
		mu.Lock()
		results[i] = result{done: done, set: true}
		mu.Unlock()
	}
	if n > f.opts.MaxBatch {
		f.opts.Logger.Warn("switchyard: oversized SQS batch; the records beyond the limit are returned unstarted",
			"records", n, "max_batch", f.opts.MaxBatch)
		for i := f.opts.MaxBatch; i < n; i++ {
			set(i, false)
		}
		n = f.opts.MaxBatch
	}

	// Groups: one per record on standard queues; per MessageGroupId, in
	// event order, on FIFO ones.
	var groups [][]int
	byGroup := map[string]int{}
	for i := range n {
		g := ev.Records[i].Attributes["MessageGroupId"]
		if g == "" {
			groups = append(groups, []int{i})
			continue
		}
		k, seen := byGroup[g]
		if !seen {
			k = len(groups)
			byGroup[g] = k
			groups = append(groups, nil)
		}
		groups[k] = append(groups[k], i)
	}

	sem := make(chan struct{}, f.opts.Concurrency)
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-runCtx.Done():
				// No slot before the deadline: hand the group back unstarted.
				for _, i := range g {
					set(i, f.handBack(ctx, ev.Records[i], "no slot came free before the function's deadline"))
				}
				return
			}
			defer func() { <-sem }()
			for j, i := range g {
				done := f.record(ctx, runCtx, deadline, ev.Records[i])
				set(i, done)
				if !done && len(g) > 1 {
					// FIFO: the rest of the group must come back after it.
					for _, k := range g[j+1:] {
						f.returnNow(ctx, ev.Records[k])
						set(k, false)
					}
					return
				}
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	hard := time.NewTimer(time.Until(deadline.Add(-f.opts.Reserve / 4)))
	defer hard.Stop()
	select {
	case <-finished:
	case <-hard.C:
		f.opts.Logger.Warn("switchyard: handlers still running at the function's deadline; their records are reported failed and come back after their visibility timeout")
	}

	var resp events.SQSEventResponse
	mu.Lock()
	defer mu.Unlock()
	for i, r := range results {
		if !r.set || !r.done {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: ev.Records[i].MessageId})
		}
	}
	return resp, nil
}

// record runs one record; true means it is settled for good (deleted from
// the live queue) and must not be reported failed.
func (f *Function) record(ctx, runCtx context.Context, deadline time.Time, r events.SQSMessage) bool {
	log := f.opts.Logger
	lane, dv, ok := f.delivery(ctx, r)
	if !ok {
		return dv != nil && sqs.OutcomeOf(dv) == sqs.OutcomeDeleted
	}
	keep, err := f.b.Accept(ctx, dv)
	if err != nil {
		log.Warn("switchyard: an SQS record could not be accepted now; it comes back after its visibility timeout",
			"message_id", r.MessageId, "lane", lane, "error", err)
		return false
	}
	if !keep {
		return sqs.OutcomeOf(dv) == sqs.OutcomeDeleted // handled by Accept
	}
	if !dv.RunAt.IsZero() && dv.RunAt.After(f.opts.Now()) {
		// Early (a FIFO queue has no per-message delay): back at RunAt.
		if err := f.b.Nack(ctx, dv, dv.RunAt.Sub(f.opts.Now())); err != nil {
			log.Warn("switchyard: deferring an early SQS record failed", "task", dv.ID, "error", err)
		}
		return false
	}
	est := f.estimate(dv.Kind)
	if f.opts.Now().Add(est + f.opts.Reserve).After(deadline) {
		return f.release(ctx, dv, fmt.Sprintf("its estimate of %s does not fit before the function's deadline", est))
	}
	start := time.Now()
	if err := f.s.RunDelivery(runCtx, dv); err != nil {
		log.Warn("switchyard: an SQS record was refused by the scheduler", "task", dv.ID, "lane", lane, "error", err)
		return false
	}
	f.durs.add(dv.Kind, time.Since(start))
	return sqs.OutcomeOf(dv) == sqs.OutcomeDeleted
}

// delivery maps r to its lane and delivery. ok=false means r was handled
// here (dv set: dead-lettered as undecodable) or refused (dv nil).
func (f *Function) delivery(ctx context.Context, r events.SQSMessage) (string, *broker.Delivery, bool) {
	log := f.opts.Logger
	queue := queueOfARN(r.EventSourceARN)
	lane, ok := f.d.LaneOfQueue(queue, f.lanes)
	if !ok || !slices.Contains(f.lanes, f.b.LaneOf(lane)) {
		log.Warn("switchyard: an SQS record comes from a queue no served lane maps to; reported failed (the queue's redrive policy ends its loop)",
			"message_id", r.MessageId, "queue", queue)
		return "", nil, false
	}
	dv, err := f.d.DeliveryFromRecord(ctx, lane, recordOf(r, queue))
	switch {
	case err == nil:
		return lane, dv, true
	case dv != nil && errors.Is(err, broker.ErrUndecodable):
		log.Warn("switchyard: an SQS record is not a Switchyard envelope; dead-lettered as undecodable",
			"message_id", r.MessageId, "lane", lane, "error", err)
		if derr := f.b.DeadLetter(ctx, dv, &broker.DeadLetter{Reason: broker.ReasonUndecodable, Error: err.Error()}); derr != nil {
			log.Warn("switchyard: dead-lettering an undecodable SQS record failed; it comes back after its visibility timeout",
				"message_id", r.MessageId, "error", derr)
		}
		return lane, dv, false
	default:
		log.Warn("switchyard: an SQS record is refused; reported failed", "message_id", r.MessageId, "lane", lane, "error", err)
		return lane, nil, false
	}
}

// release hands dv back unstarted (see "The function's deadline").
func (f *Function) release(ctx context.Context, dv *broker.Delivery, why string) bool {
	if err := f.b.Release(ctx, dv, 0); err != nil {
		f.opts.Logger.Warn("switchyard: handing back an unstarted SQS record failed; reported failed", "task", dv.ID, "error", err)
		return false
	}
	f.opts.Logger.Info("switchyard: an SQS record was handed back unstarted", "task", dv.ID, "kind", dv.Kind, "why", why)
	return sqs.OutcomeOf(dv) == sqs.OutcomeDeleted
}

// handBack hands a record back unstarted; true when it left the queue.
func (f *Function) handBack(ctx context.Context, r events.SQSMessage, why string) bool {
	_, dv, ok := f.delivery(ctx, r)
	if !ok {
		return dv != nil && sqs.OutcomeOf(dv) == sqs.OutcomeDeleted
	}
	return f.release(ctx, dv, why)
}

// returnNow makes a record visible again at once (a FIFO group's records
// after a failure), best effort: failing that, it comes back after its
// visibility timeout.
func (f *Function) returnNow(ctx context.Context, r events.SQSMessage) {
	queue := queueOfARN(r.EventSourceARN)
	lane, ok := f.d.LaneOfQueue(queue, f.lanes)
	if !ok {
		return
	}
	dv, _ := f.d.DeliveryFromRecord(ctx, lane, recordOf(r, queue))
	if dv == nil {
		return
	}
	if err := f.d.Nack(ctx, dv, 0); err != nil {
		f.opts.Logger.Warn("switchyard: returning a FIFO record failed; it comes back after its visibility timeout", "message_id", r.MessageId, "error", err)
	}
}

func (f *Function) estimate(kind string) time.Duration {
	if f.opts.Estimate != nil {
		return max(f.opts.Estimate(kind), 0)
	}
	return f.durs.p90(kind)
}

func recordOf(r events.SQSMessage, queue string) sqs.Record {
	return sqs.Record{MessageID: r.MessageId, ReceiptHandle: r.ReceiptHandle, Body: r.Body, Attributes: r.Attributes, QueueName: queue}
}

// queueOfARN is the queue name in an SQS ARN (arn:aws:sqs:region:account:name).
func queueOfARN(arn string) string {
	if i := strings.LastIndexByte(arn, ':'); i >= 0 {
		return arn[i+1:]
	}
	return arn
}

// durations keeps the last runs' durations per kind.
type durations struct {
	mu sync.Mutex
	m  map[string][]time.Duration
}

const durWindow = 64

func newDurations() *durations { return &durations{m: map[string][]time.Duration{}} }

func (d *durations) add(kind string, v time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.m[kind]
	if len(s) >= durWindow {
		s = s[1:]
	}
	if len(d.m) > 1024 && d.m[kind] == nil {
		return // bounded: kinds come from registered handlers, but be safe
	}
	d.m[kind] = append(s, v)
}

func (d *durations) p90(kind string) time.Duration {
	d.mu.Lock()
	s := slices.Clone(d.m[kind])
	d.mu.Unlock()
	if len(s) == 0 {
		return 0
	}
	slices.Sort(s)
	return s[len(s)*9/10]
}
