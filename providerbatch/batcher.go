package providerbatch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/lanes"
	"github.com/switchyard-dev/switchyard/scheduler"
	"github.com/switchyard-dev/switchyard/spend"
)

// Lane is the name of the provider-batch lane.
const Lane = "provider-batch"

// LaneDef is the provider-batch lane's definition: shared slots only,
// weight 1, promoted after a minute (its tasks are short: each run reads
// the store, maybe pumps, and snoozes).
func LaneDef() lanes.Lane {
	return lanes.Lane{Name: Lane, Weight: 1, PromotionAge: time.Minute}
}

// Config configures a Batcher. Provider, Store and Prices are required.
type Config struct {
	Provider Provider
	Store    Store
	Prices   *spend.Table
	// Windows cap spend per tenant. Defaults to none.
	Windows []spend.Window
	// MaxItems is the most items per batch. Defaults to 1000 (OpenAI takes
	// 50,000, Anthropic 100,000).
	MaxItems int
	// MaxAge submits a smaller batch once its oldest item has waited this
	// long. Defaults to 1 minute.
	MaxAge time.Duration
	// PollInterval is how often a batch is polled and how long a waiting
	// task snoozes. Defaults to 30 seconds.
	PollInterval time.Duration
	// Latency is the turnaround a batch is assumed to need: a task whose
	// deadline is sooner than now+Latency calls the provider directly.
	// Defaults to 24 hours (the providers' completion window).
	Latency time.Duration
	// MaxItemAttempts bounds how often one item is batched again after a
	// retryable error or a missing result. Defaults to 3.
	MaxItemAttempts int
	// LeaseTTL is how long a pump holds its lease (a SIGKILLed pump's lease
	// runs out after it). Defaults to 2 minutes.
	LeaseTTL time.Duration
	// CallTimeout bounds each provider call. Defaults to 2 minutes.
	CallTimeout time.Duration
	// Metrics, when set, receives counters. Defaults to nil.
	Metrics *Metrics
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// Batcher runs the provider-batch lane's tasks: Do collects each task's
// request into provider batches and returns its own result once the batch
// has ended, driving submission and polling from the tasks' own snoozed
// runs (no process waits for a batch).
type Batcher struct {
	cfg     Config
	holder  string
	mu      sync.Mutex
	pumping sync.Mutex
	// throttled is when a 429 on submit lets this process submit again.
	throttled time.Time
	// lastPump is when this process last pumped: Do pumps at most once
	// per pumpEvery, so thousands of waiting tasks do not each take the
	// lease.
	lastPump  time.Time
	pumpEvery time.Duration
}

// New returns a Batcher.
func New(cfg Config) (*Batcher, error) {
	if cfg.Provider == nil || cfg.Store == nil || cfg.Prices == nil {
		return nil, broker.Invalidf("providerbatch: Config needs Provider, Store and Prices")
	}
	for _, w := range cfg.Windows {
		if err := w.Validate(); err != nil {
			return nil, broker.Invalidf("providerbatch: %v", err)
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if cfg.MaxItems <= 0 {
		cfg.MaxItems = 1000
	}
	if cfg.MaxItemAttempts <= 0 {
		cfg.MaxItemAttempts = 3
	}
	def(&cfg.MaxAge, time.Minute)
	def(&cfg.PollInterval, 30*time.Second)
	def(&cfg.Latency, 24*time.Hour)
	def(&cfg.LeaseTTL, 2*time.Minute)
	def(&cfg.CallTimeout, 2*time.Minute)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Batcher{cfg: cfg, holder: newID("pump"), pumpEvery: min(cfg.PollInterval, cfg.MaxAge) / 2}, nil
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// Request is one task's model call.
type Request struct {
	// Model is the model, as in the price table. Required.
	Model string
	// Params is the provider's request body as JSON (see Item). Required.
	Params json.RawMessage
	// InputTokens and MaxOutputTokens estimate the call's worst case, for
	// the spend reservation. The reservation is an upper bound only when
	// they are: InputTokens at least the prompt's tokens, MaxOutputTokens
	// the request's max_tokens.
	InputTokens     int64
	MaxOutputTokens int64
	// CacheKey groups requests sharing a prompt prefix. Defaults to the
	// task's EnqueueOpts.CacheKey.
	CacheKey string
	// Run attributes the spend to a workflow run. Defaults to "".
	Run string
}

// Response is a task's result.
type Response struct {
	Body  json.RawMessage
	Usage spend.Usage
	Cost  spend.Micros
	Mode  spend.Mode
}

// CacheKeyOf returns the task's cache key (EnqueueOpts.CacheKey).
func CacheKeyOf(job *scheduler.Job) string {
	if job == nil {
		return ""
	}
	return job.Headers["meta-"+scheduler.MetaCacheKey]
}

func deadlineOf(job *scheduler.Job) time.Time {
	if job.Task != nil && !job.Task.Deadline.IsZero() {
		return job.Task.Deadline
	}
	if s := job.Headers[scheduler.HeaderDeadline]; s != "" {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t
		}
	}
	return time.Time{}
}

// Do returns the task's result. The first run records the request
// (reserving its spend) and snoozes; later runs pump the batches (submit,
// poll, collect) and snooze until the result is in. A request that would
// miss the task's deadline is called directly. The error is a scheduler
// result: a Snooze while waiting, Budget when a spend window refuses the
// call (Snooze until the window resets if its Action is spend.Snooze),
// Permanent for a failed item or bad input, with the reason.
func (b *Batcher) Do(ctx context.Context, job *scheduler.Job, req Request) (*Response, error) {
	if job == nil || job.ID == "" {
		return nil, broker.Invalidf("providerbatch: Do needs a job")
	}
	pname := b.cfg.Provider.Name()
	price, err := b.cfg.Prices.Price(pname, req.Model)
	if err != nil {
		return nil, scheduler.Permanent(err)
	}
	it, err := b.cfg.Store.Item(ctx, job.ID)
	if err != nil {
		return nil, err
	}
	now := b.cfg.Now()
	deadline := deadlineOf(job)
	late := !deadline.IsZero() && now.Add(b.cfg.Latency).After(deadline)
	if it == nil {
		if len(req.Params) == 0 || !json.Valid(req.Params) {
			return nil, scheduler.Permanent(fmt.Errorf("providerbatch: task %s: request params are not valid JSON", job.ID))
		}
		if req.InputTokens < 0 || req.MaxOutputTokens < 0 {
			return nil, scheduler.Permanent(fmt.Errorf("providerbatch: task %s: negative token estimate", job.ID))
		}
		mode, state := spend.Batch, Pending
		if late {
			mode, state = spend.Direct, DirectCall
		}
		ck := req.CacheKey
		if ck == "" {
			ck = CacheKeyOf(job)
		}
		est := price.Cost(spend.Usage{Input: req.InputTokens, Output: req.MaxOutputTokens}, mode)
		it, err = b.cfg.Store.Add(ctx, StoredItem{TaskID: job.ID, Provider: pname, Model: req.Model, Tenant: job.Tenant,
			Kind: job.Kind, Run: req.Run, CacheKey: ck, Params: req.Params, State: state, CreatedAt: now, Mode: mode},
			Reservation{Estimate: est, Mode: mode, Windows: b.cfg.Windows, Now: now})
		if err != nil {
			var ce *spend.CapError
			if errors.As(err, &ce) {
				b.cfg.Metrics.refused(ce.Tenant)
				if ce.Window.Action == spend.Snooze {
					return nil, scheduler.Snooze(max(time.Second, ce.Until.Sub(now)))
				}
				return nil, scheduler.Budget(err)
			}
			return nil, err
		}
		b.cfg.Metrics.item("added")
	}
	switch it.State {
	case Done:
		return &Response{Body: it.Result, Usage: it.Usage, Cost: it.Cost, Mode: it.Mode}, nil
	case FailedItem:
		return nil, scheduler.Permanent(fmt.Errorf("providerbatch: %s", it.Err))
	case DirectCall:
		return b.direct(ctx, it, price)
	case Pending:
		if late {
			est := price.Cost(spend.Usage{Input: req.InputTokens, Output: req.MaxOutputTokens}, spend.Direct)
			ok, err := b.cfg.Store.TakeDirect(ctx, job.ID, Reservation{Estimate: est, Mode: spend.Direct, Windows: b.cfg.Windows, Now: now})
			var ce *spend.CapError
			if errors.As(err, &ce) {
				// The direct price does not fit the window; the item stays
				// batched (cheaper) even though it may miss its deadline.
				ok, err = false, nil
			}
			if err != nil {
				return nil, err
			}
			if ok {
				it.State = DirectCall
				return b.direct(ctx, it, price)
			}
		}
	}
	if err := b.maybePump(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		b.cfg.Logger.Warn("providerbatch: pump", "provider", pname, "err", err)
	}
	if it, err = b.cfg.Store.Item(ctx, job.ID); err == nil && it != nil {
		switch it.State {
		case Done:
			return &Response{Body: it.Result, Usage: it.Usage, Cost: it.Cost, Mode: it.Mode}, nil
		case FailedItem:
			return nil, scheduler.Permanent(fmt.Errorf("providerbatch: %s", it.Err))
		}
	}
	return nil, scheduler.Snooze(b.cfg.PollInterval)
}

// maybePump pumps unless this process did so less than pumpEvery ago.
func (b *Batcher) maybePump(ctx context.Context) error {
	now := b.cfg.Now()
	b.mu.Lock()
	if now.Sub(b.lastPump) < b.pumpEvery && !now.Before(b.lastPump) {
		b.mu.Unlock()
		return nil
	}
	b.lastPump = now
	b.mu.Unlock()
	return b.Pump(ctx)
}

// directResult is a direct call's memoised outcome.
type directResult struct {
	Body  json.RawMessage `json:"body,omitempty"`
	Usage spend.Usage     `json:"usage"`
	Err   *ItemError      `json:"err,omitempty"`
}

// direct calls the provider for it, memoised as a Step (with a ledger a
// retry after a crash does not pay for the call twice), and settles it.
func (b *Batcher) direct(ctx context.Context, it *StoredItem, price spend.Price) (*Response, error) {
	call := func(ctx context.Context) ([]byte, error) {
		cctx, cancel := context.WithTimeout(ctx, b.cfg.CallTimeout)
		defer cancel()
		r, err := b.cfg.Provider.Call(cctx, Item{CustomID: it.TaskID, Model: it.Model, Params: it.Params})
		if err != nil {
			return nil, err
		}
		if r.Err == nil {
			if err := r.Usage.Validate(); err != nil {
				r.Err = &ItemError{Code: "malformed", Message: err.Error()}
			}
		}
		return json.Marshal(directResult{Body: r.Body, Usage: r.Usage, Err: r.Err})
	}
	out, err := scheduler.Step(ctx, "providerbatch.direct", call)
	if errors.Is(err, scheduler.ErrNotInTask) {
		out, err = call(ctx) // called outside a handler: nothing to memoise in
	}
	if err != nil {
		return nil, err
	}
	var dr directResult
	if err := json.Unmarshal(out, &dr); err != nil {
		return nil, scheduler.Permanent(fmt.Errorf("providerbatch: decode direct result: %w", err))
	}
	now := b.cfg.Now()
	if dr.Err != nil {
		if dr.Err.Retryable {
			return nil, fmt.Errorf("providerbatch: direct call: %w", dr.Err)
		}
		msg := "direct call: " + dr.Err.Error()
		if err := b.cfg.Store.Settle(ctx, Outcome{TaskID: it.TaskID, State: FailedItem, Err: msg}, now); err != nil {
			return nil, err
		}
		b.cfg.Metrics.item("failed")
		return nil, scheduler.Permanent(fmt.Errorf("providerbatch: %s", msg))
	}
	cost := price.Cost(dr.Usage, spend.Direct)
	if err := b.cfg.Store.Settle(ctx, Outcome{TaskID: it.TaskID, State: Done, Result: dr.Body, Usage: dr.Usage, Cost: cost}, now); err != nil {
		return nil, err
	}
	b.cfg.Metrics.settled(it, dr.Usage, cost, spend.Direct)
	return &Response{Body: dr.Body, Usage: dr.Usage, Cost: cost, Mode: spend.Direct}, nil
}
