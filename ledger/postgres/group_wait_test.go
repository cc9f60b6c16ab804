package postgres

import (
	"errors"
	"testing"
	"time"
)

// takeAsync runs g.next for a writer in a goroutine; the result comes on
// the returned channel.
func takeAsync(g *grouper, ran bool) <-chan []*groupReq {
	out := make(chan []*groupReq, 1)
	go func() {
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		out <- g.next(nil, ran, timer)
	}()
	return out
}

func newReqs(n int) []*groupReq {
	rs := make([]*groupReq, n)
	for i := range rs {
		rs[i] = &groupReq{done: make(chan error, 1)}
	}
	return rs
}

func mustTake(t *testing.T, ch <-chan []*groupReq, want int, what string) []*groupReq {
	t.Helper()
	select {
	case rs := <-ch:
		if len(rs) != want {
			t.Fatalf("%s: took %d writes, want %d", what, len(rs), want)
		}
		return rs
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no group started", what)
	}
	return nil
}

func mustWait(t *testing.T, ch <-chan []*groupReq, what string) {
	t.Helper()
	select {
	case rs := <-ch:
		t.Fatalf("%s: started a group of %d, want it to wait", what, len(rs))
	case <-time.After(50 * time.Millisecond):
	}
}

// TestGroupWait_Policy: a write that finds no writer busy is taken at
// once; while one writer is busy the writes that arrive wait for it (it
// takes them all when it finishes), and an idle writer takes them only
// when a full group waits or the oldest has waited GroupWait.
func TestGroupWait_Policy(t *testing.T) {
	g := newGrouper(time.Hour)
	idle := takeAsync(g, false)
	rs := newReqs(maxGroup + 5)
	// No writer busy: the first write starts a group at once.
	if err := g.push(rs[0]); err != nil {
		t.Fatal(err)
	}
	mustTake(t, idle, 1, "first write, no writer busy")
	// One writer busy: the next writes wait for it, not for an idle one.
	idle = takeAsync(g, false)
	for _, r := range rs[1:4] {
		if err := g.push(r); err != nil {
			t.Fatal(err)
		}
	}
	mustWait(t, idle, "three writes while a writer is busy")
	// The busy writer finishes: it takes the three at once.
	mustTake(t, takeAsync(g, true), 3, "the busy writer, finished")
	// It is busy again; a full group arrives: the idle writer takes it.
	for _, r := range rs[4 : 4+maxGroup] {
		if err := g.push(r); err != nil {
			t.Fatal(err)
		}
	}
	mustTake(t, idle, maxGroup, "a full group while a writer is busy")
	if w, f := g.waited.Load(), g.full.Load(); w != 0 || f != 1 {
		t.Errorf("waited %d, full %d; want 0, 1", w, f)
	}
	// Two busy now; the last write waits for one of them.
	idle = takeAsync(g, false)
	if err := g.push(rs[len(rs)-1]); err != nil {
		t.Fatal(err)
	}
	mustWait(t, idle, "one write while two writers are busy")
	// Close: the idle writer stops, and the queued write gets an error.
	s := &Store{g: g}
	s.stopGroup()
	if rs := mustTake(t, idle, 0, "idle writer at Close"); rs != nil {
		t.Fatalf("writer got %d writes at Close", len(rs))
	}
	select {
	case err := <-rs[len(rs)-1].done:
		if !errors.Is(err, errClosedPool) {
			t.Errorf("queued write at Close: %v, want %v", err, errClosedPool)
		}
	default:
		t.Error("the write queued at Close got no outcome")
	}
	if err := g.push(newReqs(1)[0]); !errors.Is(err, errClosedPool) {
		t.Errorf("push after Close: %v, want %v", err, errClosedPool)
	}
}

// TestGroupWait_Bound: an idle writer takes a write that has waited
// GroupWait for a busy writer, not earlier; with no wait (negative) it
// takes it at once.
func TestGroupWait_Bound(t *testing.T) {
	for _, wait := range []time.Duration{200 * time.Millisecond, -1} {
		g := newGrouper(wait)
		rs := newReqs(2)
		first := takeAsync(g, false)
		g.push(rs[0])
		mustTake(t, first, 1, "first write")
		at := time.Now()
		idle := takeAsync(g, false)
		g.push(rs[1])
		mustTake(t, idle, 1, "second write, one writer busy")
		took := time.Since(at)
		if wait > 0 && took < wait {
			t.Errorf("wait %v: the idle writer took the write after %v", wait, took)
		}
		if want := int64(0); wait > 0 {
			want = 1
			if g.waited.Load() != want {
				t.Errorf("wait %v: waited %d, want %d", wait, g.waited.Load(), want)
			}
		} else if g.waited.Load() != 0 {
			t.Errorf("no wait: waited %d, want 0 (taken at once)", g.waited.Load())
		}
		(&Store{g: g}).stopGroup()
	}
}
