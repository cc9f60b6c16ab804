package postgres

import (
	"errors"
	"testing"
	"time"
)

// TestGroupHold_Policy: while writes arrive at the hold rate, a write that
// finds no writer busy is held (an idle writer does not take it) until a
// full group is queued, and the group is the writes in arrival order;
// below the rate, or with no hold, the same write is taken at once.
func TestGroupHold_Policy(t *testing.T) {
	// holdGap 10ms: the first gap counts as maxGap (10ms), so holding.
	g := newGrouper(time.Hour, time.Hour, 100)
	idle := takeAsync(g, false)
	rs := newReqs(maxGroup)
	g.push(rs[0])
	mustWait(t, idle, "lone write while holding")
	for _, r := range rs[1 : maxGroup-1] {
		g.push(r)
	}
	mustWait(t, idle, "a group but one queued while holding")
	g.push(rs[maxGroup-1])
	got := mustTake(t, idle, maxGroup, "full group while holding")
	for i, r := range got {
		if r != rs[i] {
			t.Fatalf("write %d of the group is not the %dth queued", i, i)
		}
	}
	if g.held.Load() != 0 {
		t.Errorf("held %d, want 0 (the group started full)", g.held.Load())
	}
	(&Store{g: g}).stopGroup()

	for _, c := range []struct {
		name string
		g    *grouper
	}{
		{"below the hold rate", newGrouper(time.Hour, time.Hour, 1_000_000)}, // holdGap 1µs
		{"no hold", newGrouper(time.Hour, 0, 100)},
		{"no wait", newGrouper(-1, time.Hour, 100)},
	} {
		idle := takeAsync(c.g, false)
		c.g.push(newReqs(1)[0])
		mustTake(t, idle, 1, c.name)
		(&Store{g: c.g}).stopGroup()
	}
}

// TestGroupHold_Expires: a held write is taken once it has been held
// GroupHold, with the writes that arrived meanwhile, and counted.
func TestGroupHold_Expires(t *testing.T) {
	g := newGrouper(time.Hour, 30*time.Millisecond, 100)
	idle := takeAsync(g, false)
	rs := newReqs(3)
	for _, r := range rs {
		g.push(r)
	}
	got := mustTake(t, idle, 3, "held writes")
	for i, r := range got {
		if r != rs[i] {
			t.Fatalf("write %d of the group is not the %dth queued", i, i)
		}
	}
	if g.held.Load() != 1 {
		t.Errorf("held %d, want 1", g.held.Load())
	}
	(&Store{g: g}).stopGroup()
}

// TestGroupHold_Gap: the gap estimate follows the arrivals: writes pushed
// back to back bring it under holdGap, one gap of maxGap takes it back
// above (at the default rate).
func TestGroupHold_Gap(t *testing.T) {
	g := newGrouper(time.Hour, time.Hour, defaultGroupHoldRate)
	g.mu.Lock()
	slow := !g.holding()
	g.mu.Unlock()
	if !slow {
		t.Errorf("before any write: gap %v, holding (holdGap %v)", g.gap, g.holdGap)
	}
	// Writes back to back (a pause of the test's goroutine may lift the
	// average for a while, so push until it holds, within a bound).
	fast := false
	for range 100_000 {
		g.push(&groupReq{})
		g.mu.Lock()
		fast = g.holding()
		g.mu.Unlock()
		if fast {
			break
		}
	}
	if !fast {
		t.Errorf("100,000 writes back to back: gap %v, not holding (holdGap %v)", g.gap, g.holdGap)
	}
	g.mu.Lock()
	g.last = time.Now().Add(-time.Hour)
	g.mu.Unlock()
	g.push(&groupReq{})
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.holding() {
		t.Errorf("after an idle hour: gap %v, still holding (holdGap %v)", g.gap, g.holdGap)
	}
}

// TestGroupHold_Close: a write held when the store closes never runs; its
// caller gets the error of a write after Close.
func TestGroupHold_Close(t *testing.T) {
	g := newGrouper(time.Hour, time.Hour, 100)
	idle := takeAsync(g, false)
	r := newReqs(1)[0]
	g.push(r)
	mustWait(t, idle, "lone write while holding")
	(&Store{g: g}).stopGroup()
	if rs := <-idle; rs != nil {
		t.Fatalf("the writer took %d writes at Close", len(rs))
	}
	select {
	case err := <-r.done:
		if !errors.Is(err, errClosedPool) {
			t.Errorf("held write at Close: %v, want %v", err, errClosedPool)
		}
	default:
		t.Error("the write held at Close got no outcome")
	}
	if r.state.Load() != reqTaken {
		t.Errorf("held write's state %d after Close, want taken (never run)", r.state.Load())
	}
}

// TestGroupHold_AfterBusy: writes queued while a writer was busy are not
// held: the writer that finishes takes them at once, whatever the rate.
func TestGroupHold_AfterBusy(t *testing.T) {
	g := newGrouper(time.Hour, time.Hour, 100)
	first := takeAsync(g, false)
	for _, r := range newReqs(maxGroup) {
		g.push(r)
	}
	mustTake(t, first, maxGroup, "full group")
	rs := newReqs(2)
	g.push(rs[0])
	g.push(rs[1])
	// The busy writer finishes and comes back for more.
	got := mustTake(t, takeAsync(g, true), 2, "writes queued while a writer was busy")
	if got[0] != rs[0] || got[1] != rs[1] {
		t.Fatal("the group is not the writes in arrival order")
	}
	// A write after that finds no writer busy: held again.
	idle := takeAsync(g, true)
	for deadline := time.Now().Add(10 * time.Second); ; {
		g.mu.Lock()
		waiting := g.idle == 1
		g.mu.Unlock()
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer did not come back idle")
		}
		time.Sleep(time.Millisecond)
	}
	g.push(newReqs(1)[0])
	mustWait(t, idle, "lone write after the writers went idle")
	(&Store{g: g}).stopGroup()
}
