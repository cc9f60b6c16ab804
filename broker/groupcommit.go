package broker

import (
	"context"
	"runtime"
	"sync"

	"github.com/switchyard-dev/switchyard/internal/groupctx"
)

// PublishConcurrency is implemented by drivers whose concurrent Publish
// calls gain nothing from running in parallel — one database connection, one
// script runner — and cost a transaction or a round trip each. Broker then
// keeps at most MaxConcurrentPublishes driver publishes in flight; Publish
// calls that arrive meanwhile are queued and, when one returns, go out
// together in one driver batch (group commit). A caller that finds a free
// place publishes at once, so a lone caller never waits.
//
// Drivers without it get every Publish call through at once, uncoalesced:
// where a broker runs concurrent publishes in parallel (RabbitMQ confirms on
// several channels, NATS asynchronous publishes) that measured faster.
type PublishConcurrency interface {
	// MaxConcurrentPublishes is at least 1.
	MaxConcurrentPublishes() int
}

// LateGroupCommit is implemented by PublishConcurrency drivers whose
// queued publishes are better grouped when the caller woken to publish
// them runs than when it is woken: that caller yields once, and the
// batches that arrive meanwhile — above all those of the callers just
// served, coming back with their next one — join its driver publish
// instead of waiting for the one after it. It suits a driver whose every
// publish is a commit on one connection (the embedded broker: about half
// the lone publish commits of the runtime with one Enqueue a call);
// elsewhere it was not measured to help (bench/peers' asynq adapter with
// the PostgreSQL ledger ran fewer tasks a second with it in 3 of 4
// alternated pairs), so it is opt-in.
type LateGroupCommit interface {
	// LateGroupCommit reports whether groups are formed late.
	LateGroupCommit() bool
}

func lateGroupCommit(d Driver) bool {
	l, ok := d.(LateGroupCommit)
	return ok && l.LateGroupCommit()
}

// publishInFlight is d's limit on driver publishes in flight; 0: none.
func publishInFlight(d Driver) int {
	if p, ok := d.(PublishConcurrency); ok {
		return max(p.MaxConcurrentPublishes(), 1)
	}
	return 0
}

// groupCommit coalesces concurrent driver publishes (see
// PublishConcurrency): while inFlight Driver.Publish calls are in flight,
// the batches of the calls that arrive are queued, and when one returns they
// go out together in one Driver.Publish (up to MaxBatch) — one SQLite
// transaction, one script call — instead of one each (with late, also
// those that arrive until the first of them has formed its group: see
// LateGroupCommit).
//
// A caller that finds a free place publishes at once, so a lone caller
// never waits; a queued caller waits at most for a publish in flight and
// then its own. Each caller gets its own batch's results (or the
// whole batch's error), exactly as if it had called the driver itself.
// Queued batches keep their arrival order, and two batches that carry the
// same idempotency key (lane, tenant, key) never share a driver batch, so a
// driver deduplicates them exactly as it would one after the other.
type groupCommit struct {
	d        Driver
	max      int  // Capabilities.MaxBatch; 0: unlimited
	inFlight int  // the most driver publishes at once; 0: no limit, no coalescing
	late     bool // groups are formed by their leader when it runs (LateGroupCommit)

	// testLeading, when set (by tests), runs when a queued caller woken
	// to publish next is about to publish (late: to form its group).
	testLeading func()

	mu    sync.Mutex
	busy  int          // driver publishes in flight
	queue []*pubWaiter // waiting, in arrival order; only while busy == inFlight
}

// pubWaiter is one caller's batch.
type pubWaiter struct {
	ctx  context.Context
	msgs []*Message

	// Set before done is closed.
	res []PublishResult
	err error
	// lead is set instead when this waiter is to publish a group (its own
	// batch first) on behalf of the others; leads, when it is to form that
	// group itself (late).
	lead  []*pubWaiter
	leads bool
	done  chan struct{}
}

