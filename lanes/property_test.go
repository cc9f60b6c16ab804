package lanes

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// genLoad draws a pool, 2–4 handler lanes (plus a manual lane with work
// that must never be chosen), random loads and optionally a pause and
// borrowing. All tasks cost one slot.
func genLoad(t *rapid.T) (simConfig, time.Duration) {
	total := rapid.IntRange(2, 10).Draw(t, "total")
	nl := rapid.IntRange(2, 4).Draw(t, "lanes")
	horizon := 6 * time.Second
	cfg := simConfig{Total: total, Horizon: horizon}
	reservedLeft := total - 1 // keep at least one shared slot
	var dmax time.Duration
	durs := make([]time.Duration, nl)
	for i := range nl {
		r := 0
		if reservedLeft > 0 {
			r = rapid.IntRange(0, min(2, reservedLeft)).Draw(t, fmt.Sprintf("reserved%d", i))
		}
		reservedLeft -= r
		l := Lane{
			Name:          fmt.Sprintf("l%d", i),
			Reserved:      r,
			Weight:        rapid.IntRange(0, 100).Draw(t, fmt.Sprintf("weight%d", i)),
			PromotionAge:  time.Duration(rapid.IntRange(50, 1500).Draw(t, fmt.Sprintf("promo%d", i))) * time.Millisecond,
			WaitObjective: time.Duration(rapid.IntRange(0, 400).Draw(t, fmt.Sprintf("objective%d", i))) * time.Millisecond,
			MinShare:      float64(rapid.IntRange(0, 20).Draw(t, fmt.Sprintf("share%d", i))) / 100,
		}
		cfg.Lanes = append(cfg.Lanes, l)
		durs[i] = time.Duration(rapid.IntRange(1, 200).Draw(t, fmt.Sprintf("dur%d", i))) * time.Millisecond
		dmax = max(dmax, durs[i])
		// A backlog at t=0 and/or a steady stream.
		for range rapid.IntRange(0, 150).Draw(t, fmt.Sprintf("backlog%d", i)) {
			cfg.Arrivals = append(cfg.Arrivals, arrival{At: 0, Lane: i, Dur: durs[i], Cost: 1})
		}
		if every := rapid.IntRange(0, 100).Draw(t, fmt.Sprintf("every%d", i)); every > 0 {
			rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, fmt.Sprintf("seed%d", i)), 1))
			for at := time.Duration(0); at < horizon; at += time.Duration(every) * time.Millisecond {
				// Durations vary within [dur/2, dur].
				d := durs[i]/2 + time.Duration(rng.Int64N(int64(durs[i]/2)+1))
				cfg.Arrivals = append(cfg.Arrivals, arrival{At: at, Lane: i, Dur: max(d, time.Millisecond), Cost: 1})
			}
		}
	}
	// Keep minimum shares feasible: at most what the lane can hold.
	shared := total
	for _, l := range cfg.Lanes {
		shared -= l.Reserved
	}
	for i := range cfg.Lanes {
		cfg.Lanes[i].MinShare = min(cfg.Lanes[i].MinShare, float64(shared+cfg.Lanes[i].Reserved)/float64(total))
	}
	cfg.Lanes = append(cfg.Lanes, Lane{Name: "review", Manual: true, Weight: 1000, PromotionAge: time.Millisecond})
	cfg.Arrivals = append(cfg.Arrivals, arrival{At: 0, Lane: nl, Dur: time.Millisecond, Cost: 1})
	if rapid.Bool().Draw(t, "borrow") {
		cfg.P90 = slices.Clone(durs)
		cfg.P90 = append(cfg.P90, 0)
	}
	if rapid.Bool().Draw(t, "pause") {
		from := time.Duration(rapid.IntRange(0, 3000).Draw(t, "pauseFrom")) * time.Millisecond
		cfg.Pauses = []pause{{Lane: rapid.IntRange(0, nl-1).Draw(t, "pauseLane"), From: from, To: from + time.Second}}
	}
	return cfg, dmax
}

