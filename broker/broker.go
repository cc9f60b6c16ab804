package broker

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Reserved headers the framework uses to carry state across brokers that
// have no native place for it.
const (
	// HeaderHoldUntil holds a run-at time beyond the driver's MaxDelay
	// (RFC 3339, nanoseconds). Broker re-delays the message until then.
	HeaderHoldUntil = "switchyard-hold-until"
	// HeaderAttemptBase is added to the driver's attempt count after Broker
	// re-published a message (a held nack), so attempts keep growing.
	HeaderAttemptBase = "switchyard-attempt-base"
	// HeaderHeldKey stashes the idempotency key while a message is held, so
	// the re-publish is not deduplicated against itself.
	HeaderHeldKey = "switchyard-held-idempotency-key"
)

// Options configure a Broker. A nil *Options means every default.
type Options struct {
	// DefaultLease is used when a ReceiveRequest has no Lease. Defaults to
	// 30s.
	DefaultLease time.Duration
	// DefaultMaxAttempts applies to messages published with MaxAttempts 0.
	// Defaults to 25.
	DefaultMaxAttempts int
	// Dedup deduplicates idempotency keys for drivers without native
	// deduplication. Defaults to an in-process store with a 24h window,
	// which covers one process only; use the ledger's store to cover many.
	Dedup DedupStore
	// MaxDelay caps native delays below the driver's own maximum; longer
	// delays are held by Broker. Zero uses the driver's maximum. Tests use
	// it to exercise the hold path with short waits.
	MaxDelay time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Logger receives warnings about fallbacks. Defaults to slog.Default().
	// Payloads and credentials are never logged.
	Logger *slog.Logger
}

// WithDefaults returns a copy of o (which may be nil) with every zero field
// set to its default.
func (o *Options) WithDefaults() *Options {
	var c Options
	if o != nil {
		c = *o
	}
	if c.DefaultLease <= 0 {
		c.DefaultLease = 30 * time.Second
	}
	if c.DefaultMaxAttempts <= 0 {
		c.DefaultMaxAttempts = 25
	}
	if c.Dedup == nil {
		c.Dedup = NewMemoryDedup(24 * time.Hour)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return &c
}

// Broker is the portable type the framework and users work with. It wraps a
// Driver and adds, once for every driver: validation, IDs and timestamps,
// size limits, batching to the driver's batch size, the attempt limit where
// the broker has none, deduplication where the broker has none, and delays
// beyond the broker's maximum.
type Broker struct {
	d      Driver
	caps   Capabilities
	opts   *Options
	maxDel time.Duration
	closed atomic.Bool
}

// New wraps d. opts may be nil.
func New(d Driver, opts *Options) (*Broker, error) {
	if d == nil {
		return nil, Invalidf("nil driver")
	}
	o := opts.WithDefaults()
	b := &Broker{d: d, caps: d.Capabilities(), opts: o}
	b.maxDel = b.caps.MaxDelay
	if o.MaxDelay > 0 && (b.maxDel == 0 || o.MaxDelay < b.maxDel) {
		b.maxDel = o.MaxDelay
	}
	return b, nil
}

// Driver returns the wrapped driver.
func (b *Broker) Driver() Driver { return b.d }

// Capabilities returns the driver's capabilities.
func (b *Broker) Capabilities() Capabilities { return b.caps }

// NewID returns a new time-ordered unique message ID (UUIDv7).
func NewID() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}

