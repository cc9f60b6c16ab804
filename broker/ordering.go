package broker

import (
	"context"
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
)

// Sequencer serialises ordering keys for brokers that cannot (Capabilities.
// Ordering is false): messages that share a key start in the order Assign
// numbered them, one at a time. The ledger implements it across processes;
// NewMemorySequencer covers one process.
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

func (s *memSeq) Acquire(_ context.Context, lane, key string, seq int64, until time.Time) (Grant, error) {
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
		return GrantLate, nil
	case seq != st.nextStart:
		return GrantWait, nil
	case st.running != 0 && st.running != seq && now.Before(st.until):
		return GrantWait, nil
	}
	st.running, st.until, st.progress = seq, until, now
	return GrantRun, nil
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

// releaseOrder lets the next message of d's key start once d is finished
// (done) or returned (not done).
func (b *Broker) releaseOrder(ctx context.Context, d *Delivery, done bool) {
	b.orderMu.Lock()
	r, ok := b.orders[d]
	delete(b.orders, d)
	b.orderMu.Unlock()
	if ok {
		_ = b.opts.Sequencer.Release(context.WithoutCancel(ctx), r.lane, r.key, r.seq, done)
	}
}
