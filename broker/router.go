package broker

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
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

// routed is the Handle of a delivery that passed through a Router or a
// Migrating: the driver it came from and that driver's own delivery.
type routed struct {
	drv Driver
	mu  sync.Mutex
	in  *Delivery
	// seq is the framework's ordering sequence the message arrived with
	// (Broker removes the header once it has acquired the key), carried on
	// a re-published release so the copy keeps its place.
	seq string
}

func wrapDeliveries(drv Driver, ds []*Delivery) []*Delivery {
	out := make([]*Delivery, len(ds))
	for i, in := range ds {
		out[i] = &Delivery{Message: in.Message, Attempt: in.Attempt, LeaseDeadline: in.LeaseDeadline, DeadLetter: in.DeadLetter, Handle: &routed{drv: drv, in: in, seq: in.Headers[HeaderOrderSeq]}}
	}
	return out
}

func routedOf(op string, d *Delivery) (*routed, error) {
	if d == nil {
		return nil, Invalidf("%s: nil delivery", op)
	}
	h, ok := d.Handle.(*routed)
	if !ok {
		return nil, Invalidf("%s: delivery %s was not received through this router", op, d.ID)
	}
	return h, nil
}

// call runs f on the origin driver's own delivery, carrying the fields the
// layers above may have changed down to it and the new lease deadline back.
func (h *routed) call(d *Delivery, f func(in *Delivery) error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.in.Message = d.Message
	h.in.Attempt = d.Attempt
	h.in.DeadLetter = d.DeadLetter
	err := f(h.in)
	d.LeaseDeadline = h.in.LeaseDeadline
	return err
}

