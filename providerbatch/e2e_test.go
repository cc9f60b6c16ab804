package providerbatch_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard"
	_ "github.com/switchyard-dev/switchyard/adapters/asynq"           // redis://
	_ "github.com/switchyard-dev/switchyard/adapters/embedded"        // embedded://
	pgbroker "github.com/switchyard-dev/switchyard/adapters/postgres" // postgres:// brokers
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
	"github.com/switchyard-dev/switchyard/conformance/testenv/pgtest"
	"github.com/switchyard-dev/switchyard/internal/testclean"
	"github.com/switchyard-dev/switchyard/lanes"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/postgres" // postgres:// ledgers
	"github.com/switchyard-dev/switchyard/ledger/sqlite"
	"github.com/switchyard-dev/switchyard/providerbatch"
	"github.com/switchyard-dev/switchyard/providerbatch/fakeprovider"
	"github.com/switchyard-dev/switchyard/providerbatch/sqlstore"
	"github.com/switchyard-dev/switchyard/scheduler"
	"github.com/switchyard-dev/switchyard/spend"
)

// summarizeArgs is the e2e task: summarise Text under a shared Prefix.
type summarizeArgs struct {
	Prefix string `json:"prefix"`
	Text   string `json:"text"`
	// Model overrides testModel (bad-input cases).
	Model string `json:"model,omitempty"`
}

func (summarizeArgs) Kind() string { return "pb.summarize" }

// EnqueueOpts makes the provider-batch lane the kind's default lane.
func (summarizeArgs) EnqueueOpts() switchyard.EnqueueOpts {
	return switchyard.EnqueueOpts{Lane: providerbatch.Lane}
}

// worker is one Server running the batch lane with a Batcher.
type worker struct {
	srv  *switchyard.Server
	L    ledger.Ledger
	st   *sqlstore.Store
	mu   sync.Mutex
	done map[string]int // task → handler successes
}

// startWorker runs a Server on brokerURL with the ledger at path; the
// handler sends each task's request through the batch lane.
// ledgerPath is a SQLite file, or a postgres:// ledger DSN.
func startWorker(ctx context.Context, brokerURL, ledgerPath, provider string, fake providerbatch.Provider, tune func(*providerbatch.Config)) (*worker, error) {
	var L ledger.Ledger
	var st *sqlstore.Store
	var err error
	if strings.HasPrefix(ledgerPath, "postgres://") {
		if L, err = ledger.Open(ctx, ledgerPath); err != nil {
			return nil, err
		}
		if st, err = sqlstore.OpenDSN(ctx, ledgerPath); err != nil {
			return nil, err
		}
	} else {
		if L, err = sqlite.Open(ctx, ledgerPath, nil); err != nil {
			return nil, err
		}
		if st, err = sqlstore.OpenSQLite(ctx, ledgerPath); err != nil {
			return nil, err
		}
	}
	tab, err := spend.NewTable(map[string]spend.Price{provider + "/" + testModel: {Input: 2_500_000, CachedInput: 1_250_000, Output: 10_000_000, BatchDiscount: 5000}})
	if err != nil {
		return nil, err
	}
	cfg := providerbatch.Config{Provider: fake, Store: st, Prices: tab, MaxItems: 500, MaxAge: 200 * time.Millisecond,
		PollInterval: 300 * time.Millisecond, LeaseTTL: 2 * time.Second, CallTimeout: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)}
	if tune != nil {
		tune(&cfg)
	}
	pb, err := providerbatch.New(cfg)
	if err != nil {
		return nil, err
	}
	b, err := broker.Open(ctx, brokerURL, &broker.Options{Dedup: L})
	if err != nil {
		return nil, err
	}
	srv, err := switchyard.NewServer(b, &scheduler.Config{Ledger: L, Slots: 16, Lease: 2 * time.Second, PollWait: 50 * time.Millisecond,
		Lanes:  append(lanes.Defaults(), providerbatch.LaneDef()),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	w := &worker{srv: srv, L: L, st: st, done: map[string]int{}}
	err = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[summarizeArgs]) error {
		r := request(provider, tk.Args.Prefix, tk.Args.Text, "")
		if tk.Args.Model != "" {
			r.Model = tk.Args.Model
		}
		resp, err := pb.Do(ctx, tk.Job, r)
		if err != nil {
			return err
		}
		w.mu.Lock()
		w.done[tk.ID]++
		w.mu.Unlock()
		return tk.SetResult(resp)
	}, nil)
	if err != nil {
		return nil, err
	}
	return w, srv.Start(ctx)
}

