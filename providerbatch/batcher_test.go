package providerbatch_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/providerbatch"
	"github.com/switchyard-dev/switchyard/providerbatch/fakeprovider"
	"github.com/switchyard-dev/switchyard/providerbatch/sqlstore"
	"github.com/switchyard-dev/switchyard/scheduler"
	"github.com/switchyard-dev/switchyard/spend"
)

// fakeCost is what the fake's billed usage costs at the test prices.
func fakeCost(t *testing.T, fake *fakeprovider.Server) spend.Micros {
	t.Helper()
	var total spend.Micros
	for k, u := range fake.Billed() {
		mode, model, _ := strings.Cut(k, "/")
		p, err := testPrices(t).Price("openai", model)
		if err != nil {
			t.Fatal(err)
		}
		total += p.Cost(spend.Usage{Input: u.Input, CachedInput: u.CachedInput, Output: u.Output}, spend.Mode(mode))
	}
	return total
}

func metricSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// reconciles: the ledger's per-call costs and the cost of the fake's
// summed usage differ by less than a cent, and by at most the per-call
// rounding (half a micro-dollar per call).
func reconciles(ledger, fake spend.Micros, calls int64) bool {
	d := ledger - fake
	if d < 0 {
		d = -d
	}
	return d < 10_000 && int64(d)*2 <= calls
}

func ledgerSpend(t *testing.T, st *sqlstore.Store) sqlstore.SpendRow {
	t.Helper()
	rows, err := st.Spend(context.Background(), sqlstore.SpendQuery{})
	if err != nil || len(rows) != 1 {
		t.Fatalf("Spend = %v, %v", rows, err)
	}
	return rows[0]
}

func TestBatcher_EveryTaskGetsItsOwnResult(t *testing.T) {
	t.Parallel()
	for _, p := range providers {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			m, err := providerbatch.NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			e := newEnv(t, p, func(c *providerbatch.Config) { c.Metrics = m })
			js := jobs(250, "acme")
			reqs := make([]providerbatch.Request, len(js))
			for i := range js {
				reqs[i] = request(p, "You summarise.", "text of "+js[i].ID, "")
			}
			out := e.run(t, js, reqs, 20)
			for i, o := range out {
				if o.err != nil {
					t.Fatalf("%s: %v", js[i].ID, o.err)
				}
				if got, want := textOf(t, p, o.resp.Body), "echo: text of "+js[i].ID; got != want {
					t.Fatalf("%s got %q, want %q", js[i].ID, got, want)
				}
				if o.resp.Mode != spend.Batch || o.resp.Usage.Output != 16 {
					t.Fatalf("%s: %+v", js[i].ID, o.resp)
				}
			}
			sub := e.fake.Submitted()
			for _, j := range js {
				if sub[j.ID] != 1 {
					t.Fatalf("%s submitted %d times", j.ID, sub[j.ID])
				}
			}
			if n := e.fake.Batches(); n != 3 {
				t.Errorf("%d batches for 250 items of at most 100, want 3", n)
			}
			// A second run of a finished task returns the stored result,
			// without another provider call.
			again, err := e.b.Do(context.Background(), js[0], reqs[0])
			if err != nil || string(again.Body) != string(out[0].resp.Body) || e.fake.Batches() != 3 {
				t.Fatalf("rerun: %v, %v", again, err)
			}
			// Spend reconciles with what the fake billed, to the cent.
			row := ledgerSpend(t, e.store)
			if !reconciles(row.Cost, fakeCost(t, e.fake), row.Calls) || row.Calls != 250 {
				want := fakeCost(t, e.fake)
				t.Fatalf("ledger spend %s over %d calls, fake billed %s", row.Cost, row.Calls, want)
			}
			// The metrics say the same.
			if got := metricSum(t, reg, "switchyard_spend_micros_total"); got != float64(row.Cost) {
				t.Errorf("switchyard_spend_micros_total = %v, ledger %d", got, row.Cost)
			}
			if got := metricSum(t, reg, "switchyard_provider_batch_items_total"); got != 2*250 { // added + done
				t.Errorf("switchyard_provider_batch_items_total = %v", got)
			}
		})
	}
}

