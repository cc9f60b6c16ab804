package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// HeaderOrderSeq carries the framework's per-key sequence number on brokers
// without native ordering.
const HeaderOrderSeq = "switchyard-order-seq"

// Grant is a Sequencer's answer to Acquire.
type Grant int

const (
	// GrantRun: the message is next for its key and may start now.
	GrantRun Grant = iota
	// GrantWait: an earlier message of the key has not finished; try later.
	GrantWait
	// GrantLate: the message's turn has passed (a replay, or a duplicate
	// delivery of a finished one); it runs without ordering constraints.
	GrantLate
	// GrantInvalid: the sequence number was never assigned for the key (a
	// forged or corrupt header, or a message numbered by a sequencer that
	// is not this one). Broker dead-letters the message with
	// ReasonBadSequence rather than run it out of order or hold the key.
	GrantInvalid
)

// Sequencer serialises ordering keys for brokers that cannot (Capabilities.
// Ordering is false): messages that share a key start in the order Assign
// numbered them, one at a time. Every publisher and consumer of a lane must
// share one: the ledger's (ledger/sqlite, ledger/postgres) covers any number
// of processes and survives crashes; NewMemorySequencer covers one process.
//
// Broker finds one without wiring where it can (see Options.Sequencer);
// without one it refuses to publish a keyed message on such a broker
// (ErrNoSequencer) and never runs one out of order.
type Sequencer interface {
	// Assign numbers the next message of (lane, key), from 1.
	Assign(ctx context.Context, lane, key string) (int64, error)
	// Acquire asks whether message seq of (lane, key) may start; on
	// GrantRun it holds the key until `until` (the lease deadline), Release,
	// or a later Acquire of the same seq (a redelivery, or Extend).
	Acquire(ctx context.Context, lane, key string, seq int64, until time.Time) (Grant, error)
	// Release gives the key up. done=true marks seq finished (acked,
	// dead-lettered, or never published), so the next message may start.
	Release(ctx context.Context, lane, key string, seq int64, done bool) error
}

// SequencerPosition is an optional interface of a Sequencer:
// AcquirePosition is Acquire that also reports, with GrantWait, how many
// numbers of the key come first (1: the message is next in line). Broker
// offers a waiting message again after Options.OrderingRetry times that
// (up to 50 times), so the next in line starts soon after its turn comes
// while those far behind do not churn the broker. The ledger's and the
// in-process sequencers implement it.
type SequencerPosition interface {
	AcquirePosition(ctx context.Context, lane, key string, seq int64, until time.Time) (g Grant, ahead int64, err error)
}

// acquirePosition asks sq whether d (number seq of its key, received from
// lane) may start, with its place in line when sq can tell (1 otherwise).
func acquirePosition(ctx context.Context, sq Sequencer, lane string, d *Delivery, seq int64) (Grant, int64, error) {
	if sp, ok := sq.(SequencerPosition); ok {
		return sp.AcquirePosition(ctx, lane, d.OrderingKey, seq, d.LeaseDeadline)
	}
	g, err := sq.Acquire(ctx, lane, d.OrderingKey, seq, d.LeaseDeadline)
	return g, 1, err
}

// maxOrderingBackoff bounds the multiple of Options.OrderingRetry a
// waiting message is given back for.
const maxOrderingBackoff = 50

// SequencerSource is implemented by what can hand out a Sequencer shared
// by every process: the ledger stores (ledger/sqlite, ledger/postgres), and
// drivers with a durable store of their own. Sequencer returns nil when it
// has none.
type SequencerSource interface {
	Sequencer() Sequencer
}

// ErrNoSequencer is the kind of the error a keyed publish gets on a broker
// that neither orders by key natively nor has a shared Sequencer.
var ErrNoSequencer = errors.New("no shared sequencer for ordering keys")

// NewMemorySequencer returns an in-process Sequencer. It is exact for a
// process that both publishes and consumes and keeps running; it keeps a few
// words of state for every key it has seen.
//
// Across processes and restarts it degrades safely rather than stalling: a
// consumer that meets a key it has never seen adopts the first sequence
// number it is offered as the key's next; a key whose next number has not
// shown up for 30 seconds (its message was lost to an unknown-outcome
// publish, or numbered by a publisher that restarted) skips ahead to the
// lowest number waiting; and numbers below the key's next run without
// ordering (GrantLate). Strict ordering across processes needs a durable
// Sequencer shared by all of them.
func NewMemorySequencer() Sequencer {
	return &memSeq{keys: map[[2]string]*seqState{}, stall: 30 * time.Second, now: time.Now}
}

