package broker

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// Browser is implemented by drivers that can read a lane's queued messages
// without leasing them: a browse changes neither the order of the queue,
// nor any message's attempt count, lease or age. Operator tools (peek,
// dead-letter listings) use it; drivers without it are read by leasing the
// messages and giving them back (Broker.Release), which on some brokers
// moves them to the back of the queue.
//
// A driver implements it only when its broker can read by position without
// taking anything: a database select, a list range, a stream read by
// sequence. It is optional and part of the public driver contract.
type Browser interface {
	// Browse returns up to req.Max messages of req.Lane's ready queue (or
	// its dead-letter queue, with req.DeadLetters) in the order the queue
	// delivers them, starting after req.After, and the cursor of the next
	// page ("" when the queue holds no more). The deliveries carry no
	// Handle and cannot be acked: they are copies. Attempt is the number
	// of deliveries the message has had so far (0 when never delivered);
	// dead letters carry DeadLetter.
	//
	// Positions are the broker's: a page boundary may skip or repeat a
	// message that moved meanwhile (taken by a consumer, newly published).
	Browse(ctx context.Context, req BrowseRequest) (*BrowsePage, error)
}

// BrowseRequest parameterises Browser.Browse.
type BrowseRequest struct {
	Lane string
	// DeadLetters browses the lane's dead-letter queue instead.
	DeadLetters bool
	// Max is the most messages to return; at least 1 (Broker caps it at
	// MaxBrowse).
	Max int
	// After is the cursor a previous page returned as Next; "" starts at
	// the head of the queue. Cursors are opaque and driver-specific.
	After string
}

// BrowsePage is one page of a browse.
type BrowsePage struct {
	Messages []*Delivery
	// Next is the cursor of the following page; "" when there is none.
	Next string
}

// MaxBrowse is the largest page Broker.Browse asks a driver for.
const MaxBrowse = 1000

// CanBrowse reports whether the driver can read lanes without leasing
// (see Browser). A Router or Migrating driver can browse a lane only when
// the driver serving it can; Browse then says so with ErrUnsupported.
func (b *Broker) CanBrowse() bool {
	_, ok := b.d.(Browser)
	return ok
}

// Browse reads a page of lane's ready or dead messages without leasing
// them (see Browser). Bodies are opened with Options.Codec where they open
// (a body that does not is shown as stored); framework headers are
// resolved as a receive would, so that a message the broker holds for a
// later time (a long delay hop) is left out of a ready page. For a fair
// lane the shards are read one after another. It returns an error matching
// ErrUnsupported when the driver cannot browse.
func (b *Broker) Browse(ctx context.Context, req BrowseRequest) (*BrowsePage, error) {
	if b.closed.Load() {
		return nil, closedErr("browse")
	}
	if err := ValidateName("lane", req.Lane); err != nil {
		return nil, err
	}
	br, ok := b.d.(Browser)
	if !ok {
		return nil, Errorf("browse", Permanent, "%w: the driver cannot read a queue without leasing its messages", ErrUnsupported)
	}
	if req.Max <= 0 {
		req.Max = 1
	}
	req.Max = min(req.Max, MaxBrowse)
	if fl := b.fair[req.Lane]; fl != nil {
		return b.browseFair(ctx, br, fl, req)
	}
	return b.browseOne(ctx, br, req)
}

// browseOne browses one physical lane.
func (b *Broker) browseOne(ctx context.Context, br Browser, req BrowseRequest) (*BrowsePage, error) {
	p, err := br.Browse(ctx, req)
	if err != nil {
		return nil, Wrap("browse", Transient, err)
	}
	if p == nil {
		p = &BrowsePage{}
	}
	now := b.opts.Now()
	out := p.Messages[:0]
	for _, d := range p.Messages {
		if !req.DeadLetters && !b.browseView(d, now) {
			continue
		}
		_ = b.open(ctx, d) // best effort: shown as stored when it does not open
		out = append(out, d)
	}
	p.Messages = out
	return p, nil
}

