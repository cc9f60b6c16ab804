package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/spend"
)

// ErrNoSpend is returned by Ops.Spend when no spend reporter is
// configured (Config.Spend).
var ErrNoSpend = errors.New("admin: no spend store configured (the spend report reads the ledger database's spend rows)")

// Bounds of a spend report.
const (
	// MaxSpendBuckets is the most buckets one report holds.
	MaxSpendBuckets = 1000
	// MinSpendStep is the shortest bucket.
	MinSpendStep = time.Minute
	// MaxTenantLen is the longest tenant name a filter may give.
	MaxTenantLen = 256
)

// spendEpochMax is the last instant whose Unix nanoseconds fit an int64
// (the store's time column): later times would wrap.
var (
	spendEpochMin = time.Unix(0, 0).UTC()
	spendEpochMax = time.Unix(0, 1<<63-1).UTC()
)

// SpendQuery selects a spend report.
type SpendQuery struct {
	// Since and Until bound the report: calls reserved at or after Since
	// and before Until. Both required, Since before Until, within
	// 1970-01-01..2262-04-11 (Unix nanoseconds in an int64).
	Since, Until time.Time
	// Step is the bucket length: at least MinSpendStep, and at most
	// MaxSpendBuckets buckets over the range.
	Step time.Duration
	// Tenant keeps one tenant ("" all; a tenant-scoped caller gets its
	// own).
	Tenant string
	// By groups the series: any of tenant, model, provider, kind, mode,
	// cache_key. Defaults to tenant and model.
	By []string
}

// spendGroups are the fields a report may group by.
var spendGroups = map[string]bool{"tenant": true, "model": true, "provider": true, "kind": true, "mode": true, "cache_key": true}

// SpendFigures are calls, tokens and money.
type SpendFigures struct {
	Calls       int64 `json:"calls"`
	Input       int64 `json:"input_tokens"`
	CachedInput int64 `json:"cached_input_tokens"`
	Output      int64 `json:"output_tokens"`
	// Micros is the spend in millionths of the price table's currency
	// (settled cost, plus the estimate of calls still in flight).
	Micros spend.Micros `json:"micros"`
	// Cost is Micros formatted ("$1.234567").
	Cost string `json:"cost"`
	// CachedShare is the share of input tokens read from the prompt
	// cache, 0..1.
	CachedShare float64 `json:"cached_share"`
}

func (f *SpendFigures) add(r spend.SeriesRow) {
	f.Calls += r.Calls
	f.Input += r.Usage.Input
	f.CachedInput += r.Usage.CachedInput
	f.Output += r.Usage.Output
	f.Micros += r.Cost
}

func (f *SpendFigures) finish() {
	f.Cost = f.Micros.String()
	if in := f.Input + f.CachedInput; in > 0 {
		f.CachedShare = float64(f.CachedInput) / float64(in)
	}
}

// SpendSeries is one group's spend: totals and one entry per bucket.
type SpendSeries struct {
	Group map[string]string `json:"group"`
	SpendFigures
	// MicrosPerBucket and CallsPerBucket have one entry per bucket,
	// oldest first.
	MicrosPerBucket []spend.Micros `json:"micros_per_bucket"`
	CallsPerBucket  []int64        `json:"calls_per_bucket"`
}

// SpendInfo is a spend report.
type SpendInfo struct {
	From    time.Time     `json:"from"`
	To      time.Time     `json:"to"`
	StepMS  int64         `json:"step_ms"`
	Buckets int           `json:"buckets"`
	Tenant  string        `json:"tenant,omitempty"`
	By      []string      `json:"by"`
	Series  []SpendSeries `json:"series"`
	Total   SpendSeries   `json:"total"`
}

// ValidTenant checks a tenant name given as a filter: at most MaxTenantLen
// bytes of UTF-8 without control characters.
func ValidTenant(t string) error {
	if len(t) > MaxTenantLen {
		return broker.Invalidf("tenant name longer than %d bytes", MaxTenantLen)
	}
	if !utf8.ValidString(t) {
		return broker.Invalidf("tenant name is not UTF-8")
	}
	if strings.IndexFunc(t, unicode.IsControl) >= 0 {
		return broker.Invalidf("tenant name %q has a control character", t)
	}
	return nil
}

