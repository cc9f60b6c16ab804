package spend_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/spend"
)

func TestPrice_Cost(t *testing.T) {
	t.Parallel()
	p := spend.Price{Input: 2_500_000, CachedInput: 1_250_000, Output: 10_000_000, BatchDiscount: 5000}
	cases := []struct {
		name string
		u    spend.Usage
		mode spend.Mode
		want spend.Micros
	}{
		{"zero", spend.Usage{}, spend.Direct, 0},
		{"one million input", spend.Usage{Input: 1_000_000}, spend.Direct, 2_500_000},
		{"batch halves", spend.Usage{Input: 1_000_000}, spend.Batch, 1_250_000},
		{"cached", spend.Usage{CachedInput: 1_000_000}, spend.Direct, 1_250_000},
		{"output", spend.Usage{Output: 1000}, spend.Direct, 10_000},
		// 1 input token = 2.5 micro-dollars: rounds half up to 3.
		{"rounds half up", spend.Usage{Input: 1}, spend.Direct, 3},
		// in batch 1.25 → 1
		{"rounds down below half", spend.Usage{Input: 1}, spend.Batch, 1},
		{"mixed", spend.Usage{Input: 120, CachedInput: 1000, Output: 16}, spend.Direct, 300 + 1250 + 160},
		{"huge does not overflow", spend.Usage{Input: math.MaxInt64 / 2}, spend.Direct, spend.Micros(math.MaxInt64)},
	}
	for _, c := range cases {
		if got := p.Cost(c.u, c.mode); got != c.want {
			t.Errorf("%s: Cost(%+v, %s) = %d, want %d", c.name, c.u, c.mode, got, c.want)
		}
	}
	// No discount configured: batch costs the same as direct.
	if q := (spend.Price{Input: 1_000_000}); q.Cost(spend.Usage{Input: 7}, spend.Batch) != 7 {
		t.Error("batch without a discount")
	}
}

func TestMicros_String(t *testing.T) {
	t.Parallel()
	for m, want := range map[spend.Micros]string{0: "$0.000000", 1: "$0.000001", 50_000_000: "$50.000000", -1_500_000: "-$1.500000"} {
		if got := m.String(); got != want {
			t.Errorf("%d: %q, want %q", m, got, want)
		}
	}
	if c := spend.Micros(14_999).Cents(); c != 1 {
		t.Errorf("Cents(14999) = %d", c)
	}
	if c := spend.Micros(15_000).Cents(); c != 2 {
		t.Errorf("Cents(15000) = %d", c)
	}
}

func TestTable(t *testing.T) {
	t.Parallel()
	tab, err := spend.NewTable(map[string]spend.Price{"openai/gpt-4o-mini": {Input: 150_000, Output: 600_000, BatchDiscount: 5000}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tab.Price("openai", "gpt-4o-mini"); err != nil {
		t.Fatal(err)
	}
	_, err = tab.Price("openai", "gpt-9")
	if !errors.Is(err, spend.ErrUnknownModel) || !strings.Contains(err.Error(), "openai/gpt-9") {
		t.Fatalf("unknown model: %v", err)
	}
	for _, bad := range []map[string]spend.Price{
		{"no-slash": {}},
		{"a/b": {Input: -1}},
		{"a/b": {BatchDiscount: 10_001}},
	} {
		if _, err := spend.NewTable(bad); err == nil {
			t.Errorf("NewTable(%v): no error", bad)
		}
	}
	if got := tab.Models(); len(got) != 1 || got[0] != "openai/gpt-4o-mini" {
		t.Errorf("Models = %v", got)
	}
}

func TestWindow(t *testing.T) {
	t.Parallel()
	w := spend.Window{Period: 24 * time.Hour, Cap: 50_000_000}
	now := time.Date(2026, 12, 2, 17, 30, 0, 0, time.UTC)
	if got := w.Start(now); !got.Equal(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("Start = %s", got)
	}
	if !w.Applies("any") || (spend.Window{Tenant: "a"}).Applies("b") {
		t.Error("Applies")
	}
	if (spend.Window{}).Validate() == nil || w.Validate() != nil {
		t.Error("Validate")
	}
	e := &spend.CapError{Tenant: "acme", Window: w, Spent: 49_999_000, Estimate: 2000, Until: w.Start(now).Add(w.Period)}
	if !errors.Is(e, spend.ErrCapExceeded) || !strings.Contains(e.Error(), `tenant "acme" has $49.999000 of $50.000000`) {
		t.Errorf("CapError: %v", e)
	}
}
