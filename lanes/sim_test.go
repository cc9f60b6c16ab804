package lanes

import (
	"container/heap"
	"fmt"
	"slices"
	"sort"
	"time"
)

// This file is a discrete-event simulator of a worker pool driven by
// Policy, on simulated time. The property tests and the S1–S4 scenarios use
// it; it checks the policy's invariants on every decision.

var simEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// arrival is one task entering a lane at offset At.
type arrival struct {
	At     time.Duration
	Lane   int
	Tenant string
	Dur    time.Duration
	Cost   int
}

// pause makes a lane paused during [From, To).
type pause struct {
	Lane     int
	From, To time.Duration
}

type simConfig struct {
	Total    int
	Lanes    []Lane
	Arrivals []arrival // any order; sorted stably by At
	Pauses   []pause
	// P90 per lane index reported in LaneState (0 = unknown, no borrowing).
	P90 []time.Duration
	// Fair queues each lane by tenant (and reports OldestReady as
	// unknown); otherwise each lane is FIFO.
	Fair bool
	// Horizon: no event after it is processed.
	Horizon time.Duration
}

type startRec struct {
	Lane        int
	Tenant      string
	Enq, Start  time.Duration
	Dur         time.Duration
	Cost        int
	ArrivalSeq  int
	WaitOnStart time.Duration
}

type simResult struct {
	Starts     []startRec
	Violations []string
	// SlotTime per lane: slot-seconds held within [0, Horizon].
	SlotTime []time.Duration
	// Gaps per lane: the longest time the lane waited (continuously
	// waiting, not paused) without a start.
	MaxGap []time.Duration
	// ReservedWait per lane: the longest time the lane had waiting work
	// that fitted in its idle reservation without starting.
	ReservedWait []time.Duration
	Left         []int // tasks still queued at the end
}

type simTask struct {
	enq    time.Duration
	dur    time.Duration
	cost   int
	tenant string
	seq    int
}

type completion struct {
	at   time.Duration
	lane int
	cost int
	seq  int
}

type compHeap []completion

