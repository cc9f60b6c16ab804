package integration_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	_ "modernc.org/sqlite"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
	"github.com/switchyard-dev/switchyard/conformance/testenv/pgtest"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/postgres"
	_ "github.com/switchyard-dev/switchyard/ledger/sqlite"
	"github.com/switchyard-dev/switchyard/scheduler"
)

type orderArgs struct {
	Order int `json:"order"`
}

func (orderArgs) Kind() string { return "test.order_email" }

// txEnv is a ledger, the user's own connection to the ledger's database,
// an embedded broker, a Client and a Server counting the runs of each
// task.
type txEnv struct {
	L      ledger.Ledger
	b      *broker.Broker
	c      *switchyard.Client
	srv    *switchyard.Server
	mu     sync.Mutex
	runs   map[string]int
	begin  func(t *testing.T) (tx any, commit, rollback func() error)
	insert func(tx any, order int) error // the user's own row, in tx
	dsn    string
	// brokerURL is the embedded broker's URL; dups counts the deliveries
	// the runtime recognised as copies of a task it already ran.
	brokerURL string
	dups      atomic.Int64
}

func (e *txEnv) ran(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runs[id]
}

func (e *txEnv) total() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, v := range e.runs {
		n += v
	}
	return n
}

// newTxEnv opens the ledger of store ("sqlite", "postgres-pgx" or
// "postgres-sql") and the user's connection.
func newTxEnv(t *testing.T, store string, ccfg *switchyard.ClientConfig) *txEnv {
	t.Helper()
	ctx := context.Background()
	e := &txEnv{runs: map[string]int{}}
	switch store {
	case "sqlite":
		path := filepath.Join(t.TempDir(), "app.db")
		e.dsn = "sqlite://" + path
		db, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(10000)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		L, err := ledger.Open(ctx, e.dsn)
		if err != nil {
			t.Fatal(err)
		}
		e.L = L
		if _, err := db.Exec(`CREATE TABLE orders (id INTEGER PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		e.begin = func(t *testing.T) (any, func() error, func() error) {
			tx, err := db.Begin()
			if err != nil {
				t.Fatal(err)
			}
			return tx, tx.Commit, tx.Rollback
		}
		e.insert = func(tx any, order int) error {
			_, err := tx.(*sql.Tx).Exec(`INSERT INTO orders (id) VALUES (?)`, order)
			return err
		}
	case "postgres-pgx", "postgres-sql":
		e.dsn = pgtest.LedgerDSN(t)
		L, err := ledger.Open(ctx, e.dsn)
		if err != nil {
			t.Fatal(err)
		}
		e.L = L
		u, _ := url.Parse(e.dsn)
		orders := pgx.Identifier{u.Query().Get("schema"), "orders"}.Sanitize()
		base := testenv.Postgres.Endpoint(t)
		pool, err := pgxpool.New(ctx, base)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		if _, err := pool.Exec(ctx, `CREATE TABLE `+orders+` (id int PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		if store == "postgres-pgx" {
			e.begin = func(t *testing.T) (any, func() error, func() error) {
				tx, err := pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return tx, func() error { return tx.Commit(ctx) }, func() error { return tx.Rollback(ctx) }
			}
			e.insert = func(tx any, order int) error {
				_, err := tx.(pgx.Tx).Exec(ctx, `INSERT INTO `+orders+` (id) VALUES ($1)`, order)
				return err
			}
		} else {
			db, err := sql.Open("pgx", base)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			e.begin = func(t *testing.T) (any, func() error, func() error) {
				tx, err := db.Begin()
				if err != nil {
					t.Fatal(err)
				}
				return tx, tx.Commit, tx.Rollback
			}
			e.insert = func(tx any, order int) error {
				_, err := tx.(*sql.Tx).Exec(`INSERT INTO `+orders+` (id) VALUES ($1)`, order)
				return err
			}
		}
	default:
		t.Fatalf("unknown store %s", store)
	}
	t.Cleanup(func() { e.L.Close() })
	e.brokerURL = "embedded://" + filepath.Join(t.TempDir(), "q.db") + "?namespace=" + conformance.Namespace(t)
	b, err := broker.Open(ctx, e.brokerURL, &broker.Options{Dedup: e.L})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	e.b = b
	if ccfg == nil {
		ccfg = &switchyard.ClientConfig{}
	}
	ccfg.Ledger = e.L
	if e.c, err = switchyard.NewClient(b, ccfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.c.Close(context.Background()) })
	e.srv, err = switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: e.L, Slots: 8, Lease: 5 * time.Second,
		PollWait: 100 * time.Millisecond, Retry: scheduler.RetryPolicy{Base: 20 * time.Millisecond, Jitter: scheduler.NoJitter, MaxAttempts: 3},
		Observer: func(ev scheduler.Event) {
			if ev.Type == scheduler.EventDuplicate {
				e.dups.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := switchyard.Register(e.srv, func(ctx context.Context, tk *switchyard.Task[orderArgs]) error {
		e.mu.Lock()
		e.runs[tk.ID]++
		e.mu.Unlock()
		return nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *txEnv) start(t *testing.T) {
	t.Helper()
	if err := e.srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e.srv.Stop(ctx)
	})
}

var txStores = []string{"sqlite", "postgres-pgx", "postgres-sql"}

// TestClient_EnqueueTx_CommitAndRollback: a committed transaction's task
// runs exactly once; a rolled-back one's never exists, nothing reaches
// the broker for it and the outbox is empty.
func TestClient_EnqueueTx_CommitAndRollback(t *testing.T) {
	t.Parallel()
	for _, store := range txStores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newTxEnv(t, store, nil)

			// Rollback first, with nothing running: the broker must stay
			// empty.
			tx, _, rollback := e.begin(t)
			if err := e.insert(tx, 1); err != nil {
				t.Fatal(err)
			}
			gone, err := e.c.EnqueueTx(ctx, tx, orderArgs{Order: 1}, &switchyard.EnqueueOpts{Lane: "interactive", IdempotencyKey: "order-1"})
			if err != nil {
				t.Fatal(err)
			}
			if err := rollback(); err != nil {
				t.Fatal(err)
			}

			tx, commit, _ := e.begin(t)
			if err := e.insert(tx, 2); err != nil {
				t.Fatal(err)
			}
			kept, err := e.c.EnqueueTx(ctx, tx, orderArgs{Order: 2}, &switchyard.EnqueueOpts{Lane: "interactive", IdempotencyKey: "order-2"})
			if err != nil {
				t.Fatal(err)
			}
			// Before the commit, nobody else sees the task.
			if _, err := e.L.Get(ctx, kept.ID); !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("task visible before commit: %v", err)
			}
			if err := commit(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, func() bool {
				st, err := e.b.Stats(ctx, "interactive")
				return err == nil && st.Ready == 1
			})
			e.start(t)
			waitFor(t, 10*time.Second, func() bool { return e.ran(kept.ID) == 1 })
			waitFor(t, 10*time.Second, func() bool {
				tk, err := e.L.Get(ctx, kept.ID)
				return err == nil && tk.State == ledger.Completed
			})
			waitFor(t, 10*time.Second, func() bool {
				st, err := ledger.OutboxOf(e.L).OutboxStats(ctx)
				return err == nil && st.Depth == 0
			})
			time.Sleep(300 * time.Millisecond) // a late second run would show
			if n := e.ran(kept.ID); n != 1 {
				t.Errorf("committed task ran %d times", n)
			}
			if _, err := e.L.Get(ctx, gone.ID); !errors.Is(err, ledger.ErrNotFound) {
				t.Errorf("rolled-back task: %v", err)
			}
			if _, err := e.L.GetByKey(ctx, "", "order-1"); !errors.Is(err, ledger.ErrNotFound) {
				t.Errorf("rolled-back key: %v", err)
			}
			if n := e.total(); n != 1 {
				t.Errorf("%d runs in all, want 1", n)
			}
		})
	}
}

