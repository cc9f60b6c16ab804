package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// Headers the runtime reads from a message.
const (
	// HeaderDeadline is the task's deadline (RFC 3339): past it the task is
	// dead-lettered with reason expired instead of run.
	HeaderDeadline = "switchyard-deadline"
	// HeaderReview carries a reviewer's decision (JSON Review) into a task
	// resumed after AwaitApproval.
	HeaderReview = "switchyard-review"
	// HeaderSandbox marks a sandbox replay; its value is the ID of the dead
	// letter the task copies. Such a task runs with Job.Sandbox set: its
	// steps run, its effects are recorded as ledger.EffectWouldDo and not
	// performed. Only switchyard's Client.ReplaySandbox sets it (Enqueue
	// cannot: its headers are its own and metadata travels as "meta-*").
	HeaderSandbox = "switchyard-sandbox"
	// MetaSandboxOf is the ledger metadata key naming the original of a
	// sandbox copy. With a ledger, a task whose record carries it runs in
	// sandbox mode even if a re-publish (an approval after review, say)
	// dropped HeaderSandbox: a sandbox copy never performs an effect.
	MetaSandboxOf = "switchyard-sandbox-of"
	// MetaCacheKey is the metadata key carrying a task's
	// EnqueueOpts.CacheKey (in headers as "meta-" + MetaCacheKey): tasks
	// sharing it share a prompt prefix (providerbatch orders batches by it).
	MetaCacheKey = "switchyard-cache-key"
)

// opTimeout bounds each broker and ledger call the runtime makes after a
// handler returns, so a stuck store cannot hold a slot forever.
const opTimeout = 30 * time.Second

// opCtx is the context of the runtime's own calls about one task (ledger
// writes, acks, nacks, dead letters): the task context's values without its
// cancellation, bounded by opTimeout. It is made on first use: the
// ledger-off path that succeeds acks through the acker and needs none, and
// a timer per task was about a third of run's CPU in the runtime benchmark.
// Once the handler has returned, the bound starts again (restart), so that
// a handler that ran longer than opTimeout still gets its outcome
// recorded, acked or retried, instead of every call failing with an
// expired context. Used by run's goroutine only.
type opCtx struct {
	limit  time.Duration
	parent context.Context // the task context, cancellation and all
	ctx    context.Context
	cancel context.CancelFunc
}

func newOpCtx(ctx context.Context, limit time.Duration) *opCtx {
	return &opCtx{limit: limit, parent: ctx}
}

// get returns the context, starting its opTimeout bound on first use.
func (o *opCtx) get() context.Context {
	if o.ctx == nil {
		o.ctx, o.cancel = context.WithTimeout(context.WithoutCancel(o.parent), o.limit)
	}
	return o.ctx
}

// runCtx is a handler's context: its parent's cancellation, deadline and
// values, plus the run state that Step, Effect and SetResult find under
// runKey. It holds the Job too, and lives in its task (task.rc), so that
// a delivery's task, job, run state and context are one allocation.
type runCtx struct {
	context.Context
	job Job
	rs  runState
}

func (c *runCtx) Value(key any) any {
	if _, ok := key.(runKey); ok {
		return &c.rs
	}
	return c.Context.Value(key)
}

// restart ends the current bound; the next get starts a new one.
func (o *opCtx) restart() {
	if o.cancel != nil {
		o.cancel()
		o.ctx, o.cancel = nil, nil
	}
}

// run executes one delivery, settles it with the broker and the ledger,
// and releases its slots.
func (s *Scheduler) run(ctx context.Context, l *laneState, t *task) {
	defer s.finished(l, t)
	s.execute(ctx, t)
}

