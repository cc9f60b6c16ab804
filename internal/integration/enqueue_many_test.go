package integration_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/conformance/testenv/pgtest"
	"github.com/switchyard-dev/switchyard/internal/testclean"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/postgres" // the postgres:// ledger
	"github.com/switchyard-dev/switchyard/scheduler"
)

type manyArgs struct {
	N int `json:"n"`
}

func (manyArgs) Kind() string { return "test.many" }

// manySetup opens a broker of the named adapter ("mem" for the in-process
// one), with a ledger when withLedger (SQLite; PostgreSQL when kind ends
// in "+pg"), and a client.
func manySetup(t *testing.T, kind string, withLedger bool) (*broker.Broker, ledger.Ledger, *switchyard.Client) {
	t.Helper()
	ctx := context.Background()
	var L ledger.Ledger
	opts := &broker.Options{}
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "ledger.db")
	if k, ok := strings.CutSuffix(kind, "+pg"); ok {
		kind, dsn = k, pgtest.LedgerDSN(t)
	}
	if withLedger {
		var err error
		L, err = ledger.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { L.Close() })
		opts.Dedup = L
	}
	u := "mem://" + conformance.Namespace(t)
	if kind != "mem" {
		u = testclean.URL(t, kind, conformance.Namespace(t), nil)
	}
	b, err := broker.Open(ctx, u, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	c, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		t.Fatal(err)
	}
	return b, L, c
}

// runMany runs the broker's tasks until want have run (and a moment
// more, to see any extra), returning the N of each run in run order.
func runMany(t *testing.T, b *broker.Broker, L ledger.Ledger, want int) []int {
	t.Helper()
	ctx := context.Background()
	srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, Slots: 4, PollWait: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Retry: scheduler.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ran []int
	_ = switchyard.Register(srv, func(ctx context.Context, task *switchyard.Task[manyArgs]) error {
		mu.Lock()
		ran = append(ran, task.Args.N)
		mu.Unlock()
		return nil
	}, nil)
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(ctx)
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(ran)
		mu.Unlock()
		if n >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	return append([]int(nil), ran...)
}

// TestClient_EnqueueMany: invalid items fail alone; an item repeating an
// earlier item's idempotency key, or a task's enqueued before, is a
// duplicate; every other item runs once. On the in-process broker and
// the embedded one with and without a ledger, and on network brokers.
func TestClient_EnqueueMany(t *testing.T) {
	t.Parallel()
	cases := []struct {
		kind   string
		ledger bool
	}{{"mem", false}, {"mem", true}, {"embedded", false}, {"embedded", true}, {"nats", false}, {"asynq", true}, {"rabbitmq", false}, {"nats+pg", true}}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/ledger=%v", c.kind, c.ledger), func(t *testing.T) {
			t.Parallel()
			testEnqueueMany(t, c.kind, c.ledger)
		})
	}
}

func testEnqueueMany(t *testing.T, kind string, withLedger bool) {
	ctx := context.Background()
	b, L, client := manySetup(t, kind, withLedger)
	key := "order-" + conformance.Namespace(t)
	before, err := client.Enqueue(ctx, manyArgs{N: 0}, &switchyard.EnqueueOpts{IdempotencyKey: key + "-old"})
	if err != nil {
		t.Fatal(err)
	}
	items := []switchyard.EnqueueItem{
		{Args: manyArgs{N: 1}},
		{Args: nil}, // invalid: no args
		{Args: manyArgs{N: 2}, Opts: &switchyard.EnqueueOpts{IdempotencyKey: key}},
		{Args: manyArgs{N: 3}, Opts: &switchyard.EnqueueOpts{Metadata: map[string]string{"switchyard-x": "reserved"}}}, // invalid
		{Args: manyArgs{N: 4}, Opts: &switchyard.EnqueueOpts{IdempotencyKey: key}},                                     // repeats item 2
		{Args: manyArgs{N: 5}, Opts: &switchyard.EnqueueOpts{IdempotencyKey: key + "-old"}},                            // repeats the earlier task
		{Args: manyArgs{N: 6}, Opts: &switchyard.EnqueueOpts{Lane: "no such lane!"}},                                   // invalid
		{Args: manyArgs{N: 7}},
	}
	rs, err := client.EnqueueMany(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(items) {
		t.Fatalf("%d results for %d items", len(rs), len(items))
	}
	for _, i := range []int{1, 3, 6} {
		if rs[i].Err == nil || !errors.Is(rs[i].Err, broker.ErrInvalid) || rs[i].ID != "" {
			t.Errorf("invalid item %d: %+v, want ErrInvalid", i, rs[i])
		}
	}
	ids := map[string]bool{before.ID: true}
	for _, i := range []int{0, 2, 7} {
		if rs[i].Err != nil || rs[i].ID == "" || rs[i].Duplicate || ids[rs[i].ID] {
			t.Errorf("new item %d: %+v", i, rs[i])
		}
		ids[rs[i].ID] = true
	}
	if rs[4].Err != nil || !rs[4].Duplicate || rs[4].ID != rs[2].ID {
		t.Errorf("item repeating a key in the batch: %+v, want a duplicate of %s", rs[4], rs[2].ID)
	}
	if rs[5].Err != nil || !rs[5].Duplicate || rs[5].ID != before.ID {
		t.Errorf("item repeating an enqueued task's key: %+v, want a duplicate of %s", rs[5], before.ID)
	}
	// The same batch again: every valid item with a key is a duplicate.
	again, err := client.EnqueueMany(ctx, items[2:3])
	if err != nil {
		t.Fatal(err)
	}
	if again[0].Err != nil || !again[0].Duplicate || again[0].ID != rs[2].ID {
		t.Errorf("the key enqueued again: %+v", again[0])
	}
	if L != nil {
		info, err := client.Task(ctx, rs[7].ID)
		if err != nil || info.Task.Kind != "test.many" || info.Task.State != ledger.Queued {
			t.Errorf("ledger record of item 7: %+v, %v", info, err)
		}
	}
	ran := runMany(t, b, L, 4)
	sort.Ints(ran)
	if fmt.Sprint(ran) != "[0 1 2 7]" {
		t.Errorf("ran %v, want [0 1 2 7] once each", ran)
	}
}

// TestClient_EnqueueManyOrdering: items sharing an ordering key run in
// their order in the batch.
func TestClient_EnqueueManyOrdering(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, L, client := manySetup(t, "embedded", true)
	var items []switchyard.EnqueueItem
	for i := 1; i <= 6; i++ {
		items = append(items, switchyard.EnqueueItem{Args: manyArgs{N: i}, Opts: &switchyard.EnqueueOpts{OrderingKey: "k"}})
	}
	rs, err := client.EnqueueMany(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Err != nil {
			t.Fatalf("item %d: %v", i, r.Err)
		}
	}
	if ran := runMany(t, b, L, 6); fmt.Sprint(ran) != "[1 2 3 4 5 6]" {
		t.Errorf("ran %v, want [1 2 3 4 5 6]", ran)
	}
}

// TestClient_EnqueueManyLedgerFails: when the ledger's transaction fails,
// the call fails and nothing is published.
func TestClient_EnqueueManyLedgerFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, L, client := manySetup(t, "mem", true)
	L.Close()
	if _, err := client.EnqueueMany(ctx, []switchyard.EnqueueItem{{Args: manyArgs{N: 1}}}); err == nil {
		t.Fatal("EnqueueMany with a closed ledger succeeded")
	}
	st, err := b.Stats(ctx, "batch")
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready != 0 {
		t.Errorf("%d messages published after the ledger failed", st.Ready)
	}
}