// TestClient_EnqueueTx_BadInput: a transaction of the wrong type, a
// closed one, one on another database; an invalid item in a batch; no
// outbox. Each is a typed error and nothing is half-written.
func TestClient_EnqueueTx_BadInput(t *testing.T) {
	t.Parallel()
	for _, store := range txStores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			// No relay: the rows stay for the test to count.
			e := newTxEnv(t, store, &switchyard.ClientConfig{Relay: &switchyard.RelayConfig{Off: true}})
			ob := ledger.OutboxOf(e.L)

			if _, err := e.c.EnqueueTx(ctx, "not a tx", orderArgs{}, nil); !errors.Is(err, ledger.ErrTxType) || !errors.Is(err, broker.ErrInvalid) {
				t.Errorf("wrong type: %v", err)
			}
			tx, commit, _ := e.begin(t)
			if err := commit(); err != nil {
				t.Fatal(err)
			}
			if _, err := e.c.EnqueueTx(ctx, tx, orderArgs{}, nil); !errors.Is(err, ledger.ErrTxClosed) || !errors.Is(err, broker.ErrInvalid) {
				t.Errorf("closed tx: %v", err)
			}

			// Another database.
			var other any
			var otherDone func()
			switch store {
			case "sqlite":
				db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "other.db"))
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				otx, err := db.Begin()
				if err != nil {
					t.Fatal(err)
				}
				other, otherDone = otx, func() { otx.Rollback() }
			default:
				u, _ := url.Parse(testenv.Postgres.Endpoint(t))
				u.Path = "/postgres"
				conn, err := pgx.Connect(ctx, u.String())
				if err != nil {
					t.Skipf("database postgres: %v", err)
				}
				defer conn.Close(ctx)
				otx, err := conn.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				other, otherDone = otx, func() { otx.Rollback(ctx) }
			}
			if _, err := e.c.EnqueueTx(ctx, other, orderArgs{}, nil); !errors.Is(err, ledger.ErrForeignTx) || !errors.Is(err, broker.ErrInvalid) {
				t.Errorf("foreign tx: %v", err)
			}
			otherDone()

			// An invalid item fails alone; the rest are written.
			tx, commit, _ = e.begin(t)
			rs, err := e.c.EnqueueManyTx(ctx, tx, []switchyard.EnqueueItem{
				{Args: orderArgs{Order: 1}},
				{Args: orderArgs{Order: 2}, Opts: &switchyard.EnqueueOpts{Lane: "no such lane!"}},
				{Args: orderArgs{Order: 3}, Opts: &switchyard.EnqueueOpts{IdempotencyKey: "k"}},
				{Args: orderArgs{Order: 4}, Opts: &switchyard.EnqueueOpts{IdempotencyKey: "k"}},
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := commit(); err != nil {
				t.Fatal(err)
			}
			if rs[0].Err != nil || rs[2].Err != nil || rs[3].Err != nil {
				t.Fatalf("valid items failed: %+v", rs)
			}
			if !errors.Is(rs[1].Err, broker.ErrInvalid) {
				t.Errorf("invalid item: %v", rs[1].Err)
			}
			if rs[3].ID != rs[2].ID || !rs[3].Duplicate || rs[2].Duplicate {
				t.Errorf("repeated key in a batch: %+v %+v", rs[2], rs[3])
			}
			st, err := ob.OutboxStats(ctx)
			if err != nil || st.Depth != 2 {
				t.Errorf("outbox depth %d (%v), want 2 (one row per new task)", st.Depth, err)
			}
			// A key committed earlier: a duplicate, no second row.
			tx, commit, _ = e.begin(t)
			r, err := e.c.EnqueueTx(ctx, tx, orderArgs{Order: 5}, &switchyard.EnqueueOpts{IdempotencyKey: "k"})
			if err != nil || !r.Duplicate || r.ID != rs[2].ID {
				t.Errorf("committed key again: %+v %v", r, err)
			}
			if err := commit(); err != nil {
				t.Fatal(err)
			}
			if st, _ := ob.OutboxStats(ctx); st.Depth != 2 {
				t.Errorf("outbox depth %d after a duplicate, want 2", st.Depth)
			}

			// A ledger without an outbox.
			c, err := switchyard.NewClient(e.b, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.EnqueueTx(ctx, tx, orderArgs{}, nil); !errors.Is(err, switchyard.ErrNoOutbox) {
				t.Errorf("no ledger: %v", err)
			}
			if !strings.Contains(switchyard.ErrNoOutbox.Error(), "outbox") {
				t.Error("ErrNoOutbox does not say what is missing")
			}
		})
	}
}