func TestBatcher_PartialFailuresRetryOnlyTheirItem(t *testing.T) {
	t.Parallel()
	for _, p := range providers {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, p, nil)
			js := jobs(20, "acme")
			reqs := make([]providerbatch.Request, len(js))
			for i := range js {
				reqs[i] = request(p, "sys", "t"+js[i].ID, "")
			}
			e.fake.SetFaults(fakeprovider.Faults{
				Fail:      map[string]string{"task-0001": "server", "task-0002": "invalid"},
				Drop:      map[string]bool{"task-0003": true},
				Malformed: map[string]bool{"task-0004": true},
				Garbage:   true,
			})
			out := e.run(t, js, reqs, 30)
			sub := e.fake.Submitted()
			for i, j := range js {
				o := out[i]
				switch j.ID {
				case "task-0002":
					if !isClass(o.err, "permanent") || !contains(o.err, "invalid_request_error") || sub[j.ID] != 1 {
						t.Errorf("invalid item: %v, submitted %d", o.err, sub[j.ID])
					}
				case "task-0004":
					if !isClass(o.err, "permanent") || !contains(o.err, "malformed") || sub[j.ID] != 1 {
						t.Errorf("malformed item: %v, submitted %d", o.err, sub[j.ID])
					}
				case "task-0001", "task-0003": // retried alone, then succeeded
					if o.err != nil || sub[j.ID] != 2 {
						t.Errorf("%s: %v, submitted %d", j.ID, o.err, sub[j.ID])
					}
				default:
					if o.err != nil || sub[j.ID] != 1 {
						t.Errorf("%s: %v, submitted %d", j.ID, o.err, sub[j.ID])
					}
				}
			}
			if n := e.fake.Batches(); n != 2 {
				t.Errorf("%d batches, want 2 (the second holding only the two retried items)", n)
			}
			// Failed items are settled at zero; spend still reconciles.
			if row, want := ledgerSpend(t, e.store), fakeCost(t, e.fake); !reconciles(row.Cost, want, row.Calls) {
				t.Fatalf("ledger %s, fake %s", row.Cost, want)
			}
		})
	}
}

func TestBatcher_ExpiredBatchResubmitsOnlyUnfinished(t *testing.T) {
	t.Parallel()
	for _, p := range providers {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, p, nil)
			js := jobs(40, "acme")
			reqs := make([]providerbatch.Request, len(js))
			for i := range js {
				reqs[i] = request(p, "sys", "t"+js[i].ID, "")
			}
			e.fake.SetFaults(fakeprovider.Faults{Expire: 1})
			out := e.run(t, js, reqs, 30)
			sub := e.fake.Submitted()
			// The fake finishes the first half of an expiring batch; the
			// batch is ordered by enqueue time within its (empty) cache key.
			for i, j := range js {
				want := 1
				if i >= len(js)/2 {
					want = 2
				}
				if out[i].err != nil || sub[j.ID] != want {
					t.Errorf("%s: %v, submitted %d, want %d", j.ID, out[i].err, sub[j.ID], want)
				}
			}
		})
	}
}

func TestBatcher_SubmitThrottled(t *testing.T) {
	t.Parallel()
	for _, p := range providers {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, p, nil)
			e.fake.SetFaults(fakeprovider.Faults{Submit429: 2, RetryAfter: 30})
			js := jobs(10, "acme")
			reqs := make([]providerbatch.Request, len(js))
			for i := range js {
				reqs[i] = request(p, "sys", "t"+js[i].ID, "")
			}
			out := e.run(t, js, reqs, 40)
			for i, o := range out {
				if o.err != nil {
					t.Fatalf("%s: %v", js[i].ID, o.err)
				}
			}
			if n := e.fake.Batches(); n != 1 {
				t.Errorf("%d batches created, want 1 after two 429s", n)
			}
		})
	}
}

func TestBatcher_DeadlineGoesDirect(t *testing.T) {
	t.Parallel()
	for _, p := range providers {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, p, func(c *providerbatch.Config) { c.Latency = time.Hour })
			js := jobs(4, "acme")
			reqs := make([]providerbatch.Request, len(js))
			for i := range js {
				reqs[i] = request(p, "sys", "t"+js[i].ID, "")
			}
			// task-0000 is due in 10 minutes: a batch would miss it.
			js[0].Task = &ledger.Task{ID: js[0].ID, Deadline: e.clk.now().Add(10 * time.Minute)}
			out := e.run(t, js, reqs, 20)
			if out[0].err != nil || out[0].resp.Mode != spend.Direct || e.fake.Direct()["task-0000"] != 1 || e.fake.Submitted()["task-0000"] != 0 {
				t.Fatalf("due task: %+v, direct %d, batched %d", out[0], e.fake.Direct()["task-0000"], e.fake.Submitted()["task-0000"])
			}
			for i := 1; i < len(js); i++ {
				if out[i].err != nil || out[i].resp.Mode != spend.Batch {
					t.Fatalf("%s: %+v", js[i].ID, out[i])
				}
			}
			// Direct pays the full price, batches the discounted one.
			price, _ := testPrices(t).Price(p, testModel)
			if d := out[0].resp; d.Cost != price.Cost(d.Usage, spend.Direct) || d.Cost < 2*price.Cost(d.Usage, spend.Batch)-1 {
				t.Errorf("direct call cost %s for %+v", d.Cost, d.Usage)
			}
			if b := out[1].resp; b.Cost != price.Cost(b.Usage, spend.Batch) {
				t.Errorf("batched call cost %s for %+v", b.Cost, b.Usage)
			}
		})
	}
}

