package ledgertest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// History: a store implementing ledger.History keeps one row per minute,
// lane and server, replaces a server's row when it writes it again (so a
// repeated write counts nothing twice), sums servers when listing, by
// minute then lane, filters by lane and time, prunes by minute and
// refuses bad points with broker.ErrInvalid.
func History(t *testing.T, mk Maker) {
	l := mk(t)
	h := ledger.HistoryOf(l)
	if h == nil {
		t.Skip("this store keeps no history (ledger.History is optional)")
	}
	c := ctx(t)
	m0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	m1 := m0.Add(time.Minute)
	if got, err := h.ListHistory(c, m0.Add(-time.Hour), ""); err != nil || len(got) != 0 {
		t.Fatalf("ListHistory on an empty store = %+v, %v", got, err)
	}
	// Server a: minute 0 written twice (the second replaces the first),
	// a point inside minute 1 (truncated to it).
	if err := h.RecordHistory(c, "srv-a", []ledger.HistoryPoint{{Minute: m0, Lane: "batch", Processed: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := h.RecordHistory(c, "srv-a", []ledger.HistoryPoint{
		{Minute: m0, Lane: "batch", Processed: 5, Failed: 2, Dead: 1},
		{Minute: m1.Add(42 * time.Second), Lane: "interactive", Processed: 3},
	}); err != nil {
		t.Fatal(err)
	}
	// Server b adds to minute 0's batch row; writing it twice is no double.
	for range 2 {
		if err := h.RecordHistory(c, "srv-b", []ledger.HistoryPoint{{Minute: m0, Lane: "batch", Processed: 10, Failed: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.RecordHistory(c, "srv-b", nil); err != nil {
		t.Fatalf("RecordHistory with no points: %v", err)
	}
	got, err := h.ListHistory(c, m0, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []ledger.HistoryPoint{
		{Minute: m0, Lane: "batch", Processed: 15, Failed: 3, Dead: 1},
		{Minute: m1, Lane: "interactive", Processed: 3},
	}
	if !samePoints(got, want) {
		t.Fatalf("ListHistory = %+v, want %+v", got, want)
	}
	if got, err := h.ListHistory(c, m0, "interactive"); err != nil || !samePoints(got, want[1:]) {
		t.Errorf("ListHistory lane=interactive = %+v, %v; want %+v", got, err, want[1:])
	}
	if got, err := h.ListHistory(c, m1.Add(30*time.Second), ""); err != nil || !samePoints(got, want[1:]) {
		t.Errorf("ListHistory since inside minute 1 = %+v, %v; want %+v", got, err, want[1:])
	}
	// Bad input.
	bad := map[string][]ledger.HistoryPoint{
		"bad lane":       {{Minute: m0, Lane: "no such/lane"}},
		"negative count": {{Minute: m0, Lane: "batch", Failed: -1}},
		"minute in 1900": {{Minute: time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), Lane: "batch"}},
		"too many":       make([]ledger.HistoryPoint, ledger.MaxHistoryPoints+1),
	}
	for name, pts := range bad {
		if err := h.RecordHistory(c, "srv-a", pts); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("RecordHistory %s: %v, want ErrInvalid", name, err)
		}
	}
	for _, srv := range []string{"", strings.Repeat("s", broker.MaxKeyLen+1)} {
		if err := h.RecordHistory(c, srv, want); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("RecordHistory server %q: %v, want ErrInvalid", srv, err)
		}
	}
	// Prune minute 0 (two servers' rows).
	if n, err := h.PruneHistory(c, m1); err != nil || n != 2 {
		t.Errorf("PruneHistory = %d, %v; want 2", n, err)
	}
	if got, err := h.ListHistory(c, m0, ""); err != nil || !samePoints(got, want[1:]) {
		t.Errorf("ListHistory after prune = %+v, %v; want %+v", got, err, want[1:])
	}
}

func samePoints(a, b []ledger.HistoryPoint) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Minute.Equal(b[i].Minute) || a[i].Lane != b[i].Lane || a[i].Processed != b[i].Processed ||
			a[i].Failed != b[i].Failed || a[i].Dead != b[i].Dead {
			return false
		}
	}
	return true
}