// TestOutboxRelay_RepublishAfterCrash: a relay that published a row and
// died before deleting it (here a "ghost" owner that claims and publishes
// by hand) leaves the row to the next relay once its lease passes; that
// relay publishes the task again, so the broker holds two copies, and the
// runtime recognises the second: the task runs once.
func TestOutboxRelay_RepublishAfterCrash(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"sqlite", "postgres-pgx"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newTxEnv(t, store, &switchyard.ClientConfig{Relay: &switchyard.RelayConfig{Off: true}})
			e.srv.SetRelay(&switchyard.RelayConfig{Off: true})
			tx, commit, _ := e.begin(t)
			r, err := e.c.EnqueueTx(ctx, tx, orderArgs{Order: 7}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := commit(); err != nil {
				t.Fatal(err)
			}
			o := ledger.OutboxOf(e.L)
			items, err := o.ClaimOutbox(ctx, "ghost", 10, 500*time.Millisecond)
			if err != nil || len(items) != 1 {
				t.Fatalf("ghost claim: %d %v", len(items), err)
			}
			tk := items[0].Task
			if _, err := e.b.PublishOne(ctx, &broker.Message{ID: tk.ID, Lane: tk.Lane, Kind: tk.Kind, Body: tk.Args}); err != nil {
				t.Fatal(err)
			}
			// The ghost dies here: no DoneOutbox. The next relay publishes
			// the task again once the ghost's lease has passed (a row whose
			// task already left the queue would be deleted unpublished).
			live, err := switchyard.NewClient(e.b, &switchyard.ClientConfig{Ledger: e.L})
			if err != nil {
				t.Fatal(err)
			}
			live.StartRelay()
			defer live.Close(ctx)
			waitFor(t, 10*time.Second, func() bool {
				st, err := o.OutboxStats(ctx)
				return err == nil && st.Depth == 0
			})
			if st, err := e.b.Stats(ctx, tk.Lane); err != nil || st.Ready != 2 {
				t.Fatalf("broker holds %+v (%v), want both copies", st, err)
			}
			e.start(t)
			waitFor(t, 10*time.Second, func() bool { return e.ran(r.ID) == 1 })
			waitFor(t, 10*time.Second, func() bool { return e.dups.Load() >= 1 })
			if n := e.ran(r.ID); n != 1 {
				t.Errorf("task ran %d times", n)
			}
		})
	}
}

