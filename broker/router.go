package broker

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Router is a Driver that sends each lane to a driver of its own, so that
// one namespace can keep, say, interactive on NATS and batch on SQS under
// one Broker, one lane policy and one ledger:
//
//	r, err := broker.NewRouter(map[string]broker.Driver{"interactive": natsDrv, "batch": sqsDrv}, embeddedDrv)
//	b, err := broker.New(r, &broker.Options{Dedup: ledger})
//
// A route may itself be a *Migrating, which publishes to a new broker while
// still consuming from the old one (live migration).
//
// Deliveries remember the driver they came from, so Ack, Nack, Extend,
// DeadLetter, Replay and Release go back to it. Capabilities are the
// intersection of the routes' (the weakest of each), so Broker's fallbacks
// cover whatever one of the brokers lacks. Close closes every routed
// driver once. The routed drivers must be comparable (pointer types, as
// every adapter's driver is).
//
// A Router can also be opened by URL (broker.Open), each routed broker's
// URL URL-escaped as a parameter:
//
//	router://?default=<url>&lane.<lane>=<url>[&from.<lane>=<url>][&from.default=<url>]
//
// lane.<lane> routes one lane, default every other lane, and from.<lane>
// (from.default) makes that route a Migrating from the given broker.
// broker.Redact masks credentials inside the nested URLs too.
type Router struct {
	routes   map[string]Driver
	fallback Driver
	caps     Capabilities
	all      []Driver
	// owned, when set (a router opened by URL), are the drivers Close
	// closes instead of all.
	owned  []Driver
	closed atomic.Bool
}

// NewRouter returns a Router sending the lanes named in routes to their
// drivers and every other lane to fallback. A nil fallback makes
// unrouted lanes an ErrInvalid error.
func NewRouter(routes map[string]Driver, fallback Driver) (*Router, error) {
	r := &Router{routes: map[string]Driver{}, fallback: fallback}
	for lane, d := range routes {
		if err := ValidateName("lane", lane); err != nil {
			return nil, err
		}
		if d == nil {
			return nil, Invalidf("router: lane %q has a nil driver", lane)
		}
		r.routes[lane] = d
		r.add(d)
	}
	if fallback != nil {
		r.add(fallback)
	}
	if len(r.all) == 0 {
		return nil, Invalidf("router: no routes and no fallback")
	}
	caps := make([]Capabilities, len(r.all))
	for i, d := range r.all {
		caps[i] = d.Capabilities()
	}
	r.caps = IntersectCapabilities(caps...)
	return r, nil
}

func (r *Router) add(d Driver) {
	for _, e := range r.all {
		if e == d {
			return
		}
	}
	r.all = append(r.all, d)
}

// Route returns the driver that serves lane, or an ErrInvalid error when
// there is none.
func (r *Router) Route(lane string) (Driver, error) {
	if d, ok := r.routes[lane]; ok {
		return d, nil
	}
	if base, _, ok := SplitFairShard(lane); ok {
		// A fair lane's shards go where the lane goes.
		if d, ok := r.routes[base]; ok {
			return d, nil
		}
	}
	if r.fallback != nil {
		return r.fallback, nil
	}
	return nil, Invalidf("router: lane %q has no route and there is no default", lane)
}

// IntersectCapabilities returns what every one of caps provides: the
// smallest limits (0 meaning unlimited) and the features all have.
func IntersectCapabilities(caps ...Capabilities) Capabilities {
	if len(caps) == 0 {
		return Capabilities{}
	}
	out := caps[0]
	minDur := func(a, b time.Duration) time.Duration {
		if a == 0 || b != 0 && b < a {
			return b
		}
		return a
	}
	minInt := func(a, b int) int {
		if a == 0 || b != 0 && b < a {
			return b
		}
		return a
	}
	for _, c := range caps[1:] {
		out.MaxDelay = minDur(out.MaxDelay, c.MaxDelay)
		out.MaxLease = minDur(out.MaxLease, c.MaxLease)
		out.LeaseExtension = out.LeaseExtension && c.LeaseExtension
		if out.Dedup && c.Dedup {
			out.DedupWindow = minDur(out.DedupWindow, c.DedupWindow)
		}
		out.Dedup = out.Dedup && c.Dedup
		out.Ordering = out.Ordering && c.Ordering
		out.DeadLetterReasons = out.DeadLetterReasons && c.DeadLetterReasons
		out.MaxAttempts = out.MaxAttempts && c.MaxAttempts
		out.MaxMessageSize = minInt(out.MaxMessageSize, c.MaxMessageSize)
		out.MaxBatch = minInt(out.MaxBatch, c.MaxBatch)
		out.OldestReadyAge = out.OldestReadyAge && c.OldestReadyAge
	}
	if !out.Dedup {
		out.DedupWindow = 0
	}
	return out
}

