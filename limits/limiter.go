package limits

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Limit is a provider-style limit: Requests and Tokens per Interval, as two
// separate token buckets. A zero count means that bucket is unlimited.
type Limit struct {
	// Requests per Interval. 0: no request limit.
	Requests int64
	// Tokens per Interval. 0: no token limit.
	Tokens int64
	// Interval defaults to one minute.
	Interval time.Duration
	// BurstRequests and BurstTokens are the bucket capacities: how much can
	// be spent at once after a quiet spell. Default to Requests and Tokens
	// (a full interval's worth, like the providers' own limiters); set
	// them lower to smooth traffic.
	BurstRequests int64
	BurstTokens   int64
	// Reserved is the share (0 to <1) of each bucket that only priority
	// callers (Config.PriorityLanes) may use, so batch work cannot exhaust
	// what interactive work needs. Defaults to 0.
	Reserved float64
}

func (l Limit) withDefaults() Limit {
	if l.Interval <= 0 {
		l.Interval = time.Minute
	}
	if l.BurstRequests <= 0 {
		l.BurstRequests = l.Requests
	}
	if l.BurstTokens <= 0 {
		l.BurstTokens = l.Tokens
	}
	return l
}

// Rule applies a Limit to the calls it matches, with one pair of buckets
// per distinct value of its By fields.
type Rule struct {
	// Name identifies the rule; it is part of every bucket name. Required.
	Name string
	// Match restricts the rule to calls whose Key equals Match's non-empty
	// fields (Provider "openai": every OpenAI call). Zero matches all.
	Match Key
	// By lists the fields that separate buckets: {Model, Tenant} gives each
	// (model, tenant) pair its own limit; nil shares one limit among every
	// matching call.
	By []Field
	// Limit is the limit of each bucket pair.
	Limit Limit
}

