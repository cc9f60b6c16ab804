// Package limitstest is the table of cases every limits.Store and
// limits.UsageStore must pass — the in-process MemoryStore and the Redis
// store run the same cases with an injected clock, so they behave the
// same.
package limitstest

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/limits"
)

// Clock is a manual clock for tests.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock set to a fixed instant.
func NewClock() *Clock {
	return &Clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Sleep advances the clock instead of sleeping (for limits.Config.Sleep).
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return nil
}

// Factory returns a fresh, empty store in its own namespace, reading the
// clock now, and cleans it up when t ends.
type Factory func(t *testing.T, now func() time.Time) (limits.Store, limits.UsageStore)

// Case is one exported case.
type Case struct {
	Name string
	Fn   func(t *testing.T, f Factory)
}

// Cases lists every case, for running one alone.
var Cases = []Case{
	{"RequestsNeverExceeded", RequestsNeverExceeded},
	{"TokensSeparateFromRequests", TokensSeparateFromRequests},
	{"SettleRefundsAndDebits", SettleRefundsAndDebits},
	{"ReservedShare", ReservedShare},
	{"ThrottleBacksOffEveryone", ThrottleBacksOffEveryone},
	{"AllOrNothing", AllOrNothing},
	{"KeyedBuckets", KeyedBuckets},
	{"UsageTotalsAndSums", UsageTotalsAndSums},
}

// Run runs every case against f.
func Run(t *testing.T, f Factory) {
	for _, c := range Cases {
		t.Run(c.Name, func(t *testing.T) { c.Fn(t, f) })
	}
}

func newLimiter(t *testing.T, f Factory, rules ...limits.Rule) (*limits.Limiter, limits.Store, *Clock) {
	t.Helper()
	clk := NewClock()
	st, _ := f(t, clk.Now)
	l, err := limits.New(limits.Config{Store: st, Rules: rules, Sleep: clk.Sleep})
	if err != nil {
		t.Fatal(err)
	}
	return l, st, clk
}

func mustReserve(t *testing.T, l *limits.Limiter, req limits.Request) *limits.Reservation {
	t.Helper()
	r, err := l.Reserve(context.Background(), req)
	if err != nil {
		t.Fatalf("Reserve(%+v): %v", req, err)
	}
	return r
}

func mustWait(t *testing.T, l *limits.Limiter, req limits.Request) time.Duration {
	t.Helper()
	_, err := l.Reserve(context.Background(), req)
	var we *limits.WaitError
	if !errors.As(err, &we) {
		t.Fatalf("Reserve(%+v) = %v, want a *WaitError", req, err)
	}
	if !errors.Is(err, limits.ErrLimited) {
		t.Fatalf("WaitError does not match ErrLimited")
	}
	return we.Wait
}

func near(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	if d := got - want; d < -time.Millisecond || d > time.Millisecond {
		t.Fatalf("%s = %s, want %s", what, got, want)
	}
}

// conforms checks that admissions (times, amounts) never exceed a bucket of
// capacity c and rate r per second: for every window [t_j, t_i] the sum
// is at most c + r·(t_i − t_j).
func conforms(t *testing.T, what string, at []time.Time, n []float64, c, r float64) {
	t.Helper()
	for i := range at {
		sum := 0.0
		for j := i; j >= 0; j-- {
			sum += n[j]
			if allowed := c + r*at[i].Sub(at[j]).Seconds(); sum > allowed+1e-6 {
				t.Fatalf("%s exceeded: %.1f admitted in [%s, %s], at most %.1f allowed", what, sum, at[j].Format("05.000000"), at[i].Format("05.000000"), allowed)
			}
		}
	}
}

// RequestsNeverExceeded: callers hammering a request limit never get more
// than it allows in any window, the wait they are told is exact, and they
// get (close to) all of it.
func RequestsNeverExceeded(t *testing.T, f Factory) {
	lim := limits.Limit{Requests: 10, Interval: time.Second, BurstRequests: 5}
	l, _, clk := newLimiter(t, f, limits.Rule{Name: "req", Limit: lim})
	req := limits.Request{Key: limits.Key{Provider: "p"}}
	rng := rand.New(rand.NewPCG(1, 2))
	start := clk.Now()
	var at []time.Time
	var n []float64
	for clk.Now().Sub(start) < 5*time.Second {
		_, err := l.Reserve(context.Background(), req)
		var we *limits.WaitError
		switch {
		case err == nil:
			at, n = append(at, clk.Now()), append(n, 1)
		case errors.As(err, &we):
			if rng.IntN(2) == 0 {
				// Wait exactly as told: then it must succeed.
				clk.Advance(we.Wait)
				mustReserve(t, l, req)
				at, n = append(at, clk.Now()), append(n, 1)
			}
		default:
			t.Fatal(err)
		}
		clk.Advance(time.Duration(rng.IntN(40)) * time.Millisecond)
	}
	conforms(t, "requests", at, n, 5, 10)
	if min := 0.9 * (5 + 10*5.0); float64(len(at)) < min {
		t.Fatalf("only %d requests admitted in 5s of a 10/s limit (want ≥ %.0f)", len(at), min)
	}
}

