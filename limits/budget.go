package limits

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
	"github.com/switchyard-dev/switchyard/spend"
)

// Budget is a run's hard limits, accounted across every attempt of the
// task (a retry spends from the same budget). Zero fields are unlimited.
type Budget struct {
	// WallClock bounds the time from the task's first start, across
	// retries and snoozes.
	WallClock     time.Duration
	MaxModelCalls int64
	MaxToolCalls  int64
	// MaxTokens bounds the tokens of every model call together.
	MaxTokens int64
	// MaxSpend bounds the spend (currency units, USD by convention).
	MaxSpend float64
}

func (b Budget) max() Usage {
	return Usage{ModelCalls: b.MaxModelCalls, ToolCalls: b.MaxToolCalls, Tokens: b.MaxTokens, Spend: b.MaxSpend}
}

// MeterConfig configures a Meter.
type MeterConfig struct {
	// Store keeps the running totals and aggregates. Required: a
	// *MemoryStore in one process, a redisstore.Store across processes (a
	// retry may land on another worker).
	Store UsageStore
	// Ledger, when set, gets one event per recorded call on the task's log
	// (reason "usage", detail the JSON Record) and one "budget_exceeded"
	// event when a run is stopped, so the task's history shows what it
	// consumed. Defaults to nil.
	Ledger ledger.Ledger
	// Windows cap each tenant's spend per period (for example $50 per
	// tenant per UTC day): Run.Begin reserves a model call's estimated
	// Spend on every window that applies to the run's tenant and refuses
	// the call with a *SpendCapError when one would be crossed; End and
	// EndSpend settle the reservation to the actual cost. Defaults to none.
	Windows []spend.Window
	// Spend keeps the windows' reservations. Required with Windows: a
	// *MemoryStore in one process, providerbatch/sqlstore.Store across
	// processes (which also reports every model call's spend, windowed or
	// not, to the admin API and `switchyard spend`). Defaults to nil.
	Spend SpendStore
	// SpendObserver, when set with Spend, is told of every settled call
	// and every refusal (providerbatch.Metrics: Prometheus). Defaults to
	// nil.
	SpendObserver SpendObserver
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// Meter accounts for what runs consume and enforces their budgets.
type Meter struct {
	cfg MeterConfig
}

// NewMeter returns a Meter.
func NewMeter(cfg MeterConfig) (*Meter, error) {
	if cfg.Store == nil {
		return nil, invalidf("limits: MeterConfig.Store is required")
	}
	for _, w := range cfg.Windows {
		if err := w.Validate(); err != nil {
			return nil, invalidf("limits: MeterConfig.Windows: %v", err)
		}
		if w.Action != spend.Refuse && w.Action != spend.Snooze {
			return nil, invalidf("limits: MeterConfig.Windows: unknown action %d", w.Action)
		}
	}
	if len(cfg.Windows) > 0 && cfg.Spend == nil {
		return nil, invalidf("limits: MeterConfig.Windows needs MeterConfig.Spend to keep the reservations")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Meter{cfg: cfg}, nil
}

// Store returns the meter's usage store, for queries (Sum, TaskUsage).
func (m *Meter) Store() UsageStore { return m.cfg.Store }

// Run is one task's account: every attempt of the task opens its own Run
// on the same totals.
type Run struct {
	m       *Meter
	task    string
	key     Key // tenant and kind of the task
	budget  Budget
	started time.Time
	windows spendWindows
	// cacheKey is the job's cache key (StartJob), for the spend report.
	cacheKey string
}

// Start opens the account of task (its ID, tenant and kind) under budget,
// recording its first start if this is the first attempt. It returns a
// *BudgetError when the wall clock has already run out.
func (m *Meter) Start(ctx context.Context, taskID, tenant, kind string, budget Budget) (*Run, error) {
	if taskID == "" {
		return nil, invalidf("limits: Start needs a task ID")
	}
	first, err := m.cfg.Store.StartRun(ctx, taskID, m.cfg.Now())
	if err != nil {
		return nil, err
	}
	r := &Run{m: m, task: taskID, key: Key{Tenant: tenant, Kind: kind}, budget: budget, started: first,
		windows: spendWindows{open: map[Call][]string{}}}
	if err := r.CheckClock(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// StartJob is Start for the job a handler is running.
func (m *Meter) StartJob(ctx context.Context, job *scheduler.Job, budget Budget) (*Run, error) {
	if job == nil {
		return nil, invalidf("limits: StartJob needs a job")
	}
	r, err := m.Start(ctx, job.ID, job.Tenant, job.Kind, budget)
	if r != nil {
		r.cacheKey = job.Headers["meta-"+scheduler.MetaCacheKey]
	}
	return r, err
}

// FirstStart is when the task's first attempt started.
func (r *Run) FirstStart() time.Time { return r.started }

// Remaining is the wall-clock time left (0 without a WallClock limit, or
// when it ran out).
func (r *Run) Remaining() time.Duration {
	if r.budget.WallClock <= 0 {
		return 0
	}
	return max(0, r.started.Add(r.budget.WallClock).Sub(r.m.cfg.Now()))
}

// Context returns ctx bounded by the run's wall-clock deadline (ctx itself
// without one), so a call in flight stops when the budget's time is up.
func (r *Run) Context(ctx context.Context) (context.Context, context.CancelFunc) {
	if r.budget.WallClock <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, r.started.Add(r.budget.WallClock))
}

// CheckClock returns a *BudgetError once the wall clock has run out.
func (r *Run) CheckClock(ctx context.Context) error {
	if r.budget.WallClock <= 0 {
		return nil
	}
	used := r.m.cfg.Now().Sub(r.started)
	if used <= r.budget.WallClock {
		return nil
	}
	return r.stop(ctx, &BudgetError{TaskID: r.task, Limit: FieldWallClock, Used: used.Round(time.Millisecond).String(), Max: r.budget.WallClock.String()})
}

// CallKind says what kind of call a Run accounts for.
type CallKind int

// Call kinds.
const (
	ModelCall CallKind = iota
	ToolCall
)

// Call is one call about to be made.
type Call struct {
	Kind CallKind
	// Key names the provider and model, or the tool (tenant and kind come
	// from the run).
	Key Key
	// Tokens and Spend are estimates: a call whose estimate would cross
	// MaxTokens or MaxSpend is refused before it is made.
	Tokens int64
	Spend  float64
}

// Check returns a *BudgetError when the call c would cross a hard limit,
// without counting anything: for checking the budget before waiting for
// rate-limit capacity. Begin still decides, atomically.
func (r *Run) Check(ctx context.Context, c Call) error {
	if err := r.CheckClock(ctx); err != nil {
		return err
	}
	head := Usage{Tokens: c.Tokens, Spend: c.Spend}
	if c.Kind == ToolCall {
		head.ToolCalls = 1
	} else {
		head.ModelCalls = 1
	}
	totals, over, err := r.m.cfg.Store.Charge(ctx, r.task, Usage{}, head, r.budget.max())
	if err != nil {
		return err
	}
	if over != "" {
		return r.stop(ctx, r.budgetError(over, totals.Add(head)))
	}
	return nil
}

// Begin counts the call against the run's call limits and checks its
// estimates against the token and spend limits, atomically across every
// process sharing the store. It returns a *BudgetError (and counts
// nothing) when the call would cross a hard limit. With spend windows
// (MeterConfig.Windows), a model call also reserves its Spend estimate on
// its tenant's windows and is refused with a *SpendCapError when one would
// be crossed; every Begin that returns nil must be followed by End or
// EndSpend (End with zero usage when the call failed), which settles the
// reservation.
func (r *Run) Begin(ctx context.Context, c Call) error {
	if err := r.CheckClock(ctx); err != nil {
		return err
	}
	id, err := r.reserve(ctx, c)
	if err != nil {
		return err
	}
	if err := r.charge(ctx, c); err != nil {
		r.release(ctx, c, id)
		return err
	}
	return nil
}

func (r *Run) charge(ctx context.Context, c Call) error {
	var add Usage
	if c.Kind == ToolCall {
		add.ToolCalls = 1
	} else {
		add.ModelCalls = 1
	}
	totals, over, err := r.m.cfg.Store.Charge(ctx, r.task, add, Usage{Tokens: c.Tokens, Spend: c.Spend}, r.budget.max())
	if err != nil {
		return err
	}
	if over != "" {
		return r.stop(ctx, r.budgetError(over, totals.Add(add).Add(Usage{Tokens: c.Tokens, Spend: c.Spend})))
	}
	return nil
}

// End records what the call begun with c actually consumed: it adds
// tokens and spend to the run's totals and the accounting aggregates (and
// the ledger's event log), and returns a *BudgetError when the totals now
// cross a hard limit — the call happened, so it is recorded either way.
//
// With spend windows, End settles the call's reservation to spend, with
// its tokens counted as uncached input; EndSpend keeps the provider's
// breakdown.
func (r *Run) End(ctx context.Context, c Call, tokens int64, spend float64) error {
	return r.end(ctx, c, tokens, spend, nil, 0)
}

func (r *Run) end(ctx context.Context, c Call, tokens int64, amount float64, detail *spend.Usage, cost spend.Micros) error {
	if r.m.cfg.Spend != nil && c.Kind == ModelCall {
		if detail == nil {
			var err error
			if cost, err = MicrosOf(amount); err != nil {
				return err
			}
			detail = &spend.Usage{Input: tokens}
		}
		if err := r.settleWindow(ctx, c, *detail, cost); err != nil {
			return err
		}
	}
	used := Usage{Tokens: tokens, Spend: amount}
	totals, _, err := r.m.cfg.Store.Charge(ctx, r.task, used, Usage{}, Usage{})
	if err != nil {
		return err
	}
	rec := Record{TaskID: r.task, Key: c.Key, Usage: used, At: r.m.cfg.Now()}
	rec.Key.Tenant, rec.Key.Kind = r.key.Tenant, r.key.Kind
	if c.Kind == ToolCall {
		rec.Usage.ToolCalls = 1
	} else {
		rec.Usage.ModelCalls = 1
	}
	if err := r.m.cfg.Store.Record(ctx, rec); err != nil {
		return err
	}
	if L := r.m.cfg.Ledger; L != nil {
		detail, _ := json.Marshal(ledgerUsage{Provider: rec.Key.Provider, Model: rec.Key.Model, Tool: rec.Key.Tool,
			ModelCalls: rec.Usage.ModelCalls, ToolCalls: rec.Usage.ToolCalls, Tokens: tokens, Spend: amount})
		if err := L.AppendEvent(ctx, ledger.Event{TaskID: r.task, At: rec.At, Reason: EventUsage, Detail: string(detail), Actor: "limits"}); err != nil {
			return err
		}
	}
	if over := overField(totals, r.budget.max()); over != "" {
		return r.stop(ctx, r.budgetError(over, totals))
	}
	return nil
}

// Usage returns the run's totals so far, across attempts.
func (r *Run) Usage(ctx context.Context) (Usage, error) { return r.m.cfg.Store.TaskUsage(ctx, r.task) }

func (r *Run) budgetError(field string, u Usage) *BudgetError {
	e := &BudgetError{TaskID: r.task, Limit: field}
	switch field {
	case FieldModelCalls:
		e.Used, e.Max = fmt.Sprint(u.ModelCalls), fmt.Sprint(r.budget.MaxModelCalls)
	case FieldToolCalls:
		e.Used, e.Max = fmt.Sprint(u.ToolCalls), fmt.Sprint(r.budget.MaxToolCalls)
	case FieldTokens:
		e.Used, e.Max = fmt.Sprint(u.Tokens), fmt.Sprint(r.budget.MaxTokens)
	case FieldSpend:
		e.Used, e.Max = fmt.Sprintf("%.6f", u.Spend), fmt.Sprintf("%.6f", r.budget.MaxSpend)
	}
	return e
}

// stop records the budget stop in the ledger (best effort) and returns e.
func (r *Run) stop(ctx context.Context, e *BudgetError) error {
	if L := r.m.cfg.Ledger; L != nil {
		_ = L.AppendEvent(context.WithoutCancel(ctx), ledger.Event{TaskID: r.task, At: r.m.cfg.Now(), Reason: EventBudgetExceeded, Detail: e.Error(), Actor: "limits"})
	}
	return e
}

// Ledger event reasons this package appends (ledger.Event.Reason).
const (
	EventUsage          = "usage"
	EventBudgetExceeded = "budget_exceeded"
)

type ledgerUsage struct {
	Provider   string  `json:"provider,omitempty"`
	Model      string  `json:"model,omitempty"`
	Tool       string  `json:"tool,omitempty"`
	ModelCalls int64   `json:"model_calls,omitempty"`
	ToolCalls  int64   `json:"tool_calls,omitempty"`
	Tokens     int64   `json:"tokens,omitempty"`
	Spend      float64 `json:"spend,omitempty"`
}

// LedgerUsage sums the "usage" events the Meter appended to the ledger for
// the tasks matching f, grouped like UsageStore.Sum (Match and By of q):
// the accounting as the ledger records it, for when the usage store's
// aggregates are not at hand.
func LedgerUsage(ctx context.Context, L ledger.Ledger, f ledger.Filter, q Query) ([]Row, error) {
	aggs := map[Key]Usage{}
	for {
		tasks, err := L.List(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, t := range tasks {
			evs, err := L.Events(ctx, t.ID)
			if err != nil {
				return nil, err
			}
			for _, e := range evs {
				if e.Reason != EventUsage {
					continue
				}
				var u ledgerUsage
				if json.Unmarshal([]byte(e.Detail), &u) != nil {
					continue
				}
				k := Key{Provider: u.Provider, Model: u.Model, Tool: u.Tool, Tenant: t.Tenant, Kind: t.Kind}
				aggs[k] = aggs[k].Add(Usage{ModelCalls: u.ModelCalls, ToolCalls: u.ToolCalls, Tokens: u.Tokens, Spend: u.Spend})
			}
		}
		limit := f.Limit
		if limit <= 0 {
			limit = 100
		}
		if len(tasks) < limit {
			break
		}
		f.After = tasks[len(tasks)-1].ID
	}
	return group(aggs, q), nil
}