// Config configures a Limiter.
type Config struct {
	// Store holds the buckets. Required: a *MemoryStore for one process,
	// a redisstore.Store to share limits across processes.
	Store Store
	// Prefix is prepended to every bucket name, so several applications or
	// tests can share one store. Defaults to "".
	Prefix string
	// Rules are the limits. A call is limited by every rule it matches.
	Rules []Rule
	// PriorityLanes may use the Reserved share of every limit. Defaults
	// to ["interactive"].
	PriorityLanes []string
	// MaxInlineWait: Wait sleeps in place for waits up to this long and
	// returns a *WaitError (turned into a Snooze by Result) for longer
	// ones, freeing the slot. Defaults to 250ms.
	MaxInlineWait time.Duration
	// Sleep is the in-place wait (for injected clocks in tests). Defaults
	// to a timer that honours ctx.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Limiter reserves request and token capacity before a call and settles
// it after.
type Limiter struct {
	cfg Config
}

// New returns a Limiter, or ErrInvalid for a bad configuration.
func New(cfg Config) (*Limiter, error) {
	if cfg.Store == nil {
		return nil, invalidf("limits: Config.Store is required")
	}
	if cfg.PriorityLanes == nil {
		cfg.PriorityLanes = []string{"interactive"}
	}
	if cfg.MaxInlineWait <= 0 {
		cfg.MaxInlineWait = 250 * time.Millisecond
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	seen := map[string]bool{}
	rules := make([]Rule, len(cfg.Rules))
	for i, r := range cfg.Rules {
		if r.Name == "" {
			return nil, invalidf("limits: rule %d has no name", i)
		}
		if seen[r.Name] {
			return nil, invalidf("limits: two rules are named %q", r.Name)
		}
		seen[r.Name] = true
		for _, f := range r.By {
			if !validField(f) {
				return nil, invalidf("limits: rule %q: unknown field %q", r.Name, f)
			}
		}
		if r.Limit.Requests < 0 || r.Limit.Tokens < 0 || r.Limit.BurstRequests < 0 || r.Limit.BurstTokens < 0 {
			return nil, invalidf("limits: rule %q: negative limit", r.Name)
		}
		if r.Limit.Reserved < 0 || r.Limit.Reserved >= 1 {
			return nil, invalidf("limits: rule %q: Reserved %v must be in [0, 1)", r.Name, r.Limit.Reserved)
		}
		r.Limit = r.Limit.withDefaults()
		rules[i] = r
	}
	cfg.Rules = rules
	return &Limiter{cfg: cfg}, nil
}

// Request describes one call about to be made.
type Request struct {
	Key Key
	// Tokens is the estimate reserved before the call (prompt plus the
	// most the answer may use); Settle corrects it to the actual count.
	Tokens int64
	// Lane is the task's lane: lanes in Config.PriorityLanes may use the
	// reserved share.
	Lane string
}

// Reservation is capacity taken for one call. Settle it with the actual
// token count after the call, or Cancel it if the call was not made.
type Reservation struct {
	l       *Limiter
	tokens  []Bucket
	reqs    []Bucket
	est     int64
	settled bool
}

// Estimate is the number of tokens reserved.
func (r *Reservation) Estimate() int64 { return r.est }

// Settle corrects the reservation to actual tokens: it refunds est−actual
// to every token bucket when the estimate was high, and debits the
// difference when it was low (later calls wait for it). Settling twice is
// a no-op.
func (r *Reservation) Settle(ctx context.Context, actual int64) error {
	if r == nil || r.settled {
		return nil
	}
	r.settled = true
	delta := float64(r.est - actual)
	if delta == 0 {
		return nil
	}
	var errs []error
	for _, b := range r.tokens {
		errs = append(errs, r.l.cfg.Store.Put(ctx, b, delta))
	}
	return errors.Join(errs...)
}

// Cancel gives the whole reservation back (requests and tokens): the call
// was not made.
func (r *Reservation) Cancel(ctx context.Context) error {
	if r == nil || r.settled {
		return nil
	}
	r.settled = true
	var errs []error
	for _, b := range r.reqs {
		errs = append(errs, r.l.cfg.Store.Put(ctx, b, 1))
	}
	for _, b := range r.tokens {
		errs = append(errs, r.l.cfg.Store.Put(ctx, b, float64(r.est)))
	}
	return errors.Join(errs...)
}

// takes returns the takes for req (empty when no rule matches). With all,
// it includes every bucket of every matching rule and checks nothing.
func (l *Limiter) takes(req Request, all bool) (takes []Take, reqs, toks []Bucket, err error) {
	prio := slices.Contains(l.cfg.PriorityLanes, req.Lane)
	for _, r := range l.cfg.Rules {
		if !req.Key.matches(r.Match) {
			continue
		}
		name := l.cfg.Prefix + escape(r.Name)
		for _, f := range r.By {
			name += "|" + string(f) + "=" + escape(req.Key.Get(f))
		}
		lim := r.Limit
		per := lim.Interval.Seconds()
		if lim.Requests > 0 {
			b := Bucket{Name: name + "|req", Capacity: float64(lim.BurstRequests), Rate: float64(lim.Requests) / per}
			t := Take{Bucket: b, N: 1}
			if !prio {
				t.Floor = lim.Reserved * b.Capacity
			}
			if !all && t.N+t.Floor > b.Capacity {
				return nil, nil, nil, fmt.Errorf("%w: rule %q: one request needs more than the bucket's capacity %v beyond its reserved share", ErrTooLarge, r.Name, b.Capacity)
			}
			takes, reqs = append(takes, t), append(reqs, b)
		}
		if lim.Tokens > 0 && (req.Tokens > 0 || all) {
			b := Bucket{Name: name + "|tok", Capacity: float64(lim.BurstTokens), Rate: float64(lim.Tokens) / per}
			t := Take{Bucket: b, N: float64(req.Tokens)}
			if !prio {
				t.Floor = lim.Reserved * b.Capacity
			}
			if !all && t.N+t.Floor > b.Capacity {
				return nil, nil, nil, fmt.Errorf("%w: rule %q: %d tokens exceed the bucket's capacity %v beyond its reserved share", ErrTooLarge, r.Name, req.Tokens, b.Capacity)
			}
			takes, toks = append(takes, t), append(toks, b)
		}
	}
	return takes, reqs, toks, nil
}

// Reserve takes one request and req.Tokens tokens from every rule that
// matches req.Key, all or nothing. When capacity is not there it returns a
// *WaitError saying how long until it is; Result turns that into a
// scheduler.Snooze, which spends no attempt and frees the slot.
func (l *Limiter) Reserve(ctx context.Context, req Request) (*Reservation, error) {
	if req.Tokens < 0 {
		return nil, invalidf("limits: negative token estimate %d", req.Tokens)
	}
	takes, reqs, toks, err := l.takes(req, false)
	if err != nil {
		return nil, err
	}
	res := &Reservation{l: l, reqs: reqs, tokens: toks, est: req.Tokens}
	if len(takes) == 0 {
		return res, nil
	}
	wait, err := l.cfg.Store.Take(ctx, takes)
	if err != nil {
		return nil, err
	}
	if wait > 0 {
		return nil, &WaitError{Key: req.Key, Wait: wait}
	}
	return res, nil
}

// Wait is Reserve that sleeps in place for short waits (up to
// Config.MaxInlineWait, retrying until ctx ends) and returns the
// *WaitError of a longer one, for the handler to snooze on.
func (l *Limiter) Wait(ctx context.Context, req Request) (*Reservation, error) {
	for {
		res, err := l.Reserve(ctx, req)
		var we *WaitError
		if !errors.As(err, &we) || we.Wait > l.cfg.MaxInlineWait {
			return res, err
		}
		if err := l.cfg.Sleep(ctx, we.Wait); err != nil {
			return nil, err
		}
	}
}

// Throttle backs off every rule matching key for d, for every caller
// sharing the store: a provider answered 429 with Retry-After d. After d
// the buckets refill from empty, so the callers do not all return at once.
func (l *Limiter) Throttle(ctx context.Context, key Key, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	takes, _, _, _ := l.takes(Request{Key: key}, true)
	var errs []error
	for _, t := range takes {
		errs = append(errs, l.cfg.Store.Block(ctx, t.Bucket, d))
	}
	return errors.Join(errs...)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Throttled records a provider's "rate limited, retry after d" for key
// (Throttle: every caller sharing the store backs off) and returns the
// *ThrottledError for the handler to return through Result, which snoozes
// the task for d plus jitter without spending an attempt. A Throttle
// failure is joined to the returned error, which still snoozes.
func (l *Limiter) Throttled(ctx context.Context, key Key, d time.Duration, cause error) error {
	te := &ThrottledError{Key: key, RetryAfter: d, Err: cause}
	if err := l.Throttle(ctx, key, d); err != nil {
		return errors.Join(te, err)
	}
	return te
}