func TestBatcher_SpendCapStopsWithinOneCall(t *testing.T) {
	t.Parallel()
	for _, p := range providers {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			// Every prompt has its own prefix (no cache hits), so the
			// estimate is exactly what the fake bills.
			prefix, text := strings.Repeat("p", 400), "text"
			price, _ := testPrices(t).Price(p, testModel)
			r := request(p, prefix+"task-0000", text+"0", "")
			est := price.Cost(spend.Usage{Input: r.InputTokens, Output: r.MaxOutputTokens}, spend.Batch)
			limit := 7*est + est/2
			e := newEnv(t, p, func(c *providerbatch.Config) {
				c.Windows = []spend.Window{{Period: 24 * time.Hour, Cap: limit}}
			})
			js := jobs(20, "acme")
			other := jobs(3, "globex")
			for i, j := range other {
				j.ID = fmt.Sprintf("other-%d", i)
			}
			js = append(js, other...)
			reqs := make([]providerbatch.Request, len(js))
			for i := range js {
				reqs[i] = request(p, prefix+fmt.Sprintf("%-9s", js[i].ID), text+js[i].ID[len(js[i].ID)-1:], "")
			}
			out := e.run(t, js, reqs, 30)
			okN, refused := 0, 0
			for i, o := range out {
				switch {
				case o.err == nil:
					okN++
				case isClass(o.err, "budget") && errors.Is(o.err, spend.ErrCapExceeded) && contains(o.err, `tenant "acme"`):
					refused++
				default:
					t.Fatalf("%s: %v", js[i].ID, o.err)
				}
			}
			if okN != 7+3 || refused != 13 {
				t.Fatalf("%d done, %d refused; want 10 (7 acme + 3 globex) and 13", okN, refused)
			}
			rows, err := e.store.Spend(context.Background(), sqlstore.SpendQuery{Tenant: "acme", By: []string{"tenant"}})
			if err != nil || len(rows) != 1 {
				t.Fatal(rows, err)
			}
			if s := rows[0].Cost; s > limit || limit-s >= est {
				t.Fatalf("acme spent %s of %s; one call is %s", s, limit, est)
			}
			if want := fakeCost(t, e.fake); !reconciles(ledgerSpend(t, e.store).Cost, want, ledgerSpend(t, e.store).Calls) {
				t.Fatalf("ledger %s, fake %s", ledgerSpend(t, e.store).Cost, want)
			}
		})
	}
}

func TestBatcher_BadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "openai", nil)
	ctx := context.Background()
	j := &scheduler.Job{ID: "t1", Kind: "k", Tenant: "acme"}
	_, err := e.b.Do(ctx, j, providerbatch.Request{Model: "no-such-model", Params: params("openai", "a", "b")})
	if !isClass(err, "permanent") || !errors.Is(err, spend.ErrUnknownModel) || !contains(err, "openai/no-such-model") {
		t.Fatalf("unknown model: %v", err)
	}
	_, err = e.b.Do(ctx, j, providerbatch.Request{Model: testModel, Params: []byte("{not json")})
	if !isClass(err, "permanent") || !contains(err, "not valid JSON") {
		t.Fatalf("bad params: %v", err)
	}
	_, err = e.b.Do(ctx, j, providerbatch.Request{Model: testModel, Params: params("openai", "a", "b"), InputTokens: -1})
	if !isClass(err, "permanent") || !contains(err, "negative") {
		t.Fatalf("negative estimate: %v", err)
	}
	if it, err := e.store.Item(ctx, "t1"); it != nil || err != nil {
		t.Fatalf("bad input left an item: %+v, %v", it, err)
	}
	if _, err := providerbatch.New(providerbatch.Config{}); err == nil {
		t.Fatal("New without a provider: no error")
	}
}