// TestClient_EnqueueTx_Router: the outbox is broker-agnostic: through
// router:// each committed task is published to its own lane's broker,
// and runs once.
func TestClient_EnqueueTx_Router(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	ns := conformance.Namespace(t)
	fast := "embedded://" + filepath.Join(dir, "fast.db") + "?namespace=" + ns
	bulk := "embedded://" + filepath.Join(dir, "bulk.db") + "?namespace=" + ns
	path := filepath.Join(dir, "app.db")
	L, err := ledger.Open(ctx, "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer L.Close()
	db, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b, err := broker.Open(ctx, "router://?lane.interactive="+url.QueryEscape(fast)+"&default="+url.QueryEscape(bulk), &broker.Options{Dedup: L})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	rs, err := c.EnqueueManyTx(ctx, tx, []switchyard.EnqueueItem{
		{Args: orderArgs{Order: 1}, Opts: &switchyard.EnqueueOpts{Lane: "interactive"}},
		{Args: orderArgs{Order: 2}, Opts: &switchyard.EnqueueOpts{Lane: "batch"}},
	})
	if err != nil || rs[0].Err != nil || rs[1].Err != nil {
		t.Fatalf("%+v %v", rs, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// Each lane's message is on its own broker.
	for _, w := range []struct{ url, lane string }{{fast, "interactive"}, {bulk, "batch"}} {
		direct, err := broker.Open(ctx, w.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, func() bool {
			st, err := direct.Stats(ctx, w.lane)
			return err == nil && st.Ready == 1
		})
		direct.Close()
	}
	srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, PollWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := map[string]int{}
	if err := switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[orderArgs]) error {
		mu.Lock()
		runs[tk.ID]++
		mu.Unlock()
		return nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(ctx)
	waitFor(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return runs[rs[0].ID] == 1 && runs[rs[1].ID] == 1
	})
}

// TestOutboxRelay_RefusedIsDead: a committed task the broker refuses for
// good (here a lane router:// has no route for) is not retried forever:
// the relay moves it to dead with reason publish_refused and the broker's
// error, and deletes its row.
func TestOutboxRelay_RefusedIsDead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "app.db")
	L, err := ledger.Open(ctx, "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer L.Close()
	db, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	only := "embedded://" + filepath.Join(dir, "q.db") + "?namespace=" + conformance.Namespace(t)
	b, err := broker.Open(ctx, "router://?lane.interactive="+url.QueryEscape(only), &broker.Options{Dedup: L})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.EnqueueTx(ctx, tx, orderArgs{Order: 1}, &switchyard.EnqueueOpts{Lane: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		tk, err := L.Get(ctx, r.ID)
		return err == nil && tk.State == ledger.Dead
	})
	evs, err := L.Events(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.Reason != switchyard.ReasonPublishRefused || !strings.Contains(last.Detail, "no route") {
		t.Errorf("last event %+v, want %s with the broker's error", last, switchyard.ReasonPublishRefused)
	}
	waitFor(t, 10*time.Second, func() bool {
		st, err := ledger.OutboxOf(L).OutboxStats(ctx)
		return err == nil && st.Depth == 0
	})
}