// TokensSeparateFromRequests: the token bucket limits by size while the
// request bucket has room, and the other way round.
func TokensSeparateFromRequests(t *testing.T, f Factory) {
	lim := limits.Limit{Requests: 100, Tokens: 1000, Interval: time.Second}
	l, _, clk := newLimiter(t, f, limits.Rule{Name: "tok", Limit: lim})
	k := limits.Key{Model: "m"}
	mustReserve(t, l, limits.Request{Key: k, Tokens: 600})
	near(t, "token wait", mustWait(t, l, limits.Request{Key: k, Tokens: 600}), 200*time.Millisecond)
	// A small request still fits: only the token bucket is short.
	mustReserve(t, l, limits.Request{Key: k, Tokens: 400})
	_, err := l.Reserve(context.Background(), limits.Request{Key: k, Tokens: 1001})
	if !errors.Is(err, limits.ErrTooLarge) {
		t.Fatalf("a request above the capacity: %v, want ErrTooLarge", err)
	}
	// Random sizes under time: both buckets conform.
	rng := rand.New(rand.NewPCG(3, 4))
	start := clk.Now()
	var at []time.Time
	var toks, reqs []float64
	for clk.Now().Sub(start) < 3*time.Second {
		n := int64(1 + rng.IntN(200))
		if _, err := l.Reserve(context.Background(), limits.Request{Key: k, Tokens: n}); err == nil {
			at, toks, reqs = append(at, clk.Now()), append(toks, float64(n)), append(reqs, 1)
		}
		clk.Advance(time.Duration(rng.IntN(5)) * time.Millisecond)
	}
	conforms(t, "tokens", at, toks, 1000, 1000)
	conforms(t, "requests", at, reqs, 100, 100)
}

