package lanes

import (
	"math"
	"sync"
	"time"
)

// ShareWindow is the time constant of the exponentially decayed average
// that measures each lane's share of the slots for Lane.MinShare.
const ShareWindow = 10 * time.Second

// BorrowFraction bounds lending: a lane may borrow a lender's idle reserved
// slot only if its observed p90 task duration is at most BorrowFraction ×
// the lender's Lane.WaitObjective.
const BorrowFraction = 0.5

// LaneState is what the scheduler knows about one lane at the moment it
// asks Policy.Next. Zero values are safe defaults.
type LaneState struct {
	// Name is the lane's name. States naming a lane the policy does not
	// know are ignored; a known lane without a state counts as idle; if a
	// lane has two states, the first counts.
	Name string
	// Running is the number of slots the lane's running tasks hold (a task
	// of cost c counts c). Defaults to 0; negative counts as 0.
	Running int
	// Waiting reports that at least one task of the lane is ready to
	// start. Defaults to false: the lane is never chosen.
	Waiting bool
	// OldestReady is when the lane's oldest ready task became ready
	// (enqueue or run-at time). The zero time means unknown: the policy
	// then uses the time it first saw Waiting become true.
	OldestReady time.Time
	// Paused reports that the lane is paused: it is never chosen, but its
	// Running slots still count. Defaults to false.
	Paused bool
	// Cost is the number of slots the lane's next task needs. Defaults to
	// 1 (0 or negative means 1).
	Cost int
	// P90 is the observed 90th percentile of the lane's task durations.
	// Defaults to 0, unknown: the lane never borrows reserved slots.
	P90 time.Duration
}

// Policy decides which lane the next free worker slot pulls for. It is a
// deterministic state machine: its answers depend only on its lanes and on
// the sequence of Next calls (their times and states). It does no I/O,
// starts no goroutines and never reads the clock. It is safe for concurrent
// use, but decisions are meaningful only in the order the scheduler makes
// them, so one goroutine should call Next.
type Policy struct {
	mu     sync.Mutex
	total  int
	shared int
	lanes  []Lane
	index  map[string]int
	track  []track
	weight float64   // decayed weight of the time observed, to unbias avg
	last   time.Time // the latest now seen
	seen   bool      // last is set
	states []LaneState
	given  []bool      // scratch for Next
	cands  []candidate // scratch for Next
}

// track is the policy's memory of one lane.
type track struct {
	lastServed   time.Time // when Next last chose the lane
	waitingSince time.Time // when Waiting was last seen turning true
	wasWaiting   bool
	avg          float64 // decayed average of slots held
	running      int     // slots held since the last call (after its decision)
}

// NewPolicy returns a policy for totalSlots worker slots (a task may cost
// more than one) split among lanes. It validates the lanes (see Validate)
// and copies them.
func NewPolicy(totalSlots int, lanes []Lane) (*Policy, error) {
	if err := Validate(totalSlots, lanes); err != nil {
		return nil, err
	}
	p := &Policy{
		total:  totalSlots,
		shared: totalSlots,
		lanes:  append([]Lane(nil), lanes...),
		index:  make(map[string]int, len(lanes)),
		track:  make([]track, len(lanes)),
		states: make([]LaneState, len(lanes)),
		given:  make([]bool, len(lanes)),
		cands:  make([]candidate, 0, len(lanes)),
	}
	for i, l := range lanes {
		p.index[l.Name] = i
		p.shared -= l.Reserved
	}
	return p, nil
}

// Total returns the number of worker slots.
func (p *Policy) Total() int { return p.total }

// Shared returns the number of slots no lane reserves.
func (p *Policy) Shared() int { return p.shared }

// Lanes returns a copy of the policy's lane definitions.
func (p *Policy) Lanes() []Lane { return append([]Lane(nil), p.lanes...) }

// Share returns the lane's time-averaged share of all slots (0..1) as of the
// last Next call, the figure compared with Lane.MinShare; 0 for an unknown
// lane.
func (p *Policy) Share(lane string) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := p.index[lane]
	if !ok {
		return 0
	}
	return p.share(i)
}

