package broker

import (
	"context"
	"errors"
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
	// HeaderRunAt keeps a held message's own run-at (empty: none) while its
	// hops carry the hop times.
	HeaderRunAt = "switchyard-run-at"
)

// Options configure a Broker. A nil *Options means every default.
type Options struct {
	// DefaultLease is used when a ReceiveRequest has no Lease. Defaults to
	// 30s.
	DefaultLease time.Duration
	// DefaultMaxAttempts limits deliveries of messages published with
	// MaxAttempts 0, as a safety net against messages that crash every
	// consumer (the scheduler's retry policy usually ends them sooner).
	// Drivers that enforce limits natively apply their own default, also
	// 25. Defaults to 25.
	DefaultMaxAttempts int
	// Dedup deduplicates idempotency keys for drivers without native
	// deduplication, and — when set explicitly — beyond the window of
	// drivers whose native deduplication expires (SQS FIFO: 5 minutes,
	// JetStream: its duplicate window). Defaults to an in-process store
	// with a 24h window, which covers one process only; the ledger's store
	// covers every process.
	Dedup DedupStore
	// Sequencer serialises ordering keys for drivers without native
	// ordering (RabbitMQ, NATS JetStream, SQS standard queues, routers and
	// migrations). Every publisher and consumer of a keyed lane must share
	// one. When nil, Broker takes the first of: Dedup's Sequencer when
	// Dedup is a SequencerSource (the ledger stores are), the driver's own
	// (a driver that is a SequencerSource), and a ledger handed over later
	// by AdoptSequencer (switchyard.NewClient and NewServer do it with
	// their ledger). Without any, a keyed publish fails with
	// ErrNoSequencer and a keyed delivery is given back unstarted (with a
	// warning in Logger) rather than run out of order.
	// NewMemorySequencer() is correct only when one process both
	// publishes and consumes the lane; set it explicitly for that case.
	Sequencer Sequencer
	// OrderingRetry is how long a message waits before it is offered again
	// when an earlier message of its ordering key is still running (drivers
	// without native ordering only): the next in line waits this long, one
	// further behind a multiple of it (see SequencerPosition). Defaults to
	// 100ms.
	OrderingRetry time.Duration
	// MaxDelay caps native delays below the driver's own maximum; longer
	// delays are held by Broker. Zero uses the driver's maximum. Tests use
	// it to exercise the hold path with short waits.
	MaxDelay time.Duration
	// Fair makes lanes fair between tenants: Fair[lane] is the number of
	// shard queues the lane is split into (see FairShardName; 1 to
	// MaxFairShards). Publishers and consumers of a lane must agree on it.
	// The URL parameter fair ("?fair=batch:8") sets it for Open. Defaults to
	// no fair lanes.
	Fair map[string]int
	// FairPoll is how long an idle fair lane's receive long-polls one shard
	// before looking at all of them again. Defaults to 100ms.
	FairPoll time.Duration
	// Codec, when set, seals every message body on publish and opens it
	// on receive (dead-letter queues included), so that the broker's
	// storage holds only sealed bodies: codec.AEAD encrypts them. A body
	// that does not open (tampered, sealed under an unknown key, or
	// plaintext) is dead-lettered with ReasonUndecodable and never
	// delivered; one the codec cannot open for now (a key service down)
	// stays leased and comes back after its lease. Publishers and consumers
	// of a lane must agree on it. IDs, lanes, kinds, tenants, keys and
	// headers are not sealed. Defaults to nil: bodies travel as given.
	Codec Codec
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
	if c.OrderingRetry <= 0 {
		c.OrderingRetry = 100 * time.Millisecond
	}
	if c.FairPoll <= 0 {
		c.FairPoll = 100 * time.Millisecond
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

	orderMu sync.Mutex
	orders  map[*Delivery]orderRef
	park    parkLot // keyed messages next in line (park.go)
	// seq is the Sequencer in use (nil: none yet; see Options.Sequencer).
	seq     atomic.Pointer[seqBox]
	seqWarn sync.Map // lane → struct{}: "no sequencer" already logged

	fair map[string]*fairLane // nil: no fair lanes

	// storeDedup: claim keys in Options.Dedup too. True when the broker
	// has no native dedup, or when a store was configured and the native
	// window is finite (the store, typically the ledger, then covers the
	// longer horizon).
	storeDedup bool

	pub *groupCommit // coalesces concurrent publishes
}

// New wraps d. opts may be nil.
func New(d Driver, opts *Options) (*Broker, error) {
	if d == nil {
		return nil, Invalidf("nil driver")
	}
	o := opts.WithDefaults()
	fair, err := newFairLanes(o.Fair)
	if err != nil {
		return nil, err
	}
	b := &Broker{d: d, caps: d.Capabilities(), opts: o, orders: map[*Delivery]orderRef{}, fair: fair}
	b.pub = &groupCommit{d: d, max: b.caps.MaxBatch, inFlight: publishInFlight(d), late: lateGroupCommit(d)}
	b.storeDedup = !b.caps.Dedup || opts != nil && opts.Dedup != nil && b.caps.DedupWindow > 0
	if s := resolveSequencer(o, d); s != nil {
		b.seq.Store(&seqBox{s})
	}
	b.maxDel = b.caps.MaxDelay
	if o.MaxDelay > 0 && (b.maxDel == 0 || o.MaxDelay < b.maxDel) {
		b.maxDel = o.MaxDelay
	}
	return b, nil
}

// Driver returns the wrapped driver.
func (b *Broker) Driver() Driver { return b.d }

// Codec returns Options.Codec (nil: bodies travel as given). The root
// package's Client and Server, and admin.Ops, seal their ledger's payloads
// with it too (ledger.WithCodec), so the broker's options are the one
// place encryption is configured.
func (b *Broker) Codec() Codec { return b.opts.Codec }

// Capabilities returns the driver's capabilities.
func (b *Broker) Capabilities() Capabilities { return b.caps }

// Now reads the broker's clock (Options.Now): the time delays count from.
func (b *Broker) Now() time.Time { return b.opts.Now() }

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
	var pend []pending
	for i, m := range msgs {
		p, r, ok := b.prepare(ctx, i, m, now)
		res[i] = r
		if ok {
			pend = append(pend, p)
		}
	}
	batch := b.caps.MaxBatch
	if batch <= 0 {
		batch = len(pend)
	}
	for start := 0; start < len(pend); start += batch {
		end := min(start+batch, len(pend))
		send := make([]*Message, 0, end-start)
		for _, p := range pend[start:end] {
			send = append(send, p.out)
		}
		rs, err := b.pub.publish(ctx, send)
		if err == nil && len(rs) != len(send) {
			err = Errorf("publish", Permanent, "driver returned %d results for %d messages", len(rs), len(send))
		}
		for j, p := range pend[start:end] {
			e := err
			if e == nil {
				e = rs[j].Err
			}
			if e != nil {
				res[p.i].Err = Wrap("publish", Transient, e)
				b.unwind(ctx, msgs[p.i], p, ClassOf(e))
				continue
			}
			res[p.i].Duplicate = rs[j].Duplicate
			if rs[j].ID != "" {
				res[p.i].ID = rs[j].ID
			}
		}
		if err != nil {
			// The broker is failing: do not send the rest.
			for _, p := range pend[end:] {
				res[p.i].Err = Wrap("publish", ClassOf(err), fmt.Errorf("not sent after an earlier batch failed: %w", err))
				b.unwind(ctx, msgs[p.i], p, Permanent)
			}
			return res, nil
		}
	}
	return res, nil
}

