package broker

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Migrating is a Driver for live migration from one broker to another: it
// publishes to To and receives from both, alternating which it asks first
// so that From drains even while To is busy. Deliveries go back to the
// broker they came from (a nack or a dead letter of a message received from
// From stays on From). When From reports no ready, delayed or leased
// messages, it is drained and the route can be switched to To alone.
//
// Use it as a Broker's driver or as a Router route:
//
//	m := &broker.Migrating{From: rabbitDrv, To: sqsDrv}
//	b, err := broker.New(m, &broker.Options{Dedup: ledger})
//
// A task may exist on both brokers during the switch (a publisher retrying
// across it, a migrate run interrupted halfway); the ledger's idempotency
// runs it once in effect. Capabilities are the intersection of both,
// without native ordering and deduplication (neither broker sees the other's
// messages), so Broker orders new messages with its Sequencer and claims
// idempotency keys in Options.Dedup — set it to the ledger so that keys
// claimed before the switch are seen after it. Close closes both drivers.
type Migrating struct {
	From, To Driver

	flip   atomic.Uint64
	closed atomic.Bool
}

var _ Driver = (*Migrating)(nil)
var _ Releaser = (*Migrating)(nil)
var _ LaneLister = (*Migrating)(nil)

func (m *Migrating) check(op string) error {
	if m.From == nil || m.To == nil {
		return Invalidf("%s: migrating driver needs both From and To", op)
	}
	if m.closed.Load() {
		return ClosedError(op)
	}
	return nil
}

// Publish implements Driver: everything goes to To.
func (m *Migrating) Publish(ctx context.Context, msgs []*Message) ([]PublishResult, error) {
	if err := m.check("publish"); err != nil {
		return nil, err
	}
	return m.To.Publish(ctx, msgs)
}

// migratingPoll bounds one long poll on To while both brokers are empty, so
// that From is asked again at least this often.
const migratingPoll = 500 * time.Millisecond

// Receive implements Driver: it asks both brokers without waiting,
// alternating which goes first, and while both are empty long-polls To in
// slices of at most 500ms until req.Wait ends.
func (m *Migrating) Receive(ctx context.Context, req ReceiveRequest) ([]*Delivery, error) {
	if err := m.check("receive"); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(req.Wait)
	first, second := m.To, m.From
	if m.flip.Add(1)%2 == 0 {
		first, second = m.From, m.To
	}
	for {
		now := req
		now.Wait = 0
		for _, d := range []Driver{first, second} {
			ds, err := d.Receive(ctx, now)
			if err != nil {
				return nil, err
			}
			if len(ds) > 0 {
				return wrapDeliveries(d, ds), nil
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		poll := req
		poll.Wait = min(left, migratingPoll)
		ds, err := m.To.Receive(ctx, poll)
		if err != nil {
			return nil, err
		}
		if len(ds) > 0 {
			return wrapDeliveries(m.To, ds), nil
		}
		if err := ctx.Err(); err != nil {
			return nil, nil
		}
		if !time.Now().Before(deadline) {
			return nil, nil
		}
	}
}

// Ack implements Driver.
func (m *Migrating) Ack(ctx context.Context, ds []*Delivery) error {
	if err := m.check("ack"); err != nil {
		return err
	}
	return multi("ack", ds, func(d Driver, ins []*Delivery) error { return d.Ack(ctx, ins) })
}

// Extend implements Driver.
func (m *Migrating) Extend(ctx context.Context, ds []*Delivery, lease time.Duration) error {
	if err := m.check("extend"); err != nil {
		return err
	}
	return multi("extend", ds, func(d Driver, ins []*Delivery) error { return d.Extend(ctx, ins, lease) })
}

// Nack implements Driver.
func (m *Migrating) Nack(ctx context.Context, d *Delivery, delay time.Duration) error {
	if err := m.check("nack"); err != nil {
		return err
	}
	return nackRouted(ctx, d, delay)
}

// DeadLetter implements Driver.
func (m *Migrating) DeadLetter(ctx context.Context, d *Delivery, dl *DeadLetter) error {
	if err := m.check("dead-letter"); err != nil {
		return err
	}
	return deadLetterRouted(ctx, d, dl)
}

// Replay implements Driver.
func (m *Migrating) Replay(ctx context.Context, d *Delivery) error {
	if err := m.check("replay"); err != nil {
		return err
	}
	return replayRouted(ctx, d)
}

// Release implements Releaser (see Router.Release).
func (m *Migrating) Release(ctx context.Context, d *Delivery, delay time.Duration) error {
	if err := m.check("release"); err != nil {
		return err
	}
	return releaseRouted(ctx, d, delay)
}

// Stats implements Driver: the sum of both brokers' depths.
func (m *Migrating) Stats(ctx context.Context, lane string) (Stats, error) {
	if err := m.check("stats"); err != nil {
		return Stats{}, err
	}
	a, err := m.To.Stats(ctx, lane)
	if err != nil {
		return Stats{}, err
	}
	b, err := m.From.Stats(ctx, lane)
	if err != nil {
		return Stats{}, err
	}
	return Stats{
		Lane:         lane,
		Ready:        a.Ready + b.Ready,
		InFlight:     a.InFlight + b.InFlight,
		Delayed:      a.Delayed + b.Delayed,
		DeadLettered: a.DeadLettered + b.DeadLettered,
		OldestReady:  max(a.OldestReady, b.OldestReady),
	}, nil
}

// Drained reports whether From holds nothing live (ready, leased or
// delayed) in lane: once every lane is drained the route can point at To
// alone. Dead letters stay on From (move them with the migrate package).
func (m *Migrating) Drained(ctx context.Context, lane string) (bool, error) {
	if err := m.check("stats"); err != nil {
		return false, err
	}
	s, err := m.From.Stats(ctx, lane)
	if err != nil {
		return false, err
	}
	return s.Ready+s.InFlight+s.Delayed == 0, nil
}

// Lanes implements LaneLister: the lanes either broker reports.
func (m *Migrating) Lanes(ctx context.Context) ([]string, error) {
	set := map[string]bool{}
	for _, d := range []Driver{m.From, m.To} {
		if err := listLanes(ctx, d, set); err != nil {
			return nil, err
		}
	}
	return sortedKeys(set), nil
}

// Capabilities implements Driver: the intersection of both, without native
// ordering or deduplication.
func (m *Migrating) Capabilities() Capabilities {
	if m.From == nil || m.To == nil {
		return Capabilities{}
	}
	c := IntersectCapabilities(m.From.Capabilities(), m.To.Capabilities())
	c.Ordering = false
	c.Dedup = false
	c.DedupWindow = 0
	return c
}

// Close closes both drivers.
func (m *Migrating) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	var errs []error
	for _, d := range []Driver{m.To, m.From} {
		if d != nil {
			if err := d.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