// share is lane i's decayed share of all slots, unbiased for the short
// history at the start (an average over less than ShareWindow).
func (p *Policy) share(i int) float64 {
	if p.weight <= 0 {
		return 0
	}
	return p.track[i].avg / p.weight / float64(p.total)
}

// Tiers of the ranking, highest first.
const (
	tierWeight     = iota // competes by effective priority
	tierBelowShare        // waiting and below its MinShare
	tierPromoted          // waited past its PromotionAge
	tierReserved          // its next task fits in its own idle reservation
)

type candidate struct {
	i        int
	tier     int
	deadline time.Time // promoted: since + PromotionAge
	key      float64   // below share: share/MinShare (lower first); weight: effective priority (higher first)
	need     int       // slots beyond the lane's own idle reservation
	cost     int
}

// Next returns the lane the next free slot should pull a task for, or
// ok=false when nothing should start now: no eligible lane has waiting
// work that fits, or the free shared slots are held for a lane that
// outranks every lane that would fit. The caller starts one task of the
// returned lane (and reports it in Running next time), then calls Next
// again until ok=false; it calls Next whenever a slot frees up, work
// arrives or a lane is resumed.
//
// The rules, in order:
//
//  1. Never a manual, paused or idle lane, and never more slots than are
//     free (Total minus the sum of Running).
//  2. A lane whose next task fits in its own idle reserved slots is
//     served first. (A task that would spill beyond the reservation
//     competes for the shared slots under rule 3.)
//  3. Then, for the shared slots: a promoted lane (its work has waited at
//     least PromotionAge, counted from its oldest ready task or its last
//     slot, whichever is later), the earliest deadline (that time +
//     PromotionAge) first; then a lane below its MinShare (time-averaged
//     share below MinShare and fewer than ⌈MinShare × Total⌉ slots held
//     now), the most deficient first; then the highest effective priority
//     Weight × (1 + age / PromotionAge). Ties go to the lane defined first.
//  4. A promoted lane whose task does not fit yet (it costs more slots
//     than are free) holds the shared slots: lanes ranked below it may
//     then only use their own idle reserved slots. A task that could never
//     fit (more than Total, or more than the lane's reservation plus the
//     shared slots) holds nothing.
//  5. When the shared slots are all in use, a lane with a known P90 may
//     borrow an idle reserved slot of a lane with nothing waiting, if P90
//     ≤ BorrowFraction × the lender's WaitObjective; a lender always keeps
//     one reserved slot idle.
func (p *Policy) Next(now time.Time, states []LaneState) (lane string, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()

	// Gather the states in lane order.
	for i := range p.states {
		p.states[i] = LaneState{Name: p.lanes[i].Name}
	}
	given := p.given
	clear(given)
	for _, s := range states {
		i, known := p.index[s.Name]
		if !known || given[i] {
			continue
		}
		given[i] = true
		if s.Running < 0 {
			s.Running = 0
		}
		if s.Cost <= 0 {
			s.Cost = 1
		}
		p.states[i] = s
	}
	for i := range p.states {
		if p.states[i].Cost <= 0 {
			p.states[i].Cost = 1
		}
	}

	p.observe(now)

	// Slot accounting.
	used, overReserved := 0, 0
	for i, s := range p.states {
		used += s.Running
		if over := s.Running - p.lanes[i].Reserved; over > 0 {
			overReserved += over
		}
	}
	free := p.total - used
	sharedFree := max(p.shared-overReserved, 0)
	borrowed := max(overReserved-p.shared, 0)

	// Rank the lanes that could run.
	var best *candidate
	cands := p.cands[:0]
	for i, s := range p.states {
		l := p.lanes[i]
		if l.Manual || s.Paused || !s.Waiting {
			continue
		}
		c := candidate{i: i, cost: s.Cost, need: max(s.Cost-max(l.Reserved-s.Running, 0), 0)}
		age := p.age(i, now)
		share := p.share(i)
		switch {
		case c.need == 0:
			// The task fits in the lane's own idle reservation. (A task
			// that spills beyond it competes for the shared part like
			// any other, or a lane could take shared slots at the top
			// rank again and again.)
			c.tier = tierReserved
		case l.PromotionAge > 0 && age >= l.PromotionAge:
			c.tier = tierPromoted
			c.deadline = now.Add(-age).Add(l.PromotionAge)
		case l.MinShare > 0 && share < l.MinShare && float64(s.Running) < math.Ceil(l.MinShare*float64(p.total)):
			c.tier = tierBelowShare
			c.key = share / l.MinShare
		default:
			c.tier = tierWeight
			c.key = float64(l.Weight)
			if l.PromotionAge > 0 {
				c.key *= 1 + float64(age)/float64(l.PromotionAge)
			}
		}
		cands = append(cands, c)
	}
	sortCandidates(cands)
	for k := range cands {
		c := &cands[k]
		room := sharedFree + p.borrowRoom(c.i, borrowed)
		if c.cost <= free && c.need <= room {
			best = c
			break
		}
		// Hold the shared slots for a promoted lane that will fit once
		// running tasks finish, so a costly task cannot be overtaken
		// forever by cheap ones. Every lane that needs no shared slot
		// ranks above it, so holding never costs a reservation.
		l := p.lanes[c.i]
		canEverFit := c.cost <= p.total && max(c.cost-l.Reserved, 0) <= p.shared
		if c.tier == tierPromoted && canEverFit {
			return "", false
		}
	}
	if best == nil {
		return "", false
	}
	t := &p.track[best.i]
	t.lastServed = now
	t.running += best.cost
	return p.lanes[best.i].Name, true
}