// pending is a message prepared for the driver, with the framework state it
// took (a dedup claim, an ordering sequence) to undo if it is not sent.
type pending struct {
	i       int
	out     *Message
	lane    string // the physical lane, which the dedup claim and sequence are keyed by
	claimed bool
	seq     int64
}

// prepare validates m, fills its defaults and applies the publish-side
// fallbacks. ok=false means r is final and m is not to be sent.
func (b *Broker) prepare(ctx context.Context, i int, m *Message, now time.Time) (p pending, r PublishResult, ok bool) {
	if err := m.Validate(); err != nil {
		return p, PublishResult{Err: err}, false
	}
	if m.ID == "" {
		m.ID = NewID()
	}
	if m.EnqueuedAt.IsZero() {
		m.EnqueuedAt = now
	}
	r.ID = m.ID
	if b.opts.Codec != nil && !alreadySealed(b.opts.Codec, m.Body) {
		sealed, err := b.opts.Codec.Seal(ctx, m.Body, BodyAAD(m))
		if err != nil {
			r.Err = Wrap("publish: seal", Transient, err)
			return p, r, false
		}
		// The caller's message keeps its body; the copy sent carries the
		// sealed one (and the size limit applies to it).
		c := *m
		c.Body = sealed
		m = &c
	}
	if b.caps.MaxMessageSize > 0 && m.Size() > b.caps.MaxMessageSize {
		r.Err = &Error{Op: "publish", Class: Permanent, Kind: ErrTooLarge, Err: &TooLargeError{Size: m.Size(), Max: b.caps.MaxMessageSize}}
		return p, r, false
	}
	p.i = i
	if lane := b.fairPublishLane(m); lane != m.Lane {
		// A fair lane: the copy goes to its tenant's shard; the caller's
		// message keeps the lane it named.
		m = m.Clone()
		m.Lane = lane
	}
	p.lane = m.Lane
	if m.IdempotencyKey != "" && b.storeDedup {
		existing, dup, err := b.opts.Dedup.Claim(ctx, m.Lane, m.Tenant, m.IdempotencyKey, m.ID)
		if err != nil {
			r.Err = Wrap("publish: dedup", Transient, err)
			return p, r, false
		}
		if dup && existing != m.ID {
			return p, PublishResult{ID: existing, Duplicate: true}, false
		}
		// A claim by this very message (a retried publish whose first try
		// had an unknown outcome) is not a duplicate: send it again.
		p.claimed = !dup
	}
	if m.OrderingKey != "" && !b.caps.Ordering {
		sq := b.sequencer()
		if sq == nil {
			r.Err = b.noSequencer("publish", m.Lane)
			b.unwind(ctx, m, p, Permanent)
			return p, r, false
		}
		seq, err := sq.Assign(ctx, m.Lane, m.OrderingKey)
		if err != nil {
			r.Err = Wrap("publish: sequence", Transient, err)
			b.unwind(ctx, m, p, Permanent)
			return p, r, false
		}
		p.seq = seq
		// The caller's message keeps its own headers; the copy carries ours.
		m = m.Clone()
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		m.Headers[HeaderOrderSeq] = strconv.FormatInt(seq, 10)
	}
	p.out = m
	if b.maxDel > 0 && m.RunAt.Sub(now) > b.maxDel {
		// The first hop keeps its idempotency key, so native deduplication
		// claims it; later hops travel without it.
		p.out = b.holdCopy(m, m.RunAt, now, 0, false)
	}
	return p, r, true
}

