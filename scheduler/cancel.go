package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// Cancellation from outside the handler (switchyard's Client.Cancel, the
// admin API) is a move in the ledger: a queued, delayed, retrying or
// parked task goes straight to cancelled, and every later delivery of it
// is acknowledged without running (begin finds it cancelled). A running
// task goes to cancelled too; the worker running it hears of it through
// the ledger's control channel (ledger.Notes — PostgreSQL LISTEN/NOTIFY,
// or the SQLite store's polled notes table), not through the task broker,
// and cancels the handler's context with ErrCancelled as its cause. When
// the handler returns, its attempt is recorded with outcome "cancel" and
// the delivery is acknowledged: no retry, no dead letter. Effects it
// confirmed stay confirmed; one it was performing when its context ended
// is recorded as unknown (as for any cancelled context), and since the
// task never runs again nothing repeats it.
//
// Should a note be missed (the control channel was down), the heartbeat's
// ledger lease renewal finds the task no longer running and stops the
// handler the same way within Config.Heartbeat; its delivery then comes
// back after its lease and is acknowledged as a duplicate.

// ErrCancelled is the cause of a handler's context (context.Cause) when
// its task was cancelled from outside while it ran.
var ErrCancelled = errors.New("scheduler: the task was cancelled")

// EventCancelRequested is observed when a running handler's context is
// cancelled because its task was cancelled from outside.
const EventCancelRequested EventType = "cancel_requested"

// cancelWatch is the scheduler's listener on the ledger's notes.
type cancelWatch struct {
	n      ledger.Notes
	ch     <-chan ledger.Note // nil when the first Listen failed
	ctx    context.Context
	cancel context.CancelFunc
}

// listenCancels starts listening to the ledger's notes, before any task
// starts (Listen returns once the listener hears every note sent from
// then on). It returns nil without a ledger that has notes.
func (s *Scheduler) listenCancels(ctx context.Context) *cancelWatch {
	if s.cfg.Ledger == nil {
		return nil
	}
	n, ok := ledger.NotesOf(s.cfg.Ledger)
	if !ok {
		return nil
	}
	cw := &cancelWatch{n: n}
	cw.ctx, cw.cancel = context.WithCancel(context.WithoutCancel(ctx))
	// Listen returns once its source is ready, or has failed (then the
	// listener gets a gap and the source is tried again).
	ch, err := n.Listen(cw.ctx)
	if err == nil {
		cw.ch = ch
	} else {
		s.cfg.Logger.Warn("switchyard: listening to the ledger for cancellations failed; trying again, and the heartbeat still stops cancelled tasks", "error", err)
	}
	return cw
}

func (cw *cancelWatch) stop() {
	if cw != nil {
		cw.cancel()
	}
}

// watchCancels listens to the ledger's notes until the scheduler stops,
// and cancels the handlers of tasks that were cancelled while they ran.
func (s *Scheduler) watchCancels(cw *cancelWatch) {
	defer s.loopWG.Done()
	defer cw.cancel()
	ctx := cw.ctx
	go func() {
		select {
		case <-s.stopped:
		case <-ctx.Done():
		}
		cw.cancel()
	}()
	ch := cw.ch
	for ctx.Err() == nil {
		if ch == nil {
			var err error
			if ch, err = cw.n.Listen(ctx); err != nil {
				if ctx.Err() == nil {
					s.cfg.Logger.Warn("switchyard: listening to the ledger for cancellations failed; the heartbeat still stops cancelled tasks", "error", err)
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
				continue
			}
			s.checkRunning(ctx) // what was missed meanwhile
		}
		for note := range ch {
			switch {
			case note.Topic == ledger.TopicGap:
				s.checkRunning(ctx)
			case note.Topic == ledger.TopicState && note.State == ledger.Cancelled:
				s.cancelRunning(note.TaskID)
			}
		}
		ch = nil
	}
}

// cancelRunning cancels the handler running task id here, if any.
func (s *Scheduler) cancelRunning(id string) {
	s.mu.Lock()
	var hit []*task
	for _, t := range s.running {
		if t.d.ID == id && t.run.Load() > 0 && t.cancel != nil {
			hit = append(hit, t)
		}
	}
	s.mu.Unlock()
	for _, t := range hit {
		t.cancel(ErrCancelled)
		s.observe(Event{Type: EventCancelRequested, TaskID: id, Kind: t.d.Kind, Lane: t.d.Lane, Attempt: int(t.run.Load())})
	}
}

// checkRunning asks the ledger about every task whose handler runs here
// and cancels those found cancelled (after a gap in the notes).
func (s *Scheduler) checkRunning(ctx context.Context) {
	s.mu.Lock()
	var ids []string
	for _, t := range s.running {
		if t.run.Load() > 0 {
			ids = append(ids, t.d.ID)
		}
	}
	s.mu.Unlock()
	for _, id := range ids {
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		t, err := s.cfg.Ledger.Get(gctx, id)
		cancel()
		if err == nil && t.State == ledger.Cancelled {
			s.cancelRunning(id)
		}
	}
}

// settleCancelled ends a run whose task was cancelled from outside while
// its handler ran: the attempt is recorded (outcome "cancel"; the task is
// already cancelled in the ledger) and the delivery is acknowledged.
func (s *Scheduler) settleCancelled(ctx context.Context, d *broker.Delivery, att ledger.Attempt) {
	att.Outcome, att.Class = "cancel", "cancel"
	if att.Error == "" {
		att.Error = ErrCancelled.Error()
	}
	s.finishAttempt(ctx, att)
	s.settleErr(d, "ack", s.b.Ack(ctx, d))
	s.observe(Event{Type: EventCancelled, TaskID: d.ID, Kind: d.Kind, Lane: d.Lane, Attempt: att.Number, Duration: att.Duration, Err: ErrCancelled})
}

// cancelledInLedger reports whether the ledger says task id is cancelled.
func (s *Scheduler) cancelledInLedger(ctx context.Context, id string) bool {
	if s.cfg.Ledger == nil {
		return false
	}
	t, err := s.cfg.Ledger.Get(ctx, id)
	return err == nil && t.State == ledger.Cancelled
}

// ackIfCancelled acknowledges a delivery whose run could not settle
// because the task was cancelled from outside meanwhile (its attempt is
// recorded already); a task in any other state is left to its
// redelivery, as before.
func (s *Scheduler) ackIfCancelled(ctx context.Context, d *broker.Delivery, attempt int) {
	if !s.cancelledInLedger(ctx, d.ID) {
		return
	}
	s.settleErr(d, "ack", s.b.Ack(ctx, d))
	s.observe(Event{Type: EventCancelled, TaskID: d.ID, Kind: d.Kind, Lane: d.Lane, Attempt: attempt, Err: ErrCancelled})
}