// execute executes one delivery and settles it with the broker and the
// ledger; the caller releases its slots.
func (s *Scheduler) execute(ctx context.Context, t *task) {
	d := t.d
	op := newOpCtx(ctx, s.opTimeout)
	defer op.restart()

	if d.Headers[HeaderAwaitTimeout] != "" {
		s.awaitTimeout(op.get(), d) // a wait's timeout: never a handler run (await.go)
		return
	}
	h, known := s.handlers[d.Kind]
	if !known {
		s.dead(op.get(), d, nil, broker.ReasonUnknownKind, fmt.Sprintf("no handler is registered for kind %q", d.Kind), nil)
		return
	}
	if dl := deadlineOf(d); !dl.IsZero() && s.cfg.Now().After(dl) {
		s.dead(op.get(), d, nil, broker.ReasonExpired, "the task's deadline "+dl.Format(time.RFC3339)+" passed before it ran", nil)
		return
	}

	rc := &t.rc // the job, its run state and the handler's context: no allocation of their own
	job := &rc.job
	*job = Job{ID: d.ID, Kind: d.Kind, Lane: d.Lane, Tenant: d.Tenant, Args: d.Body, Headers: d.Headers,
		Attempt: d.Attempt, MaxAttempts: s.maxAttempts(d, h), EnqueuedAt: d.EnqueuedAt}
	if v := d.Headers[HeaderReview]; v != "" {
		var r Review
		if json.Unmarshal([]byte(v), &r) == nil {
			job.Review = &r
		}
	}
	if d.Attempt > job.MaxAttempts {
		// Earlier attempts never reported back: their workers crashed or
		// lost their leases. Stop here rather than crash another one —
		// unless the ledger knows better: a copy of a task that finished,
		// or that a live attempt is running, must not bury it.
		replayed := false
		if s.cfg.Ledger != nil {
			if lt, err := s.cfg.Ledger.Get(op.get(), d.ID); err == nil && settledOrLive(lt, time.Now()) {
				if !s.held(op.get(), d, lt) {
					return
				}
				replayed = true // an operator's replay of its dead letter: run it
			}
		}
		if !replayed {
			s.dead(op.get(), d, nil, broker.ReasonMaxAttempts,
				fmt.Sprintf("attempt %d exceeds the limit of %d; earlier attempts crashed or lost their leases", d.Attempt, job.MaxAttempts), nil)
			return
		}
	}
	attempt := d.Attempt
	if s.cfg.Ledger != nil {
		task, n, proceed := s.begin(op.get(), d)
		if !proceed {
			return
		}
		job.Task, job.Attempt, attempt = task, n, n
		t.run.Store(int64(n)) // the heartbeat renews this run's ledger lease from now on
	}
	job.Sandbox = d.Headers[HeaderSandbox] != "" || job.Task != nil && job.Task.Metadata[MetaSandboxOf] != ""
	s.observe(Event{Type: EventStarted, TaskID: d.ID, Kind: d.Kind, Lane: d.Lane, Attempt: attempt})

	hctx := ctx
	if h.opts.Timeout > 0 {
		var c context.CancelFunc
		hctx, c = context.WithTimeout(hctx, h.opts.Timeout)
		defer c()
	}
	if dl := deadlineOf(d); !dl.IsZero() {
		var c context.CancelFunc
		hctx, c = context.WithDeadline(hctx, dl)
		defer c()
	}
	rs := &rc.rs
	rs.s, rs.task, rs.tenant, rs.attempt, rs.sandbox = s, d.ID, d.Tenant, attempt, job.Sandbox
	rc.Context = hctx
	hctx = rc
	start := time.Now()
	result, out := s.call(hctx, h.fn, job)
	dur := time.Since(start)
	op.restart()   // the bound on settling counts from here
	t.run.Store(0) // the handler returned: its ledger lease ends with the write below

	att := ledger.Attempt{TaskID: d.ID, Number: attempt, Worker: s.cfg.WorkerID, Start: start, Duration: dur, Class: out.class(), Stack: out.stack}
	if out.err != nil {
		att.Error = out.err.Error()
	}

	switch cause := context.Cause(ctx); {
	case errors.Is(cause, ErrCancelled):
		// Cancelled from outside while it ran (see cancel.go): the ledger
		// already says cancelled; record the attempt and acknowledge.
		s.settleCancelled(op.get(), d, att)
		return
	case errors.Is(cause, errLeaseLost) && s.cancelledInLedger(op.get(), d.ID):
		// The lease renewal found the task cancelled before its note
		// came: the same as a cancellation.
		s.settleCancelled(op.get(), d, att)
		return
	case errors.Is(cause, errLeaseLost):
		// Another worker may hold the task now: touch nothing but our
		// record, and give our ledger lease up (if it is still ours) so
		// that the delivery now holding the task need not wait for it.
		att.Outcome = "lease_lost"
		s.finishAttempt(op.get(), att)
		return
	case errors.Is(cause, errShutdown) && !out.ok && broker.IsContext(out.err):
		// Interrupted by shutdown (a handler that finished anyway is
		// settled normally below).
		att.Outcome, att.Class = "returned", ""
		s.end(op.get(), att, ledger.Queued, "returned", "returned unfinished at shutdown", nil, nil, time.Time{})
		if err := s.b.Release(op.get(), d, 0); err != nil {
			s.cfg.Logger.Warn("switchyard: returning an interrupted task failed; it comes back after its lease", "task", d.ID, "error", err)
		}
		s.observe(Event{Type: EventReturned, TaskID: d.ID, Kind: d.Kind, Lane: d.Lane, Attempt: attempt, Duration: dur})
		return
	}

	if out.ok {
		result = rs.resultOf(result)
		if err := s.checkResult(d.ID, result); err != nil {
			out, result = classifyResult(Permanent(err)), nil
			att.Class, att.Error = out.class(), err.Error()
		}
	}

	if !out.ok && s.cancelledInLedger(op.get(), d.ID) {
		// Cancelled from outside just before the handler failed (its note
		// not yet here): a cancellation, not a retry or a dead letter.
		s.settleCancelled(op.get(), d, att)
		return
	}

	switch {
	case out.ok:
		att.Outcome = "ok"
		// Without a ledger end does nothing: skip making its context.
		if s.cfg.Ledger != nil && !s.end(op.get(), att, ledger.Completed, "completed", "", result, nil, time.Time{}) {
			s.ackIfCancelled(op.get(), d, attempt) // cancelled as it finished
			return
		}
		if s.acks != nil {
			s.acks.ack(op, d)
		} else {
			// Not started (RunDelivery): no batching, ack at once.
			s.settleErr(d, "ack", s.b.Ack(op.get(), d))
		}
		s.observe(Event{Type: EventSucceeded, TaskID: d.ID, Kind: d.Kind, Lane: d.Lane, Attempt: attempt, Duration: dur})

	case out.kind == resultCancel:
		att.Outcome = "cancel"
		msg := out.err.Error()
		if !s.end(op.get(), att, ledger.Cancelled, "cancelled", msg, nil, &msg, time.Time{}) {
			return
		}
		s.settleErr(d, "ack", s.b.Ack(op.get(), d))
		s.observe(Event{Type: EventCancelled, TaskID: d.ID, Kind: d.Kind, Lane: d.Lane, Attempt: attempt, Duration: dur, Err: out.err})

	case out.kind == resultSnooze:
		att.Outcome = "snooze"
		s.end(op.get(), att, ledger.Queued, "snoozed", out.err.Error(), nil, nil, time.Time{})
		s.settleErr(d, "release", s.b.Release(op.get(), d, out.delay))
		s.observe(Event{Type: EventSnoozed, TaskID: d.ID, Kind: d.Kind, Lane: d.Lane, Attempt: attempt, Duration: dur})

	case out.kind == resultAwait:
		att.Outcome = "await_review"
		if s.cfg.Ledger == nil {
			s.dead(op.get(), d, &att, broker.ReasonPermanent, "AwaitApproval needs a ledger to park the task", nil)
			return
		}
		detail, _ := json.Marshal(map[string]string{"reason": out.reason, "action": out.action})
		if !s.end(op.get(), att, ledger.AwaitingReview, "await_review", string(detail), nil, nil, time.Time{}) {
			return
		}
		s.settleErr(d, "ack", s.b.Ack(op.get(), d))
		s.observe(Event{Type: EventAwaiting, TaskID: d.ID, Kind: d.Kind, Lane: d.Lane, Attempt: attempt, Duration: dur})

	case out.kind == resultAwaitEvent:
		if s.cfg.Ledger == nil {
			s.dead(op.get(), d, &att, broker.ReasonPermanent, "AwaitEvent needs a ledger to park the task", nil)
			return
		}
		s.parkForEvent(op.get(), d, att, out, dur)

	case out.kind == resultPermanent || errors.Is(out.err, broker.ErrUndecodable):
		att.Outcome = "permanent"
		reason := broker.ReasonPermanent
		if errors.Is(out.err, broker.ErrUndecodable) {
			reason = broker.ReasonUndecodable
		}
		s.dead(op.get(), d, &att, reason, out.err.Error(), nil)

	case out.kind == resultBudget:
		att.Outcome = "budget"
		s.dead(op.get(), d, &att, broker.ReasonBudget, out.err.Error(), nil)

	default: // transient, unknown outcome, panic, retry-after
		att.Outcome = "retry"
		if out.panic {
			att.Outcome = "panic"
		}
		// The budget counts deliveries since enqueue (or replay): the
		// broker's count. The ledger's attempt numbers keep growing across
		// replays, for the history.
		if d.Attempt >= job.MaxAttempts {
			s.dead(op.get(), d, &att, broker.ReasonMaxAttempts,
				fmt.Sprintf("attempt %d of %d failed: %v", d.Attempt, job.MaxAttempts, out.err), nil)
			return
		}
		delay := out.delay
		if delay <= 0 {
			delay = s.policyFor(h).Backoff(d.Attempt)
		}
		msg := out.err.Error()
		s.end(op.get(), att, ledger.RetryWait, "retry", msg, nil, &msg, s.cfg.Now().Add(delay))
		s.settleErr(d, "nack", s.b.NackWithError(op.get(), d, delay, out.err))
		s.observe(Event{Type: EventRetried, TaskID: d.ID, Kind: d.Kind, Lane: d.Lane, Attempt: attempt, Duration: dur, Err: out.err})
	}
}