// unwind undoes the framework state p took for a message that failed to
// publish with an error of class c. A dedup claim is kept when the outcome
// is unknown (the message may be out there); an ordering sequence is always
// released, so a failed publish can never block its key.
func (b *Broker) unwind(ctx context.Context, m *Message, p pending, c Class) {
	ctx = context.WithoutCancel(ctx)
	if p.seq > 0 {
		if sq := b.sequencer(); sq != nil {
			b.releaseSeq(ctx, sq, orderRef{lane: p.lane, key: m.OrderingKey, seq: p.seq}, true)
		}
	}
	if p.claimed && c != UnknownOutcome {
		// Best effort: a failed release leaves the key claimed until its
		// window ends, the safe direction for dedup.
		_ = b.opts.Dedup.Release(ctx, p.lane, m.Tenant, m.IdempotencyKey, m.ID)
	}
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
	if _, ok := c.Headers[HeaderRunAt]; !ok {
		c.Headers[HeaderRunAt] = ""
		if !m.RunAt.IsZero() {
			c.Headers[HeaderRunAt] = m.RunAt.UTC().Format(time.RFC3339Nano)
		}
	}
	if attemptBase > 0 {
		c.Headers[HeaderAttemptBase] = strconv.Itoa(attemptBase)
	} else {
		delete(c.Headers, HeaderAttemptBase)
	}
	if stashKey && c.IdempotencyKey != "" {
		c.Headers[HeaderHeldKey] = c.IdempotencyKey
		c.IdempotencyKey = ""
	}
	if b.maxDel > 0 && until.Sub(now) > b.maxDel {
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
	var ds []*Delivery
	var err error
	if fl := b.fair[req.Lane]; fl != nil {
		ds, err = b.receiveFair(ctx, fl, req)
	} else {
		ds, err = b.receiveOne(ctx, req)
	}
	if b.fair != nil {
		for _, d := range ds {
			b.logical(d)
		}
	}
	return ds, err
}

// receiveOne receives from one physical lane, applying the receive-side
// fallbacks; req is already normalised.
func (b *Broker) receiveOne(ctx context.Context, req ReceiveRequest) ([]*Delivery, error) {
	deadline := time.Now().Add(req.Wait)
	for {
		parked := !req.DeadLetters && !b.caps.Ordering && b.park.has(req.Lane)
		if parked {
			got, err := b.unpark(ctx, req.Lane, req.Max)
			if len(got) > 0 {
				return got, nil
			}
			if err != nil {
				return nil, err
			}
		}
		r := req
		if parked && r.Wait > parkPoll {
			// Come back for the parked messages soon.
			r.Wait = parkPoll
		}
		ds, err := b.d.Receive(ctx, r)
		if err != nil {
			return nil, Wrap("receive", Transient, err)
		}
		if len(ds) == 0 {
			if parked && req.Wait > 0 && time.Now().Before(deadline) {
				req.Wait = time.Until(deadline)
				continue
			}
			return ds, nil
		}
		if req.DeadLetters {
			for _, d := range ds {
				// Best effort: a dead letter that does not open is shown
				// as stored (its reason is then usually undecodable).
				_ = b.open(ctx, d)
			}
			return ds, nil
		}
		out := ds[:0]
		var firstErr error
		for _, d := range ds {
			keep, err := b.filter(ctx, d)
			if keep && err == nil {
				keep, err = b.openLive(ctx, d)
			}
			if err != nil {
				// This one could not be handled (a hop not re-published):
				// it stays leased and comes back after its lease. The others
				// are unaffected.
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			if keep {
				out = append(out, d)
			}
		}
		if len(out) == 0 && firstErr != nil {
			return nil, firstErr
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
			// A tampered base must not wrap the attempt around (a
			// negative attempt would never reach the limit): clamp it.
			d.Attempt = min(d.Attempt, MaxAttemptsLimit) + min(base, MaxAttemptsLimit)
		}
		if s, ok := d.Headers[HeaderHoldUntil]; ok {
			until, err := time.Parse(time.RFC3339Nano, s)
			now := b.opts.Now()
			if err == nil && until.After(now) {
				// Not due: publish the next hop, then ack this one.
				return false, b.requeue(ctx, d, until.Sub(now))
			}
			// Due: restore the message as published.
			if v, ok := d.Headers[HeaderRunAt]; ok {
				d.RunAt = time.Time{}
				if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
					d.RunAt = t
				}
			}
			delete(d.Headers, HeaderHoldUntil)
			delete(d.Headers, HeaderRunAt)
		}
		if key, ok := d.Headers[HeaderHeldKey]; ok {
			d.IdempotencyKey = key
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
			if seq, ok := orderSeq(d); ok && !b.caps.Ordering {
				if sq := b.sequencer(); sq != nil {
					b.releaseSeq(context.WithoutCancel(ctx), sq, orderRef{lane: d.Lane, key: d.OrderingKey, seq: seq}, true)
				}
			}
			return false, nil
		}
	}
	if d.OrderingKey != "" && !b.caps.Ordering {
		return b.filterOrder(ctx, d)
	}
	return true, nil
}

// filterOrder decides whether d, a keyed delivery on a broker without
// native ordering, may start now: its key's Sequencer must grant its
// sequence number. A delivery whose number is missing, malformed or never
// assigned is dead-lettered (ReasonBadSequence); one whose turn has not
// come is given back unspent, as is every keyed delivery while the Broker
// has no Sequencer.
func (b *Broker) filterOrder(ctx context.Context, d *Delivery) (bool, error) {
	seq, err := parseOrderSeq(d)
	if err != nil {
		dl := &DeadLetter{Reason: ReasonBadSequence, Error: err.Error(), At: b.opts.Now()}
		if err := b.d.DeadLetter(ctx, d, dl); err != nil && ClassOf(err) != Permanent {
			return false, Wrap("receive: dead-letter", Transient, err)
		}
		return false, nil
	}
	sq := b.sequencer()
	if sq == nil {
		if _, seen := b.seqWarn.LoadOrStore(d.Lane, struct{}{}); !seen {
			// Once per lane: every keyed delivery of it meets the same gap.
			b.opts.Logger.Warn("switchyard: keyed messages are given back unstarted: "+b.noSequencer("receive", d.Lane).Error(), "lane", d.Lane)
		}
		return false, b.requeue(ctx, d, max(b.opts.OrderingRetry, time.Second))
	}
	g, ahead, err := acquirePosition(ctx, sq, d.Lane, d, seq)
	if err != nil {
		// Cannot tell whether it may run: give it back unspent.
		return false, b.requeue(ctx, d, b.opts.OrderingRetry)
	}
	if g == GrantWait && ahead <= 1 && b.parkAdd(d, seq, time.Now()) {
		return false, nil // next in line: parked here (see park.go)
	}
	return b.admit(ctx, d, seq, g, ahead)
}

// admit acts on the sequencer's grant for d: run it (tracked, so that its
// finish releases the key), give it back to wait its turn, or dead-letter
// a number that was never assigned.
func (b *Broker) admit(ctx context.Context, d *Delivery, seq int64, g Grant, ahead int64) (bool, error) {
	switch g {
	case GrantRun, GrantLate:
		// A late one is tracked too, so that a nack that re-publishes it
		// keeps its number (its release changes nothing).
		b.trackOrder(d, orderRef{lane: d.Lane, key: d.OrderingKey, seq: seq})
	case GrantWait:
		return false, b.requeue(ctx, d, b.opts.OrderingRetry*time.Duration(min(max(ahead, 1), maxOrderingBackoff)))
	default:
		dl := &DeadLetter{Reason: ReasonBadSequence, At: b.opts.Now(),
			Error: fmt.Sprintf("ordering sequence %d was never assigned for key %q on lane %q", seq, d.OrderingKey, d.Lane)}
		if err := b.d.DeadLetter(ctx, d, dl); err != nil && ClassOf(err) != Permanent {
			return false, Wrap("receive: dead-letter", Transient, err)
		}
		return false, nil
	}
	delete(d.Headers, HeaderOrderSeq)
	return true, nil
}

// BodyAAD is the additional data Broker binds a sealed body to: the
// message's ID, kind and tenant. A sealed body copied into another message
// does not open.
func BodyAAD(m *Message) []byte {
	b := make([]byte, 0, 24+len(m.ID)+len(m.Kind)+len(m.Tenant))
	b = append(b, "switchyard body\x00"...)
	b = appendString(b, m.ID)
	b = appendString(b, m.Kind)
	return appendString(b, m.Tenant)
}

// alreadySealed reports whether body is sealed by c's own format (when c
// can tell, with an IsSealed method): a dead letter whose body did not open
// and is re-published as stored (moved to another lane, say) is sent as it
// is rather than sealed twice, so the right key still opens it.
func alreadySealed(c Codec, body []byte) bool {
	s, ok := c.(interface{ IsSealed([]byte) bool })
	return ok && s.IsSealed(body)
}

// open replaces d's sealed body by its plaintext, keeping the sealed one
// for the driver (see wire).
func (b *Broker) open(ctx context.Context, d *Delivery) error {
	if b.opts.Codec == nil || d.sealed != nil {
		return nil
	}
	pt, err := b.opts.Codec.Open(ctx, d.Body, BodyAAD(&d.Message))
	if err != nil {
		return err
	}
	if d.Body == nil {
		d.Body = []byte{} // sealed is non-nil once opened
	}
	d.sealed, d.Body = d.Body, pt
	return nil
}

// openLive opens a live delivery's body. A body that can never open is
// dead-lettered with ReasonUndecodable (keep=false, no error); one that
// cannot open for now stays leased and comes back after its lease.
func (b *Broker) openLive(ctx context.Context, d *Delivery) (keep bool, err error) {
	err = b.open(ctx, d)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, ErrUndecodable) {
		// It stays leased and comes back; its ordering turn is not spent.
		if !b.caps.Ordering {
			b.releaseOrder(ctx, d, false)
		}
		return false, Wrap("receive: open body", Transient, err)
	}
	b.opts.Logger.Warn("switchyard: a message body does not open; dead-lettered as undecodable",
		"id", d.ID, "lane", d.Lane, "kind", d.Kind, "error", err)
	dl := &DeadLetter{Reason: ReasonUndecodable, Error: "body does not open: " + err.Error(), At: b.opts.Now()}
	if err := b.d.DeadLetter(ctx, d, dl); err != nil && ClassOf(err) != Permanent {
		return false, Wrap("receive: dead-letter", Transient, err)
	}
	if !b.caps.Ordering {
		b.releaseOrder(ctx, d, true)
	}
	return false, nil
}