func (r *Router) check(op string) error {
	if r.closed.Load() {
		return ClosedError(op)
	}
	return nil
}

// Publish implements Driver: each message goes to its lane's driver. A
// driver whose batch fails as a whole fails only its own messages.
func (r *Router) Publish(ctx context.Context, msgs []*Message) ([]PublishResult, error) {
	if err := r.check("publish"); err != nil {
		return nil, err
	}
	return publishRouted(ctx, msgs, r.Route)
}

// Receive implements Driver.
func (r *Router) Receive(ctx context.Context, req ReceiveRequest) ([]*Delivery, error) {
	if err := r.check("receive"); err != nil {
		return nil, err
	}
	d, err := r.Route(req.Lane)
	if err != nil {
		return nil, err
	}
	ds, err := d.Receive(ctx, req)
	if err != nil {
		return nil, err
	}
	return wrapDeliveries(d, ds), nil
}

// Ack implements Driver.
func (r *Router) Ack(ctx context.Context, ds []*Delivery) error {
	if err := r.check("ack"); err != nil {
		return err
	}
	return multi("ack", ds, func(d Driver, ins []*Delivery) error { return d.Ack(ctx, ins) })
}

// Extend implements Driver.
func (r *Router) Extend(ctx context.Context, ds []*Delivery, lease time.Duration) error {
	if err := r.check("extend"); err != nil {
		return err
	}
	return multi("extend", ds, func(d Driver, ins []*Delivery) error { return d.Extend(ctx, ins, lease) })
}

// Nack implements Driver.
func (r *Router) Nack(ctx context.Context, d *Delivery, delay time.Duration) error {
	if err := r.check("nack"); err != nil {
		return err
	}
	return nackRouted(ctx, d, delay)
}

// DeadLetter implements Driver: the message goes to the dead-letter queue
// of the broker it came from.
func (r *Router) DeadLetter(ctx context.Context, d *Delivery, dl *DeadLetter) error {
	if err := r.check("dead-letter"); err != nil {
		return err
	}
	return deadLetterRouted(ctx, d, dl)
}

// Replay implements Driver: the message goes back to the live lane of the
// broker whose dead-letter queue held it.
func (r *Router) Replay(ctx context.Context, d *Delivery) error {
	if err := r.check("replay"); err != nil {
		return err
	}
	return replayRouted(ctx, d)
}

// Release implements Releaser. Where the origin driver has no Release of
// its own, the message is re-published with its attempt count carried in
// HeaderAttemptBase (as Broker does) and the delivery acked.
func (r *Router) Release(ctx context.Context, d *Delivery, delay time.Duration) error {
	if err := r.check("release"); err != nil {
		return err
	}
	return releaseRouted(ctx, d, delay)
}

// Stats implements Driver.
func (r *Router) Stats(ctx context.Context, lane string) (Stats, error) {
	if err := r.check("stats"); err != nil {
		return Stats{}, err
	}
	d, err := r.Route(lane)
	if err != nil {
		return Stats{}, err
	}
	return d.Stats(ctx, lane)
}

// Lanes implements LaneLister: the routed lanes and every lane the routed
// drivers that can list theirs report.
func (r *Router) Lanes(ctx context.Context) ([]string, error) {
	set := map[string]bool{}
	for l := range r.routes {
		set[l] = true
	}
	for _, d := range r.all {
		if err := listLanes(ctx, d, set); err != nil {
			return nil, err
		}
	}
	return sortedKeys(set), nil
}

// Capabilities implements Driver: the intersection of the routes'.
func (r *Router) Capabilities() Capabilities { return r.caps }

// Close closes every routed driver once.
func (r *Router) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	closing := r.all
	if r.owned != nil {
		closing = r.owned
	}
	var errs []error
	for _, d := range closing {
		if err := d.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

var _ Releaser = (*Router)(nil)
var _ LaneLister = (*Router)(nil)
