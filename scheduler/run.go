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
)

// opTimeout bounds each broker and ledger call the runtime makes after a
// handler returns, so a stuck store cannot hold a slot forever.
const opTimeout = 30 * time.Second

// run executes one delivery and settles it with the broker and the ledger.
func (s *Scheduler) run(ctx context.Context, l *laneState, t *task) {
	defer s.finished(l, t)
	d := t.d
	settle, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()

	h, known := s.handlers[d.Kind]
	if !known {
		s.dead(settle, d, nil, broker.ReasonUnknownKind, fmt.Sprintf("no handler is registered for kind %q", d.Kind), nil)
		return
	}
	if dl := deadlineOf(d); !dl.IsZero() && s.cfg.Now().After(dl) {
		s.dead(settle, d, nil, broker.ReasonExpired, "the task's deadline "+dl.Format(time.RFC3339)+" passed before it ran", nil)
		return
	}

	job := &Job{ID: d.ID, Kind: d.Kind, Lane: s.b.LaneOf(d.Lane), Tenant: d.Tenant, Args: d.Body, Headers: d.Headers,
		Attempt: d.Attempt, MaxAttempts: s.maxAttempts(d, h), EnqueuedAt: d.EnqueuedAt}
	if v := d.Headers[HeaderReview]; v != "" {
		var r Review
		if json.Unmarshal([]byte(v), &r) == nil {
			job.Review = &r
		}
	}
	if d.Attempt > job.MaxAttempts {
		// Earlier attempts never reported back: their workers crashed or
		// lost their leases. Stop here rather than crash another one.
		s.dead(settle, d, nil, broker.ReasonMaxAttempts,
			fmt.Sprintf("attempt %d exceeds the limit of %d; earlier attempts crashed or lost their leases", d.Attempt, job.MaxAttempts), nil)
		return
	}
	attempt := d.Attempt
	if s.cfg.Ledger != nil {
		task, n, proceed := s.begin(settle, d)
		if !proceed {
			return
		}
		job.Task, job.Attempt, attempt = task, n, n
	}
	job.Sandbox = d.Headers[HeaderSandbox] != "" || job.Task != nil && job.Task.Metadata[MetaSandboxOf] != ""
	s.observe(Event{Type: EventStarted, TaskID: d.ID, Kind: d.Kind, Lane: s.b.LaneOf(d.Lane), Attempt: attempt})

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
	rs := &runState{s: s, task: d.ID, attempt: attempt, sandbox: job.Sandbox}
	hctx = context.WithValue(hctx, runKey{}, rs)
	start := time.Now()
	result, out := s.call(hctx, h.fn, job)
	dur := time.Since(start)

	att := ledger.Attempt{TaskID: d.ID, Number: attempt, Worker: s.cfg.WorkerID, Start: start, Duration: dur, Class: out.class(), Stack: out.stack}
	if out.err != nil {
		att.Error = out.err.Error()
	}

	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errLeaseLost):
		// Another worker holds the task now: touch nothing but our record.
		att.Outcome = "lease_lost"
		s.finishAttempt(settle, att)
		return
	case errors.Is(cause, errShutdown) && !out.ok && broker.IsContext(out.err):
		// Interrupted by shutdown (a handler that finished anyway is
		// settled normally below).
		att.Outcome, att.Class = "returned", ""
		s.finishAttempt(settle, att)
		s.transition(settle, d.ID, ledger.Queued, "returned", "returned unfinished at shutdown", attempt, nil, nil)
		if err := s.b.Release(settle, d, 0); err != nil {
			s.cfg.Logger.Warn("switchyard: returning an interrupted task failed; it comes back after its lease", "task", d.ID, "error", err)
		}
		s.observe(Event{Type: EventReturned, TaskID: d.ID, Kind: d.Kind, Lane: s.b.LaneOf(d.Lane), Attempt: attempt, Duration: dur})
		return
	}

	switch {
	case out.ok:
		att.Outcome = "ok"
		s.finishAttempt(settle, att)
		if !s.transition(settle, d.ID, ledger.Completed, "completed", "", attempt, result, nil) {
			return
		}
		s.acks.ack(settle, d)
		s.observe(Event{Type: EventSucceeded, TaskID: d.ID, Kind: d.Kind, Lane: s.b.LaneOf(d.Lane), Attempt: attempt, Duration: dur})

	case out.kind == resultCancel:
		att.Outcome = "cancel"
		s.finishAttempt(settle, att)
		msg := out.err.Error()
		if !s.transition(settle, d.ID, ledger.Cancelled, "cancelled", msg, attempt, nil, &msg) {
			return
		}
		s.settleErr(d, "ack", s.b.Ack(settle, d))
		s.observe(Event{Type: EventCancelled, TaskID: d.ID, Kind: d.Kind, Lane: s.b.LaneOf(d.Lane), Attempt: attempt, Duration: dur, Err: out.err})

	case out.kind == resultSnooze:
		att.Outcome = "snooze"
		s.finishAttempt(settle, att)
		s.transition(settle, d.ID, ledger.Queued, "snoozed", out.err.Error(), attempt, nil, nil)
		s.settleErr(d, "release", s.b.Release(settle, d, out.delay))
		s.observe(Event{Type: EventSnoozed, TaskID: d.ID, Kind: d.Kind, Lane: s.b.LaneOf(d.Lane), Attempt: attempt, Duration: dur})

	case out.kind == resultAwait:
		att.Outcome = "await_review"
		s.finishAttempt(settle, att)
		if s.cfg.Ledger == nil {
			s.dead(settle, d, &att, broker.ReasonPermanent, "AwaitApproval needs a ledger to park the task", nil)
			return
		}
		detail, _ := json.Marshal(map[string]string{"reason": out.reason, "action": out.action})
		if !s.transition(settle, d.ID, ledger.AwaitingReview, "await_review", string(detail), attempt, nil, nil) {
			return
		}
		s.settleErr(d, "ack", s.b.Ack(settle, d))
		s.observe(Event{Type: EventAwaiting, TaskID: d.ID, Kind: d.Kind, Lane: s.b.LaneOf(d.Lane), Attempt: attempt, Duration: dur})

	case out.kind == resultPermanent || errors.Is(out.err, broker.ErrUndecodable):
		att.Outcome = "permanent"
		s.finishAttempt(settle, att)
		reason := broker.ReasonPermanent
		if errors.Is(out.err, broker.ErrUndecodable) {
			reason = broker.ReasonUndecodable
		}
		s.dead(settle, d, &att, reason, out.err.Error(), nil)

	case out.kind == resultBudget:
		att.Outcome = "budget"
		s.finishAttempt(settle, att)
		s.dead(settle, d, &att, broker.ReasonBudget, out.err.Error(), nil)

	default: // transient, unknown outcome, panic, retry-after
		att.Outcome = "retry"
		if out.panic {
			att.Outcome = "panic"
		}
		s.finishAttempt(settle, att)
		// The budget counts deliveries since enqueue (or replay): the
		// broker's count. The ledger's attempt numbers keep growing across
		// replays, for the history.
		if d.Attempt >= job.MaxAttempts {
			s.dead(settle, d, &att, broker.ReasonMaxAttempts,
				fmt.Sprintf("attempt %d of %d failed: %v", d.Attempt, job.MaxAttempts, out.err), nil)
			return
		}
		delay := out.delay
		if delay <= 0 {
			delay = s.policyFor(h).Backoff(d.Attempt)
		}
		msg := out.err.Error()
		s.transitionRunAt(settle, d.ID, ledger.RetryWait, "retry", msg, attempt, s.cfg.Now().Add(delay), &msg)
		s.settleErr(d, "nack", s.b.Nack(settle, d, delay))
		s.observe(Event{Type: EventRetried, TaskID: d.ID, Kind: d.Kind, Lane: s.b.LaneOf(d.Lane), Attempt: attempt, Duration: dur, Err: out.err})
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

// begin records the start of an attempt in the ledger. It returns
// proceed=false when the delivery must not run: the task already finished
// (a duplicate delivery), is parked for review, or the ledger is failing
// (then the delivery is given back for later).
func (s *Scheduler) begin(ctx context.Context, d *broker.Delivery) (*ledger.Task, int, bool) {
	L := s.cfg.Ledger
	t, err := L.Get(ctx, d.ID)
	if errors.Is(err, ledger.ErrNotFound) {
		// Published without a ledger record (by another tool, or a client
		// without a ledger): record it now.
		t, _, err = L.Create(ctx, &ledger.Task{ID: d.ID, Tenant: d.Tenant, IdempotencyKey: d.IdempotencyKey, Kind: d.Kind, Lane: s.b.LaneOf(d.Lane),
			OrderingKey: d.OrderingKey, Args: d.Body, MaxAttempts: d.MaxAttempts, RunAt: d.RunAt})
		if err == nil && t.ID != d.ID {
			// Its idempotency key belongs to another task: this delivery is
			// a duplicate of that one.
			s.duplicate(ctx, d, "its idempotency key belongs to task "+t.ID)
			return nil, 0, false
		}
	}
	if err != nil {
		s.ledgerDown(ctx, d, err)
		return nil, 0, false
	}
	switch t.State {
	case ledger.Completed, ledger.Cancelled, ledger.Rejected, ledger.Failed:
		s.duplicate(ctx, d, "the task is already "+string(t.State))
		return nil, 0, false
	case ledger.AwaitingReview:
		s.duplicate(ctx, d, "the task is awaiting review")
		return nil, 0, false
	case ledger.Dead:
		// The ledger dead-lettered it but the broker still had it (a crash
		// between the two): finish the move.
		s.dead(ctx, d, nil, broker.ReasonMaxAttempts, "dead in the ledger: "+t.LastError, nil)
		return nil, 0, false
	}
	// The attempt this run records: the delivery's, or the ledger's when
	// the delivery is a copy whose count started lower (one past it after a
	// failed attempt; the same after a snooze or a return, which spend
	// none).
	attempt := max(d.Attempt, t.Attempt)
	if t.State == ledger.RetryWait {
		attempt = max(d.Attempt, t.Attempt+1)
	}
	req := ledger.TransitionRequest{ID: d.ID, From: []ledger.State{ledger.Queued, ledger.RetryWait},
		To: ledger.Running, Reason: "attempt_started", Actor: s.cfg.WorkerID, Attempt: attempt}
	if t.State == ledger.Running {
		// Another delivery started it. Take over only with a newer attempt
		// (the earlier holder crashed or lost its lease); a copy with an
		// attempt no newer is a concurrent duplicate.
		if d.Attempt <= t.Attempt {
			s.cfg.Logger.Debug("switchyard: task running elsewhere; delivery held back", "task", d.ID)
			s.settleErr(d, "release", s.b.Release(ctx, d, s.cfg.Lease))
			s.observe(Event{Type: EventDuplicate, TaskID: d.ID, Kind: d.Kind, Lane: s.b.LaneOf(d.Lane), Attempt: d.Attempt, Err: errors.New("running elsewhere")})
			return nil, 0, false
		}
		attempt = d.Attempt
		req.From, req.Attempt, req.IfAttemptBelow = []ledger.State{ledger.Running}, attempt, attempt
	}
	t, err = L.Transition(ctx, req)
	if errors.Is(err, ledger.ErrConflict) {
		// Someone moved it meanwhile; decide again from its new state.
		return s.begin(ctx, d)
	}
	if err != nil {
		s.ledgerDown(ctx, d, err)
		return nil, 0, false
	}
	if err := L.StartAttempt(ctx, ledger.Attempt{TaskID: d.ID, Number: attempt, Worker: s.cfg.WorkerID, Start: time.Now()}); err != nil {
		// Undo the move to running, or the returned delivery (whose
		// attempt does not grow) would find the task "running elsewhere"
		// for good.
		_, _ = L.Transition(ctx, ledger.TransitionRequest{ID: d.ID, From: []ledger.State{ledger.Running}, To: ledger.Queued,
			Reason: "attempt_not_recorded", Detail: err.Error(), Actor: s.cfg.WorkerID, Attempt: max(attempt-1, 0)})
		s.ledgerDown(ctx, d, err)
		return nil, 0, false
	}
	return t, attempt, true
}

func (s *Scheduler) duplicate(ctx context.Context, d *broker.Delivery, why string) {
	s.settleErr(d, "ack", s.b.Ack(ctx, d))
	s.observe(Event{Type: EventDuplicate, TaskID: d.ID, Kind: d.Kind, Lane: s.b.LaneOf(d.Lane), Attempt: d.Attempt, Err: errors.New(why)})
}

// ledgerDown gives a delivery back when the ledger cannot be reached:
// running it without a record could repeat effects.
func (s *Scheduler) ledgerDown(ctx context.Context, d *broker.Delivery, err error) {
	s.cfg.Logger.Warn("switchyard: ledger unavailable; task returned for later", "task", d.ID, "error", err)
	s.settleErr(d, "release", s.b.Release(ctx, d, time.Second))
	s.observe(Event{Type: EventReturned, TaskID: d.ID, Kind: d.Kind, Lane: s.b.LaneOf(d.Lane), Attempt: d.Attempt, Err: err})
}

// transition applies a ledger transition from running (or any state, for
// "returned"); false means the task must not be settled further (another
// worker or an operator moved it).
//
// mine is the attempt this worker ran: the move applies only while the
// ledger's attempt is not newer, so a worker that lost the task to a newer
// attempt cannot settle over the new holder.
func (s *Scheduler) transition(ctx context.Context, id string, to ledger.State, reason, detail string, mine int, result []byte, lastErr *string) bool {
	if s.cfg.Ledger == nil {
		return true
	}
	req := ledger.TransitionRequest{ID: id, From: []ledger.State{ledger.Running}, To: to, Reason: reason, Detail: detail,
		Actor: s.cfg.WorkerID, Result: result, LastError: lastErr}
	if mine > 0 {
		req.IfAttemptBelow = mine + 1
	}
	_, err := s.cfg.Ledger.Transition(ctx, req)
	if err != nil {
		s.cfg.Logger.Warn("switchyard: ledger transition failed", "task", id, "to", to, "error", err)
		return !errors.Is(err, ledger.ErrConflict)
	}
	return true
}

func (s *Scheduler) transitionRunAt(ctx context.Context, id string, to ledger.State, reason, detail string, mine int, runAt time.Time, lastErr *string) {
	if s.cfg.Ledger == nil {
		return
	}
	_, err := s.cfg.Ledger.Transition(ctx, ledger.TransitionRequest{ID: id, From: []ledger.State{ledger.Running}, To: to, Reason: reason,
		Detail: detail, Actor: s.cfg.WorkerID, RunAt: runAt, LastError: lastErr, IfAttemptBelow: mine + 1})
	if err != nil {
		s.cfg.Logger.Warn("switchyard: ledger transition failed", "task", id, "to", to, "error", err)
	}
}

func (s *Scheduler) finishAttempt(ctx context.Context, a ledger.Attempt) {
	if s.cfg.Ledger == nil {
		return
	}
	if err := s.cfg.Ledger.FinishAttempt(ctx, a); err != nil {
		s.cfg.Logger.Warn("switchyard: recording an attempt failed", "task", a.TaskID, "attempt", a.Number, "error", err)
	}
}

// dead dead-letters d with the whole attempt history: the ledger's when
// there is one, else the attempt just made.
func (s *Scheduler) dead(ctx context.Context, d *broker.Delivery, last *ledger.Attempt, reason broker.Reason, msg string, _ error) {
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
	if s.cfg.Ledger != nil {
		m := msg
		req := ledger.TransitionRequest{ID: d.ID, To: ledger.Dead, Reason: string(reason), Detail: msg, Actor: s.cfg.WorkerID, LastError: &m}
		if last != nil {
			req.IfAttemptBelow = last.Number + 1 // not over a newer holder
		}
		_, err := s.cfg.Ledger.Transition(ctx, req)
		if errors.Is(err, ledger.ErrConflict) && last != nil {
			if t, gerr := s.cfg.Ledger.Get(ctx, d.ID); gerr == nil && t.Attempt > last.Number {
				// A newer attempt holds the task: leave it to that one.
				s.cfg.Logger.Warn("switchyard: not dead-lettering a task a newer attempt holds", "task", d.ID, "attempt", last.Number, "newer", t.Attempt)
				return
			}
		}
		if err != nil && !errors.Is(err, ledger.ErrNotFound) && !errors.Is(err, ledger.ErrConflict) {
			s.cfg.Logger.Warn("switchyard: ledger transition to dead failed", "task", d.ID, "error", err)
		}
	}
	s.settleErr(d, "dead-letter", s.b.DeadLetter(ctx, d, &broker.DeadLetter{Reason: reason, Error: msg, Attempts: hist}))
	s.observe(Event{Type: EventDead, TaskID: d.ID, Kind: d.Kind, Lane: s.b.LaneOf(d.Lane), Attempt: d.Attempt, Reason: reason, Err: errors.New(msg)})
}

// settleErr logs a failed ack/nack/dead-letter: the broker will redeliver
// after the lease, and the ledger makes the redelivery harmless.
func (s *Scheduler) settleErr(d *broker.Delivery, op string, err error) {
	if err != nil {
		s.cfg.Logger.Warn("switchyard: settling a task failed; it will be redelivered after its lease", "op", op, "task", d.ID, "error", err)
	}
}
