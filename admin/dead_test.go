package admin

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// extendCounter is the embedded driver, counting the lease renewals that
// pass through it.
type extendCounter struct {
	broker.Driver
	n atomic.Int64
}

func (c *extendCounter) Extend(ctx context.Context, ds []*broker.Delivery, lease time.Duration) error {
	c.n.Add(1)
	return c.Driver.Extend(ctx, ds, lease)
}

// A long bulk run renews the leases of what it holds: the clock moves
// 40% of the lease with every item acted on, so without renewals the
// later items would be acted on with their leases run out.
func TestOps_BulkRenewsLeases(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	var ids []string
	for range 4 {
		ids = append(ids, e.enqueue("batch", "acme", `{}`))
	}
	for range 3 {
		e.enqueue("batch", "globex", `{}`)
	}
	e.kill("batch", broker.ReasonPermanent)
	cnt := &extendCounter{Driver: e.b.Driver()}
	b, err := broker.New(cnt, &broker.Options{Dedup: e.L})
	if err != nil {
		t.Fatal(err)
	}
	ops, err := New(Config{Broker: b, Ledger: e.L, ScanLease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	ops.now = func() time.Time { return clock }
	rep, err := ops.bulk(e.ctx, Scope{}, DeadFilter{Lane: "batch", Tenant: "acme"}, nil, func(ctx context.Context, d *broker.Delivery) error {
		clock = clock.Add(24 * time.Second)
		return ops.cfg.Broker.Ack(ctx, d)
	})
	if err != nil || rep.Done != 4 || len(rep.Failed) != 0 {
		t.Fatalf("bulk: %+v %v", rep, err)
	}
	if cnt.n.Load() == 0 {
		t.Fatal("the leases held during the run were never renewed")
	}
	if s := e.stats("batch"); s.DeadLettered != 3 {
		t.Errorf("left %d dead letters, want globex's 3", s.DeadLettered)
	}
}

// A bulk operation goes lane by lane: by the time it acts on the second
// lane, the first lane's dead letters it did not act on are back in their
// queue, not held for the whole run.
func TestOps_BulkGoesLaneByLane(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	e.enqueue("batch", "globex", `{}`)
	e.enqueue("batch", "globex", `{}`)
	acme := e.enqueue("interactive", "acme", `{}`)
	e.kill("batch", broker.ReasonPermanent)
	e.kill("interactive", broker.ReasonPermanent)
	var seen int
	rep, err := e.ops.bulk(e.ctx, Scope{}, DeadFilter{Tenant: "acme"}, nil, func(ctx context.Context, d *broker.Delivery) error {
		// batch's dead letters (globex's) can be leased again now.
		ds, err := e.b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 10, Lease: time.Minute, DeadLetters: true})
		if err != nil {
			return err
		}
		seen = len(ds)
		for _, x := range ds {
			if err := e.b.Driver().Nack(ctx, x, 0); err != nil {
				return err
			}
		}
		return e.b.Ack(ctx, d)
	})
	if err != nil || rep.Done != 1 || len(rep.Failed) != 0 {
		t.Fatalf("bulk: %+v %v", rep, err)
	}
	if seen != 2 {
		t.Errorf("while acting on lane interactive, %d of lane batch's 2 dead letters were free; want 2", seen)
	}
	if _, err := e.ops.DeadLetter(e.ctx, Scope{}, "", acme); err == nil {
		t.Error("the acted-on dead letter is still there")
	}
}

// An item that has started finishes even when the caller goes away
// (a client disconnecting between a publish and the removal after it).
func TestOps_BulkItemOutlivesCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	e.enqueue("batch", "acme", `{}`)
	e.enqueue("batch", "acme", `{}`)
	e.kill("batch", broker.ReasonPermanent)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	rep, err := e.ops.bulk(ctx, Scope{}, DeadFilter{Lane: "batch"}, nil, func(actx context.Context, d *broker.Delivery) error {
		cancel() // the client is gone
		return e.b.Ack(actx, d)
	})
	if err == nil {
		t.Fatal("a cancelled run reported success")
	}
	if rep == nil || rep.Done != 1 || len(rep.Failed) != 0 {
		t.Fatalf("report %+v: want the started item done and the second not started", rep)
	}
	if s := e.stats("batch"); s.DeadLettered != 1 {
		t.Errorf("%d dead letters left, want 1", s.DeadLettered)
	}
}