// TestPolicy_PropertyInvariants simulates random loads and checks every
// invariant the policy promises.
func TestPolicy_PropertyInvariants(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		cfg, dmax := genLoad(t)
		res := simulate(cfg)
		// Every decision valid: waiting, not paused, not manual, fits.
		for _, v := range res.Violations {
			t.Fatal(v)
		}
		// Deterministic: the same run gives the same starts.
		if again := simulate(cfg); !slices.Equal(res.Starts, again.Starts) {
			t.Fatal("two runs of the same load differ")
		}
		shared := cfg.Total
		for _, l := range cfg.Lanes {
			shared -= l.Reserved
		}
		handlers := len(cfg.Lanes) - 1
		// Borrowed slots are held at most one borrower's task.
		var borrowMax time.Duration
		if cfg.P90 != nil {
			borrowMax = dmax
		}
		for i, l := range cfg.Lanes {
			if l.Manual {
				if n := len(res.waits(i, "", 0, cfg.Horizon)); n != 0 {
					t.Fatalf("manual lane started %d tasks", n)
				}
				continue
			}
			// Reservations honoured: work that fits in the lane's idle
			// reservation starts at once (within one borrowed task
			// when lending is on).
			if res.ReservedWait[i] > borrowMax {
				t.Fatalf("lane %s waited %v with its reservation idle (borrow bound %v)", l.Name, res.ReservedWait[i], borrowMax)
			}
			// No starvation: a waiting lane starts a task at least
			// every PromotionAge + ⌈lanes/shared⌉ task durations (see
			// doc.go: one duration when there are at least as many
			// shared slots as lanes).
			bound := l.PromotionAge + time.Duration((handlers+shared-1)/shared)*dmax
			if res.MaxGap[i] > bound {
				t.Fatalf("lane %s waited %v without a start, bound %v (promotion %v, dmax %v, lanes %d, shared %d)",
					l.Name, res.MaxGap[i], bound, l.PromotionAge, dmax, handlers, shared)
			}
		}
	})
}

// TestPolicy_PropertyMinShare overloads a high-weight lane and a batch lane
// with a minimum share, and checks the batch lane's share of slot-time.
func TestPolicy_PropertyMinShare(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		total := rapid.IntRange(2, 12).Draw(t, "total")
		reserved := rapid.IntRange(0, total-1).Draw(t, "reserved")
		// A feasible minimum share: at most the shared fraction.
		maxShare := min(50, 100*(total-reserved)/total)
		minShare := float64(rapid.IntRange(min(2, maxShare), maxShare).Draw(t, "minShare")) / 100
		horizon := 20 * time.Second
		hiDur := time.Duration(rapid.IntRange(10, 100).Draw(t, "hiDur")) * time.Millisecond
		loDur := time.Duration(rapid.IntRange(10, 300).Draw(t, "loDur")) * time.Millisecond
		cfg := simConfig{
			Total: total, Horizon: horizon,
			Lanes: []Lane{
				{Name: "hi", Reserved: reserved, Weight: 100, PromotionAge: time.Second},
				{Name: "lo", Weight: 1, PromotionAge: time.Duration(rapid.IntRange(1, 10).Draw(t, "promo")) * time.Second, MinShare: minShare},
			},
		}
		// Backlogs that outlast the horizon for both lanes.
		cfg.Arrivals = append(cfg.Arrivals, backlog(0, int(horizon/hiDur)*total+1, hiDur, "")...)
		cfg.Arrivals = append(cfg.Arrivals, backlog(1, int(horizon/loDur)*total+1, loDur, "")...)
		res := simulate(cfg)
		for _, v := range res.Violations {
			t.Fatal(v)
		}
		share := float64(res.SlotTime[1]) / float64(time.Duration(total)*horizon)
		if share < minShare-0.1 {
			t.Fatalf("lo share %.3f < min share %.3f − 0.1", share, minShare)
		}
		if share < 0.9*minShare {
			t.Fatalf("lo share %.3f < 0.9 × min share %.3f", share, minShare)
		}
		if res.ReservedWait[0] > 0 {
			t.Fatalf("hi waited %v with its reservation idle", res.ReservedWait[0])
		}
	})
}