type seqState struct {
	assigned  int64
	nextStart int64
	done      map[int64]bool
	running   int64
	until     time.Time
	progress  time.Time // the last start or finish
}

type memSeq struct {
	mu    sync.Mutex
	keys  map[[2]string]*seqState
	stall time.Duration
	now   func() time.Time
}

func (s *memSeq) state(lane, key string) *seqState {
	k := [2]string{lane, key}
	st := s.keys[k]
	if st == nil {
		st = &seqState{nextStart: 1, done: map[int64]bool{}, progress: s.now()}
		s.keys[k] = st
	}
	return st
}

func (s *memSeq) Assign(_ context.Context, lane, key string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state(lane, key)
	st.assigned++
	return st.assigned, nil
}

func (s *memSeq) Acquire(ctx context.Context, lane, key string, seq int64, until time.Time) (Grant, error) {
	g, _, err := s.AcquirePosition(ctx, lane, key, seq, until)
	return g, err
}

// AcquirePosition implements SequencerPosition.
func (s *memSeq) AcquirePosition(_ context.Context, lane, key string, seq int64, until time.Time) (Grant, int64, error) {
	g, next := s.acquire(lane, key, seq, until)
	return g, max(1, seq-next), nil
}

func (s *memSeq) acquire(lane, key string, seq int64, until time.Time) (Grant, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	st, known := s.keys[[2]string{lane, key}]
	if !known {
		// Numbered by another process (or before a restart): adopt.
		st = s.state(lane, key)
		st.nextStart = seq
	}
	if seq > st.nextStart && st.running == 0 && now.Sub(st.progress) > s.stall {
		// The next number has not shown up for a long time: skip ahead
		// rather than hold the key forever.
		st.nextStart = seq
	}
	switch {
	case seq < st.nextStart || st.done[seq]:
		return GrantLate, st.nextStart
	case seq != st.nextStart:
		return GrantWait, st.nextStart
	case st.running != 0 && st.running != seq && now.Before(st.until):
		return GrantWait, st.nextStart
	}
	st.running, st.until, st.progress = seq, until, now
	return GrantRun, st.nextStart
}

func (s *memSeq) Release(_ context.Context, lane, key string, seq int64, done bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{lane, key}
	st := s.keys[k]
	if st == nil {
		return nil
	}
	if st.running == seq {
		st.running = 0
	}
	st.progress = s.now()
	if done && seq >= st.nextStart {
		st.done[seq] = true
		for st.done[st.nextStart] {
			delete(st.done, st.nextStart)
			st.nextStart++
		}
	}
	return nil
}

// orderRef remembers which sequence a delivery acquired.
type orderRef struct {
	lane, key string
	seq       int64
}

// seqBox holds a Sequencer for an atomic pointer.
type seqBox struct{ s Sequencer }

// resolveSequencer picks the Sequencer of a new Broker (see
// Options.Sequencer); nil means none yet.
func resolveSequencer(o *Options, d Driver) Sequencer {
	if o.Sequencer != nil {
		return o.Sequencer
	}
	if src, ok := o.Dedup.(SequencerSource); ok {
		if s := src.Sequencer(); s != nil {
			return s
		}
	}
	if src, ok := d.(SequencerSource); ok {
		if s := src.Sequencer(); s != nil {
			return s
		}
	}
	return nil
}

// sequencer returns the Sequencer in use, or nil.
func (b *Broker) sequencer() Sequencer {
	if p := b.seq.Load(); p != nil {
		return p.s
	}
	return nil
}

// Sequencer returns the Sequencer b orders keys with: nil when the broker
// orders natively (Capabilities.Ordering) or when b has none yet.
func (b *Broker) Sequencer() Sequencer {
	if b.caps.Ordering {
		return nil
	}
	return b.sequencer()
}