// Publish validates and enqueues msgs, assigning IDs and EnqueuedAt where
// they are unset (the caller's messages are updated in place). It returns
// one result per message. Invalid or oversized messages get a per-message
// error (ErrInvalid, ErrTooLarge) and are not sent; the others are.
// The returned error is non-nil only when the call as a whole failed.
func (b *Broker) Publish(ctx context.Context, msgs ...*Message) ([]PublishResult, error) {
	if b.closed.Load() {
		return nil, closedErr("publish")
	}
	now := b.opts.Now()
	res := make([]PublishResult, len(msgs))
	send := make([]*Message, 0, len(msgs))
	idx := make([]int, 0, len(msgs))
	var claimed []int // indexes whose dedup claim we hold, to release on failure
	for i, m := range msgs {
		if err := m.Validate(); err != nil {
			res[i].Err = err
			continue
		}
		if m.ID == "" {
			m.ID = NewID()
		}
		if m.EnqueuedAt.IsZero() {
			m.EnqueuedAt = now
		}
		if m.MaxAttempts == 0 {
			m.MaxAttempts = b.opts.DefaultMaxAttempts
		}
		res[i].ID = m.ID
		if b.caps.MaxMessageSize > 0 && m.Size() > b.caps.MaxMessageSize {
			res[i].Err = &Error{Op: "publish", Class: Permanent, Kind: ErrTooLarge, Err: &TooLargeError{Size: m.Size(), Max: b.caps.MaxMessageSize}}
			continue
		}
		if m.IdempotencyKey != "" && !b.caps.Dedup {
			existing, dup, err := b.opts.Dedup.Claim(ctx, m.Lane, m.Tenant, m.IdempotencyKey, m.ID)
			if err != nil {
				res[i].Err = Wrap("publish: dedup", Transient, err)
				continue
			}
			if dup {
				res[i] = PublishResult{ID: existing, Duplicate: true}
				continue
			}
			claimed = append(claimed, i)
		}
		out := m
		if b.maxDel > 0 && m.RunAt.Sub(now) > b.maxDel {
			// The first hop keeps its idempotency key, so native
			// deduplication claims it; later hops travel without it.
			out = b.holdCopy(m, m.RunAt, now, 0, false)
		}
		send = append(send, out)
		idx = append(idx, i)
	}
	release := func(i int) {
		m := msgs[i]
		for _, c := range claimed {
			if c == i {
				// Best effort: a failed release leaves the key claimed until
				// its window ends, the safe direction for dedup.
				_ = b.opts.Dedup.Release(context.WithoutCancel(ctx), m.Lane, m.Tenant, m.IdempotencyKey, m.ID)
			}
		}
	}
	batch := b.caps.MaxBatch
	if batch <= 0 {
		batch = len(send)
	}
	for start := 0; start < len(send); start += batch {
		end := min(start+batch, len(send))
		rs, err := b.d.Publish(ctx, send[start:end])
		if err == nil && len(rs) != end-start {
			err = Errorf("publish", Permanent, "driver returned %d results for %d messages", len(rs), end-start)
		}
		for j := start; j < end; j++ {
			i := idx[j]
			if err != nil {
				res[i].Err = Wrap("publish", Transient, err)
				if ClassOf(err) != UnknownOutcome {
					release(i)
				}
				continue
			}
			r := rs[j-start]
			if r.Err != nil {
				res[i].Err = Wrap("publish", Transient, r.Err)
				if ClassOf(r.Err) != UnknownOutcome {
					release(i)
				}
				continue
			}
			res[i].Duplicate = r.Duplicate
			if r.ID != "" {
				res[i].ID = r.ID
			}
		}
		if err != nil && start+batch < len(send) {
			// Mark the rest as not sent and stop: the broker is failing.
			for j := end; j < len(send); j++ {
				res[idx[j]].Err = Wrap("publish", ClassOf(err), fmt.Errorf("not sent after an earlier batch failed: %w", err))
				release(idx[j])
			}
			return res, nil
		}
	}
	return res, nil
}

// PublishOne publishes one message and returns its result's error.
func (b *Broker) PublishOne(ctx context.Context, m *Message) (PublishResult, error) {
	rs, err := b.Publish(ctx, m)
	if err != nil {
		return PublishResult{}, err
	}
	return rs[0], rs[0].Err
}

// holdCopy returns a copy of m to publish with the longest native delay,
// remembering the real run-at and the attempts already spent.
// With stashKey, the idempotency key moves to a header so that the hop is not
// deduplicated against the message itself.
func (b *Broker) holdCopy(m *Message, until, now time.Time, attemptBase int, stashKey bool) *Message {
	c := m.Clone()
	if c.Headers == nil {
		c.Headers = map[string]string{}
	}
	c.Headers[HeaderHoldUntil] = until.UTC().Format(time.RFC3339Nano)
	if attemptBase > 0 {
		c.Headers[HeaderAttemptBase] = strconv.Itoa(attemptBase)
	} else {
		delete(c.Headers, HeaderAttemptBase)
	}
	if stashKey && c.IdempotencyKey != "" {
		c.Headers[HeaderHeldKey] = c.IdempotencyKey
		c.IdempotencyKey = ""
	}
	if until.Sub(now) > b.maxDel {
		c.RunAt = now.Add(b.maxDel)
	} else {
		c.RunAt = until
	}
	return c
}