// TestFair_PropertyBoundedWait: whatever the pushes and pops, an item is
// overtaken by at most ⌈(ahead+1)/w⌉ × (the other keys' weights) items of
// other keys, where ahead is the number of its own key's items before it;
// every item comes out once, FIFO within its key.
func TestFair_PropertyBoundedWait(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		keys := []string{"a", "b", "c", "d"}
		weights := map[string]int{}
		var f Fair[int]
		total := 0
		for _, k := range keys {
			w := rapid.IntRange(1, 4).Draw(t, "w_"+k)
			weights[k] = w
			total += w
			f.SetWeight(k, w)
		}
		type item struct {
			key      string
			ahead    int // own-key items queued before it at push
			overtook int // other keys' pops since its push
			popped   bool
		}
		var items []*item
		queued := map[string][]int{}
		ops := rapid.IntRange(1, 600).Draw(t, "ops")
		for range ops {
			if rapid.IntRange(0, 2).Draw(t, "op") < 2 {
				// Pushes are skewed towards "a", the noisy tenant.
				k := keys[min(rapid.IntRange(0, 6).Draw(t, "key"), 3)]
				if rapid.IntRange(0, 3).Draw(t, "noisy") > 0 {
					k = "a"
				}
				id := len(items)
				items = append(items, &item{key: k, ahead: f.Queued(k)})
				queued[k] = append(queued[k], id)
				f.Push(k, id)
				continue
			}
			id, k, ok := f.Pop()
			if !ok {
				if f.Len() != 0 {
					t.Fatalf("Pop failed with Len %d", f.Len())
				}
				continue
			}
			if len(queued[k]) == 0 || queued[k][0] != id || items[id].key != k {
				t.Fatalf("popped %d of %q, want the head of %q %v", id, k, k, queued[k])
			}
			queued[k] = queued[k][1:]
			items[id].popped = true
			for _, it := range items {
				if !it.popped && it.key != k {
					it.overtook++
				}
			}
		}
		for id, it := range items {
			w := weights[it.key]
			bound := (it.ahead/w + 1) * (total - w)
			if it.overtook > bound {
				t.Fatalf("item %d of %q (%d ahead) overtaken by %d, bound %d", id, it.key, it.ahead, it.overtook, bound)
			}
		}
		n := 0
		for _, q := range queued {
			n += len(q)
		}
		if f.Len() != n {
			t.Fatalf("Len %d, want %d", f.Len(), n)
		}
	})
}

// TestPolicy_PropertyWeightedSlots: tasks cost 1–3 slots. Every decision
// still fits, reservations are honoured, and no lane starves: a costly
// promoted task holds the shared slots until it fits, so it waits at most
// its promotion age plus ⌈L / max(1, ⌊S/c⌋)⌉ task durations: every lane
// ranked ahead of it takes its slots once, ⌊S/c⌋ of them side by side.
func TestPolicy_PropertyWeightedSlots(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		cfg, dmax := genLoad(t)
		shared := cfg.Total
		for _, l := range cfg.Lanes {
			shared -= l.Reserved
		}
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "costSeed"), 2))
		for k := range cfg.Arrivals {
			a := &cfg.Arrivals[k]
			if cfg.Lanes[a.Lane].Manual {
				continue
			}
			a.Cost = 1 + rng.IntN(min(3, shared+cfg.Lanes[a.Lane].Reserved))
		}
		res := simulate(cfg)
		for _, v := range res.Violations {
			t.Fatal(v)
		}
		handlers := len(cfg.Lanes) - 1
		var borrowMax time.Duration
		if cfg.P90 != nil {
			borrowMax = dmax
		}
		for i, l := range cfg.Lanes {
			if l.Manual {
				continue
			}
			if res.ReservedWait[i] > borrowMax {
				t.Fatalf("lane %s waited %v with its reservation idle (borrow bound %v)", l.Name, res.ReservedWait[i], borrowMax)
			}
			// ⌊S/3⌋ tasks of up to 3 slots run side by side on the
			// shared slots (at least one: a task may also use its
			// lane's own reserved slots).
			side := max(shared/3, 1)
			bound := l.PromotionAge + time.Duration((handlers+side-1)/side)*dmax
			if res.MaxGap[i] > bound {
				t.Fatalf("lane %s waited %v without a start, bound %v (promotion %v, dmax %v, lanes %d, shared %d)",
					l.Name, res.MaxGap[i], bound, l.PromotionAge, dmax, handlers, shared)
			}
		}
	})
}
