package limits

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/spend"
)

// SpendReservation is one model call's worst-case cost, reserved on its
// tenant's spend windows before the call is made.
type SpendReservation struct {
	// ID names the reservation; unique per call (Run.Begin makes one).
	ID string
	// TaskID, Tenant, Kind, Provider and Model say whose call it is and
	// what it calls, for the spend report.
	TaskID, Tenant, Kind, Provider, Model string
	// CacheKey is the task's cache key (switchyard.EnqueueOpts.CacheKey),
	// so that the spend report gives the cached-token share per key.
	CacheKey string
	// Estimate is the call's worst-case cost.
	Estimate spend.Micros
	// Windows are the windows to check (those that apply to Tenant).
	Windows []spend.Window
	// Now places the reservation in its windows.
	Now time.Time
}

// SpendStore keeps the money side of per-tenant spend windows: every
// call's reservation, settled to its actual cost after the call.
// Implementations are atomic per tenant across every caller sharing them:
// MemoryStore within one process, providerbatch/sqlstore.Store across
// processes (the ledger's database: the same rows as the provider-batch
// lane's spend, so one window caps both, and the admin API and `switchyard
// spend` report them).
type SpendStore interface {
	// ReserveSpend records r unless, for a window of r.Windows, the
	// tenant's settled and reserved spend in the window containing r.Now
	// plus r.Estimate would exceed the window's cap; then nothing is
	// recorded and the error is a *spend.CapError.
	ReserveSpend(ctx context.Context, r SpendReservation) error
	// SettleSpend replaces reservation id's estimate with what the call
	// used and cost (zero usage and cost release it: the call was not
	// made). Settling an unknown or already settled id is a no-op.
	SettleSpend(ctx context.Context, id string, u spend.Usage, cost spend.Micros) error
}

// MicrosOf converts spend in currency units (as Call.Spend and Budget
// carry it) to Micros, rounding up: an estimate rounded up stays an upper
// bound. Negative, NaN and infinite amounts are an error.
func MicrosOf(v float64) (spend.Micros, error) {
	if math.IsNaN(v) || v < 0 || v*1e6 >= math.MaxInt64 {
		return 0, invalidf("limits: spend %v out of range", v)
	}
	return spend.Micros(math.Ceil(v*1e6 - 1e-6)), nil
}

// spendWindows is a Run's side of the windows: the reservations its Begin
// calls made and its End calls settle, oldest first per call.
type spendWindows struct {
	mu   sync.Mutex
	open map[Call][]string
}

func newReservationID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "spend-" + hex.EncodeToString(b[:])
}

// reserve reserves c's estimated spend on the run's tenant windows (a
// no-op without a SpendStore; with one and no window applying, the call is
// recorded for the spend report all the same).
func (r *Run) reserve(ctx context.Context, c Call) (string, error) {
	var ws []spend.Window
	for _, w := range r.m.cfg.Windows {
		if w.Applies(r.key.Tenant) {
			ws = append(ws, w)
		}
	}
	if r.m.cfg.Spend == nil || c.Kind != ModelCall {
		return "", nil
	}
	est, err := MicrosOf(c.Spend)
	if err != nil {
		return "", err
	}
	id := newReservationID()
	err = r.m.cfg.Spend.ReserveSpend(ctx, SpendReservation{ID: id, TaskID: r.task, Tenant: r.key.Tenant, Kind: r.key.Kind,
		Provider: c.Key.Provider, Model: c.Key.Model, CacheKey: r.cacheKey, Estimate: est, Windows: ws, Now: r.m.cfg.Now()})
	var ce *spend.CapError
	if errors.As(err, &ce) {
		return "", r.stopSpend(ctx, ce)
	}
	if err != nil {
		return "", err
	}
	r.windows.mu.Lock()
	r.windows.open[c] = append(r.windows.open[c], id)
	r.windows.mu.Unlock()
	return id, nil
}

// release settles id to nothing (the call was refused after reserving).
func (r *Run) release(ctx context.Context, c Call, id string) {
	if id == "" {
		return
	}
	r.windows.mu.Lock()
	ids := r.windows.open[c]
	for i, v := range ids {
		if v == id {
			r.windows.open[c] = append(ids[:i:i], ids[i+1:]...)
			break
		}
	}
	r.windows.mu.Unlock()
	_ = r.m.cfg.Spend.SettleSpend(context.WithoutCancel(ctx), id, spend.Usage{}, 0)
}