// Wire returns d as the driver delivered it: d itself, or, when Broker
// opened its body with Options.Codec or received it from a shard of a fair
// lane, a copy carrying the sealed body and the shard's physical lane. Code
// that hands a delivery from Broker.Receive to the Driver directly passes
// Wire(d), so that a driver which re-publishes the message (on nack,
// release, dead-letter or replay) never writes the plaintext, and every
// call reaches the shard the message sits in.
//
// The copy does not carry LeaseDeadline: a heartbeat may be moving it while
// the delivery is settled, and drivers settle by Handle.
func Wire(d *Delivery) *Delivery {
	if d.sealed == nil && d.shard == "" {
		return d
	}
	c := wireCopy(d, false)
	if d.sealed != nil {
		c.Body = d.sealed
	}
	return c
}

// wireCopy is d for its driver: its physical lane (the shard, when d came
// from one) and no Broker-private state. It copies field by field, never
// the whole struct, so that reading d here does not race with a heartbeat
// writing d.LeaseDeadline (Extend) while d is acked or nacked: only an
// extension, which runs on the heartbeat's goroutine, asks for the lease
// (lease=true). A field added to Delivery must be added here.
func wireCopy(d *Delivery, lease bool) *Delivery {
	c := &Delivery{Message: d.Message, Attempt: d.Attempt, DeadLetter: d.DeadLetter, Handle: d.Handle}
	if lease {
		c.LeaseDeadline = d.LeaseDeadline
	}
	if d.shard != "" {
		c.Lane = d.shard
	}
	return c
}