// multi runs f once per origin driver with that driver's own deliveries,
// in the order they first appear. Ack and Extend need only the driver's
// handle, so the fields the layers above changed are not carried down;
// Extend carries the new lease deadline up.
func multi(op string, ds []*Delivery, f func(Driver, []*Delivery) error) error {
	extend := op == "extend"
	var order []Driver
	outs := map[Driver][]*Delivery{}
	hs := map[Driver][]*routed{}
	seen := map[*routed]bool{}
	for _, d := range ds {
		h, err := routedOf(op, d)
		if err != nil {
			return err
		}
		if seen[h] {
			continue
		}
		seen[h] = true
		if _, ok := outs[h.drv]; !ok {
			order = append(order, h.drv)
		}
		outs[h.drv] = append(outs[h.drv], d)
		hs[h.drv] = append(hs[h.drv], h)
	}
	var errs []error
	for _, drv := range order {
		list, handles := outs[drv], hs[drv]
		ins := make([]*Delivery, len(handles))
		for i, h := range handles {
			ins[i] = h.in
		}
		err := f(drv, ins)
		if extend {
			for i, h := range handles {
				list[i].LeaseDeadline = h.in.LeaseDeadline
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
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

func publishRouted(ctx context.Context, msgs []*Message, route func(string) (Driver, error)) ([]PublishResult, error) {
	res := make([]PublishResult, len(msgs))
	var order []Driver
	idx := map[Driver][]int{}
	for i, m := range msgs {
		d, err := route(m.Lane)
		if err != nil {
			res[i] = PublishResult{ID: m.ID, Err: err}
			continue
		}
		if _, ok := idx[d]; !ok {
			order = append(order, d)
		}
		idx[d] = append(idx[d], i)
	}
	for _, d := range order {
		is := idx[d]
		send := make([]*Message, len(is))
		for j, i := range is {
			send[j] = msgs[i]
		}
		rs, err := d.Publish(ctx, send)
		if err == nil && len(rs) != len(send) {
			err = Errorf("publish", Permanent, "driver returned %d results for %d messages", len(rs), len(send))
		}
		for j, i := range is {
			if err != nil {
				res[i] = PublishResult{ID: msgs[i].ID, Err: err}
			} else {
				res[i] = rs[j]
			}
		}
	}
	return res, nil
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

func nackRouted(ctx context.Context, d *Delivery, delay time.Duration) error {
	h, err := routedOf("nack", d)
	if err != nil {
		return err
	}
	return h.call(d, func(in *Delivery) error { return h.drv.Nack(ctx, in, delay) })
}

// DeadLetter implements Driver: the message goes to the dead-letter queue
// of the broker it came from.
func (r *Router) DeadLetter(ctx context.Context, d *Delivery, dl *DeadLetter) error {
	if err := r.check("dead-letter"); err != nil {
		return err
	}
	return deadLetterRouted(ctx, d, dl)
}

func deadLetterRouted(ctx context.Context, d *Delivery, dl *DeadLetter) error {
	h, err := routedOf("dead-letter", d)
	if err != nil {
		return err
	}
	return h.call(d, func(in *Delivery) error { return h.drv.DeadLetter(ctx, in, dl) })
}

// Replay implements Driver: the message goes back to the live lane of the
// broker whose dead-letter queue held it.
func (r *Router) Replay(ctx context.Context, d *Delivery) error {
	if err := r.check("replay"); err != nil {
		return err
	}
	return replayRouted(ctx, d)
}

func replayRouted(ctx context.Context, d *Delivery) error {
	h, err := routedOf("replay", d)
	if err != nil {
		return err
	}
	return h.call(d, func(in *Delivery) error { return h.drv.Replay(ctx, in) })
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

func releaseRouted(ctx context.Context, d *Delivery, delay time.Duration) error {
	h, err := routedOf("release", d)
	if err != nil {
		return err
	}
	return h.call(d, func(in *Delivery) error {
		if rel, ok := h.drv.(Releaser); ok {
			return rel.Release(ctx, in, delay)
		}
		now := time.Now()
		c := in.Message.Clone()
		if c.Headers == nil {
			c.Headers = map[string]string{}
		}
		until := now.Add(delay)
		c.Headers[HeaderHoldUntil] = until.UTC().Format(time.RFC3339Nano)
		if _, ok := c.Headers[HeaderRunAt]; !ok {
			c.Headers[HeaderRunAt] = ""
			if !in.RunAt.IsZero() {
				c.Headers[HeaderRunAt] = in.RunAt.UTC().Format(time.RFC3339Nano)
			}
		}
		if base := d.Attempt - 1; base > 0 {
			c.Headers[HeaderAttemptBase] = strconv.Itoa(base)
		} else {
			delete(c.Headers, HeaderAttemptBase)
		}
		if c.IdempotencyKey != "" {
			c.Headers[HeaderHeldKey] = c.IdempotencyKey
			c.IdempotencyKey = ""
		}
		if h.seq != "" {
			c.Headers[HeaderOrderSeq] = h.seq
		}
		c.RunAt = until
		rs, err := h.drv.Publish(ctx, []*Message{c})
		if err == nil && len(rs) == 1 {
			err = rs[0].Err
		}
		if err != nil {
			return err
		}
		return h.drv.Ack(ctx, []*Delivery{in})
	})
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

func listLanes(ctx context.Context, d Driver, set map[string]bool) error {
	l, ok := d.(LaneLister)
	if !ok {
		return nil
	}
	ls, err := l.Lanes(ctx)
	if err != nil {
		return err
	}
	for _, x := range ls {
		set[x] = true
	}
	return nil
}

func sortedKeys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
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
var _ Releaser = (*Router)(nil)
var _ LaneLister = (*Router)(nil)

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

func init() { Register("router", openRouterURL) }

// openRouterURL opens a Router from a URL whose parameters are the
// URL-escaped URLs of the routed brokers:
//
//	router://?default=<url>&lane.<lane>=<url>[&from.<lane>=<url>][&from.default=<url>]
//
// lane.<lane> routes that lane to its own broker; default serves every other
// lane (without it, unrouted lanes are an error). from.<lane> (or
// from.default) puts that route in live migration: it publishes to the
// lane's URL and also consumes the from URL until it is drained (see
// Migrating). The same URL given twice is opened once.
func openRouterURL(ctx context.Context, u *url.URL) (Driver, error) {
	if u.Host != "" || (u.Path != "" && u.Path != "/") {
		return nil, Invalidf("router URL takes only parameters: router://?default=<url>&lane.<lane>=<url>")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, Invalidf("router URL: the parameters do not parse")
	}
	opened := map[string]Driver{}
	fail := func(err error) (Driver, error) {
		for _, d := range opened {
			d.Close()
		}
		return nil, err
	}
	open := func(name, raw string) (Driver, error) {
		if d, ok := opened[raw]; ok {
			return d, nil
		}
		if strings.EqualFold(strings.SplitN(raw, ":", 2)[0], "router") {
			return nil, Invalidf("router URL: %s is itself a router URL", name)
		}
		d, err := OpenDriver(ctx, raw)
		if err != nil {
			return nil, fmt.Errorf("router URL: %s: %w", name, err)
		}
		opened[raw] = d
		return d, nil
	}
	to := map[string]string{}   // lane ("" = default) -> URL
	from := map[string]string{} // lane ("" = default) -> URL
	for k, vs := range q {
		if len(vs) != 1 || vs[0] == "" {
			return fail(Invalidf("router URL: parameter %q must be given once, with a URL", k))
		}
		switch {
		case k == "default":
			to[""] = vs[0]
		case k == "from.default":
			from[""] = vs[0]
		case strings.HasPrefix(k, "lane."):
			to[strings.TrimPrefix(k, "lane.")] = vs[0]
		case strings.HasPrefix(k, "from."):
			from[strings.TrimPrefix(k, "from.")] = vs[0]
		default:
			return fail(Invalidf("router URL: unknown parameter %q (known: default, lane.<lane>, from.<lane>, from.default)", k))
		}
	}
	for lane := range from {
		if _, ok := to[lane]; !ok {
			name := "lane." + lane
			if lane == "" {
				name = "default"
			}
			return fail(Invalidf("router URL: from.%s needs %s, the broker it migrates to", strings.TrimPrefix(name, "lane."), name))
		}
	}
	// Open in a stable order, so errors are reproducible.
	lanes := make([]string, 0, len(to))
	for l := range to {
		lanes = append(lanes, l)
	}
	sort.Strings(lanes)
	routes := map[string]Driver{}
	var fallback Driver
	for _, lane := range lanes {
		name := "lane." + lane
		if lane == "" {
			name = "default"
		}
		d, err := open(name, to[lane])
		if err != nil {
			return fail(err)
		}
		if f, ok := from[lane]; ok {
			fd, err := open("from."+strings.TrimPrefix(name, "lane."), f)
			if err != nil {
				return fail(err)
			}
			if fd == d {
				return fail(Invalidf("router URL: %s migrates from the broker it migrates to", name))
			}
			d = &sharedMigrating{Migrating{From: fd, To: d}}
		}
		if lane == "" {
			fallback = d
		} else {
			if err := ValidateName("lane", lane); err != nil {
				return fail(err)
			}
			routes[lane] = d
		}
	}
	r, err := NewRouter(routes, fallback)
	if err != nil {
		return fail(err)
	}
	r.owned = make([]Driver, 0, len(opened))
	for _, d := range opened {
		r.owned = append(r.owned, d)
	}
	return r, nil
}

// sharedMigrating is a Migrating opened by a router URL, whose drivers may
// be shared with other routes: the Router closes them, not it.
type sharedMigrating struct{ Migrating }

func (m *sharedMigrating) Close() error {
	m.closed.Store(true)
	return nil
}