// publish sends msgs (at most max of them) through the driver, coalesced
// with concurrent callers.
func (g *groupCommit) publish(ctx context.Context, msgs []*Message) ([]PublishResult, error) {
	if g.inFlight <= 0 {
		return g.d.Publish(ctx, msgs)
	}
	g.mu.Lock()
	if g.busy < g.inFlight {
		g.busy++
		g.mu.Unlock()
		defer g.handOff() // even if the driver panics
		// Callers about to publish (runnable, not yet running) get a
		// chance to join this batch: on a busy machine they otherwise
		// arrive one by one, each just after the previous publish.
		runtime.Gosched()
		g.mu.Lock()
		if len(g.queue) == 0 {
			g.mu.Unlock()
			return g.d.Publish(ctx, msgs)
		}
		w := &pubWaiter{ctx: ctx, msgs: msgs}
		g.lead(w)
		return w.res, w.err
	}
	w := &pubWaiter{ctx: ctx, msgs: msgs, done: make(chan struct{})}
	g.queue = append(g.queue, w)
	g.mu.Unlock()
	select {
	case <-w.done:
	case <-ctx.Done():
		g.mu.Lock()
		for i, q := range g.queue {
			if q == w {
				// Not taken yet: nothing of it was sent.
				g.queue = append(g.queue[:i], g.queue[i+1:]...)
				g.mu.Unlock()
				return nil, Wrap("publish", Transient, ctx.Err())
			}
		}
		g.mu.Unlock()
		// Taken: its outcome is on the way.
		<-w.done
	}
	if w.lead != nil {
		defer g.handOff()
		if g.testLeading != nil {
			g.testLeading()
		}
		g.flush(w.lead)
	}
	if w.leads {
		defer g.handOff()
		// As above: the callers of the batch just published, on their way
		// back with their next one, join this batch instead of the next.
		runtime.Gosched()
		if g.testLeading != nil {
			g.testLeading()
		}
		g.mu.Lock()
		g.lead(w)
	}
	return w.res, w.err
}

// lead publishes w's batch with the queued batches that fit with it
// (take) and gives each its outcome. Called with mu held; returns with it
// released.
func (g *groupCommit) lead(w *pubWaiter) {
	g.queue = append(g.queue, nil)
	copy(g.queue[1:], g.queue)
	g.queue[0] = w
	group := g.take()
	g.mu.Unlock()
	g.flush(group)
}

// handOff ends the caller's turn: the next group of queued batches goes to
// the first of them to publish, or the publisher becomes idle. With late,
// that caller forms its group when it runs, not here.
func (g *groupCommit) handOff() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.queue) == 0 {
		g.busy--
		return
	}
	if g.late {
		leader := g.queue[0]
		g.queue = append(g.queue[:0], g.queue[1:]...)
		leader.leads = true
		close(leader.done)
		return
	}
	group := g.take()
	leader := group[0]
	leader.lead = group
	close(leader.done)
}

// take removes the next group of queued batches from the queue: in
// arrival order, up to max messages, and never two batches that share an
// idempotency key. Called with mu held and the queue not empty.
func (g *groupCommit) take() []*pubWaiter {
	n, total := 0, 0
	keys := map[dedupKey]bool{}
	for _, w := range g.queue {
		if n > 0 && g.max > 0 && total+len(w.msgs) > g.max {
			break
		}
		if n > 0 && sharesKey(keys, w.msgs) {
			break
		}
		for _, m := range w.msgs {
			if m.IdempotencyKey != "" {
				keys[dedupKey{m.Lane, m.Tenant, m.IdempotencyKey}] = true
			}
		}
		total += len(w.msgs)
		n++
	}
	group := make([]*pubWaiter, n)
	copy(group, g.queue[:n])
	g.queue = append(g.queue[:0], g.queue[n:]...)
	return group
}

type dedupKey struct{ lane, tenant, key string }

func sharesKey(keys map[dedupKey]bool, msgs []*Message) bool {
	for _, m := range msgs {
		if m.IdempotencyKey != "" && keys[dedupKey{m.Lane, m.Tenant, m.IdempotencyKey}] {
			return true
		}
	}
	return false
}

// flush publishes group's batches in one driver call and gives each waiter
// its results. The call's context ends only when every waiter's has, and
// carries the first waiter's values.
func (g *groupCommit) flush(group []*pubWaiter) {
	total := 0
	for _, w := range group {
		total += len(w.msgs)
	}
	all := make([]*Message, 0, total)
	for _, w := range group {
		all = append(all, w.msgs...)
	}
	ctxs := make([]context.Context, len(group))
	for i, w := range group {
		ctxs[i] = w.ctx
	}
	ctx, release := groupctx.Any(ctxs...)
	defer release()
	rs, err := g.callDriver(ctx, all)
	if err == nil && len(rs) != total {
		err = Errorf("publish", Permanent, "driver returned %d results for %d messages", len(rs), total)
	}
	off := 0
	for _, w := range group {
		if err != nil {
			w.err = err
		} else {
			w.res = rs[off : off+len(w.msgs) : off+len(w.msgs)]
		}
		off += len(w.msgs)
		if w != group[0] {
			close(w.done)
		}
	}
}

// callDriver publishes a group's batch; a panicking driver fails the batch
// instead of leaving the group's callers waiting for ever.
func (g *groupCommit) callDriver(ctx context.Context, msgs []*Message) (rs []PublishResult, err error) {
	defer func() {
		if p := recover(); p != nil {
			rs, err = nil, Errorf("publish", UnknownOutcome, "driver panicked: %v", p)
		}
	}()
	return g.d.Publish(ctx, msgs)
}