// WireLane is Wire(d).Lane without the copy: the physical lane the driver
// delivered d from (a fair lane's shard, or d.Lane itself). Tools that
// show deliveries in the broker's own terms (asynq's worker records) use
// it; everything else uses d.Lane.
func WireLane(d *Delivery) string {
	if d.shard != "" {
		return d.shard
	}
	return d.Lane
}

// onShard returns d for a driver call that does not re-publish the
// message (ack, extend): d itself, or a copy carrying the shard's physical
// lane when d came from a shard of a fair lane.
func onShard(d *Delivery) *Delivery {
	if d.shard == "" {
		return d
	}
	return wireCopy(d, false)
}

// onShards is onShard of each of ds (with their leases when lease is set:
// an extension); it returns ds itself when none came from a shard.
func onShards(ds []*Delivery, lease bool) []*Delivery {
	var out []*Delivery
	for i, d := range ds {
		if d.shard == "" && out == nil {
			continue
		}
		if out == nil {
			out = make([]*Delivery, len(ds))
			copy(out, ds[:i])
		}
		if d.shard == "" {
			out[i] = d
		} else {
			out[i] = wireCopy(d, lease)
		}
	}
	if out == nil {
		return ds
	}
	return out
}

// logical gives d, a delivery about to leave Broker, its logical lane: the
// fair lane for a shard, keeping the shard for the driver (see Wire).
func (b *Broker) logical(d *Delivery) {
	if d.shard != "" {
		return
	}
	if lane := b.LaneOf(d.Lane); lane != d.Lane {
		d.shard, d.Lane = d.Lane, lane
	}
}

