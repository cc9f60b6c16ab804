package scheduler

import (
	"context"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// acker coalesces the acks of finished tasks into batches: one broker call
// per up to ackBatch deliveries or ackLinger, instead of one per task. The
// ledger (when there is one) has already recorded the outcome, so an ack
// that is delayed or lost only means a redelivery the ledger absorbs.
//
// Finished deliveries are appended to a list under a mutex; the loop is
// woken only when the list becomes non-empty (it then waits up to
// ackLinger for more) and when it reaches ackBatch, not once per task. A
// task whose ack finds ackMaxPending deliveries waiting (the broker slower
// than the handlers) waits for room, so the list stays bounded.
type acker struct {
	s       *Scheduler
	mu      sync.Mutex
	room    *sync.Cond // signalled when the loop takes a batch
	closed  bool
	pending []*broker.Delivery
	wake    chan struct{} // the list became non-empty, or close
	full    chan struct{} // the list reached ackBatch
	closing chan struct{} // closed by close
	done    chan struct{}
}

const (
	ackBatch      = 100
	ackLinger     = 2 * time.Millisecond
	ackMaxPending = 4 * ackBatch
)

func newAcker(s *Scheduler) *acker {
	a := &acker{s: s, wake: make(chan struct{}, 1), full: make(chan struct{}, 1),
		closing: make(chan struct{}), done: make(chan struct{}),
		pending: make([]*broker.Delivery, 0, ackBatch)}
	a.room = sync.NewCond(&a.mu)
	go a.loop()
	return a
}

// ack queues d, or acks it at once after close (within op's context).
func (a *acker) ack(op *opCtx, d *broker.Delivery) {
	a.mu.Lock()
	for len(a.pending) >= ackMaxPending && !a.closed {
		a.room.Wait()
	}
	if a.closed {
		a.mu.Unlock()
		a.s.settleErr(d, "ack", a.s.b.Ack(op.get(), d))
		return
	}
	a.pending = append(a.pending, d)
	n := len(a.pending)
	a.mu.Unlock()
	switch n {
	case 1:
		signal(a.wake)
	case ackBatch:
		signal(a.full)
	}
}

// close flushes what is queued and stops the loop.
func (a *acker) close() {
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		close(a.closing)
		a.room.Broadcast()
	}
	a.mu.Unlock()
	<-a.done
}

func (a *acker) loop() {
	defer close(a.done)
	batch := make([]*broker.Delivery, 0, ackBatch)
	linger := time.NewTimer(ackLinger)
	linger.Stop()
	for {
		select { // a stale full signal must not cut the next linger short
		case <-a.full:
		default:
		}
		a.mu.Lock()
		n, closed := len(a.pending), a.closed
		a.mu.Unlock()
		if n == 0 {
			if closed {
				return
			}
			select {
			case <-a.wake:
			case <-a.closing:
			}
			continue
		}
		if n < ackBatch && !closed {
			linger.Reset(ackLinger)
			select {
			case <-a.full:
			case <-linger.C:
			case <-a.closing:
			}
			linger.Stop()
		}
		a.mu.Lock()
		k := min(len(a.pending), ackBatch)
		batch = append(batch[:0], a.pending[:k]...)
		rest := copy(a.pending, a.pending[k:])
		clear(a.pending[rest:])
		a.pending = a.pending[:rest]
		a.room.Broadcast()
		a.mu.Unlock()
		a.flush(batch)
		clear(batch)
	}
}

func (a *acker) flush(batch []*broker.Delivery) {
	ctx, cancel := context.WithTimeout(context.Background(), a.s.opTimeout)
	defer cancel()
	err := a.s.b.Ack(ctx, batch...)
	if err == nil || len(batch) == 1 {
		if err != nil {
			a.s.settleErr(batch[0], "ack", err)
		}
		return
	}
	// Some deliveries failed (a lease lost, a broker hiccup): ack them one
	// by one so each failure is attributed and the rest still go through.
	// A batch that ran out of time leaves the retries a bound of their
	// own: with the expired one each would fail at once, and every
	// delivery would come back after its lease.
	if ctx.Err() != nil {
		var cancel2 context.CancelFunc
		ctx, cancel2 = context.WithTimeout(context.Background(), a.s.opTimeout)
		defer cancel2()
	}
	for _, d := range batch {
		a.s.settleErr(d, "ack", a.s.b.Ack(ctx, d))
	}
}