// settleWindow settles the oldest open reservation of c.
func (r *Run) settleWindow(ctx context.Context, c Call, u spend.Usage, cost spend.Micros) error {
	r.windows.mu.Lock()
	ids := r.windows.open[c]
	if len(ids) == 0 {
		r.windows.mu.Unlock()
		return nil
	}
	id := ids[0]
	if len(ids) == 1 {
		delete(r.windows.open, c)
	} else {
		r.windows.open[c] = ids[1:]
	}
	r.windows.mu.Unlock()
	if err := r.m.cfg.Spend.SettleSpend(context.WithoutCancel(ctx), id, u, cost); err != nil {
		return err
	}
	if o := r.m.cfg.SpendObserver; o != nil {
		o.SpendSettled(SpendReservation{ID: id, TaskID: r.task, Tenant: r.key.Tenant, Kind: r.key.Kind,
			Provider: c.Key.Provider, Model: c.Key.Model, CacheKey: r.cacheKey}, u, cost)
	}
	return nil
}

// SpendObserver is told of every metered model call settled and every call
// a spend window refused (MeterConfig.SpendObserver):
// providerbatch.Metrics implements it, so that direct calls count in the
// same Prometheus series as the batch lane's (mode "direct").
type SpendObserver interface {
	// SpendSettled reports a settled call: whose (r's task, tenant, kind,
	// provider, model, cache key), its usage and its cost.
	SpendSettled(r SpendReservation, u spend.Usage, cost spend.Micros)
	// SpendRefused reports a call refused by one of tenant's windows.
	SpendRefused(tenant string)
}

// SpendCapError is a call refused by a tenant's spend window: the
// spend.CapError, and what the runtime does with the task (Result: a
// window with Action spend.Snooze snoozes the task until the window
// resets, without spending an attempt; spend.Refuse dead-letters it with
// reason budget_exceeded).
type SpendCapError struct {
	*spend.CapError
	// RetryIn is the time left until the window resets, by the meter's
	// clock.
	RetryIn time.Duration
}

// Unwrap returns the spend.CapError.
func (e *SpendCapError) Unwrap() error { return e.CapError }

// Is makes errors.Is(err, ErrBudgetExceeded) true for a refusing window
// (and errors.Is(err, spend.ErrCapExceeded) for every one).
func (e *SpendCapError) Is(target error) bool {
	return target == ErrBudgetExceeded && e.Window.Action == spend.Refuse
}

// EventSpendCap is the ledger event reason of a call refused by a spend
// window; its detail is the error text and the action taken.
const EventSpendCap = "spend_cap"

func (r *Run) stopSpend(ctx context.Context, ce *spend.CapError) error {
	if o := r.m.cfg.SpendObserver; o != nil {
		o.SpendRefused(ce.Tenant)
	}
	e := &SpendCapError{CapError: ce, RetryIn: max(0, ce.Until.Sub(r.m.cfg.Now()))}
	if L := r.m.cfg.Ledger; L != nil {
		action := "refused: the task is dead-lettered"
		if ce.Window.Action == spend.Snooze {
			action = fmt.Sprintf("snoozed until the window resets in %s", e.RetryIn.Round(time.Second))
		}
		_ = L.AppendEvent(context.WithoutCancel(ctx), ledger.Event{TaskID: r.task, At: r.m.cfg.Now(), Reason: EventSpendCap,
			Detail: ce.Error() + "; " + action, Actor: "limits"})
	}
	return e
}

// A reservation that is never settled (the process died between Begin and
// End) keeps counting against its window until the window ends: the cap
// errs on the side of spending less.

// EndSpend is End for a model call whose usage the provider reported in
// detail: it records the tokens and cost like End (the spend in currency
// units is cost) and settles the call's reservation on its tenant's spend
// windows to u and cost, so the window (and the spend report) holds the
// provider's figures, cached input apart.
func (r *Run) EndSpend(ctx context.Context, c Call, u spend.Usage, cost spend.Micros) error {
	if err := u.Validate(); err != nil {
		return invalidf("limits: %v", err)
	}
	if cost < 0 {
		return invalidf("limits: negative cost %d", cost)
	}
	return r.end(ctx, c, u.Input+u.CachedInput+u.Output, float64(cost)/1e6, &u, cost)
}
