package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
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