// call runs the handler, turning a panic into a recorded failure.
func (s *Scheduler) call(ctx context.Context, fn HandlerFunc, job *Job) (result []byte, out outcome) {
	defer func() {
		if r := recover(); r != nil {
			out = outcome{kind: resultRetry, err: fmt.Errorf("panic: %v", r), panic: true, stack: string(debug.Stack())}
		}
	}()
	res, err := fn(ctx, job)
	if err == nil {
		return res, outcome{ok: true}
	}
	return nil, classifyResult(err)
}

func (s *Scheduler) maxAttempts(d *broker.Delivery, h handlerEntry) int {
	if d.MaxAttempts > 0 {
		return d.MaxAttempts
	}
	return s.policyFor(h).MaxAttempts
}

func (s *Scheduler) policyFor(h handlerEntry) RetryPolicy {
	if h.opts.Retry != nil {
		return h.opts.Retry.WithDefaults()
	}
	return s.cfg.Retry
}

func deadlineOf(d *broker.Delivery) time.Time {
	if v := d.Headers[HeaderDeadline]; v != "" {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t
		}
	}
	return time.Time{}
}

// begin records the start of an attempt in the ledger (ledger.BeginRun:
// one write). It returns proceed=false when the delivery must not run: the
// task already finished (a duplicate delivery), is parked for review, is
// held by a live attempt elsewhere (the delivery is given back until that
// lease could end), or the ledger is failing (then the delivery is given
// back for later).
func (s *Scheduler) begin(ctx context.Context, d *broker.Delivery) (*ledger.Task, int, bool) {
	L := s.cfg.Ledger
	req := ledger.RunStart{ID: d.ID, Attempt: d.Attempt, Worker: s.cfg.WorkerID, Start: time.Now(), Lease: s.cfg.Lease}
	for range 4 {
		t, err := L.BeginRun(ctx, req)
		if err == nil {
			return t, t.Attempt, true
		}
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			// Published without a ledger record (by another tool, or a
			// client without a ledger): record it now, then run it.
			t, _, err = L.Create(ctx, &ledger.Task{ID: d.ID, Tenant: d.Tenant, IdempotencyKey: d.IdempotencyKey, Kind: d.Kind, Lane: d.Lane,
				OrderingKey: d.OrderingKey, Args: d.Body, MaxAttempts: d.MaxAttempts, RunAt: d.RunAt})
			if err == nil && t.ID != d.ID {
				// Its idempotency key belongs to another task: this
				// delivery is a duplicate of that one.
				s.duplicate(ctx, d, "its idempotency key belongs to task "+t.ID)
				return nil, 0, false
			}
			if err != nil && !refused(err) {
				s.ledgerDown(ctx, d, err)
				return nil, 0, false
			}
			if err != nil {
				s.refusedByLedger(ctx, d, err)
				return nil, 0, false
			}
			continue
		case errors.Is(err, ledger.ErrConflict) && t != nil:
			if t.State == ledger.Running && !t.LeaseUntil.IsZero() {
				// A redelivery after a crash comes when the broker lease
				// ends, about when the gone holder's ledger lease ends
				// too. When that is moments away, wait for it here rather
				// than hand the delivery back (which costs a receive, and
				// on SQS a step towards its redrive count).
				if wait := time.Until(t.LeaseUntil); wait <= s.cfg.Heartbeat {
					select {
					case <-time.After(max(wait, 0) + 50*time.Millisecond):
						continue
					case <-ctx.Done():
					}
				}
			}
			if !s.held(ctx, d, t) {
				return nil, 0, false
			}
			continue // a replay moved it back to queued: run it
		case refused(err):
			s.refusedByLedger(ctx, d, err)
			return nil, 0, false
		default:
			s.ledgerDown(ctx, d, err)
			return nil, 0, false
		}
	}
	s.ledgerDown(ctx, d, errors.New("the task's state kept changing under the delivery"))
	return nil, 0, false
}