// observe advances the decayed shares to now and records the new states.
func (p *Policy) observe(now time.Time) {
	if p.seen && now.After(p.last) {
		e := math.Exp(-float64(now.Sub(p.last)) / float64(ShareWindow))
		for i := range p.track {
			t := &p.track[i]
			t.avg = t.avg*e + float64(t.running)*(1-e)
		}
		p.weight = p.weight*e + (1 - e)
	}
	if !p.seen || now.After(p.last) {
		p.last, p.seen = now, true
	}
	for i, s := range p.states {
		t := &p.track[i]
		t.running = s.Running
		if s.Waiting && !t.wasWaiting {
			t.waitingSince = now
		}
		t.wasWaiting = s.Waiting
	}
}

// age is how long lane i's work has waited: since its oldest ready task
// (or, if unknown, since it started waiting), or since its last slot,
// whichever is later.
func (p *Policy) age(i int, now time.Time) time.Duration {
	t := p.track[i]
	since := p.states[i].OldestReady
	if since.IsZero() {
		since = t.waitingSince
	}
	if t.lastServed.After(since) {
		since = t.lastServed
	}
	if since.IsZero() || !now.After(since) {
		return 0
	}
	return now.Sub(since)
}

// borrowRoom is how many idle reserved slots lane b may borrow now, given
// that borrowed slots are already lent out.
func (p *Policy) borrowRoom(b, borrowed int) int {
	p90 := p.states[b].P90
	if p90 <= 0 {
		return 0
	}
	lendable := 0
	for j, s := range p.states {
		l := p.lanes[j]
		if j == b || l.WaitObjective <= 0 || (s.Waiting && !s.Paused) {
			continue
		}
		if float64(p90) > BorrowFraction*float64(l.WaitObjective) {
			continue
		}
		lendable += max(l.Reserved-s.Running-1, 0)
	}
	return max(lendable-borrowed, 0)
}

// sortCandidates orders candidates best first: by tier, then within a tier
// by deadline (promoted), deficiency (below share) or effective priority
// (weight), then by lane order. Insertion sort: there are a handful.
func sortCandidates(c []candidate) {
	less := func(a, b candidate) bool {
		if a.tier != b.tier {
			return a.tier > b.tier
		}
		switch a.tier {
		case tierPromoted:
			if !a.deadline.Equal(b.deadline) {
				return a.deadline.Before(b.deadline)
			}
		case tierBelowShare:
			if a.key != b.key {
				return a.key < b.key
			}
		case tierWeight:
			if a.key != b.key {
				return a.key > b.key
			}
		}
		return a.i < b.i
	}
	for i := 1; i < len(c); i++ {
		for j := i; j > 0 && less(c[j], c[j-1]); j-- {
			c[j], c[j-1] = c[j-1], c[j]
		}
	}
}