// requeue gives d back to be offered again after delay without spending an
// attempt: it publishes the next hop, then acks d. A crash between the two
// leaves a duplicate, never a loss.
func (b *Broker) requeue(ctx context.Context, d *Delivery, delay time.Duration) error {
	now := b.opts.Now()
	c := b.holdCopy(&Wire(d).Message, now.Add(delay), now, d.Attempt-1, true)
	if key := d.Headers[HeaderHeldKey]; key != "" {
		c.Headers[HeaderHeldKey] = key
	}
	b.carryOrder(d, c)
	if err := b.republish(ctx, c); err != nil {
		return err
	}
	if err := b.d.Ack(ctx, []*Delivery{onShard(d)}); err != nil && ClassOf(err) != Permanent {
		return Wrap("receive: requeue", Transient, err)
	}
	return nil
}

// carryOrder puts the ordering sequence d acquired back on c, a copy of d
// about to be re-published, so the copy keeps its place in its key's order.
func (b *Broker) carryOrder(d *Delivery, c *Message) {
	if b.caps.Ordering {
		return
	}
	b.orderMu.Lock()
	r, ok := b.orders[d]
	b.orderMu.Unlock()
	if ok {
		c.Headers[HeaderOrderSeq] = strconv.FormatInt(r.seq, 10)
	}
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
		part := ds[start:min(start+batch, len(ds))]
		if err := b.d.Ack(ctx, onShards(part, false)); err != nil {
			return Wrap("ack", Transient, err)
		}
		if !b.caps.Ordering {
			for _, d := range part {
				b.releaseOrder(ctx, d, true)
			}
		}
	}
	return nil
}