// Spend reports recorded model spend per group (tenant and model by
// default) and per Step-long bucket of [Since, Until). A tenant-scoped
// caller sees only its own tenant. Errors: ErrNoSpend without a
// reporter; broker.ErrInvalid for a query out of range.
func (o *Ops) Spend(ctx context.Context, sc Scope, q SpendQuery) (*SpendInfo, error) {
	if o.cfg.Spend == nil {
		return nil, ErrNoSpend
	}
	if err := ValidTenant(q.Tenant); err != nil {
		return nil, err
	}
	tenant, ok := sc.tenant(q.Tenant)
	if !ok {
		return nil, fmt.Errorf("%w: a token scoped to tenant %q cannot read tenant %q's spend", ErrTenantScoped, sc.Tenant, q.Tenant)
	}
	if q.Since.IsZero() || q.Until.IsZero() {
		return nil, broker.Invalidf("a spend report needs both ends of its range")
	}
	if q.Since.Before(spendEpochMin) || q.Until.After(spendEpochMax) {
		return nil, broker.Invalidf("spend range %s..%s outside %s..%s", q.Since.UTC().Format(time.RFC3339), q.Until.UTC().Format(time.RFC3339),
			spendEpochMin.Format(time.RFC3339), spendEpochMax.Format(time.RFC3339))
	}
	if !q.Until.After(q.Since) {
		return nil, broker.Invalidf("spend range is empty or inverted: since %s is not before until %s", q.Since.UTC().Format(time.RFC3339Nano), q.Until.UTC().Format(time.RFC3339Nano))
	}
	if q.Step < MinSpendStep {
		return nil, broker.Invalidf("spend step %s is shorter than %s", q.Step, MinSpendStep)
	}
	span := q.Until.Sub(q.Since) // both ends within the int64-nanosecond range: it cannot overflow
	buckets := int64(span / q.Step)
	if span%q.Step != 0 {
		buckets++
	}
	if buckets > MaxSpendBuckets {
		return nil, broker.Invalidf("spend range %s in steps of %s is %d buckets, more than %d", span, q.Step, buckets, MaxSpendBuckets)
	}
	by := q.By
	if len(by) == 0 {
		by = []string{"tenant", "model"}
	}
	seen := map[string]bool{}
	for _, f := range by {
		if !spendGroups[f] {
			return nil, broker.Invalidf("cannot group spend by %q (tenant, model, provider, kind, mode, cache_key)", f)
		}
		if seen[f] {
			return nil, broker.Invalidf("spend grouped by %q twice", f)
		}
		seen[f] = true
	}
	rows, err := o.cfg.Spend.SpendSeries(ctx, spend.SeriesQuery{Since: q.Since, Until: q.Until, Step: q.Step, Tenant: tenant, By: by})
	if err != nil {
		return nil, err
	}
	info := &SpendInfo{From: q.Since.UTC(), To: q.Until.UTC(), StepMS: q.Step.Milliseconds(), Buckets: int(buckets), Tenant: tenant, By: by,
		Series: []SpendSeries{}}
	newSeries := func(g map[string]string) SpendSeries {
		return SpendSeries{Group: g, MicrosPerBucket: make([]spend.Micros, buckets), CallsPerBucket: make([]int64, buckets)}
	}
	info.Total = newSeries(map[string]string{})
	idx := map[string]int{}
	for _, r := range rows {
		if r.Bucket < 0 || r.Bucket >= buckets {
			return nil, fmt.Errorf("admin: spend store answered bucket %d outside 0..%d", r.Bucket, buckets-1)
		}
		var k strings.Builder
		for _, f := range by {
			k.WriteString(url.QueryEscape(r.Group[f]) + "&")
		}
		i, ok := idx[k.String()]
		if !ok {
			i = len(info.Series)
			idx[k.String()] = i
			info.Series = append(info.Series, newSeries(r.Group))
		}
		s := &info.Series[i]
		s.add(r)
		s.MicrosPerBucket[r.Bucket] += r.Cost
		s.CallsPerBucket[r.Bucket] += r.Calls
		info.Total.add(r)
		info.Total.MicrosPerBucket[r.Bucket] += r.Cost
		info.Total.CallsPerBucket[r.Bucket] += r.Calls
	}
	for i := range info.Series {
		info.Series[i].finish()
	}
	info.Total.finish()
	return info, nil
}

// spendReport answers GET /api/v1/spend?since=&until=&step=&tenant=&by=:
// model spend per group and time bucket (Ops.Spend). since is RFC 3339 or
// a duration back from now ("24h", the default); until is RFC 3339
// (default now); step a duration (default: the range in 24 buckets,
// rounded up to a minute).
func (h *handler) spendReport(r *http.Request, c *call) (int, any, error) {
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "since", "until", "step", "tenant", "by":
		default:
			return 0, nil, badRequest("unknown parameter %q (since, until, step, tenant, by)", k)
		}
		if len(q[k]) > 1 {
			return 0, nil, badRequest("parameter %q given %d times", k, len(q[k]))
		}
	}
	now := time.Now().UTC()
	sq := SpendQuery{Until: now, Tenant: q.Get("tenant")}
	if s := q.Get("until"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return 0, nil, badRequest("until must be an RFC 3339 time, got %q", s)
		}
		sq.Until = t
	}
	switch s := q.Get("since"); {
	case s == "":
		sq.Since = sq.Until.Add(-24 * time.Hour)
	case strings.ContainsAny(s, "T:"):
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return 0, nil, badRequest("since must be an RFC 3339 time or a duration back from until, got %q", s)
		}
		sq.Since = t
	default:
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return 0, nil, badRequest("since must be an RFC 3339 time or a positive duration back from until, got %q", s)
		}
		if sq.Until.Sub(spendEpochMin) < d { // Until-d would fall before 1970 (or wrap)
			return 0, nil, badRequest("since %s before until reaches back beyond %s", s, spendEpochMin.Format(time.RFC3339))
		}
		sq.Since = sq.Until.Add(-d)
	}
	if s := q.Get("step"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return 0, nil, badRequest("step must be a positive duration, got %q", s)
		}
		sq.Step = d
	} else if span := sq.Until.Sub(sq.Since); span > 0 {
		sq.Step = max(MinSpendStep, (span/24+time.Minute-1)/time.Minute*time.Minute)
	}
	if s := q.Get("by"); s != "" {
		for _, f := range strings.Split(s, ",") {
			sq.By = append(sq.By, strings.TrimSpace(f))
		}
	}
	info, err := h.ops.Spend(r.Context(), c.scope, sq)
	if errors.Is(err, ErrNoSpend) {
		return 0, nil, &apiError{http.StatusNotImplemented, "no spend store is configured: " + err.Error()}
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, info, nil
}
