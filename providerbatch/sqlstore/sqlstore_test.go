package sqlstore_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/conformance/testenv/pgtest"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/postgres"
	"github.com/switchyard-dev/switchyard/ledger/sqlite"
	"github.com/switchyard-dev/switchyard/providerbatch"
	"github.com/switchyard-dev/switchyard/providerbatch/sqlstore"
	"github.com/switchyard-dev/switchyard/spend"
)

func openSQLite(t *testing.T) *sqlstore.Store {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "l.db")
	L, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L.Close() })
	st, err := sqlstore.OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func openPostgres(t *testing.T) *sqlstore.Store {
	ctx := context.Background()
	dsn := pgtest.LedgerDSN(t)
	L, err := ledger.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L.Close() })
	st, err := sqlstore.OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestStore_SQLite(t *testing.T) {
	t.Parallel()
	testStore(t, openSQLite(t))
}

func TestStore_Postgres(t *testing.T) {
	t.Parallel()
	testStore(t, openPostgres(t))
}

func TestOpen_OldSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "none.db")
	if _, err := sqlstore.OpenSQLite(context.Background(), path); err == nil {
		t.Fatal("a database without the ledger: no error")
	}
}

func testStore(t *testing.T, st *sqlstore.Store) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	win := []spend.Window{{Tenant: "acme", Period: 24 * time.Hour, Cap: 1000}}
	add := func(id, tenant, key string, est spend.Micros, at time.Time) (*providerbatch.StoredItem, error) {
		return st.Add(ctx, providerbatch.StoredItem{TaskID: id, Provider: "p", Model: "m", Tenant: tenant, Kind: "k", CacheKey: key,
			Params: []byte(`{"x":1}`), State: providerbatch.Pending, CreatedAt: at, Mode: spend.Batch},
			providerbatch.Reservation{Estimate: est, Mode: spend.Batch, Windows: win, Now: at})
	}
	// Oldest first, then grouped by cache key within the batch.
	for i, k := range []string{"b", "a", "b", "a"} {
		if _, err := add("t"+string(rune('0'+i)), "acme", k, 200, t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	// A second Add of a task returns the first, reserving nothing more.
	if it, err := add("t0", "acme", "zzz", 999, t0); err != nil || it.CacheKey != "b" {
		t.Fatalf("re-Add: %+v, %v", it, err)
	}
	// acme has 800 reserved of 1000: 300 more is refused, 200 fits.
	_, err := add("t9", "acme", "", 300, t0)
	var ce *spend.CapError
	if !errors.As(err, &ce) || ce.Spent != 800 || ce.Estimate != 300 || !ce.Until.Equal(t0.Truncate(24*time.Hour).Add(24*time.Hour)) {
		t.Fatalf("over the cap: %v", err)
	}
	if it, _ := st.Item(ctx, "t9"); it != nil {
		t.Fatal("a refused Add wrote an item")
	}
	// Another tenant is not capped; the next day is a new window.
	if _, err := add("o1", "globex", "", 5000, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := add("t8", "acme", "", 900, t0.Add(24*time.Hour)); err != nil {
		t.Fatalf("next day: %v", err)
	}
	// Leases exclude other holders until they expire.
	if ok, err := st.Lease(ctx, "p", "h1", t0, t0.Add(time.Minute)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, _ := st.Lease(ctx, "p", "h2", t0.Add(time.Second), t0.Add(time.Minute)); ok {
		t.Fatal("h2 took h1's live lease")
	}
	if ok, _ := st.Lease(ctx, "p", "h2", t0.Add(2*time.Minute), t0.Add(3*time.Minute)); !ok {
		t.Fatal("h2 could not take an expired lease")
	}
	n, oldest, err := st.PendingStats(ctx, "p")
	if err != nil || n != 6 || !oldest.Equal(t0) {
		t.Fatalf("PendingStats = %d %s %v", n, oldest, err)
	}
	items, err := st.Claim(ctx, "p", "lb1", 4, t0)
	if err != nil || len(items) != 4 {
		t.Fatal(items, err)
	}
	var order []string
	for _, it := range items {
		order = append(order, it.TaskID)
	}
	if got := order[0] + order[1] + order[2] + order[3]; got != "t1t3t0t2" {
		t.Errorf("batch order %v, want t1 t3 (key a) then t0 t2 (key b)", order)
	}
	// Release puts them back; claim again and submit.
	if err := st.Release(ctx, "lb1"); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := st.PendingStats(ctx, "p"); n != 6 {
		t.Fatalf("after Release %d pending", n)
	}
	if items, err = st.Claim(ctx, "p", "lb2", 4, t0); err != nil || len(items) != 4 {
		t.Fatal(items, err)
	}
	if err := st.Submitted(ctx, "lb2", "batch_1", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	open, err := st.Open(ctx, "p")
	if err != nil || len(open) != 1 || open[0].ProviderID != "batch_1" || open[0].State != providerbatch.Submitted || open[0].Items != 4 {
		t.Fatalf("Open = %+v, %v", open, err)
	}
	err = st.Finish(ctx, "lb2", []providerbatch.Outcome{
		{TaskID: "t0", State: providerbatch.Done, Result: []byte(`"r0"`), Usage: spend.Usage{Input: 10, CachedInput: 5, Output: 2}, Cost: 150},
		{TaskID: "t1", State: providerbatch.FailedItem, Err: "invalid"},
		{TaskID: "t2", State: providerbatch.Pending, Err: "server_error"},
		{TaskID: "t3", State: providerbatch.Done, Result: []byte(`"r3"`), Cost: 100},
	}, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// Finishing twice changes nothing.
	if err := st.Finish(ctx, "lb2", []providerbatch.Outcome{{TaskID: "t0", State: providerbatch.FailedItem}}, t0); err != nil {
		t.Fatal(err)
	}
	it, err := st.Item(ctx, "t0")
	if err != nil || it.State != providerbatch.Done || string(it.Result) != `"r0"` || it.Cost != 150 || it.Usage.CachedInput != 5 {
		t.Fatalf("t0 = %+v, %v", it, err)
	}
	if it, _ := st.Item(ctx, "t1"); it.State != providerbatch.FailedItem || it.Err != "invalid" || it.Cost != 0 {
		t.Fatalf("t1 = %+v", it)
	}
	if it, _ := st.Item(ctx, "t2"); it.State != providerbatch.Pending || it.Attempts != 1 || it.Batch != "" {
		t.Fatalf("t2 = %+v", it)
	}
	if open, _ := st.Open(ctx, "p"); len(open) != 0 {
		t.Fatalf("open after Finish: %+v", open)
	}
	// A pending item taken direct, then settled.
	if ok, err := st.TakeDirect(ctx, "t2", providerbatch.Reservation{Estimate: 400, Mode: spend.Direct, Windows: win, Now: t0}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if ok, _ := st.TakeDirect(ctx, "t2", providerbatch.Reservation{Estimate: 400, Mode: spend.Direct, Now: t0}); ok {
		t.Fatal("TakeDirect twice")
	}
	if err := st.Settle(ctx, providerbatch.Outcome{TaskID: "t2", State: providerbatch.Done, Result: []byte(`"r2"`), Usage: spend.Usage{Input: 3}, Cost: 8}, t0); err != nil {
		t.Fatal(err)
	}
	rows, err := st.Spend(ctx, sqlstore.SpendQuery{Tenant: "acme", Until: t0.Add(time.Hour), By: []string{"mode", "state"}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]spend.Micros{}
	for _, r := range rows {
		got[r.Group["mode"]+"/"+r.Group["state"]] = r.Cost
	}
	// settled batch: 150 + 0 + 100; direct settled 8; reserved: t0..t3
	// day one are all settled, so nothing reserved that day.
	if got["batch/settled"] != 250 || got["direct/settled"] != 8 || len(got) != 2 {
		t.Fatalf("spend by mode and state: %v", got)
	}
	if _, err := st.Spend(ctx, sqlstore.SpendQuery{By: []string{"secret"}}); err == nil {
		t.Fatal("grouping by an unknown field: no error")
	}
	all, err := st.Spend(ctx, sqlstore.SpendQuery{By: []string{"tenant"}})
	if err != nil || len(all) != 2 || all[0].Group["tenant"] != "acme" || all[1].Cost != 5000 {
		t.Fatalf("by tenant: %+v, %v", all, err)
	}
}
