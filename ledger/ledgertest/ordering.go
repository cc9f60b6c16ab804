package ledgertest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// The ordering cases check the ledger's Sequencer (broker.Sequencer), which
// serialises ordering keys for every process sharing the ledger on brokers
// without native ordering.
func init() {
	Cases = append(Cases,
		Case{"SequencerOrder", SequencerOrder},
		Case{"SequencerOutOfTurn", SequencerOutOfTurn},
		Case{"SequencerInvalid", SequencerInvalid},
		Case{"SequencerPrune", SequencerPrune},
		Case{"RaceSequencer", RaceSequencer},
	)
}

func sequencer(t *testing.T, mk Maker) broker.Sequencer {
	l := mk(t)
	s := ledger.SequencerOf(l)
	if s == nil {
		t.Skip("the store has no Sequencer")
	}
	return s
}

func grantName(g broker.Grant) string {
	switch g {
	case broker.GrantRun:
		return "run"
	case broker.GrantWait:
		return "wait"
	case broker.GrantLate:
		return "late"
	case broker.GrantInvalid:
		return "invalid"
	}
	return fmt.Sprintf("grant(%d)", int(g))
}

func assign(t *testing.T, s broker.Sequencer, lane, key string, n int) []int64 {
	t.Helper()
	out := make([]int64, n)
	for i := range out {
		v, err := s.Assign(ctx(t), lane, key)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && v != out[i-1]+1 {
			t.Fatalf("Assign gave %d after %d: numbers of a key must be consecutive", v, out[i-1])
		}
		out[i] = v
	}
	return out
}

func wantGrant(t *testing.T, s broker.Sequencer, lane, key string, seq int64, until time.Time, want broker.Grant) {
	t.Helper()
	g, err := s.Acquire(ctx(t), lane, key, seq, until)
	if err != nil {
		t.Fatalf("Acquire(%s, %d): %v", key, seq, err)
	}
	if g != want {
		t.Fatalf("Acquire(%s, %d) = %s, want %s", key, seq, grantName(g), grantName(want))
	}
}

func release(t *testing.T, s broker.Sequencer, lane, key string, seq int64, done bool) {
	t.Helper()
	if err := s.Release(ctx(t), lane, key, seq, done); err != nil {
		t.Fatalf("Release(%s, %d, %v): %v", key, seq, done, err)
	}
}

// SequencerOrder: numbers of a key start in order and one at a time; a
// returned number (not done) keeps the key's turn; other keys are
// independent; a finished number is late; a number never assigned is
// invalid; a key never numbered runs without ordering.
func SequencerOrder(t *testing.T, mk Maker) {
	s := sequencer(t, mk)
	until := time.Now().Add(time.Minute)
	a := assign(t, s, "interactive", "conv-a", 3)
	b := assign(t, s, "interactive", "conv-b", 1)
	other := assign(t, s, "batch", "conv-a", 1) // same key, other lane

	wantGrant(t, s, "interactive", "conv-a", a[1], until, broker.GrantWait)
	wantGrant(t, s, "interactive", "conv-a", a[0], until, broker.GrantRun)
	wantGrant(t, s, "interactive", "conv-b", b[0], until, broker.GrantRun)
	wantGrant(t, s, "batch", "conv-a", other[0], until, broker.GrantRun)
	// The holder's own number again (a redelivery, a lease extension).
	wantGrant(t, s, "interactive", "conv-a", a[0], until, broker.GrantRun)
	wantGrant(t, s, "interactive", "conv-a", a[1], until, broker.GrantWait)

	release(t, s, "interactive", "conv-a", a[0], true)
	wantGrant(t, s, "interactive", "conv-a", a[2], until, broker.GrantWait)
	wantGrant(t, s, "interactive", "conv-a", a[1], until, broker.GrantRun)
	// Given back unfinished (a retry): the key stays with it.
	release(t, s, "interactive", "conv-a", a[1], false)
	wantGrant(t, s, "interactive", "conv-a", a[2], until, broker.GrantWait)
	wantGrant(t, s, "interactive", "conv-a", a[1], until, broker.GrantRun)
	release(t, s, "interactive", "conv-a", a[1], true)
	wantGrant(t, s, "interactive", "conv-a", a[2], until, broker.GrantRun)

	wantGrant(t, s, "interactive", "conv-a", a[0], until, broker.GrantLate)
	wantGrant(t, s, "interactive", "conv-a", a[2]+1000, until, broker.GrantInvalid)
	wantGrant(t, s, "interactive", "never-numbered", 7, until, broker.GrantLate)
	// Releasing what holds nothing changes nothing.
	release(t, s, "interactive", "never-numbered", 7, true)
	release(t, s, "interactive", "conv-a", a[0], true)
	wantGrant(t, s, "interactive", "conv-a", a[2], until, broker.GrantRun)
}

// SequencerOutOfTurn: a number finished before its turn (dead-lettered at
// receive, or its publish failed) is skipped when the turn reaches it, and
// a late copy of it runs without ordering. A holder whose lease has ended
// no longer blocks its own number's redelivery, and no later number starts
// before the holder's number finishes.
func SequencerOutOfTurn(t *testing.T, mk Maker) {
	s := sequencer(t, mk)
	until := time.Now().Add(time.Minute)
	n := assign(t, s, "interactive", "k", 4)
	release(t, s, "interactive", "k", n[1], true) // finished out of turn
	wantGrant(t, s, "interactive", "k", n[1], until, broker.GrantLate)
	wantGrant(t, s, "interactive", "k", n[0], time.Now().Add(-time.Second), broker.GrantRun) // a lease already over
	wantGrant(t, s, "interactive", "k", n[2], until, broker.GrantWait)                       // n[0] started: never skipped
	wantGrant(t, s, "interactive", "k", n[0], until, broker.GrantRun)                        // its redelivery
	release(t, s, "interactive", "k", n[0], true)
	wantGrant(t, s, "interactive", "k", n[3], until, broker.GrantWait)
	wantGrant(t, s, "interactive", "k", n[2], until, broker.GrantRun)
	release(t, s, "interactive", "k", n[2], true)
	wantGrant(t, s, "interactive", "k", n[3], until, broker.GrantRun)
}