// settledOrLive reports whether t is finished, parked, dead or running
// under a live lease: a delivery of it is for held, not for the attempt
// limit.
func settledOrLive(t *ledger.Task, now time.Time) bool {
	switch t.State {
	case ledger.Queued, ledger.RetryWait:
		return false
	case ledger.Running:
		return !t.LeaseUntil.IsZero() && now.Before(t.LeaseUntil)
	}
	return true
}

// held settles a delivery whose task BeginRun found in state t.State. It
// returns true when the task was moved so that the delivery may now run.
func (s *Scheduler) held(ctx context.Context, d *broker.Delivery, t *ledger.Task) bool {
	switch t.State {
	case ledger.Completed, ledger.Cancelled, ledger.Rejected, ledger.Failed:
		s.duplicate(ctx, d, "the task is already "+string(t.State))
	case ledger.AwaitingReview:
		s.duplicate(ctx, d, "the task is awaiting review")
	case ledger.AwaitingEvent:
		s.duplicate(ctx, d, "the task is awaiting an event")
	case ledger.Dead:
		return s.deadAgain(ctx, d, t)
	case ledger.Running:
		// A live attempt holds it (its lease has not passed): this is a
		// copy of the message, or a redelivery that came before the
		// holder's lease ended. Never run two handlers of one task: give
		// the delivery back, without spending an attempt, until the
		// holder's lease could have ended; by then the task is finished
		// (and the copy a duplicate) or its holder is known to be gone.
		wait := s.cfg.Lease
		if !t.LeaseUntil.IsZero() {
			wait = min(max(time.Until(t.LeaseUntil)+s.cfg.Heartbeat, s.cfg.Heartbeat), s.cfg.Lease+s.cfg.Heartbeat)
		}
		s.cfg.Logger.Debug("switchyard: task running elsewhere; delivery held back", "task", d.ID, "attempt", t.Attempt, "wait", wait)
		s.settleErr(d, "release", s.b.Release(ctx, d, wait))
		s.observe(Event{Type: EventDuplicate, TaskID: d.ID, Kind: d.Kind, Lane: d.Lane, Attempt: d.Attempt, Err: errors.New("running elsewhere")})
	default:
		s.ledgerDown(ctx, d, fmt.Errorf("task %s is %s and cannot start", d.ID, t.State))
	}
	return false
}

