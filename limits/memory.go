package limits

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/spend"
)

// MemoryStore is a Store and UsageStore for one process: every limiter and
// meter sharing it shares its limits. Its clock is injectable.
type MemoryStore struct {
	now func() time.Time

	mu      sync.Mutex
	buckets map[string]*memBucket
	starts  map[string]time.Time
	totals  map[string]Usage
	aggs    map[Key]Usage

	spendWin map[spendKey]spend.Micros
	spendRes map[string]spendRes
}

type memBucket struct {
	level float64
	ts    int64 // microseconds; no refill before it (a block pushes it ahead)
}

var (
	_ Store      = (*MemoryStore)(nil)
	_ UsageStore = (*MemoryStore)(nil)
)

// NewMemoryStore returns an empty store. now is its clock; nil means
// time.Now.
func NewMemoryStore(now func() time.Time) *MemoryStore {
	if now == nil {
		now = time.Now
	}
	return &MemoryStore{now: now, buckets: map[string]*memBucket{}, starts: map[string]time.Time{},
		totals: map[string]Usage{}, aggs: map[Key]Usage{},
		spendWin: map[spendKey]spend.Micros{}, spendRes: map[string]spendRes{}}
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func durationOf(sec float64) time.Duration {
	if sec <= 0 {
		return 0
	}
	d := time.Duration(math.Ceil(sec * 1e6))
	return d * time.Microsecond
}

// bucket returns b's state refilled to now (ms lock held).
func (s *MemoryStore) bucket(b Bucket, now int64) *memBucket {
	st, ok := s.buckets[b.Name]
	if !ok {
		st = &memBucket{level: b.Capacity, ts: now}
		s.buckets[b.Name] = st
		return st
	}
	if now > st.ts {
		st.level = refill(st.level, st.ts, now, b)
		st.ts = now
	} else if st.level > b.Capacity {
		st.level = b.Capacity
	}
	return st
}

// Take implements Store.
func (s *MemoryStore) Take(ctx context.Context, takes []Take) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	now := micros(s.now())
	s.mu.Lock()
	defer s.mu.Unlock()
	wait := 0.0
	for _, t := range takes {
		st := s.bucket(t.Bucket, now)
		w := 0.0
		if st.ts > now {
			w = float64(st.ts-now) / 1e6
		}
		if short := t.N + t.Floor - st.level; short > levelEpsilon {
			w += short / t.Bucket.Rate
		}
		wait = math.Max(wait, w)
	}
	if wait > 0 {
		return max(durationOf(wait), time.Microsecond), nil
	}
	for _, t := range takes {
		s.buckets[t.Bucket.Name].level -= t.N
	}
	return 0, nil
}

// Put implements Store.
func (s *MemoryStore) Put(ctx context.Context, b Bucket, delta float64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := micros(s.now())
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.bucket(b, now)
	st.level = math.Min(st.level+delta, b.Capacity)
	return nil
}

// Block implements Store.
func (s *MemoryStore) Block(ctx context.Context, b Bucket, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := micros(s.now())
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.bucket(b, now)
	st.level = math.Min(st.level, 0)
	st.ts = max(st.ts, now+d.Microseconds())
	return nil
}

// Level implements Store.
func (s *MemoryStore) Level(ctx context.Context, b Bucket) (float64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	now := micros(s.now())
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bucket(b, now).level, nil
}

// StartRun implements UsageStore.
func (s *MemoryStore) StartRun(ctx context.Context, taskID string, now time.Time) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.starts[taskID]; ok {
		return t, nil
	}
	s.starts[taskID] = now
	return now, nil
}

// Charge implements UsageStore.
func (s *MemoryStore) Charge(ctx context.Context, taskID string, add, headroom, max Usage) (Usage, string, error) {
	if err := ctx.Err(); err != nil {
		return Usage{}, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.totals[taskID]
	if over := overField(cur.Add(add).Add(headroom), max); over != "" {
		return cur, over, nil
	}
	cur = cur.Add(add)
	s.totals[taskID] = cur
	return cur, "", nil
}

// Record implements UsageStore.
func (s *MemoryStore) Record(ctx context.Context, r Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.aggs[r.Key] = s.aggs[r.Key].Add(r.Usage)
	return nil
}

// TaskUsage implements UsageStore.
func (s *MemoryStore) TaskUsage(ctx context.Context, taskID string) (Usage, error) {
	if err := ctx.Err(); err != nil {
		return Usage{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.totals[taskID], nil
}

// Sum implements UsageStore.
func (s *MemoryStore) Sum(ctx context.Context, q Query) ([]Row, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return group(s.aggs, q), nil
}

// spendKey is one tenant's window (a period starting at start).
type spendKey struct {
	tenant string
	period time.Duration
	start  int64
}

// spendRes is a reservation: its amount and the windows it counts in.
type spendRes struct {
	micros spend.Micros
	keys   []spendKey
}

var _ SpendStore = (*MemoryStore)(nil)

// ReserveSpend implements SpendStore.
func (s *MemoryStore) ReserveSpend(ctx context.Context, r SpendReservation) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.ID == "" || r.Estimate < 0 {
		return invalidf("limits: ReserveSpend needs an ID and a non-negative estimate")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.spendRes[r.ID]; ok {
		return nil
	}
	keys := make([]spendKey, 0, len(r.Windows))
	for _, w := range r.Windows {
		if !w.Applies(r.Tenant) {
			continue
		}
		start := w.Start(r.Now)
		k := spendKey{tenant: r.Tenant, period: w.Period, start: start.UnixNano()}
		if spent := s.spendWin[k]; spent+r.Estimate > w.Cap {
			return &spend.CapError{Tenant: r.Tenant, Window: w, Spent: spent, Estimate: r.Estimate, Until: start.Add(w.Period)}
		}
		keys = append(keys, k)
	}
	for _, k := range keys {
		if _, ok := s.spendWin[k]; !ok {
			// A tenant's new window: its ended ones go, so the store
			// holds one total per tenant and window, not one per day
			// for ever.
			for old := range s.spendWin {
				if old.tenant == k.tenant && old.period == k.period && old.start < k.start {
					delete(s.spendWin, old)
				}
			}
		}
		s.spendWin[k] += r.Estimate
	}
	s.spendRes[r.ID] = spendRes{micros: r.Estimate, keys: keys}
	return nil
}

// SettleSpend implements SpendStore. The memory store keeps window totals,
// not per-call usage.
func (s *MemoryStore) SettleSpend(ctx context.Context, id string, u spend.Usage, cost spend.Micros) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	res, ok := s.spendRes[id]
	if !ok {
		return nil
	}
	delete(s.spendRes, id)
	for _, k := range res.keys {
		if _, ok := s.spendWin[k]; ok { // gone when its window ended
			s.spendWin[k] += cost - res.micros
		}
	}
	return nil
}

// SpendInWindow returns tenant's settled and reserved spend in the window
// w containing now.
func (s *MemoryStore) SpendInWindow(tenant string, w spend.Window, now time.Time) spend.Micros {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.spendWin[spendKey{tenant: tenant, period: w.Period, start: w.Start(now).UnixNano()}]
}
