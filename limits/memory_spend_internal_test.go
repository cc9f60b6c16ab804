package limits

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/spend"
)

// TestMemoryStore_SpendWindowsPruned: a tenant's ended windows leave the
// store when its next one opens, and a reservation settled after its
// window ended changes nothing.
func TestMemoryStore_SpendWindowsPruned(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore(nil)
	day := spend.Window{Period: 24 * time.Hour, Cap: 1_000_000}
	t0 := time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC)
	for d := 0; d < 30; d++ {
		for _, tenant := range []string{"acme", "globex"} {
			id := fmt.Sprintf("%s-%d", tenant, d)
			if err := s.ReserveSpend(ctx, SpendReservation{ID: id, Tenant: tenant, Estimate: 100, Windows: []spend.Window{day}, Now: t0.AddDate(0, 0, d)}); err != nil {
				t.Fatal(err)
			}
			if d < 29 {
				if err := s.SettleSpend(ctx, id, spend.Usage{}, 40); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if n := len(s.spendWin); n != 2 {
		t.Fatalf("%d window totals after 30 days of 2 tenants, want 2", n)
	}
	// The last day's reservation of acme, settled on the next day (its
	// window is gone by then for acme's next reservation).
	if err := s.ReserveSpend(ctx, SpendReservation{ID: "acme-30", Tenant: "acme", Estimate: 100, Windows: []spend.Window{day}, Now: t0.AddDate(0, 0, 30)}); err != nil {
		t.Fatal(err)
	}
	if err := s.SettleSpend(ctx, "acme-29", spend.Usage{}, 40); err != nil {
		t.Fatal(err)
	}
	if n := len(s.spendWin); n != 2 {
		t.Fatalf("%d window totals, want 2: settling into an ended window recreated it", n)
	}
	if got := s.SpendInWindow("acme", day, t0.AddDate(0, 0, 30)); got != 100 {
		t.Fatalf("acme's open window holds %d, want 100", got)
	}
}
