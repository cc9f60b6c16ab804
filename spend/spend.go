// Package spend turns settled model usage into money and enforces spend
// caps per tenant.
//
// # Money
//
// Money is Micros: integer millionths of the price table's currency (USD by
// convention), never a float, so that sums reconcile to the cent. Prices
// are Micros per million tokens: $2.50 per million input tokens is
// Price{Input: 2_500_000}. Cost multiplies exactly (big integers) and rounds
// once, half up, to a whole micro-dollar per call; over n calls the sum of
// the per-call costs differs from the cost of the summed usage by at most
// n/2 micro-dollars (2,000 calls: a tenth of a cent).
//
// # Usage
//
// Usage counts uncached input tokens, cached input tokens (read from a
// prompt cache, billed at Price.CachedInput) and output tokens. OpenAI's
// prompt_tokens include the cached ones (the adapter subtracts them);
// Anthropic reports them apart. Anthropic's cache-creation tokens are
// counted as input (their 25% surcharge is not modelled).
//
// # Windows
//
// A Window caps what a tenant may spend per period (a UTC-aligned fixed
// window: a day from 00:00 UTC for Period 24h). A call reserves its
// worst-case cost (its estimate) before it runs and settles to the actual
// cost after; a reservation that would cross the cap is refused with a
// *CapError whose text is the reason shown on the dead letter or snooze.
// Because the estimate is an upper bound, a tenant's settled spend never
// exceeds its cap, and work stops within one call's estimate of it.
package spend

import (
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strings"
	"time"
)

// Micros is money in millionths of the currency unit.
type Micros int64

// String formats m as dollars with six decimals: "$1.234567".
func (m Micros) String() string {
	sign := ""
	v := int64(m)
	if v < 0 {
		sign, v = "-", -v
	}
	return fmt.Sprintf("%s$%d.%06d", sign, v/1_000_000, v%1_000_000)
}

// Cents rounds m half up to whole cents (hundredths), for reports.
func (m Micros) Cents() int64 {
	if m >= 0 {
		return (int64(m) + 5_000) / 10_000
	}
	return -((-int64(m) + 5_000) / 10_000)
}

// Price is one model's price, in Micros per million tokens.
type Price struct {
	Input       Micros
	CachedInput Micros
	Output      Micros
	// BatchDiscount is the discount of the provider's batch API in basis
	// points (5000 = half price). Defaults to 0.
	BatchDiscount int
}

// Usage is what one call consumed, as the provider reported it.
type Usage struct {
	// Input is the uncached input tokens.
	Input int64 `json:"input"`
	// CachedInput is the input tokens read from the prompt cache.
	CachedInput int64 `json:"cached_input"`
	Output      int64 `json:"output"`
}

// Add returns u+v.
func (u Usage) Add(v Usage) Usage {
	return Usage{Input: u.Input + v.Input, CachedInput: u.CachedInput + v.CachedInput, Output: u.Output + v.Output}
}

// Validate refuses negative counts.
func (u Usage) Validate() error {
	if u.Input < 0 || u.CachedInput < 0 || u.Output < 0 {
		return fmt.Errorf("spend: negative token count in %+v", u)
	}
	return nil
}

// Mode says whether a call went through a provider's batch API.
type Mode string

const (
	Direct Mode = "direct"
	Batch  Mode = "batch"
)

var million = big.NewInt(1_000_000)

// Cost is the money u costs at p, batch-discounted when mode is Batch,
// rounded half up to a whole micro-dollar.
func (p Price) Cost(u Usage, mode Mode) Micros {
	sum := new(big.Int)
	add := func(tokens int64, price Micros) {
		sum.Add(sum, new(big.Int).Mul(big.NewInt(tokens), big.NewInt(int64(price))))
	}
	add(u.Input, p.Input)
	add(u.CachedInput, p.CachedInput)
	add(u.Output, p.Output)
	den := new(big.Int).Set(million)
	if mode == Batch && p.BatchDiscount > 0 {
		sum.Mul(sum, big.NewInt(int64(10_000-p.BatchDiscount)))
		den.Mul(den, big.NewInt(10_000))
	}
	// round half up: (sum + den/2) / den
	sum.Add(sum, new(big.Int).Rsh(den, 1))
	sum.Quo(sum, den)
	if !sum.IsInt64() {
		return Micros(1<<63 - 1)
	}
	return Micros(sum.Int64())
}

