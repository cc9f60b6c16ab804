package store

import (
	"context"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// NoteBuffer is how many notes a listener may fall behind by before what
// it missed is replaced by one ledger.TopicGap.
const NoteBuffer = 256

// Hub fans the notes of one source (a poller, a LISTEN connection) out to
// every ledger.Notes listener of a store. The source runs while at least
// one listener does; it is started by the first Listen and stopped when
// the last listener's context ends or the hub closes.
type Hub struct {
	// Run is the source: it calls ready once it receives every note sent
	// from then on (Listen returns only after that), then emit for every
	// note until ctx ends, and returns. It calls emit(Note{Topic: TopicGap}) after any interruption
	// in which notes may have been lost (and is restarted by the hub if it
	// returns while listeners remain, after a pause).
	Run func(ctx context.Context, ready func(), emit func(ledger.Note))

	mu     sync.Mutex
	subs   map[*hubSub]struct{}
	cancel context.CancelFunc
	done   chan struct{}
	ready  chan struct{} // closed once the running source is ready
	closed bool
}

// hubSub is one listener: emit queues its notes (without blocking the
// source) and a goroutine of its own hands them over. A queue that
// reaches NoteBuffer is dropped and replaced by one gap note, which the
// listener always gets, whether more notes come or not.
type hubSub struct {
	out  chan ledger.Note
	wake chan struct{}
	done chan struct{}

	mu    sync.Mutex
	queue []ledger.Note
	lost  bool
}

func newHubSub() *hubSub {
	return &hubSub{out: make(chan ledger.Note), wake: make(chan struct{}, 1), done: make(chan struct{})}
}

func (s *hubSub) push(n ledger.Note) {
	s.mu.Lock()
	if len(s.queue) >= NoteBuffer {
		s.queue, s.lost = s.queue[:0], true
	} else {
		s.queue = append(s.queue, n)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// forward hands the queued notes over until done, then closes out.
func (s *hubSub) forward() {
	defer close(s.out)
	for {
		s.mu.Lock()
		var (
			n  ledger.Note
			ok = true
		)
		switch {
		case s.lost:
			n, s.lost = ledger.Note{Topic: ledger.TopicGap}, false
		case len(s.queue) > 0:
			n = s.queue[0]
			s.queue = s.queue[1:]
		default:
			ok = false
		}
		s.mu.Unlock()
		if !ok {
			select {
			case <-s.wake:
				continue
			case <-s.done:
				return
			}
		}
		select {
		case s.out <- n:
		case <-s.done:
			return
		}
	}
}

// Listen adds a listener until ctx ends.
func (h *Hub) Listen(ctx context.Context, op string) (<-chan ledger.Note, error) {
	if err := ctx.Err(); err != nil {
		return nil, broker.Wrap(op, broker.Transient, err)
	}
	sub := newHubSub()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, Closed(op)
	}
	if h.subs == nil {
		h.subs = map[*hubSub]struct{}{}
	}
	h.subs[sub] = struct{}{}
	go sub.forward()
	if h.cancel == nil {
		rctx, cancel := context.WithCancel(context.Background())
		h.cancel, h.done, h.ready = cancel, make(chan struct{}), make(chan struct{})
		go h.run(rctx, h.done, h.ready)
	}
	ready := h.ready
	h.mu.Unlock()
	go func() {
		<-ctx.Done()
		h.remove(sub)
	}()
	select {
	case <-ready:
	case <-ctx.Done():
	}
	return sub.out, nil
}

func (h *Hub) run(ctx context.Context, done, ready chan struct{}) {
	defer close(done)
	var once sync.Once
	markReady := func() { once.Do(func() { close(ready) }) }
	defer markReady()
	for ctx.Err() == nil {
		h.Run(ctx, markReady, h.emit)
		markReady() // failed before it was ready: listeners get a gap
		if ctx.Err() != nil {
			return
		}
		h.emit(ledger.Note{Topic: ledger.TopicGap})
		select {
		case <-ctx.Done():
		case <-timeAfter(): // a source that failed: try again shortly
		}
	}
}

func (h *Hub) emit(n ledger.Note) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		s.push(n)
	}
}

func (h *Hub) remove(s *hubSub) {
	h.mu.Lock()
	if _, ok := h.subs[s]; !ok {
		h.mu.Unlock()
		return
	}
	delete(h.subs, s)
	close(s.done)
	var (
		cancel context.CancelFunc
		done   chan struct{}
	)
	if len(h.subs) == 0 && h.cancel != nil {
		cancel, done = h.cancel, h.done
		h.cancel, h.done = nil, nil
	}
	h.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// Close stops the source and closes every listener's channel.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	subs := h.subs
	h.subs = nil
	cancel, done := h.cancel, h.done
	h.cancel, h.done = nil, nil
	for s := range subs {
		close(s.done)
	}
	h.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// Note checks a note for Notify.
func Note(op string, n ledger.Note) error {
	if err := broker.ValidateName("note topic", n.Topic); err != nil {
		return broker.Wrap(op, broker.Permanent, err)
	}
	if n.Topic == ledger.TopicGap || n.Topic == ledger.TopicState || n.Topic == ledger.TopicStream {
		return Invalid(op, "note topic %q is the store's own", n.Topic)
	}
	if err := ID(op, n.TaskID); err != nil {
		return err
	}
	if len(n.Detail) > ledger.MaxNoteDetail {
		return Invalid(op, "note detail is %d bytes, the limit is %d", len(n.Detail), ledger.MaxNoteDetail)
	}
	if n.State != "" && !n.State.Valid() {
		return Invalid(op, "note state %q is not a state", n.State)
	}
	return nil
}

// timeAfter is the pause before a failed source is restarted.
func timeAfter() <-chan time.Time { return time.After(200 * time.Millisecond) }