// A bulk operation that stops at MaxScan says so, and does not call the
// IDs it did not reach absent.
func TestOps_BulkTruncated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	for range 5 {
		e.enqueue("batch", "globex", `{}`)
	}
	e.kill("batch", broker.ReasonPermanent)
	last := e.enqueue("batch", "acme", `{}`)
	e.kill("batch", broker.ReasonPermanent)
	e.ops.cfg.MaxScan = 3
	rep, err := e.ops.Purge(e.ctx, Scope{}, DeadFilter{Lane: "batch", Tenant: "acme"}, "operator:t", nil)
	if err != nil || !rep.Truncated || rep.Done != 0 {
		t.Fatalf("purge by filter: %+v %v, want truncated", rep, err)
	}
	rep, err = e.ops.Purge(e.ctx, Scope{}, DeadFilter{Lane: "batch", IDs: []string{last}}, "operator:t", nil)
	if err != nil || !rep.Truncated || len(rep.Failed) != 1 || !strings.Contains(rep.Failed[0].Err, "MaxScan") {
		t.Fatalf("purge by ID: %+v %v", rep, err)
	}
	if s := e.stats("batch"); s.DeadLettered != 6 {
		t.Errorf("%d dead letters, want 6", s.DeadLettered)
	}
	e.ops.cfg.MaxScan = 10000
	rep, err = e.ops.Purge(e.ctx, Scope{}, DeadFilter{Lane: "batch", IDs: []string{last}}, "operator:t", nil)
	if err != nil || rep.Truncated || rep.Done != 1 {
		t.Fatalf("purge by ID with room: %+v %v", rep, err)
	}
}

// A bulk operation by ID looks again for an ID a concurrent listing held.
func TestOps_BulkLooksAgainForHeldIDs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	id := e.enqueue("batch", "acme", `{}`)
	e.kill("batch", broker.ReasonPermanent)
	// Another scan (a dashboard tab's listing) holds the dead letter.
	held := e.ops.newLeased()
	if _, err := e.ops.scan(e.ctx, held, "batch", true, 100, nil); err != nil || len(held.ds) != 1 {
		t.Fatalf("hold: %d %v", len(held.ds), err)
	}
	slept := 0
	e.ops.sleep = func(ctx context.Context, d time.Duration) error {
		slept++
		held.giveBack(ctx) // the listing ends
		return nil
	}
	rep, err := e.ops.Replay(e.ctx, Scope{}, DeadFilter{IDs: []string{id}}, "operator:t", nil)
	if err != nil || rep.Done != 1 || len(rep.Failed) != 0 {
		t.Fatalf("replay: %+v %v (looked again %d times)", rep, err, slept)
	}
	if e.state(id) != ledger.Queued {
		t.Errorf("state %s", e.state(id))
	}
}

// A scoped Peek on a broker that can browse reads past other tenants'
// messages to find n of its own, and takes nothing.
func TestOps_PeekScopedBrowses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	for range 3 {
		e.enqueue("batch", "globex", `{}`)
	}
	acme := e.enqueue("batch", "acme", `{}`)
	r, err := e.ops.PeekLane(e.ctx, Scope{Tenant: "acme"}, "batch", 2)
	if err != nil || len(r.Messages) != 1 || r.Messages[0].ID != acme || r.Mode != ReadBrowse {
		t.Fatalf("scoped peek of 2: %+v %v, want acme's one message, browsed", r, err)
	}
	if s := e.stats("batch"); s.Ready != 4 || s.InFlight != 0 {
		t.Errorf("after peeking: %+v", s)
	}
}