// ErrUnknownModel is returned for a provider and model the table has no
// price for.
var ErrUnknownModel = errors.New("spend: no price for model")

// Table holds prices by provider and model.
type Table struct {
	prices map[string]Price
}

// NewTable returns a table of prices keyed "provider/model" (for example
// "openai/gpt-4o-mini"). It refuses negative prices and discounts outside
// 0..10000.
func NewTable(prices map[string]Price) (*Table, error) {
	t := &Table{prices: make(map[string]Price, len(prices))}
	for k, p := range prices {
		if !strings.Contains(k, "/") {
			return nil, fmt.Errorf("spend: price key %q is not provider/model", k)
		}
		if p.Input < 0 || p.CachedInput < 0 || p.Output < 0 || p.BatchDiscount < 0 || p.BatchDiscount > 10_000 {
			return nil, fmt.Errorf("spend: price %q out of range: %+v", k, p)
		}
		t.prices[k] = p
	}
	return t, nil
}

// Price returns the price of provider's model, or an error wrapping
// ErrUnknownModel.
func (t *Table) Price(provider, model string) (Price, error) {
	if t != nil {
		if p, ok := t.prices[provider+"/"+model]; ok {
			return p, nil
		}
	}
	return Price{}, fmt.Errorf("%w %s/%s (add it to the price table)", ErrUnknownModel, provider, model)
}

// Models lists the table's keys, sorted.
func (t *Table) Models() []string {
	ks := make([]string, 0, len(t.prices))
	for k := range t.prices {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Action is what happens to work refused by a Window.
type Action int

const (
	// Refuse dead-letters the task with reason budget_exceeded.
	Refuse Action = iota
	// Snooze re-delays the task until the window resets (no attempt spent).
	Snooze
)

// Window caps the spend of a tenant per period.
type Window struct {
	// Tenant is the tenant capped; "" caps every tenant separately.
	Tenant string
	// Period is the window's length; windows are aligned to time.Time's
	// zero (Start truncates), so 24h is a UTC day and 168h a week from
	// Monday 00:00 UTC. Required.
	Period time.Duration
	// Cap is the most the tenant may spend per window. Required.
	Cap Micros
	// Action on a refused call. Defaults to Refuse.
	Action Action
}

// Start returns the start of the window containing now.
func (w Window) Start(now time.Time) time.Time { return now.UTC().Truncate(w.Period) }

// Validate checks w.
func (w Window) Validate() error {
	if w.Period <= 0 || w.Cap <= 0 {
		return fmt.Errorf("spend: window needs a positive Period and Cap, got %+v", w)
	}
	return nil
}

// Applies reports whether w caps tenant.
func (w Window) Applies(tenant string) bool { return w.Tenant == "" || w.Tenant == tenant }

// ErrCapExceeded is matched by every *CapError.
var ErrCapExceeded = errors.New("spend cap exceeded")

// CapError is a call refused by a Window.
type CapError struct {
	Tenant   string
	Window   Window
	Spent    Micros // settled and reserved in the window so far
	Estimate Micros // what the refused call would reserve
	Until    time.Time
}

func (e *CapError) Error() string {
	return fmt.Sprintf("spend cap: tenant %q has %s of %s per %s; a call estimated at %s would cross it (window resets %s)",
		e.Tenant, e.Spent, e.Window.Cap, e.Window.Period, e.Estimate, e.Until.UTC().Format(time.RFC3339))
}

// Is matches ErrCapExceeded.
func (e *CapError) Is(target error) bool { return target == ErrCapExceeded }