// SequencerInvalid: bad arguments are typed errors, not grants.
func SequencerInvalid(t *testing.T, mk Maker) {
	s := sequencer(t, mk)
	until := time.Now().Add(time.Minute)
	long := make([]byte, broker.MaxKeyLen+1)
	for i := range long {
		long[i] = 'k'
	}
	for name, call := range map[string]func() error{
		"empty lane":  func() error { _, err := s.Assign(ctx(t), "", "k"); return err },
		"bad lane":    func() error { _, err := s.Assign(ctx(t), "has space", "k"); return err },
		"empty key":   func() error { _, err := s.Assign(ctx(t), "l", ""); return err },
		"long key":    func() error { _, err := s.Assign(ctx(t), "l", string(long)); return err },
		"control key": func() error { _, err := s.Assign(ctx(t), "l", "a\nb"); return err },
		"zero seq":    func() error { _, err := s.Acquire(ctx(t), "l", "k", 0, until); return err },
		"negative":    func() error { return s.Release(ctx(t), "l", "k", -1, true) },
	} {
		if err := call(); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}

// SequencerPrune: Prune forgets keys whose numbers all finished before the
// horizon; the key is numbered afresh above every old number, so a stray
// old copy stays late.
func SequencerPrune(t *testing.T, mk Maker) {
	l := mk(t)
	s := ledger.SequencerOf(l)
	if s == nil {
		t.Skip("the store has no Sequencer")
	}
	until := time.Now().Add(time.Minute)
	old := assign(t, s, "interactive", "pruned", 2)
	busy := assign(t, s, "interactive", "busy", 2)
	for _, n := range old {
		wantGrant(t, s, "interactive", "pruned", n, until, broker.GrantRun)
		release(t, s, "interactive", "pruned", n, true)
	}
	wantGrant(t, s, "interactive", "busy", busy[0], until, broker.GrantRun)
	if _, err := l.Prune(ctx(t), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	fresh := assign(t, s, "interactive", "pruned", 1)
	if fresh[0] <= old[1] {
		t.Fatalf("a pruned key was numbered %d again, not above its old %d", fresh[0], old[1])
	}
	wantGrant(t, s, "interactive", "pruned", old[0], until, broker.GrantLate)
	wantGrant(t, s, "interactive", "pruned", fresh[0], until, broker.GrantRun)
	// A key still in use survives the prune.
	wantGrant(t, s, "interactive", "busy", busy[1], until, broker.GrantWait)
}

// RaceSequencer: publishers number a key while consumers offer its numbers
// in random order; every number starts exactly once, in order, never two
// at a time.
func RaceSequencer(t *testing.T, mk Maker) {
	s := sequencer(t, mk)
	const (
		keys      = 3
		perKey    = 25
		consumers = 6
	)
	type msg struct {
		key string
		seq int64
	}
	var (
		mu      sync.Mutex
		pending []msg
	)
	var wg sync.WaitGroup
	for k := range keys {
		for range 2 { // two publishers per key
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perKey / 2 {
					key := fmt.Sprintf("race-%d", k)
					n, err := s.Assign(ctx(t), "interactive", key)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					pending = append(pending, msg{key, n})
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	total := len(pending)
	var (
		running  sync.Map // key → *atomic.Int32
		lastMu   sync.Mutex
		last     = map[string]int64{}
		started  atomic.Int64
		deadline = time.Now().Add(45 * time.Second)
	)
	for range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				mu.Lock()
				if len(pending) == 0 {
					mu.Unlock()
					return
				}
				i := rand.IntN(len(pending))
				m := pending[i]
				pending[i] = pending[len(pending)-1]
				pending = pending[:len(pending)-1]
				mu.Unlock()
				g, err := s.Acquire(ctx(t), "interactive", m.key, m.seq, time.Now().Add(time.Minute))
				if err != nil {
					t.Error(err)
					return
				}
				if g != broker.GrantRun {
					if g != broker.GrantWait {
						t.Errorf("%s/%d: %s", m.key, m.seq, grantName(g))
					}
					mu.Lock()
					pending = append(pending, m)
					mu.Unlock()
					continue
				}
				c, _ := running.LoadOrStore(m.key, new(atomic.Int32))
				if c.(*atomic.Int32).Add(1) != 1 {
					t.Errorf("%s: two numbers running at once", m.key)
				}
				lastMu.Lock()
				if prev, ok := last[m.key]; ok && m.seq != prev+1 {
					t.Errorf("%s: %d started after %d", m.key, m.seq, prev)
				}
				last[m.key] = m.seq
				lastMu.Unlock()
				started.Add(1)
				c.(*atomic.Int32).Add(-1)
				if err := s.Release(ctx(t), "interactive", m.key, m.seq, true); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := started.Load(); got != int64(total) {
		t.Fatalf("%d of %d numbers started", got, total)
	}
}
