package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ledger/sqlite"
	"github.com/switchyard-dev/switchyard/providerbatch"
	"github.com/switchyard-dev/switchyard/providerbatch/sqlstore"
	"github.com/switchyard-dev/switchyard/spend"
)

func TestCLI_Spend(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	L, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer L.Close()
	st, err := sqlstore.OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	for i, tenant := range []string{"acme", "acme", "globex"} {
		id := "t" + string(rune('0'+i))
		if _, err := st.Add(ctx, providerbatch.StoredItem{TaskID: id, Provider: "openai", Model: "gpt-x", Tenant: tenant, CacheKey: "k",
			Params: []byte(`{}`), State: providerbatch.DirectCall, CreatedAt: now}, providerbatch.Reservation{Estimate: 9, Mode: spend.Direct, Now: now}); err != nil {
			t.Fatal(err)
		}
		if err := st.Settle(ctx, providerbatch.Outcome{TaskID: id, State: providerbatch.Done, Usage: spend.Usage{Input: 30, CachedInput: 10, Output: 5}, Cost: 1_250_000}, now); err != nil {
			t.Fatal(err)
		}
	}
	dsn := "sqlite://" + path
	code, out, errs := runCLI(t, "spend", "--ledger", dsn, "--by", "tenant")
	if code != 0 || !strings.Contains(out, "acme") || !strings.Contains(out, "$2.500000") || !strings.Contains(out, "25.0") ||
		!strings.Contains(out, "total $3.750000 over 2 groups") {
		t.Fatalf("spend: code %d\n%s%s", code, out, errs)
	}
	code, out, errs = runCLI(t, "spend", "--ledger", dsn, "--by", "cache_key", "--json")
	var rows []spendJSON
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || rows[0].Micros != 3_750_000 || rows[0].CachedShare != 0.25 {
		t.Fatalf("spend --json: code %d\n%s%s", code, out, errs)
	}
	for _, bad := range [][]string{
		{"spend"},
		{"spend", "--ledger", dsn, "--by", "password"},
		{"spend", "--ledger", dsn, "--since", "yesterday"},
		{"spend", "--ledger", "sqlite://" + filepath.Join(t.TempDir(), "missing.db")},
		{"spend", "--ledger", "mysql://x"},
	} {
		if code, _, errs := runCLI(t, bad...); code == 0 || errs == "" {
			t.Errorf("%v: code %d, stderr %q", bad, code, errs)
		}
	}
}
