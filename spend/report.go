package spend

import (
	"context"
	"time"
)

// SeriesQuery asks a Reporter for spend over time: the calls reserved at
// or after Since and before Until, summed per Step-long bucket (bucket i
// starts at Since + i×Step) and per group.
type SeriesQuery struct {
	Since, Until time.Time
	// Step is the bucket length. Required (positive).
	Step time.Duration
	// Tenant keeps one tenant; "" keeps all.
	Tenant string
	// By groups the rows: any of tenant, kind, run, provider, model, mode,
	// cache_key, state. Nil sums every call of a bucket into one row.
	By []string
}

// SeriesRow is one group's spend in one bucket.
type SeriesRow struct {
	// Bucket is the bucket's index: it starts at Since + Bucket×Step.
	Bucket int64
	// Group holds the grouping fields' values.
	Group map[string]string
	Calls int64
	Usage Usage
	Cost  Micros
}

// Reporter reports recorded spend (providerbatch/sqlstore.Store: the
// ledger database's spend rows, from the provider-batch lane and from
// limits.Meter's calls).
type Reporter interface {
	SpendSeries(ctx context.Context, q SeriesQuery) ([]SeriesRow, error)
}
