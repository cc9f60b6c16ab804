package postgres_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/postgres"
)

// TestStore_ListenOutbox: relays listening through one store share its
// LISTEN connection; a commit that adds outbox rows reaches every one of
// them within milliseconds, a commit in another schema reaches none, and
// closing the store closes their channels.
func TestStore_ListenOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openFresh(t, nil)
	other := openFresh(t, nil)
	a, err := s.ListenOutbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.ListenOutbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	drain := func(ch <-chan struct{}) {
		for {
			select {
			case <-ch:
			case <-time.After(300 * time.Millisecond):
				return
			}
		}
	}
	drain(a) // the kicks of subscribing and of connecting
	drain(b)
	if _, err := other.CreateOutbox(ctx, []ledger.OutboxTask{{Task: &ledger.Task{Kind: "k", Lane: "batch"}}}, "", 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a:
		t.Error("a commit in another schema woke this store's relay")
	case <-time.After(300 * time.Millisecond):
	}
	start := time.Now()
	if _, err := s.CreateOutbox(ctx, []ledger.OutboxTask{{Task: &ledger.Task{Kind: "k", Lane: "batch"}}}, "", 0); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]<-chan struct{}{"a": a, "b": b} {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("listener %s not notified of the commit", name)
		}
	}
	t.Logf("notified %v after the insert returned", time.Since(start))
	s.Close()
	for name, ch := range map[string]<-chan struct{}{"a": a, "b": b} {
		deadline := time.After(5 * time.Second)
	wait:
		for {
			select {
			case _, ok := <-ch:
				if !ok {
					break wait
				}
			case <-deadline:
				t.Fatalf("listener %s's channel not closed with the store", name)
			}
		}
	}
}

// TestStore_OneListenConnection: a store's note listeners (ledger.Notes)
// and outbox relays (ListenOutbox) share one LISTEN connection, so that
// a NOTIFY of either kind wakes one backend, not two. Counted by the
// store's backends in pg_stat_activity whose last statement was a LISTEN.
func TestStore_OneListenConnection(t *testing.T) {
	t.Parallel()
	dsn, schema := freshSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	app := "ledgertest_listen_" + schema
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	s, err := postgres.Open(ctx, u.String(), &postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	notes, err := s.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	relay, err := s.ListenOutbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Both work: a note reaches the listener, an outbox commit the relay.
	for len(relay) > 0 {
		<-relay
	}
	if _, err := s.CreateOutbox(ctx, []ledger.OutboxTask{{Task: &ledger.Task{Kind: "k", Lane: "batch"}}}, "", 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-relay:
	case <-ctx.Done():
		t.Fatal("the relay was not woken by an outbox commit")
	}
	task, _, err := s.Create(ctx, &ledger.Task{Kind: "k", Lane: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Notify(ctx, ledger.Note{Topic: "t", TaskID: task.ID}); err != nil {
		t.Fatal(err)
	}
	for got := false; !got; {
		select {
		case n := <-notes:
			got = n.Topic == "t"
		case <-ctx.Done():
			t.Fatal("the note listener did not get the note")
		}
	}
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var n int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`, app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d LISTEN connections for the store's note listener and relay, want 1", n)
	}
}
