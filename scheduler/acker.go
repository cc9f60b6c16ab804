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
type acker struct {
	s      *Scheduler
	mu     sync.Mutex
	closed bool
	ch     chan *broker.Delivery
	done   chan struct{}
}

const (
	ackBatch  = 100
	ackLinger = 2 * time.Millisecond
)

func newAcker(s *Scheduler) *acker {
	a := &acker{s: s, ch: make(chan *broker.Delivery, 4*ackBatch), done: make(chan struct{})}
	go a.loop()
	return a
}

// ack queues d, or acks it at once after close (within op's context).
func (a *acker) ack(op *opCtx, d *broker.Delivery) {
	a.mu.Lock()
	if !a.closed {
		a.ch <- d // the channel is drained by loop; the lock only guards close
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	a.s.settleErr(d, "ack", a.s.b.Ack(op.get(), d))
}

// close flushes what is queued and stops the loop.
func (a *acker) close() {
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		close(a.ch)
	}
	a.mu.Unlock()
	<-a.done
}

func (a *acker) loop() {
	defer close(a.done)
	batch := make([]*broker.Delivery, 0, ackBatch)
	for d := range a.ch {
		batch = append(batch[:0], d)
		timer := time.NewTimer(ackLinger)
	gather:
		for len(batch) < ackBatch {
			select {
			case d, ok := <-a.ch:
				if !ok {
					break gather
				}
				batch = append(batch, d)
			case <-timer.C:
				break gather
			}
		}
		timer.Stop()
		a.flush(batch)
	}
}

func (a *acker) flush(batch []*broker.Delivery) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
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
	for _, d := range batch {
		a.s.settleErr(d, "ack", a.s.b.Ack(ctx, d))
	}
}