// Nack makes the message deliverable again after delay, with the next
// attempt number. Delays beyond the driver's maximum are held.
func (b *Broker) Nack(ctx context.Context, d *Delivery, delay time.Duration) error {
	return b.nack(ctx, d, delay, "")
}

func (b *Broker) nack(ctx context.Context, d *Delivery, delay time.Duration, errText string) error {
	if b.closed.Load() {
		return closedErr("nack")
	}
	if delay < 0 {
		delay = 0
	}
	if b.maxDel > 0 && delay > b.maxDel {
		now := b.opts.Now()
		c := b.holdCopy(&Wire(d).Message, now.Add(delay), now, d.Attempt, true)
		b.carryOrder(d, c)
		if err := b.republish(ctx, c); err != nil {
			return err
		}
		if err := b.d.Ack(ctx, []*Delivery{onShard(d)}); err != nil {
			return Wrap("nack", Transient, err)
		}
	} else if err := b.driverNack(ctx, Wire(d), delay, errText); err != nil { // nack_error.go
		return Wrap("nack", Transient, err)
	}
	if !b.caps.Ordering {
		b.releaseOrder(ctx, d, false)
	}
	return nil
}

// Releaser is implemented by drivers that can give a delivery back without
// counting an attempt. Broker.Release uses it when present.
type Releaser interface {
	// Release ends d's lease and makes it deliverable again after delay,
	// with the same attempt number on its next delivery.
	Release(ctx context.Context, d *Delivery, delay time.Duration) error
}

