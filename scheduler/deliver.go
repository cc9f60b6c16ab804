package scheduler

import (
	"context"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// RunDelivery runs one delivery to its end on the calling goroutine, with
// every rule a slot of a started Scheduler applies (scheduler/run.go: the
// ledger's begin and end, memoised steps and once-only effects, the retry
// policy and its backoff, Snooze, RetryAfter, Permanent and Budget, the
// attempt limit, dead letters with reasons) and settles it with the broker
// and the ledger before it returns. It is the seam for runtimes that
// receive deliveries themselves (package awslambda: an AWS Lambda function
// handed a batch by its event source); such a runtime passes each delivery
// through Broker.Accept first.
//
// The scheduler need not be started (Handle only). Not started, RunDelivery
// keeps the delivery's broker lease and ledger lease renewed every
// Config.Heartbeat while the handler runs, as the started scheduler's
// heartbeat does for its own.
//
// When ctx ends the handler's context is cancelled as by StopAndCancel: a
// handler that stops for it is recorded as returned unfinished and the
// delivery is given back without spending an attempt; one that finishes
// anyway is settled normally. Settling gets its own bounded time after
// that, so leave some before a hard deadline. The delivery's lane (its
// logical lane, as Broker.Receive and Broker.Accept leave it: a fair
// lane's name, not one of its shards) must be one of Config.Lanes:
// otherwise RunDelivery refuses it with a broker.ErrInvalid error and
// touches nothing.
func (s *Scheduler) RunDelivery(ctx context.Context, d *broker.Delivery) error {
	if d == nil {
		return broker.Invalidf("scheduler: RunDelivery: nil delivery")
	}
	lane := d.Lane
	s.mu.Lock()
	l := s.lanes[lane]
	if l == nil {
		s.mu.Unlock()
		return broker.Invalidf("scheduler: RunDelivery: lane %q is not one of the scheduler's lanes", lane)
	}
	started := s.started
	t := newTask(d, s.costOf(d.Kind))
	t.started = time.Now()
	rctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	t.cancel = cancel
	l.running += t.cost
	s.used += t.cost
	s.addRunning(t)
	s.runWG.Add(1)
	s.mu.Unlock()

	stop := context.AfterFunc(ctx, func() { cancel(errShutdown) })
	defer stop()
	if !started {
		beat := make(chan struct{})
		defer close(beat)
		go s.beatOne(t, beat)
	}
	s.run(rctx, l, t)
	return nil
}

// beatOne is the heartbeat of one delivery run by RunDelivery on a
// scheduler that is not started: it extends the broker lease and renews
// the ledger lease every Config.Heartbeat until done closes.
func (s *Scheduler) beatOne(t *task, done <-chan struct{}) {
	tick := time.NewTicker(s.cfg.Heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Heartbeat)
		s.extendBroker(ctx, []*task{t})
		if s.cfg.Ledger != nil {
			s.renewLedger(ctx, []*task{t})
		}
		cancel()
	}
}
