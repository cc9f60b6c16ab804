package sqlstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/limits"
	"github.com/switchyard-dev/switchyard/providerbatch/sqlstore"
	"github.com/switchyard-dev/switchyard/spend"
)

func TestStore_SpendWindowsSQLite(t *testing.T) {
	t.Parallel()
	testSpendWindows(t, openSQLite(t))
}

func TestStore_SpendWindowsPostgres(t *testing.T) {
	t.Parallel()
	testSpendWindows(t, openPostgres(t))
}

// testSpendWindows: the limits.SpendStore side (reserve within a window,
// refuse past it, release, settle) and the series report by bucket.
func testSpendWindows(t *testing.T, st *sqlstore.Store) {
	ctx := context.Background()
	// A unique tenant per run: the PostgreSQL database may be shared.
	tenant := "t" + time.Now().Format("150405.000000000")
	day := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	w := spend.Window{Tenant: tenant, Period: 24 * time.Hour, Cap: 1_000}
	res := func(id string, est spend.Micros, at time.Time) error {
		return st.ReserveSpend(ctx, limits.SpendReservation{ID: id, TaskID: "task-" + id, Tenant: tenant, Kind: "k",
			Provider: "openai", Model: "m1", CacheKey: "policy-v1", Estimate: est, Windows: []spend.Window{w}, Now: at})
	}
	for i, id := range []string{"a", "b"} {
		if err := res(tenant+id, 400, day.Add(time.Duration(i)*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	var ce *spend.CapError
	if err := res(tenant+"c", 400, day.Add(2*time.Hour)); !errors.As(err, &ce) || ce.Spent != 800 || !ce.Until.Equal(day.Add(24*time.Hour)) {
		t.Fatalf("third reservation = %v, want a cap error at 800 until the next day", err)
	}
	if err := res(tenant+"a", 400, day); err != nil { // an ID already reserved: a no-op
		t.Fatal(err)
	}
	if err := st.SettleSpend(ctx, tenant+"a", spend.Usage{Input: 100, CachedInput: 20, Output: 10}, 250); err != nil {
		t.Fatal(err)
	}
	if err := st.SettleSpend(ctx, tenant+"b", spend.Usage{}, 0); err != nil { // released
		t.Fatal(err)
	}
	if err := res(tenant+"c", 700, day.Add(3*time.Hour)); err != nil {
		t.Fatalf("after a settle and a release 250+700 fits 1000: %v", err)
	}
	if err := res(tenant+"d", 400, day.Add(25*time.Hour)); err != nil {
		t.Fatalf("the next day's window: %v", err)
	}
	if err := st.SettleSpend(ctx, tenant+"x", spend.Usage{Input: -1}, 0); err == nil {
		t.Fatal("negative usage settled")
	}

	rows, err := st.SpendSeries(ctx, spend.SeriesQuery{Since: day, Until: day.Add(48 * time.Hour), Step: 12 * time.Hour, Tenant: tenant, By: []string{"tenant", "model", "state"}})
	if err != nil {
		t.Fatal(err)
	}
	// Bucket 0 (00:00-12:00): a settled 250 and c reserved 700; bucket 2: d reserved 400.
	type key struct {
		b     int64
		state string
	}
	got := map[key]spend.SeriesRow{}
	for _, r := range rows {
		if r.Group["tenant"] != tenant || r.Group["model"] != "m1" {
			t.Errorf("row %+v", r)
		}
		got[key{r.Bucket, r.Group["state"]}] = r
	}
	if len(got) != 3 || got[key{0, "settled"}].Cost != 250 || got[key{0, "settled"}].Usage.CachedInput != 20 ||
		got[key{0, "reserved"}].Cost != 700 || got[key{2, "reserved"}].Cost != 400 {
		t.Fatalf("series = %+v", rows)
	}
	byKey, err := st.SpendSeries(ctx, spend.SeriesQuery{Since: day, Until: day.Add(12 * time.Hour), Step: 12 * time.Hour, Tenant: tenant, By: []string{"cache_key"}})
	if err != nil || len(byKey) != 1 || byKey[0].Group["cache_key"] != "policy-v1" || byKey[0].Usage.CachedInput != 20 || byKey[0].Calls != 2 {
		t.Fatalf("by cache key: %+v %v", byKey, err)
	}
	for _, q := range []spend.SeriesQuery{
		{Since: day, Until: day, Step: time.Hour},
		{Since: day.Add(time.Hour), Until: day, Step: time.Hour},
		{Since: day, Until: day.Add(time.Hour)},
		{Since: day, Until: day.Add(time.Hour), Step: time.Hour, By: []string{"payload"}},
	} {
		if _, err := st.SpendSeries(ctx, q); err == nil {
			t.Errorf("SpendSeries(%+v) accepted", q)
		}
	}
}
