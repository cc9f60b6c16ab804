package integration_test

import (
	"context"
	"errors"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	_ "github.com/switchyard-dev/switchyard/adapters/all"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/conformance/testenv/pgtest"
	"github.com/switchyard-dev/switchyard/internal/faultproxy"
	"github.com/switchyard-dev/switchyard/internal/testclean"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// TestClient_ReliablePush_Outage: with ReliablePush, Enqueue keeps
// succeeding while the Client's way to the broker is cut (every
// connection dropped, new ones refused, through a proxy); the tasks wait
// in the outbox and all 1,000 run, once each, after the broker is back.
// The worker reaches the broker directly; its relay is off, so the
// Client's relay publishes the waiting tasks.
func TestClient_ReliablePush_Outage(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"rabbitmq", "nats", "asynq"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			reliableOutage(t, kind, "sqlite")
		})
	}
	t.Run("nats-postgres-ledger", func(t *testing.T) {
		t.Parallel()
		reliableOutage(t, "nats", "postgres")
	})
}

func reliableOutage(t *testing.T, kind, store string) {
	const (
		before, during, after = 200, 600, 200
	)
	ctx := context.Background()
	ns := conformance.Namespace(t)
	direct := testclean.URL(t, kind, ns, nil)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	p := faultproxy.New(t, u.Host)
	u.Host = p.Addr
	viaProxy := u.String()

	dsn := "sqlite://" + filepath.Join(t.TempDir(), "ledger.db")
	if store == "postgres" {
		dsn = pgtest.LedgerDSN(t)
	}
	L, err := ledger.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L.Close() })
	bc, err := broker.Open(ctx, viaProxy, &broker.Options{Dedup: L})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bc.Close() })
	bw, err := broker.Open(ctx, direct, &broker.Options{Dedup: L})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bw.Close() })
	c, err := switchyard.NewClient(bc, &switchyard.ClientConfig{Ledger: L, ReliablePush: true,
		Relay: &switchyard.RelayConfig{MaxRetryDelay: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	srv, err := switchyard.NewServer(bw, &switchyard.ServerConfig{Ledger: L, Slots: 16, Lease: 10 * time.Second,
		PollWait: 100 * time.Millisecond, Retry: scheduler.RetryPolicy{Base: 20 * time.Millisecond, Jitter: scheduler.NoJitter, MaxAttempts: 5}})
	if err != nil {
		t.Fatal(err)
	}
	// The worker's own relay would reach the broker directly and publish
	// the waiting tasks at once: off, so that only the Client's relay,
	// behind the proxy, publishes them once the broker is back.
	srv.SetRelay(&switchyard.RelayConfig{Off: true})
	var (
		mu   sync.Mutex
		runs = map[string]int{}
	)
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
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Stop(sctx)
	})

	var ids []string
	enqueue := func(n, from int) time.Duration {
		start := time.Now()
		for i := range n {
			ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
			r, err := c.Enqueue(ectx, orderArgs{Order: from + i}, &switchyard.EnqueueOpts{Lane: "interactive"})
			cancel()
			if err != nil {
				t.Fatalf("enqueue %d: %v", from+i, err)
			}
			ids = append(ids, r.ID)
		}
		return time.Since(start)
	}
	enqueue(before, 0)
	p.Down()
	took := enqueue(during, before)
	o := ledger.OutboxOf(L)
	st, err := o.OutboxStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s, %s ledger: %d enqueues during the outage took %v; outbox depth %d, oldest %v", kind, store, during, took, st.Depth, time.Since(st.Oldest).Round(time.Millisecond))
	if st.Depth != during {
		t.Errorf("outbox depth %d during the outage, want %d: every task enqueued then waits", st.Depth, during)
	}

	if err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	enqueue(after, before+during)
	waitFor(t, 90*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(runs) == len(ids)
	})
	waitFor(t, 30*time.Second, func() bool {
		st, err := o.OutboxStats(ctx)
		return err == nil && st.Depth == 0
	})
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if runs[id] != 1 {
			t.Errorf("task %s ran %d times", id, runs[id])
		}
	}
}

// TestNewClient_ReliablePushNeedsOutbox: ReliablePush without a ledger
// that has an outbox is refused at NewClient, not ignored.
func TestNewClient_ReliablePushNeedsOutbox(t *testing.T) {
	t.Parallel()
	b, err := broker.Open(context.Background(), "mem://"+conformance.Namespace(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := switchyard.NewClient(b, &switchyard.ClientConfig{ReliablePush: true}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("ReliablePush without a ledger: %v", err)
	}
}