// deadAgain handles a delivery of a task that is dead in the ledger. When
// the ledger holds no record that the broker's dead letter was written
// (reason "dead_lettered"), the worker that decided it crashed between
// the two: finish the move, with the ledger's own reason and error.
// Otherwise the dead letter itself came back: an operator replayed it with
// a tool other than Switchyard's (asynq's Inspector.RunTask, a shovel, a
// redrive). The replay is honoured: the task goes back to queued and runs
// (true).
func (s *Scheduler) deadAgain(ctx context.Context, d *broker.Delivery, t *ledger.Task) bool {
	L := s.cfg.Ledger
	evs, err := L.Events(ctx, d.ID)
	if err != nil {
		s.ledgerDown(ctx, d, err)
		return false
	}
	reason, written := broker.ReasonMaxAttempts, false
	for _, e := range evs {
		switch {
		case e.To == ledger.Dead:
			reason, written = broker.Reason(e.Reason), false
		case e.Reason == reasonDeadLettered:
			written = true
		}
	}
	if !written {
		s.deadLetter(ctx, d, nil, reason, t.LastError)
		return false
	}
	_, err = L.Transition(ctx, ledger.TransitionRequest{ID: d.ID, From: []ledger.State{ledger.Dead}, To: ledger.Queued,
		Reason: "replayed", Actor: s.cfg.WorkerID,
		Detail: "its dead letter was delivered again: replayed by a tool other than Switchyard's"})
	if err != nil && !errors.Is(err, ledger.ErrConflict) {
		s.ledgerDown(ctx, d, err)
		return false
	}
	return true
}

