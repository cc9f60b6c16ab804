package limits

import (
	"context"
	"math"
	"sync"
	"time"
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
		totals: map[string]Usage{}, aggs: map[Key]Usage{}}
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