// SettleRefundsAndDebits: an estimate above the actual count is refunded,
// one below is debited, and Cancel gives everything back.
func SettleRefundsAndDebits(t *testing.T, f Factory) {
	ctx := context.Background()
	lim := limits.Limit{Requests: 10, Tokens: 1000, Interval: 10 * time.Second}
	l, st, _ := newLimiter(t, f, limits.Rule{Name: "settle", Limit: lim})
	tokB := limits.Bucket{Name: "settle|tok", Capacity: 1000, Rate: 100}
	reqB := limits.Bucket{Name: "settle|req", Capacity: 10, Rate: 1}
	level := func(b limits.Bucket) float64 {
		t.Helper()
		v, err := st.Level(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	k := limits.Key{Model: "m"}
	r := mustReserve(t, l, limits.Request{Key: k, Tokens: 800})
	if got := level(tokB); math.Abs(got-200) > 1e-6 {
		t.Fatalf("after reserving 800 of 1000: level %v, want 200", got)
	}
	if err := r.Settle(ctx, 300); err != nil {
		t.Fatal(err)
	}
	if got := level(tokB); math.Abs(got-700) > 1e-6 {
		t.Fatalf("after settling to 300: level %v, want 700 (500 refunded)", got)
	}
	if err := r.Settle(ctx, 0); err != nil { // second settle: no-op
		t.Fatal(err)
	}
	if got := level(tokB); math.Abs(got-700) > 1e-6 {
		t.Fatalf("a second Settle changed the level to %v", got)
	}
	r = mustReserve(t, l, limits.Request{Key: k, Tokens: 100})
	if err := r.Settle(ctx, 900); err != nil { // 800 more than reserved
		t.Fatal(err)
	}
	if got := level(tokB); math.Abs(got-(-200)) > 1e-6 {
		t.Fatalf("after a low estimate: level %v, want -200 (debited)", got)
	}
	near(t, "wait after debit", mustWait(t, l, limits.Request{Key: k, Tokens: 100}), 3*time.Second)
	before := level(reqB)
	r = mustReserve(t, l, limits.Request{Key: limits.Key{Model: "m"}})
	if err := r.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if got := level(reqB); math.Abs(got-before) > 1e-6 {
		t.Fatalf("after Cancel: request level %v, want %v", got, before)
	}
}

// ReservedShare: batch callers stop at the reserved share; interactive
// callers can use it.
func ReservedShare(t *testing.T, f Factory) {
	lim := limits.Limit{Requests: 10, Interval: 10 * time.Second, Reserved: 0.3}
	l, _, _ := newLimiter(t, f, limits.Rule{Name: "share", Limit: lim})
	batch := limits.Request{Key: limits.Key{Model: "m"}, Lane: "batch"}
	inter := limits.Request{Key: limits.Key{Model: "m"}, Lane: "interactive"}
	for i := 0; i < 7; i++ {
		mustReserve(t, l, batch)
	}
	near(t, "batch wait at the reserved share", mustWait(t, l, batch), time.Second)
	for i := 0; i < 3; i++ {
		mustReserve(t, l, inter)
	}
	near(t, "interactive wait when empty", mustWait(t, l, inter), time.Second)
}

// ThrottleBacksOffEveryone: after a 429 for one key, every caller of that
// key waits the whole Retry-After, then capacity returns gradually; other
// keys are untouched.
func ThrottleBacksOffEveryone(t *testing.T, f Factory) {
	ctx := context.Background()
	lim := limits.Limit{Requests: 10, Tokens: 1000, Interval: time.Second}
	l, _, clk := newLimiter(t, f, limits.Rule{Name: "thr", By: []limits.Field{limits.Model}, Limit: lim})
	a := limits.Request{Key: limits.Key{Model: "a"}, Tokens: 100}
	b := limits.Request{Key: limits.Key{Model: "b"}, Tokens: 100}
	err := l.Throttled(ctx, a.Key, 2*time.Second, errors.New("429"))
	if !errors.Is(err, limits.ErrThrottled) {
		t.Fatalf("Throttled returned %v", err)
	}
	near(t, "wait after a 2s throttle", mustWait(t, l, a), 2*time.Second+100*time.Millisecond)
	mustReserve(t, l, b)
	clk.Advance(time.Second)
	// A refund during the block does not lift it.
	if err := l.Throttle(ctx, a.Key, 500*time.Millisecond); err != nil { // shorter: no effect
		t.Fatal(err)
	}
	near(t, "wait 1s later", mustWait(t, l, a), time.Second+100*time.Millisecond)
	clk.Advance(time.Second)
	near(t, "wait at the end of the block", mustWait(t, l, a), 100*time.Millisecond)
	clk.Advance(100 * time.Millisecond)
	mustReserve(t, l, a)
}

// AllOrNothing: a call limited by two rules takes from both or neither.
func AllOrNothing(t *testing.T, f Factory) {
	ctx := context.Background()
	l, st, _ := newLimiter(t, f,
		limits.Rule{Name: "provider", Match: limits.Key{Provider: "p"}, Limit: limits.Limit{Requests: 100, Interval: time.Second}},
		limits.Rule{Name: "tenant", Match: limits.Key{Provider: "p"}, By: []limits.Field{limits.Tenant}, Limit: limits.Limit{Requests: 2, Interval: time.Second}},
	)
	req := limits.Request{Key: limits.Key{Provider: "p", Tenant: "t1"}}
	mustReserve(t, l, req)
	mustReserve(t, l, req)
	mustWait(t, l, req)
	mustWait(t, l, req)
	lvl, err := st.Level(ctx, limits.Bucket{Name: "provider|req", Capacity: 100, Rate: 100})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(lvl-98) > 1e-6 {
		t.Fatalf("provider bucket level %v after two admitted and two refused calls, want 98", lvl)
	}
	mustReserve(t, l, limits.Request{Key: limits.Key{Provider: "p", Tenant: "t2"}})
	mustReserve(t, l, limits.Request{Key: limits.Key{Provider: "other", Tenant: "t1"}}) // no rule matches
}

// KeyedBuckets: By fields give each combination its own limit.
func KeyedBuckets(t *testing.T, f Factory) {
	l, _, _ := newLimiter(t, f, limits.Rule{Name: "keyed", By: []limits.Field{limits.Model, limits.Tenant, limits.Kind, limits.Tool},
		Limit: limits.Limit{Requests: 1, Interval: time.Minute}})
	keys := []limits.Key{{Model: "a", Tenant: "x"}, {Model: "a", Tenant: "y"}, {Model: "b", Tenant: "x"}, {Model: "a", Tenant: "x", Kind: "k"}, {Model: "a", Tenant: "x", Tool: "search"}, {Model: "a|b", Tenant: "="}}
	for _, k := range keys {
		mustReserve(t, l, limits.Request{Key: k})
	}
	for _, k := range keys {
		near(t, "second call of "+k.String(), mustWait(t, l, limits.Request{Key: k}), time.Minute)
	}
}

// UsageTotalsAndSums: a run's first start sticks, Charge refuses to cross
// a maximum and adds nothing then, and Sum groups records.
func UsageTotalsAndSums(t *testing.T, f Factory) {
	ctx := context.Background()
	clk := NewClock()
	_, us := f(t, clk.Now)
	first := clk.Now()
	got, err := us.StartRun(ctx, "task-1", first)
	if err != nil || !got.Equal(first) {
		t.Fatalf("StartRun = %v, %v", got, err)
	}
	got, err = us.StartRun(ctx, "task-1", first.Add(time.Hour))
	if err != nil || !got.Equal(first) {
		t.Fatalf("second StartRun = %v, %v; want the first start %v", got, err, first)
	}
	max := limits.Usage{ModelCalls: 2, Tokens: 1000, Spend: 0.5}
	tot, over, err := us.Charge(ctx, "task-1", limits.Usage{ModelCalls: 1}, limits.Usage{Tokens: 400}, max)
	if err != nil || over != "" || tot.ModelCalls != 1 || tot.Tokens != 0 {
		t.Fatalf("Charge = %+v %q %v", tot, over, err)
	}
	tot, _, _ = us.Charge(ctx, "task-1", limits.Usage{Tokens: 700, Spend: 0.25}, limits.Usage{}, limits.Usage{})
	if tot.Tokens != 700 || math.Abs(tot.Spend-0.25) > 1e-9 {
		t.Fatalf("totals %+v", tot)
	}
	tot, over, err = us.Charge(ctx, "task-1", limits.Usage{ModelCalls: 1}, limits.Usage{Tokens: 400}, max)
	if err != nil || over != limits.FieldTokens || tot.ModelCalls != 1 {
		t.Fatalf("Charge over tokens = %+v %q %v; want refused on max_tokens with nothing added", tot, over, err)
	}
	tot, over, _ = us.Charge(ctx, "task-1", limits.Usage{ModelCalls: 1}, limits.Usage{Spend: 0.25}, max)
	if over != "" || tot.ModelCalls != 2 {
		t.Fatalf("spend exactly at the max must pass: %+v %q", tot, over)
	}
	_, over, _ = us.Charge(ctx, "task-1", limits.Usage{ModelCalls: 1}, limits.Usage{}, max)
	if over != limits.FieldModelCalls {
		t.Fatalf("third model call: over %q, want %s", over, limits.FieldModelCalls)
	}
	if u, err := us.TaskUsage(ctx, "task-1"); err != nil || u.ModelCalls != 2 || u.Tokens != 700 {
		t.Fatalf("TaskUsage = %+v, %v", u, err)
	}
	recs := []limits.Record{
		{TaskID: "1", Key: limits.Key{Tenant: "acme", Model: "big", Kind: "agent"}, Usage: limits.Usage{ModelCalls: 1, Tokens: 100, Spend: 0.1}},
		{TaskID: "1", Key: limits.Key{Tenant: "acme", Model: "small", Kind: "agent"}, Usage: limits.Usage{ModelCalls: 1, Tokens: 10, Spend: 0.01}},
		{TaskID: "2", Key: limits.Key{Tenant: "beta", Model: "big", Kind: "agent"}, Usage: limits.Usage{ModelCalls: 2, Tokens: 200, Spend: 0.2}},
		{TaskID: "2", Key: limits.Key{Tenant: "beta", Tool: "search", Kind: "agent"}, Usage: limits.Usage{ToolCalls: 3}},
	}
	for _, r := range recs {
		if err := us.Record(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := us.Sum(ctx, limits.Query{By: []limits.Field{limits.Tenant}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Key.Tenant != "acme" || rows[0].Usage.Tokens != 110 || rows[1].Usage.ToolCalls != 3 || rows[1].Usage.ModelCalls != 2 {
		t.Fatalf("Sum by tenant = %+v", rows)
	}
	rows, _ = us.Sum(ctx, limits.Query{Match: limits.Key{Model: "big"}, By: []limits.Field{limits.Model}})
	if len(rows) != 1 || rows[0].Usage.Tokens != 300 || math.Abs(rows[0].Usage.Spend-0.3) > 1e-9 {
		t.Fatalf("Sum of model big = %+v", rows)
	}
	rows, _ = us.Sum(ctx, limits.Query{})
	if len(rows) != 1 || rows[0].Usage.ModelCalls != 4 || rows[0].Usage.ToolCalls != 3 {
		t.Fatalf("Sum of all = %+v", rows)
	}
}