// reasonDeadLettered is the ledger event that records the broker's dead
// letter as written, after the ledger's move to dead.
const reasonDeadLettered = "dead_lettered"

// refused reports whether the ledger refused a call for good: the
// delivery's fields are out of its bounds, or the task's stored payload
// does not open (ledger.WithCodec with the wrong keys, a tampered row),
// and asking again would loop.
func refused(err error) bool {
	return (errors.Is(err, broker.ErrInvalid) || errors.Is(err, broker.ErrUndecodable)) && broker.ClassOf(err) == broker.Permanent
}

// refusedByLedger dead-letters a delivery the ledger will never accept
// (an ID, key or count out of its bounds): asking again would loop.
func (s *Scheduler) refusedByLedger(ctx context.Context, d *broker.Delivery, err error) {
	s.cfg.Logger.Warn("switchyard: the ledger refuses the delivery; dead-lettering it", "lane", d.Lane, "error", err)
	if errors.Is(err, broker.ErrUndecodable) {
		// The ID is good, the record's payload does not open: the task
		// may now be running in the ledger; record it dead, with why.
		msg := err.Error()
		_, _ = s.cfg.Ledger.Transition(ctx, ledger.TransitionRequest{ID: d.ID, To: ledger.Dead, Reason: string(broker.ReasonUndecodable),
			Detail: msg, Actor: s.cfg.WorkerID, LastError: &msg})
	}
	s.settleErr(d, "dead-letter", s.b.DeadLetter(ctx, d, &broker.DeadLetter{Reason: broker.ReasonUndecodable,
		Error: "the ledger refuses the task: " + err.Error()}))
	s.observe(Event{Type: EventDead, TaskID: d.ID, Kind: d.Kind, Lane: d.Lane, Attempt: d.Attempt, Reason: broker.ReasonUndecodable, Err: err})
}

func (s *Scheduler) duplicate(ctx context.Context, d *broker.Delivery, why string) {
	s.settleErr(d, "ack", s.b.Ack(ctx, d))
	s.observe(Event{Type: EventDuplicate, TaskID: d.ID, Kind: d.Kind, Lane: d.Lane, Attempt: d.Attempt, Err: errors.New(why)})
}

// ledgerDown gives a delivery back when the ledger cannot be reached:
// running it without a record could repeat effects.
func (s *Scheduler) ledgerDown(ctx context.Context, d *broker.Delivery, err error) {
	s.cfg.Logger.Warn("switchyard: ledger unavailable; task returned for later", "task", d.ID, "error", err)
	s.settleErr(d, "release", s.b.Release(ctx, d, time.Second))
	s.observe(Event{Type: EventReturned, TaskID: d.ID, Kind: d.Kind, Lane: d.Lane, Attempt: d.Attempt, Err: err})
}

// end records attempt a's outcome and moves the task from running to `to`
// in one ledger write (ledger.EndRun); false means the task must not be
// settled further (another worker or an operator moved it).
//
// The move applies only while the ledger's attempt is not newer than a's,
// so a worker that lost the task to a newer attempt cannot settle over the
// new holder.
func (s *Scheduler) end(ctx context.Context, a ledger.Attempt, to ledger.State, reason, detail string, result []byte, lastErr *string, runAt time.Time) bool {
	if s.cfg.Ledger == nil {
		return true
	}
	req := &ledger.TransitionRequest{ID: a.TaskID, From: []ledger.State{ledger.Running}, To: to, Reason: reason, Detail: detail,
		Actor: s.cfg.WorkerID, Result: result, LastError: lastErr, RunAt: runAt, IfAttemptBelow: a.Number + 1}
	_, err := s.cfg.Ledger.EndRun(ctx, ledger.RunEnd{Attempt: a, Transition: req})
	if err != nil {
		s.cfg.Logger.Warn("switchyard: ledger transition failed", "task", a.TaskID, "to", to, "error", err)
		return !errors.Is(err, ledger.ErrConflict)
	}
	return true
}