// AdoptSequencer makes s b's Sequencer unless b already has one (given in
// Options, or found on its Dedup store or driver) and reports whether s is
// now in use. switchyard.NewClient and NewServer call it with their
// ledger's Sequencer, so a keyed lane on a broker without native ordering
// is ordered across every process sharing the ledger without wiring. A
// Broker that orders natively ignores it (and reports true: nothing is
// missing).
func (b *Broker) AdoptSequencer(s Sequencer) bool {
	if b.caps.Ordering {
		return true
	}
	if s == nil {
		return false
	}
	box := &seqBox{s}
	if b.seq.CompareAndSwap(nil, box) {
		return true
	}
	return b.sequencer() == s
}

// noSequencer is the error of a keyed message on a Broker without a
// Sequencer.
func (b *Broker) noSequencer(op, lane string) error {
	return &Error{Op: op, Class: Permanent, Kind: ErrNoSequencer, Err: fmt.Errorf(
		"ordering key on lane %q: this broker does not order by key natively and has no shared sequencer; "+
			"open the Client and Server with a ledger (ClientConfig.Ledger, ServerConfig.Ledger), or set "+
			"broker.Options.Sequencer (broker.NewMemorySequencer() only when one process both publishes and consumes the lane)",
		lane)}
}

// parseOrderSeq reads d's ordering sequence: an error names what is wrong
// with a missing or malformed one.
func parseOrderSeq(d *Delivery) (int64, error) {
	v, ok := d.Headers[HeaderOrderSeq]
	if !ok {
		return 0, fmt.Errorf("keyed message %q carries no ordering sequence (header %s)", d.ID, HeaderOrderSeq)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("keyed message %q has a malformed ordering sequence %q (want a positive integer)", d.ID, v)
	}
	return n, nil
}

func orderSeq(d *Delivery) (int64, bool) {
	if d.OrderingKey == "" || d.Headers == nil {
		return 0, false
	}
	v, ok := d.Headers[HeaderOrderSeq]
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil && n > 0
}

func (b *Broker) trackOrder(d *Delivery, r orderRef) {
	b.orderMu.Lock()
	b.orders[d] = r
	b.orderMu.Unlock()
}

// Forget drops what b keeps for d once its caller has given up settling
// it (an ack, nack, release or dead-letter that failed for good): d comes
// back after its lease as a new delivery. d's place in its ordering key
// stays taken meanwhile, and the new delivery takes it over (the holder's
// lease has passed), so the key's order is kept; only the entry that
// linked d to that place is dropped, which would otherwise stay in memory
// for the life of b. Forgetting a delivery b does not track does nothing.
func (b *Broker) Forget(d *Delivery) {
	if d == nil {
		return
	}
	b.orderMu.Lock()
	delete(b.orders, d)
	b.orderMu.Unlock()
}

// tracked is how many deliveries b holds an ordering place for (tests).
func (b *Broker) tracked() int {
	b.orderMu.Lock()
	defer b.orderMu.Unlock()
	return len(b.orders)
}

// releaseOrder lets the next message of d's key start once d is finished
// (done) or returned (not done).
func (b *Broker) releaseOrder(ctx context.Context, d *Delivery, done bool) {
	b.orderMu.Lock()
	r, ok := b.orders[d]
	delete(b.orders, d)
	b.orderMu.Unlock()
	if ok {
		if sq := b.sequencer(); sq != nil {
			b.releaseSeq(context.WithoutCancel(ctx), sq, r, done)
		}
		if done {
			b.park.poke(r.lane, r.key)
		}
	}
}

// releaseSeq gives r's number back to sq, retrying a failed call a few
// times (a shared ledger can be busy for a moment: SQLite's single writer
// under several processes, a PostgreSQL failover). Release is idempotent.
// A release that never lands holds the key until the sequencer's stall
// window has passed, so it is worth the short wait here.
func (b *Broker) releaseSeq(ctx context.Context, sq Sequencer, r orderRef, done bool) {
	var err error
	for i := range releaseTries {
		if err = sq.Release(ctx, r.lane, r.key, r.seq, done); err == nil {
			return
		}
		if i < releaseTries-1 {
			time.Sleep(time.Duration(10<<i) * time.Millisecond)
		}
	}
	b.opts.Logger.Warn("switchyard: could not release an ordering key; its next message waits for the sequencer's stall window",
		"lane", r.lane, "key", r.key, "seq", r.seq, "done", done, "error", err)
}

// releaseTries bounds releaseSeq: 310 ms of waiting at most (10, 20, 40,
// 80 and 160 ms between tries).
const releaseTries = 6
