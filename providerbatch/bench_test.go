package providerbatch_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/providerbatch"
	"github.com/switchyard-dev/switchyard/providerbatch/sqlstore"
	"github.com/switchyard-dev/switchyard/spend"
)

// benchPrices is the price table of the cost comparison, in micro-dollars
// per million tokens: $0.15 input, $0.075 cached input, $0.60 output, half
// price in batches (the shape of a small current model's list price; put
// your own table in to compare for your models).
func benchPrices(t testing.TB) *spend.Table {
	p := spend.Price{Input: 150_000, CachedInput: 75_000, Output: 600_000, BatchDiscount: 5000}
	tab, err := spend.NewTable(map[string]spend.Price{"openai/" + testModel: p, "anthropic/" + testModel: p})
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// costRun runs n tasks of a shared-prefix workload (keys distinct system
// prompts of about 500 tokens, interleaved: task i uses prefix i%keys)
// through the batch lane, or all direct, and returns the settled spend.
func costRun(t testing.TB, provider string, n, keys int, direct, cacheKey bool) sqlstore.SpendRow {
	e := newEnv(t, provider, func(c *providerbatch.Config) {
		c.Prices, c.MaxItems = benchPrices(t), 500
		if direct {
			c.Latency = 1000 * time.Hour // every task's deadline is sooner: direct calls
		}
	})
	js := jobs(n, "acme")
	reqs := make([]providerbatch.Request, n)
	for i, j := range js {
		if direct {
			j.Task = &ledger.Task{ID: j.ID, Deadline: e.clk.now().Add(time.Hour)}
		}
		k := i % keys
		prefix := fmt.Sprintf("system prompt %03d: ", k) + strings.Repeat("policy text ", 165)
		key := ""
		if cacheKey {
			key = fmt.Sprintf("prefix-%03d", k)
		}
		reqs[i] = request(provider, prefix, fmt.Sprintf("summarise document %d", i), key)
	}
	out := e.run(t, js, reqs, 20)
	for i, o := range out {
		if o.err != nil {
			t.Fatalf("%s: %v", js[i].ID, o.err)
		}
	}
	rows, err := e.store.Spend(context.Background(), sqlstore.SpendQuery{})
	if err != nil || len(rows) != 1 || rows[0].Calls != int64(n) {
		t.Fatalf("spend %+v, %v", rows, err)
	}
	return rows[0]
}

// BenchmarkCost_2000 reports the spend of 2,000 shared-prefix tasks
// direct, through the batch lane, and through the batch lane with
// CacheKey, at benchPrices against the fake provider (whose prompt cache
// holds the 4 most recent prefixes):
//
//	go test ./providerbatch -run '^$' -bench Cost_2000 -benchtime 1x
func BenchmarkCost_2000(b *testing.B) {
	const n, keys = 2000, 50
	for b.Loop() {
		direct := costRun(b, "openai", n, keys, true, false)
		batch := costRun(b, "openai", n, keys, false, false)
		keyed := costRun(b, "openai", n, keys, false, true)
		b.ReportMetric(float64(direct.Cost)/1e6, "usd_direct")
		b.ReportMetric(float64(batch.Cost)/1e6, "usd_batch")
		b.ReportMetric(float64(keyed.Cost)/1e6, "usd_batch_cachekey")
		b.ReportMetric(100*batch.CachedShare(), "cached%_batch")
		b.ReportMetric(100*keyed.CachedShare(), "cached%_cachekey")
		b.Logf("direct %s (cached %.1f%%), batch %s (cached %.1f%%), batch+CacheKey %s (cached %.1f%%); tokens direct %+v, keyed %+v",
			direct.Cost, 100*direct.CachedShare(), batch.Cost, 100*batch.CachedShare(), keyed.Cost, 100*keyed.CachedShare(), direct.Usage, keyed.Usage)
	}
}

// TestCacheKey_GroupsPrefixes: with CacheKey a batch runs each key's
// items back to back, and the fake's cache serves most of their prefix;
// without, the interleaved prefixes evict each other.
func TestCacheKey_GroupsPrefixes(t *testing.T) {
	t.Parallel()
	plain := costRun(t, "anthropic", 200, 20, false, false)
	keyed := costRun(t, "anthropic", 200, 20, false, true)
	if plain.CachedShare() != 0 || keyed.CachedShare() < 0.8 || keyed.Cost >= plain.Cost {
		t.Fatalf("cached share without key %.2f (%s), with key %.2f (%s)", plain.CachedShare(), plain.Cost, keyed.CachedShare(), keyed.Cost)
	}
}
