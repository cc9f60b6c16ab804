package limits

import (
	"context"
	"time"
)

// Bucket is one token bucket as a Store sees it: a name and a shape. The
// store keeps only the bucket's level and clock; the shape travels with
// every call, so changing a limit needs no migration.
type Bucket struct {
	// Name identifies the bucket in the store.
	Name string
	// Capacity is the most the bucket holds: the burst. A new bucket starts
	// full.
	Capacity float64
	// Rate is how much flows back in per second.
	Rate float64
}

// Take asks for N units from a bucket, leaving at least Floor behind (the
// share reserved for priority callers; 0 for them).
type Take struct {
	Bucket Bucket
	N      float64
	Floor  float64
}

// Store keeps bucket levels. Implementations are atomic across every
// caller that shares them: MemoryStore within a process, redisstore.Store
// across processes. Both pass limitstest.
type Store interface {
	// Take takes every N from its bucket if all of them can be taken at
	// once (each level minus N stays at or above its Floor and no bucket is
	// blocked); otherwise it takes nothing and returns how long to wait
	// before they could be (wait > 0). All or nothing.
	Take(ctx context.Context, takes []Take) (wait time.Duration, err error)
	// Put adds delta to a bucket's level: a refund when positive (never
	// above Capacity), a debit when negative (the level may go below zero,
	// which delays later takes until the debt is paid).
	Put(ctx context.Context, b Bucket, delta float64) error
	// Block refuses every take from the bucket for d and leaves it empty
	// at the end, so capacity returns gradually (adaptive throttling after
	// a 429). A shorter block never shortens a longer one.
	Block(ctx context.Context, b Bucket, d time.Duration) error
	// Level returns the bucket's current level (for stats and tests).
	Level(ctx context.Context, b Bucket) (float64, error)
}

// UsageStore keeps per-task running totals (for budgets, across retries and
// processes) and per-dimension aggregates (for accounting).
type UsageStore interface {
	// StartRun records now as the task's first start unless one is
	// recorded already, and returns the recorded first start.
	StartRun(ctx context.Context, taskID string, now time.Time) (time.Time, error)
	// Charge adds add to the task's totals unless that would cross max:
	// for every field with a positive max, total+add+headroom must stay at
	// or below it. On refusal nothing is added and over names the first
	// field that would cross. It returns the totals after the call.
	Charge(ctx context.Context, taskID string, add, headroom, max Usage) (totals Usage, over string, err error)
	// Record adds one accounting record to the aggregate of its key.
	Record(ctx context.Context, r Record) error
	// TaskUsage returns a task's running totals.
	TaskUsage(ctx context.Context, taskID string) (Usage, error)
	// Sum adds the aggregates of every key matching q.Match, grouped by
	// q.By (no fields: one total row).
	Sum(ctx context.Context, q Query) ([]Row, error)
}

// refill is the bucket arithmetic every store uses (the Redis script
// mirrors it line by line): the level at now, given level at ts (both in
// microseconds).
func refill(level float64, ts, now int64, b Bucket) float64 {
	if now > ts {
		level += float64(now-ts) * b.Rate / 1e6
	}
	if level > b.Capacity {
		level = b.Capacity
	}
	return level
}

// levelEpsilon absorbs float rounding: a bucket short by less than this
// counts as having enough (times are whole microseconds, rates arbitrary).
const levelEpsilon = 1e-6