// Receive leases up to req.Max messages. It applies the framework's
// fallbacks before returning: held messages that are not due are re-delayed
// and not returned; messages past their attempt limit are dead-lettered
// with ReasonMaxAttempts (where the driver does not do it natively).
func (b *Broker) Receive(ctx context.Context, req ReceiveRequest) ([]*Delivery, error) {
	if b.closed.Load() {
		return nil, closedErr("receive")
	}
	if err := ValidateName("lane", req.Lane); err != nil {
		return nil, err
	}
	if req.Max <= 0 {
		req.Max = 1
	}
	if b.caps.MaxBatch > 0 && req.Max > b.caps.MaxBatch {
		req.Max = b.caps.MaxBatch
	}
	if req.Lease <= 0 {
		req.Lease = b.opts.DefaultLease
	}
	if b.caps.MaxLease > 0 && req.Lease > b.caps.MaxLease {
		req.Lease = b.caps.MaxLease
	}
	deadline := time.Now().Add(req.Wait)
	for {
		ds, err := b.d.Receive(ctx, req)
		if err != nil {
			return nil, Wrap("receive", Transient, err)
		}
		if req.DeadLetters || len(ds) == 0 {
			return ds, nil
		}
		out := ds[:0]
		for _, d := range ds {
			keep, err := b.filter(ctx, d)
			if err != nil {
				return nil, err
			}
			if keep {
				out = append(out, d)
			}
		}
		if len(out) > 0 || req.Wait == 0 || !time.Now().Before(deadline) {
			return out, nil
		}
		req.Wait = time.Until(deadline)
	}
}

// filter applies the receive-side fallbacks to d; false means d was handled
// here and is not for the caller.
func (b *Broker) filter(ctx context.Context, d *Delivery) (bool, error) {
	if d.Headers != nil {
		if base, err := strconv.Atoi(d.Headers[HeaderAttemptBase]); err == nil && base > 0 {
			d.Attempt += base
		}
		if s, ok := d.Headers[HeaderHoldUntil]; ok {
			until, err := time.Parse(time.RFC3339Nano, s)
			now := b.opts.Now()
			if err == nil && until.After(now) {
				// Not due: publish the next hop first, then ack this one. A
				// crash between the two leaves a duplicate hop, never a loss.
				base := d.Attempt - 1
				c := b.holdCopy(&d.Message, until, now, base, true)
				if key := d.Headers[HeaderHeldKey]; key != "" {
					c.Headers[HeaderHeldKey] = key
				}
				if err := b.republish(ctx, c); err != nil {
					return false, err
				}
				if err := b.d.Ack(ctx, []*Delivery{d}); err != nil && ClassOf(err) != Permanent {
					return false, Wrap("receive: hold", Transient, err)
				}
				return false, nil
			}
			// Due: restore the message as published.
			d.RunAt = until
			if key, ok := d.Headers[HeaderHeldKey]; ok {
				d.IdempotencyKey = key
			}
			delete(d.Headers, HeaderHoldUntil)
			delete(d.Headers, HeaderHeldKey)
		}
		delete(d.Headers, HeaderAttemptBase)
	}
	if !b.caps.MaxAttempts {
		max := d.MaxAttempts
		if max <= 0 {
			max = b.opts.DefaultMaxAttempts
		}
		if d.Attempt > max {
			dl := &DeadLetter{Reason: ReasonMaxAttempts, Error: fmt.Sprintf("attempt %d exceeds the limit of %d", d.Attempt, max), At: b.opts.Now()}
			if err := b.d.DeadLetter(ctx, d, dl); err != nil && ClassOf(err) != Permanent {
				return false, Wrap("receive: dead-letter", Transient, err)
			}
			return false, nil
		}
	}
	return true, nil
}

func (b *Broker) republish(ctx context.Context, m *Message) error {
	rs, err := b.d.Publish(ctx, []*Message{m})
	if err == nil && len(rs) == 1 {
		err = rs[0].Err
	}
	return Wrap("republish", Transient, err)
}

// Ack removes the deliveries for good, in batches of the driver's size.
func (b *Broker) Ack(ctx context.Context, ds ...*Delivery) error {
	if b.closed.Load() {
		return closedErr("ack")
	}
	batch := b.caps.MaxBatch
	if batch <= 0 {
		batch = len(ds)
	}
	for start := 0; start < len(ds); start += batch {
		if err := b.d.Ack(ctx, ds[start:min(start+batch, len(ds))]); err != nil {
			return Wrap("ack", Transient, err)
		}
	}
	return nil
}

// Nack makes the message deliverable again after delay, with the next
// attempt number. Delays beyond the driver's maximum are held.
func (b *Broker) Nack(ctx context.Context, d *Delivery, delay time.Duration) error {
	if b.closed.Load() {
		return closedErr("nack")
	}
	if delay < 0 {
		delay = 0
	}
	if b.maxDel > 0 && delay > b.maxDel {
		now := b.opts.Now()
		c := b.holdCopy(&d.Message, now.Add(delay), now, d.Attempt, true)
		if err := b.republish(ctx, c); err != nil {
			return err
		}
		return Wrap("nack", Transient, b.d.Ack(ctx, []*Delivery{d}))
	}
	return Wrap("nack", Transient, b.d.Nack(ctx, d, delay))
}