// enqueueAll enqueues n tasks and returns their IDs, by text.
func enqueueAll(t *testing.T, ctx context.Context, brokerURL string, L ledger.Ledger, n int, cacheKey bool) map[string]string {
	t.Helper()
	b, err := broker.Open(ctx, brokerURL, &broker.Options{Dedup: L})
	if err != nil {
		t.Fatal(err)
	}
	c, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	items := make([]switchyard.EnqueueItem, 0, 200)
	flush := func() {
		res, err := c.EnqueueMany(ctx, items)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			ids[r.ID] = items[i].Args.(summarizeArgs).Text
		}
		items = items[:0]
	}
	for i := range n {
		a := summarizeArgs{Prefix: fmt.Sprintf("shared prefix %d", i%10), Text: fmt.Sprintf("document %d", i)}
		o := &switchyard.EnqueueOpts{Tenant: "acme"}
		if cacheKey {
			o.CacheKey = fmt.Sprintf("p%d", i%10)
		}
		items = append(items, switchyard.EnqueueItem{Args: a, Opts: o})
		if len(items) == cap(items) {
			flush()
		}
	}
	if len(items) > 0 {
		flush()
	}
	return ids
}

// enqueueBad enqueues the bad-input tasks and returns the reason each must
// dead-letter with.
func enqueueBad(t *testing.T, ctx context.Context, brokerURL string, L ledger.Ledger, fake *fakeprovider.Server) map[string]string {
	t.Helper()
	b, err := broker.Open(ctx, brokerURL, &broker.Options{Dedup: L})
	if err != nil {
		t.Fatal(err)
	}
	c, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		t.Fatal(err)
	}
	r1, err := c.Enqueue(ctx, summarizeArgs{Prefix: "p", Text: "x", Model: "gpt-unpriced"}, &switchyard.EnqueueOpts{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.Enqueue(ctx, summarizeArgs{Prefix: "p", Text: "refused"}, &switchyard.EnqueueOpts{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	fake.SetFaults(fakeprovider.Faults{Fail: map[string]string{r2.ID: "invalid"}})
	return map[string]string{r1.ID: "no price for model", r2.ID: "invalid_request_error"}
}

// waitDone waits (bounded) until every task in ids is completed in the
// ledger, and returns them.
func waitDone(t *testing.T, ctx context.Context, L ledger.Ledger, ids map[string]string, limit time.Duration) map[string]*ledger.Task {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		got := map[string]*ledger.Task{}
		after := ""
		for range 100 {
			ts, err := L.List(ctx, ledger.Filter{States: []ledger.State{ledger.Completed, ledger.Dead, ledger.Failed}, Limit: 1000, After: after})
			if err != nil {
				t.Fatal(err)
			}
			for _, tk := range ts {
				got[tk.ID] = tk
			}
			if len(ts) < 1000 {
				break
			}
			after = ts[len(ts)-1].ID
		}
		if len(got) >= len(ids) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d tasks finished after %s", len(got), len(ids), limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkResults: each task completed with its own text, once per provider
// submission, and spend reconciles with the fake.
func checkResults(t *testing.T, fake *fakeprovider.Server, provider string, ids map[string]string, got map[string]*ledger.Task, st *sqlstore.Store, others map[string]string) {
	t.Helper()
	sub, direct := fake.Submitted(), fake.Direct()
	for id, text := range ids {
		tk := got[id]
		if tk == nil || tk.State != ledger.Completed {
			t.Fatalf("task %s: %+v", id, tk)
		}
		var resp providerbatch.Response
		if err := jsonUnmarshal(tk.Result, &resp); err != nil {
			t.Fatalf("task %s result: %v", id, err)
		}
		if got := textOf(t, provider, resp.Body); got != "echo: "+text {
			t.Fatalf("task %s got %q, want its own %q", id, got, "echo: "+text)
		}
		if sub[id] != 1 || direct[id] != 0 {
			t.Fatalf("task %s submitted %d times, direct %d", id, sub[id], direct[id])
		}
	}
	for id := range sub {
		if _, ok := ids[id]; !ok {
			if _, ok := others[id]; !ok {
				t.Fatalf("the fake saw custom_id %s, which is no task of this run", id)
			}
		}
	}
	// The refused request is settled at zero; the unpriced one never
	// reached the store.
	rows, err := st.Spend(context.Background(), sqlstore.SpendQuery{By: []string{"state"}})
	if err != nil || len(rows) != 1 || rows[0].Group["state"] != "settled" || rows[0].Calls < int64(len(ids)) || rows[0].Calls > int64(len(ids)+len(others)) {
		t.Fatalf("spend rows %+v, %v", rows, err)
	}
	if want := fakeCost(t, fake); !reconciles(rows[0].Cost, want, rows[0].Calls) {
		t.Fatalf("ledger spend %s, fake billed %s", rows[0].Cost, want)
	}
	t.Logf("%d tasks in %d batches; spend %s (fake billed %s)", len(ids), fake.Batches(), rows[0].Cost, fakeCost(t, fake))
}

func e2eTasks() int {
	if testing.Short() {
		return 300
	}
	return 2000
}

func TestE2E_Embedded(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	runE2E(t, ctx, "embedded://"+filepath.Join(dir, "queue.db"), filepath.Join(dir, "ledger.db"), "openai")
}

func TestE2E_Redis(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	runE2E(t, ctx, testclean.URL(t, "asynq", "pb"+fmt.Sprint(time.Now().UnixNano()), nil), filepath.Join(dir, "ledger.db"), "anthropic")
}

// TestE2E_Postgres: the lane on PostgreSQL end to end: the ledger (and
// the lane's items, batches and spend) in PostgreSQL, with the
// PostgreSQL broker (adapters/postgres) carrying the tasks.
func TestE2E_Postgres(t *testing.T) {
	dsn := pgtest.LedgerDSN(t)
	ctx := context.Background()
	ns := "pb" + fmt.Sprint(time.Now().UnixNano())
	brokerURL := testenv.Postgres.Endpoint(t)
	sep := "?"
	if strings.Contains(brokerURL, "?") {
		sep = "&"
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, brokerURL)
		if err != nil {
			t.Errorf("dropping the broker's schema: %v", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{pgbroker.SchemaFor(ns)}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("dropping the broker's schema: %v", err)
		}
	})
	runE2E(t, ctx, brokerURL+sep+"namespace="+ns, dsn, "openai")
}

func runE2E(t *testing.T, ctx context.Context, brokerURL, ledgerPath, provider string) {
	fake := fakeprovider.New()
	defer fake.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := startWorker(ctx, brokerURL, ledgerPath, provider, newProvider(fake, provider), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.srv.Stop(context.Background())
	ids := enqueueAll(t, ctx, brokerURL, w.L, e2eTasks(), false)
	// Bad input: a model missing from the price table, and a request the
	// provider refuses. Each dead-letters with its reason.
	bad := enqueueBad(t, ctx, brokerURL, w.L, fake)
	all := map[string]string{}
	for id, s := range ids {
		all[id] = s
	}
	for id, s := range bad {
		all[id] = s
	}
	got := waitDone(t, ctx, w.L, all, 3*time.Minute)
	for id, reason := range bad {
		if tk := got[id]; tk == nil || tk.State != ledger.Dead || !strings.Contains(tk.LastError, reason) {
			t.Fatalf("bad task %s: %+v, want dead with %q", id, tk, reason)
		}
	}
	for id := range bad {
		delete(got, id)
	}
	checkResults(t, fake, provider, ids, got, w.st, bad)
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range ids {
		if w.done[id] != 1 {
			t.Fatalf("task %s handler succeeded %d times", id, w.done[id])
		}
	}
}

// The SIGKILL case: worker processes are killed while batches are in
// flight; nothing is lost, nothing is submitted twice.

const (
	childEnv      = "SWITCHYARD_PB_CHILD"
	childBroker   = "SWITCHYARD_PB_BROKER"
	childLedger   = "SWITCHYARD_PB_LEDGER"
	childFake     = "SWITCHYARD_PB_FAKE"
	killTasks     = 400
	killTimes     = 3
	killWaitLimit = 2 * time.Minute
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(childWorker())
	}
	os.Exit(m.Run())
}

// childWorker runs a worker until killed.
func childWorker() int {
	ctx := context.Background()
	p := newProviderURL(os.Getenv(childFake), "openai")
	w, err := startWorker(ctx, os.Getenv(childBroker), os.Getenv(childLedger), "openai", p, func(c *providerbatch.Config) { c.MaxItems = 100 })
	if err != nil {
		fmt.Printf("ERROR %v\n", err)
		return 2
	}
	_ = w
	fmt.Println("READY")
	time.Sleep(time.Hour) // killed by the parent
	return 3
}

func TestSIGKILL_BatchInFlight(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	brokerURL := testclean.URL(t, "asynq", "pbkill"+fmt.Sprint(time.Now().UnixNano()), nil)
	ledgerPath := filepath.Join(dir, "ledger.db")
	fake := fakeprovider.New()
	defer fake.Close()
	fake.PollsToEnd = 4 // batches stay in flight across a few polls
	L, err := sqlite.Open(ctx, ledgerPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer L.Close()
	st, err := sqlstore.OpenSQLite(ctx, ledgerPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ids := enqueueAll(t, ctx, brokerURL, L, killTasks, false)

	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSIGKILL_BatchInFlight$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"=1", childBroker+"="+brokerURL, childLedger+"="+ledgerPath, childFake+"="+fake.URL)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ready := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if l := sc.Text(); l == "READY" {
					close(ready)
				} else if strings.HasPrefix(l, "ERROR") {
					t.Errorf("worker: %s", l)
				}
			}
		}()
		select {
		case <-ready:
		case <-time.After(30 * time.Second):
			t.Fatal("worker not ready after 30s")
		}
		return cmd
	}
	kills := 0
	for k := range killTimes {
		cmd := start()
		// Kill once a new batch is in flight (submitted, not collected).
		want := k + 1
		deadline := time.Now().Add(killWaitLimit)
		for fake.Batches() < want && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		kills++
	}
	cmd := start()
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	got := waitDone(t, ctx, L, ids, killWaitLimit)
	checkResults(t, fake, "openai", ids, got, st, nil)
	t.Logf("%d SIGKILLs with batches in flight; %d batches", kills, fake.Batches())
}
