package scheduler

import (
	"context"
	"time"
)

// Task goroutines are reused. A task runs on a worker goroutine that, once
// the task is settled, releases its slots and takes the next buffered task
// the policy gives a slot to, in the same critical section (finishedNext),
// without handing it to another goroutine; when none can start, it waits up
// to workerIdle for one handed to it before it ends. A fresh goroutine per task starts on the smallest stack and grows it
// again for every task (decoding a task's JSON arguments alone takes it
// past the first size): in the ledger-off runtime benchmark the stack
// copies were about 6 % of the process's CPU. A worker keeps its grown
// stack between tasks. Each task still gets its own context; what a
// handler leaves on its goroutine itself (pprof labels set with
// pprof.SetGoroutineLabels rather than pprof.Do, a runtime.LockOSThread
// without its unlock) stays with the worker for its next tasks.
const workerIdle = time.Second

// runItem is one task handed to a worker.
type runItem struct {
	ctx context.Context
	l   *laneState
	t   *task
}

// startRun runs it on an idle worker, or on a new one when none is idle.
// It never blocks: a worker takes it only if it is already waiting.
func (s *Scheduler) startRun(it runItem) {
	select {
	case s.idle <- it:
	default:
		go s.worker(it)
	}
}

// worker runs it, then the tasks handed to it while it waits, until it has
// been idle for workerIdle or the scheduler stops fetching (no task is
// handed out after that).
func (s *Scheduler) worker(it runItem) {
	var idle *time.Timer
	for {
		s.execute(it.ctx, it.t)
		// The slot it held goes to the next task at once, on this
		// goroutine, when one is waiting.
		if nxt, ok := s.finishedNext(it.l, it.t); ok {
			it = nxt
			continue
		}
		if idle == nil {
			idle = time.NewTimer(workerIdle)
		} else {
			idle.Reset(workerIdle)
		}
		select {
		case it = <-s.idle:
		case <-idle.C:
			return
		case <-s.fetchCtx.Done():
			idle.Stop()
			return
		}
	}
}