// Extend prolongs the deliveries' leases to lease from now.
func (b *Broker) Extend(ctx context.Context, lease time.Duration, ds ...*Delivery) error {
	if b.closed.Load() {
		return closedErr("extend")
	}
	if b.caps.MaxLease > 0 && lease > b.caps.MaxLease {
		lease = b.caps.MaxLease
	}
	batch := b.caps.MaxBatch
	if batch <= 0 {
		batch = len(ds)
	}
	for start := 0; start < len(ds); start += batch {
		if err := b.d.Extend(ctx, ds[start:min(start+batch, len(ds))], lease); err != nil {
			return Wrap("extend", Transient, err)
		}
	}
	return nil
}

// DeadLetter moves the delivery to its lane's dead-letter queue.
func (b *Broker) DeadLetter(ctx context.Context, d *Delivery, dl *DeadLetter) error {
	if b.closed.Load() {
		return closedErr("dead-letter")
	}
	if dl == nil || dl.Reason == "" {
		return Invalidf("dead letter needs a reason")
	}
	if dl.At.IsZero() {
		dl.At = b.opts.Now()
	}
	return Wrap("dead-letter", Transient, b.d.DeadLetter(ctx, d, dl))
}

// Replay moves one dead-letter delivery back to its live lane.
func (b *Broker) Replay(ctx context.Context, d *Delivery) error {
	if b.closed.Load() {
		return closedErr("replay")
	}
	if d.DeadLetter == nil {
		return Invalidf("replay: delivery %s is not from a dead-letter queue", d.ID)
	}
	return Wrap("replay", Transient, b.d.Replay(ctx, d))
}

// ReplayDead replays up to max dead letters of lane (all, if max <= 0) and
// returns how many it replayed.
func (b *Broker) ReplayDead(ctx context.Context, lane string, max int) (int, error) {
	n := 0
	for max <= 0 || n < max {
		want := 100
		if max > 0 {
			want = min(want, max-n)
		}
		ds, err := b.Receive(ctx, ReceiveRequest{Lane: lane, Max: want, Lease: time.Minute, DeadLetters: true})
		if err != nil {
			return n, err
		}
		if len(ds) == 0 {
			return n, nil
		}
		for _, d := range ds {
			if err := b.Replay(ctx, d); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// Stats reports the lane's depths.
func (b *Broker) Stats(ctx context.Context, lane string) (Stats, error) {
	if b.closed.Load() {
		return Stats{}, closedErr("stats")
	}
	if err := ValidateName("lane", lane); err != nil {
		return Stats{}, err
	}
	s, err := b.d.Stats(ctx, lane)
	return s, Wrap("stats", Transient, err)
}

// Close closes the driver. It is safe to call twice.
func (b *Broker) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	return b.d.Close()
}

// DedupStore claims idempotency keys for brokers without native
// deduplication. The ledger implements it across processes.
type DedupStore interface {
	// Claim records (lane, tenant, key) → id unless the key is already
	// claimed within the window, in which case it returns the first id and
	// dup=true.
	Claim(ctx context.Context, lane, tenant, key, id string) (existing string, dup bool, err error)
	// Release forgets a claim made by id whose publish failed.
	Release(ctx context.Context, lane, tenant, key, id string) error
}

// NewMemoryDedup returns an in-process DedupStore with the given window. It
// covers publishers in one process only.
func NewMemoryDedup(window time.Duration) DedupStore {
	return &memDedup{window: window, m: map[[3]string]memClaim{}}
}

type memClaim struct {
	id string
	at time.Time
}

type memDedup struct {
	window time.Duration
	mu     sync.Mutex
	m      map[[3]string]memClaim
	ops    int
}

func (s *memDedup) Claim(_ context.Context, lane, tenant, key, id string) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.ops++
	if s.ops%1024 == 0 {
		for k, c := range s.m {
			if now.Sub(c.at) > s.window {
				delete(s.m, k)
			}
		}
	}
	k := [3]string{lane, tenant, key}
	if c, ok := s.m[k]; ok && now.Sub(c.at) <= s.window {
		return c.id, true, nil
	}
	s.m[k] = memClaim{id: id, at: now}
	return "", false, nil
}

func (s *memDedup) Release(_ context.Context, lane, tenant, key, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [3]string{lane, tenant, key}
	if c, ok := s.m[k]; ok && c.id == id {
		delete(s.m, k)
	}
	return nil
}