// Release gives d back without spending an attempt: its next delivery has
// the same attempt number. The scheduler uses it for snoozes and for work
// returned at shutdown. Drivers without Releaser get a re-publish of the
// message followed by an ack.
func (b *Broker) Release(ctx context.Context, d *Delivery, delay time.Duration) error {
	if b.closed.Load() {
		return closedErr("release")
	}
	if delay < 0 {
		delay = 0
	}
	var err error
	if r, ok := b.d.(Releaser); ok && (b.maxDel == 0 || delay <= b.maxDel) {
		err = Wrap("release", Transient, r.Release(ctx, Wire(d), delay))
	} else {
		err = b.requeue(ctx, d, delay)
	}
	if err == nil && !b.caps.Ordering {
		b.releaseOrder(ctx, d, false)
	}
	return err
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
		part := ds[start:min(start+batch, len(ds))]
		wire := onShards(part, true)
		err := b.d.Extend(ctx, wire, lease)
		for i, w := range wire {
			if w != part[i] {
				// The driver set the copy's new deadline.
				part[i].LeaseDeadline = w.LeaseDeadline
			}
		}
		if err != nil {
			return Wrap("extend", Transient, err)
		}
	}
	if !b.caps.Ordering {
		until := time.Now().Add(lease)
		for _, d := range ds {
			b.orderMu.Lock()
			r, ok := b.orders[d]
			b.orderMu.Unlock()
			if ok {
				if sq := b.sequencer(); sq != nil {
					_, _ = sq.Acquire(ctx, r.lane, r.key, r.seq, until)
				}
			}
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
	if err := b.d.DeadLetter(ctx, Wire(d), dl); err != nil {
		return Wrap("dead-letter", Transient, err)
	}
	if !b.caps.Ordering {
		b.releaseOrder(ctx, d, true)
	}
	return nil
}

// Replay moves one dead-letter delivery back to its live lane.
func (b *Broker) Replay(ctx context.Context, d *Delivery) error {
	if b.closed.Load() {
		return closedErr("replay")
	}
	if d.DeadLetter == nil {
		return Invalidf("replay: delivery %s is not from a dead-letter queue", d.ID)
	}
	if hasHopHeaders(d.Headers) {
		// It died in the middle of a hold: the stored message carries hop
		// state (an attempt base, a hold) that a replay must not inherit.
		// Publish a clean copy, then remove the dead letter.
		c := Wire(d).Message.Clone()
		if v, ok := c.Headers[HeaderRunAt]; ok {
			c.RunAt = time.Time{}
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil && t.After(b.opts.Now()) {
				c.RunAt = t
			}
		}
		if key := c.Headers[HeaderHeldKey]; key != "" {
			c.IdempotencyKey = key
		}
		for _, h := range []string{HeaderHoldUntil, HeaderAttemptBase, HeaderHeldKey, HeaderRunAt} {
			delete(c.Headers, h)
		}
		// The replayed copy must not be deduplicated against its own key.
		hold := c.IdempotencyKey
		if hold != "" {
			c.Headers[HeaderHeldKey], c.IdempotencyKey = hold, ""
		}
		if b.maxDel > 0 && c.RunAt.Sub(b.opts.Now()) > b.maxDel {
			c = b.holdCopy(c, c.RunAt, b.opts.Now(), 0, false)
		}
		if err := b.republish(ctx, c); err != nil {
			return err
		}
		return Wrap("replay", Transient, b.d.Ack(ctx, []*Delivery{onShard(d)}))
	}
	return Wrap("replay", Transient, b.d.Replay(ctx, Wire(d)))
}

func hasHopHeaders(h map[string]string) bool {
	for _, k := range []string{HeaderHoldUntil, HeaderAttemptBase} {
		if _, ok := h[k]; ok {
			return true
		}
	}
	return false
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
	if fl := b.fair[lane]; fl != nil {
		return b.statsFair(ctx, lane, fl)
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

// Accept applies to d, a live delivery received outside Receive (handed
// over by an AWS Lambda event-source mapping, say, and turned into a
// Delivery by its driver), the receive-side fallbacks Receive applies: an
// attempt base or a hold carried by a re-published copy, the attempt limit
// where the driver has none, ordering by key where the broker has none,
// and opening a sealed body. keep=false means Accept settled d itself (it
// was re-delayed, given back for its ordering turn, or dead-lettered with
// a reason) and it must not run; an error means it could not be handled
// now and stays leased, to come back after its lease.
func (b *Broker) Accept(ctx context.Context, d *Delivery) (keep bool, err error) {
	if b.closed.Load() {
		return false, closedErr("accept")
	}
	if d == nil {
		return false, Invalidf("accept: nil delivery")
	}
	keep, err = b.filter(ctx, d)
	if keep && err == nil {
		keep, err = b.openLive(ctx, d)
	}
	if keep && err == nil && b.fair != nil {
		b.logical(d)
	}
	return keep, err
}
