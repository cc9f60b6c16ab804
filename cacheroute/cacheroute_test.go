package cacheroute_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/switchyard-dev/switchyard/cacheroute"
	"github.com/switchyard-dev/switchyard/spend"
)

func targets(n int) []string {
	var ts []string
	for i := 0; i < n; i++ {
		ts = append(ts, fmt.Sprintf("replica-%d", i))
	}
	return ts
}

// Keys spread evenly over the targets, the same key always has the same
// home (in any Router over the same names: another process), and removing
// one of 5 targets moves only the keys that lived on it.
func TestRouter_HomeSpreadAndStability(t *testing.T) {
	t.Parallel()
	r, _ := cacheroute.New(targets(5), 1)
	again, _ := cacheroute.New(targets(5), 1)
	fewer, _ := cacheroute.New(targets(5)[:4], 1)
	per := map[string]int{}
	moved := 0
	const keys = 10_000
	for i := 0; i < keys; i++ {
		k := fmt.Sprintf("prompt-%d", i)
		h := r.Home(k)
		if again.Home(k) != h {
			t.Fatalf("key %s: home %s in one router, %s in another", k, h, again.Home(k))
		}
		per[h]++
		if h != "replica-4" && fewer.Home(k) != h {
			moved++
		}
	}
	for tg, n := range per {
		if n < keys/5*85/100 || n > keys/5*115/100 {
			t.Errorf("target %s is home to %d of %d keys (want about %d)", tg, n, keys, keys/5)
		}
	}
	if moved != 0 {
		t.Errorf("removing replica-4 moved %d keys that did not live on it", moved)
	}
}

// A key stays on its home while the home has capacity, spills to its next
// target in order when full (not to the least loaded), and comes home
// again once a slot is released; every target full is ErrFull.
func TestRouter_AcquireBoundedLoad(t *testing.T) {
	t.Parallel()
	r, _ := cacheroute.New(targets(3), 2)
	order := r.Order("k")
	var releases []func()
	for i, want := range []int{order[0], order[0], order[1], order[1], order[2], order[2]} {
		got, rel, err := r.Acquire("k")
		if err != nil || got != want {
			t.Fatalf("acquire %d: target %d (%v), want %d", i, got, err, want)
		}
		releases = append(releases, rel)
	}
	if _, _, err := r.Acquire("k"); !errors.Is(err, cacheroute.ErrFull) {
		t.Fatalf("acquire with every target full: %v", err)
	}
	if _, _, err := r.Acquire(""); !errors.Is(err, cacheroute.ErrFull) {
		t.Fatalf("unkeyed acquire with every target full: %v", err)
	}
	releases[0]()
	releases[0]() // a second release does nothing
	if got, _, _ := r.Acquire("k"); got != order[0] {
		t.Fatalf("after a release on the home: target %d, want the home %d", got, order[0])
	}
	if _, _, err := r.Acquire("k"); !errors.Is(err, cacheroute.ErrFull) {
		t.Fatalf("a double release freed two slots: %v", err)
	}
	homed, spilled := r.Placement()
	if homed != 3 || spilled != 4 {
		t.Fatalf("placement homed %d spilled %d, want 3 and 4", homed, spilled)
	}
}

// A call without a key goes to the least loaded target.
func TestRouter_NoKeyLeastLoaded(t *testing.T) {
	t.Parallel()
	r, _ := cacheroute.New(targets(3), 5)
	seen := map[int]int{}
	for i := 0; i < 6; i++ {
		got, _, err := r.Acquire("")
		if err != nil {
			t.Fatal(err)
		}
		seen[got]++
	}
	if len(seen) != 3 || seen[0] != 2 || seen[1] != 2 || seen[2] != 2 {
		t.Fatalf("unkeyed calls placed %v, want 2 on each", seen)
	}
}

func TestRouter_SharesAndBadInput(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ts  []string
		cap int
	}{{nil, 1}, {targets(2), 0}, {[]string{"a", "a"}, 1}, {[]string{""}, 1}} {
		if _, err := cacheroute.New(c.ts, c.cap); err == nil {
			t.Errorf("New(%q, %d) accepted", c.ts, c.cap)
		}
	}
	r, _ := cacheroute.New(targets(1), 1)
	if err := r.Record("k", spend.Usage{Input: -1}); err == nil {
		t.Error("negative usage recorded")
	}
	_ = r.Record("k", spend.Usage{Input: 100, Output: 5})
	_ = r.Record("k", spend.Usage{Input: 20, CachedInput: 80, Output: 5})
	_ = r.Record("j", spend.Usage{Output: 5})
	sh := r.Shares()
	if len(sh) != 2 || sh[0].Key != "j" || sh[0].Cached != 0 || sh[1].Calls != 2 || sh[1].Cached != 0.4 {
		t.Fatalf("shares %+v", sh)
	}
}

// TestRouter_TallyBounded: a worker that sees ever new cache keys keeps at
// most cacheroute.MaxTallyKeys tallies, plus one for the rest, and loses no call.
func TestRouter_TallyBounded(t *testing.T) {
	r, err := cacheroute.New([]string{"a", "b"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	const n = cacheroute.MaxTallyKeys + 500
	for i := 0; i < n; i++ {
		if err := r.Record(fmt.Sprintf("key-%d", i), spend.Usage{Input: 1}); err != nil {
			t.Fatal(err)
		}
	}
	sh := r.Shares()
	if len(sh) != cacheroute.MaxTallyKeys+1 {
		t.Fatalf("%d tallies, want %d", len(sh), cacheroute.MaxTallyKeys+1)
	}
	var calls int64
	for _, s := range sh {
		calls += s.Calls
		if s.Key == cacheroute.OtherKey && s.Calls != 500 {
			t.Errorf("%s holds %d calls, want 500", cacheroute.OtherKey, s.Calls)
		}
	}
	if calls != n {
		t.Fatalf("%d calls tallied, want %d", calls, n)
	}
}