func (h compHeap) Len() int { return len(h) }
func (h compHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h compHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *compHeap) Push(x any)   { *h = append(*h, x.(completion)) }
func (h *compHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// laneQueue is a lane's ready tasks: FIFO or fair by tenant.
type laneQueue struct {
	fifo []simTask
	head int
	fair *Fair[simTask]
}

func (q *laneQueue) push(t simTask) {
	if q.fair != nil {
		q.fair.Push(t.tenant, t)
		return
	}
	q.fifo = append(q.fifo, t)
}

func (q *laneQueue) len() int {
	if q.fair != nil {
		return q.fair.Len()
	}
	return len(q.fifo) - q.head
}

func (q *laneQueue) peek() simTask {
	// Only for FIFO; fair queues report no head.
	return q.fifo[q.head]
}

func (q *laneQueue) pop() simTask {
	if q.fair != nil {
		t, _, _ := q.fair.Pop()
		return t
	}
	t := q.fifo[q.head]
	q.head++
	return t
}

// simulate runs cfg and checks, on every decision, that the policy returned
// a lane with waiting work that is neither paused nor manual and whose task
// fits in the free slots.
func simulate(cfg simConfig) simResult {
	pol, err := NewPolicy(cfg.Total, cfg.Lanes)
	if err != nil {
		return simResult{Violations: []string{"NewPolicy: " + err.Error()}}
	}
	n := len(cfg.Lanes)
	arr := slices.Clone(cfg.Arrivals)
	sort.SliceStable(arr, func(i, j int) bool { return arr[i].At < arr[j].At })
	res := simResult{
		SlotTime:     make([]time.Duration, n),
		MaxGap:       make([]time.Duration, n),
		ReservedWait: make([]time.Duration, n),
		Left:         make([]int, n),
	}
	queues := make([]laneQueue, n)
	if cfg.Fair {
		for i := range queues {
			queues[i].fair = &Fair[simTask]{}
		}
	}
	running := make([]int, n)
	waitStart := make([]time.Duration, n) // -1: not waiting
	resSince := make([]time.Duration, n)  // -1: reservation not pending
	for i := range waitStart {
		waitStart[i], resSince[i] = -1, -1
	}
	paused := func(lane int, at time.Duration) bool {
		for _, p := range cfg.Pauses {
			if p.Lane == lane && at >= p.From && at < p.To {
				return true
			}
		}
		return false
	}
	states := make([]LaneState, n)
	var comps compHeap
	var lastT time.Duration
	seq := 0
	ai := 0
	p90 := func(i int) time.Duration {
		if i < len(cfg.P90) {
			return cfg.P90[i]
		}
		return 0
	}
	// Pause boundaries are events too, so a resumed lane is looked at.
	var pauseEdges []time.Duration
	for _, p := range cfg.Pauses {
		pauseEdges = append(pauseEdges, p.From, p.To)
	}
	slices.Sort(pauseEdges)
	pi := 0
	bad := func(now time.Duration, format string, args ...any) {
		if len(res.Violations) < 20 {
			res.Violations = append(res.Violations, fmt.Sprintf("t=%v: ", now)+fmt.Sprintf(format, args...))
		}
	}
	for {
		// Next event time.
		now := time.Duration(-1)
		if ai < len(arr) {
			now = arr[ai].At
		}
		if len(comps) > 0 && (now < 0 || comps[0].at < now) {
			now = comps[0].at
		}
		if pi < len(pauseEdges) && (now < 0 || pauseEdges[pi] < now) {
			now = pauseEdges[pi]
		}
		if now < 0 || now > cfg.Horizon {
			break
		}
		for i := range running {
			res.SlotTime[i] += time.Duration(running[i]) * (now - lastT)
		}
		lastT = now
		for pi < len(pauseEdges) && pauseEdges[pi] <= now {
			pi++
		}
		for len(comps) > 0 && comps[0].at == now {
			c := heap.Pop(&comps).(completion)
			running[c.lane] -= c.cost
		}
		for ai < len(arr) && arr[ai].At == now {
			a := arr[ai]
			cost := max(a.Cost, 1)
			queues[a.Lane].push(simTask{enq: a.At, dur: a.Dur, cost: cost, tenant: a.Tenant, seq: ai})
			ai++
		}
		// Waiting bookkeeping before dispatch.
		for i := range queues {
			if queues[i].len() > 0 && !paused(i, now) {
				if waitStart[i] < 0 {
					waitStart[i] = now
				}
			} else {
				waitStart[i] = -1
			}
		}
		// Dispatch until the policy says stop.
		for guard := 0; ; guard++ {
			if guard > cfg.Total+2 {
				bad(now, "dispatch loop did not stop")
				break
			}
			used := 0
			for i := range queues {
				s := LaneState{Name: cfg.Lanes[i].Name, Running: running[i], Paused: paused(i, now), P90: p90(i)}
				used += running[i]
				if q := &queues[i]; q.len() > 0 {
					s.Waiting = true
					if q.fair == nil {
						s.OldestReady = simEpoch.Add(q.peek().enq)
						s.Cost = q.peek().cost
					} else {
						s.Cost = 1
					}
				}
				states[i] = s
			}
			name, ok := pol.Next(simEpoch.Add(now), states)
			if !ok {
				break
			}
			i := pol.index[name]
			s := states[i]
			switch {
			case !s.Waiting:
				bad(now, "chose idle lane %s", name)
			case s.Paused:
				bad(now, "chose paused lane %s", name)
			case cfg.Lanes[i].Manual:
				bad(now, "chose manual lane %s", name)
			case s.Cost > cfg.Total-used:
				bad(now, "chose lane %s needing %d slots with %d free", name, s.Cost, cfg.Total-used)
			}
			if !s.Waiting || s.Cost > cfg.Total-used {
				break
			}
			t := queues[i].pop()
			running[i] += t.cost
			res.Starts = append(res.Starts, startRec{Lane: i, Tenant: t.tenant, Enq: t.enq, Start: now, Dur: t.dur, Cost: t.cost, ArrivalSeq: t.seq})
			if waitStart[i] >= 0 {
				res.MaxGap[i] = max(res.MaxGap[i], now-waitStart[i])
			}
			if queues[i].len() > 0 {
				waitStart[i] = now
			} else {
				waitStart[i] = -1
			}
			seq++
			heap.Push(&comps, completion{at: now + t.dur, lane: i, cost: t.cost, seq: seq})
		}
		// Reservation bookkeeping after dispatch: a lane whose next task
		// fits in its own idle reservation should have started it.
		for i, l := range cfg.Lanes {
			q := &queues[i]
			pending := false
			if q.len() > 0 && !paused(i, now) && !l.Manual {
				cost := 1
				if q.fair == nil {
					cost = q.peek().cost
				}
				pending = running[i]+cost <= l.Reserved
			}
			switch {
			case pending && resSince[i] < 0:
				resSince[i] = now
			case !pending && resSince[i] >= 0:
				res.ReservedWait[i] = max(res.ReservedWait[i], now-resSince[i])
				resSince[i] = -1
			}
			if pending {
				res.ReservedWait[i] = max(res.ReservedWait[i], now-resSince[i])
			}
		}
	}
	end := cfg.Horizon
	for i := range running {
		res.SlotTime[i] += time.Duration(running[i]) * max(end-lastT, 0)
		res.Left[i] = queues[i].len()
		if waitStart[i] >= 0 {
			res.MaxGap[i] = max(res.MaxGap[i], end-waitStart[i])
		}
		if resSince[i] >= 0 {
			res.ReservedWait[i] = max(res.ReservedWait[i], end-resSince[i])
		}
	}
	return res
}

// waits returns the start waits of lane (and tenant, if not empty) for
// tasks enqueued in [from, to).
func (r simResult) waits(lane int, tenant string, from, to time.Duration) []time.Duration {
	var w []time.Duration
	for _, s := range r.Starts {
		if s.Lane == lane && (tenant == "" || s.Tenant == tenant) && s.Enq >= from && s.Enq < to {
			w = append(w, s.Start-s.Enq)
		}
	}
	return w
}

func percentile(w []time.Duration, p float64) time.Duration {
	if len(w) == 0 {
		return 0
	}
	s := slices.Clone(w)
	slices.Sort(s)
	k := int(float64(len(s))*p+0.999999) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// startsIn counts starts of lane in [from, to) and the longest gap between
// consecutive starts (and from `from` to the first start, and, if
// stillWaiting, from the last start to `to`).
func (r simResult) startsIn(lane int, from, to time.Duration, stillWaiting bool) (count int, longestGap time.Duration) {
	prev := from
	for _, s := range r.Starts {
		if s.Lane != lane || s.Start < from || s.Start >= to {
			continue
		}
		count++
		longestGap = max(longestGap, s.Start-prev)
		prev = s.Start
	}
	if stillWaiting {
		longestGap = max(longestGap, to-prev)
	}
	return count, longestGap
}