// browseView resolves the framework's headers on a browsed live message as
// Broker.filter does on a delivery, without acting on anything: false
// means the message is not ready (a hop held until later).
func (b *Broker) browseView(d *Delivery, now time.Time) bool {
	if d.Headers == nil {
		return true
	}
	if base, err := strconv.Atoi(d.Headers[HeaderAttemptBase]); err == nil && base > 0 {
		d.Attempt = min(d.Attempt, MaxAttemptsLimit) + min(base, MaxAttemptsLimit)
	}
	if s, ok := d.Headers[HeaderHoldUntil]; ok {
		if until, err := time.Parse(time.RFC3339Nano, s); err == nil && until.After(now) {
			return false
		}
		if v, ok := d.Headers[HeaderRunAt]; ok {
			d.RunAt = time.Time{}
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				d.RunAt = t
			}
		}
	}
	if key, ok := d.Headers[HeaderHeldKey]; ok {
		d.IdempotencyKey = key
	}
	for _, h := range []string{HeaderHoldUntil, HeaderRunAt, HeaderHeldKey, HeaderAttemptBase, HeaderOrderSeq} {
		delete(d.Headers, h)
	}
	if len(d.Headers) == 0 {
		d.Headers = nil
	}
	return true
}

// browseFair browses the shards of a fair lane in turn; the cursor is
// "<shard>/<the shard's cursor>".
func (b *Broker) browseFair(ctx context.Context, br Browser, fl *fairLane, req BrowseRequest) (*BrowsePage, error) {
	shard, inner := 0, ""
	if req.After != "" {
		s, rest, ok := strings.Cut(req.After, "/")
		n, err := strconv.Atoi(s)
		if !ok || err != nil || n < 0 || n >= len(fl.shards) {
			return nil, Invalidf("browse: bad cursor %q for fair lane %s", req.After, req.Lane)
		}
		shard, inner = n, rest
	}
	out := &BrowsePage{}
	for shard < len(fl.shards) && len(out.Messages) < req.Max {
		sub := req
		sub.Lane, sub.After, sub.Max = fl.shards[shard], inner, req.Max-len(out.Messages)
		p, err := b.browseOne(ctx, br, sub)
		if err != nil {
			return nil, err
		}
		out.Messages = append(out.Messages, p.Messages...)
		if p.Next != "" {
			out.Next = strconv.Itoa(shard) + "/" + p.Next
			if len(out.Messages) >= req.Max {
				return out, nil
			}
			inner = p.Next
			continue
		}
		shard, inner = shard+1, ""
		out.Next = ""
		if shard < len(fl.shards) {
			out.Next = strconv.Itoa(shard) + "/"
		}
	}
	return out, nil
}

// Browse implements Browser for the lane's route, when that driver can.
func (r *Router) Browse(ctx context.Context, req BrowseRequest) (*BrowsePage, error) {
	if err := r.check("browse"); err != nil {
		return nil, err
	}
	d, err := r.Route(req.Lane)
	if err != nil {
		return nil, err
	}
	br, ok := d.(Browser)
	if !ok {
		return nil, Errorf("browse", Permanent, "%w: the broker of lane %s cannot read a queue without leasing its messages", ErrUnsupported, req.Lane)
	}
	return br.Browse(ctx, req)
}

// Browse implements Browser when both brokers can: From's messages first
// (they are older), then To's; the cursor is "f/<cursor>" or "t/<cursor>".
func (m *Migrating) Browse(ctx context.Context, req BrowseRequest) (*BrowsePage, error) {
	if err := m.check("browse"); err != nil {
		return nil, err
	}
	from, okF := m.From.(Browser)
	to, okT := m.To.(Browser)
	if !okF || !okT {
		return nil, Errorf("browse", Permanent, "%w: a broker of the migration cannot read a queue without leasing its messages", ErrUnsupported)
	}
	side, inner := "f", ""
	if req.After != "" {
		s, rest, ok := strings.Cut(req.After, "/")
		if !ok || (s != "f" && s != "t") {
			return nil, Invalidf("browse: bad cursor %q", req.After)
		}
		side, inner = s, rest
	}
	out := &BrowsePage{}
	if side == "f" {
		sub := req
		sub.After = inner
		p, err := from.Browse(ctx, sub)
		if err != nil {
			return nil, err
		}
		out.Messages = p.Messages
		if p.Next != "" {
			out.Next = "f/" + p.Next
			return out, nil
		}
		inner = ""
		if len(out.Messages) >= req.Max {
			out.Next = "t/"
			return out, nil
		}
	}
	sub := req
	sub.After, sub.Max = inner, req.Max-len(out.Messages)
	p, err := to.Browse(ctx, sub)
	if err != nil {
		return nil, err
	}
	out.Messages = append(out.Messages, p.Messages...)
	if p.Next != "" {
		out.Next = "t/" + p.Next
	}
	return out, nil
}