// finishAttempt records an attempt that makes no move, and gives its
// ledger lease up if the run still holds it.
func (s *Scheduler) finishAttempt(ctx context.Context, a ledger.Attempt) {
	if s.cfg.Ledger == nil {
		return
	}
	if _, err := s.cfg.Ledger.EndRun(ctx, ledger.RunEnd{Attempt: a}); err != nil {
		s.cfg.Logger.Warn("switchyard: recording an attempt failed", "task", a.TaskID, "attempt", a.Number, "error", err)
	}
}

// dead dead-letters d with the whole attempt history: the ledger's when
// there is one, else the attempt just made. last, when set, is the attempt
// that ended here: its record and the move to dead are one ledger write.
func (s *Scheduler) dead(ctx context.Context, d *broker.Delivery, last *ledger.Attempt, reason broker.Reason, msg string, _ error) {
	if L := s.cfg.Ledger; L != nil {
		m := msg
		req := ledger.TransitionRequest{ID: d.ID, To: ledger.Dead, Reason: string(reason), Detail: msg, Actor: s.cfg.WorkerID, LastError: &m}
		var err error
		if last != nil {
			req.IfAttemptBelow = last.Number + 1 // not over a newer holder
			_, err = L.EndRun(ctx, ledger.RunEnd{Attempt: *last, Transition: &req})
		} else {
			_, err = L.Transition(ctx, req)
		}
		if errors.Is(err, ledger.ErrConflict) && last != nil {
			if t, gerr := L.Get(ctx, d.ID); gerr == nil && t.State == ledger.Cancelled {
				// Cancelled from outside meanwhile: never a dead letter.
				s.ackIfCancelled(ctx, d, last.Number)
				return
			} else if gerr == nil && t.Attempt > last.Number {
				// A newer attempt holds the task: leave it to that one.
				s.cfg.Logger.Warn("switchyard: not dead-lettering a task a newer attempt holds", "task", d.ID, "attempt", last.Number, "newer", t.Attempt)
				return
			}
		}
		if err != nil && !errors.Is(err, ledger.ErrNotFound) && !errors.Is(err, ledger.ErrConflict) {
			s.cfg.Logger.Warn("switchyard: ledger transition to dead failed", "task", d.ID, "error", err)
		}
	}
	s.deadLetter(ctx, d, last, reason, msg)
}

// deadLetter moves d to its dead-letter queue with the attempt history and
// records in the ledger that the dead letter is written.
func (s *Scheduler) deadLetter(ctx context.Context, d *broker.Delivery, last *ledger.Attempt, reason broker.Reason, msg string) {
	var hist []broker.AttemptRecord
	if s.cfg.Ledger != nil {
		if as, err := s.cfg.Ledger.Attempts(ctx, d.ID); err == nil {
			for _, a := range as {
				hist = append(hist, broker.AttemptRecord{Attempt: a.Number, Start: a.Start, Duration: a.Duration, Class: a.Class, Error: a.Error, Worker: a.Worker})
			}
		}
	}
	if len(hist) == 0 && last != nil {
		hist = []broker.AttemptRecord{{Attempt: last.Number, Start: last.Start, Duration: last.Duration, Class: last.Class, Error: last.Error, Worker: last.Worker}}
	}
	err := s.b.DeadLetter(ctx, d, &broker.DeadLetter{Reason: reason, Error: msg, Attempts: hist})
	s.settleErr(d, "dead-letter", err)
	if err == nil && s.cfg.Ledger != nil {
		// A later delivery of this task is then a replay, not a crash's
		// leftover (see deadAgain).
		if err := s.cfg.Ledger.AppendEvent(ctx, ledger.Event{TaskID: d.ID, Reason: reasonDeadLettered, Detail: string(reason), Actor: s.cfg.WorkerID}); err != nil && !errors.Is(err, ledger.ErrNotFound) {
			s.cfg.Logger.Warn("switchyard: recording the dead letter in the ledger failed", "task", d.ID, "error", err)
		}
	}
	s.observe(Event{Type: EventDead, TaskID: d.ID, Kind: d.Kind, Lane: d.Lane, Attempt: d.Attempt, Reason: reason, Err: errors.New(msg), ran: last != nil})
}

// settleErr logs a failed ack/nack/dead-letter: the broker will redeliver
// after the lease, and the ledger makes the redelivery harmless.
func (s *Scheduler) settleErr(d *broker.Delivery, op string, err error) {
	if err != nil {
		s.cfg.Logger.Warn("switchyard: settling a task failed; it will be redelivered after its lease", "op", op, "task", d.ID, "error", err)
		s.b.Forget(d)
	}
}
