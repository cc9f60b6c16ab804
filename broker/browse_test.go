package broker_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// browseIDs pages through lane with pages of n and returns the IDs.
func browseIDs(t *testing.T, b *broker.Broker, lane string, dead bool, n int) []string {
	t.Helper()
	var ids []string
	after := ""
	for range 100 {
		p, err := b.Browse(ctxT(t), broker.BrowseRequest{Lane: lane, DeadLetters: dead, Max: n, After: after})
		if err != nil {
			t.Fatalf("browse %s: %v", lane, err)
		}
		for _, d := range p.Messages {
			ids = append(ids, d.ID)
		}
		if p.Next == "" {
			return ids
		}
		after = p.Next
	}
	t.Fatalf("browse of %s did not end", lane)
	return nil
}

// TestBrowse_FairRouterMigrating: a fair lane is browsed shard by shard
// (every message once), a Router browses through the lane's route, a
// Migrating driver reads From then To, and a message the broker holds for
// later (a long-delay hop) is not listed as ready.
func TestBrowse_FairRouterMigrating(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)

	fair := openFair(t, map[string]int{"batch": 4})
	var want []string
	for _, tenant := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		r, err := fair.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "k", Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, r.ID)
	}
	got := browseIDs(t, fair, "batch", false, 3)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("fair lane browsed %v, want every message once %v", got, want)
	}
	if _, err := fair.Browse(ctx, broker.BrowseRequest{Lane: "batch", Max: 1, After: "9/x"}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("a bad fair cursor: %v, want ErrInvalid", err)
	}

	a, c := memDriver(t, ""), memDriver(t, "")
	rt, err := broker.NewRouter(map[string]broker.Driver{"interactive": a}, c)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := broker.New(rt, &broker.Options{MaxDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r1, err := rb.PublishOne(ctx, &broker.Message{Lane: "interactive", Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rb.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "k", RunAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if got := browseIDs(t, rb, "interactive", false, 10); !slices.Equal(got, []string{r1.ID}) {
		t.Errorf("router browse of interactive = %v, want %s", got, r1.ID)
	}
	time.Sleep(1200 * time.Millisecond) // the first hop is due: visible to the driver, not ready
	if st, _ := rb.Stats(ctx, "batch"); st.Ready+st.Delayed == 0 {
		t.Fatalf("the held message is gone: %+v", st)
	}
	if raw, err := c.(broker.Browser).Browse(ctx, broker.BrowseRequest{Lane: "batch", Max: 10}); err != nil || len(raw.Messages) != 1 {
		t.Fatalf("the driver's own browse of the due hop: %+v %v", raw, err)
	}
	if got := browseIDs(t, rb, "batch", false, 10); len(got) != 0 {
		t.Errorf("a message held for an hour is listed as ready: %v", got)
	}

	from, to := memDriver(t, ""), memDriver(t, "")
	fb, _ := broker.New(from, nil)
	tb, _ := broker.New(to, nil)
	old, _ := fb.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "k"})
	nu, _ := tb.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "k"})
	mb, err := broker.New(&broker.Migrating{From: from, To: to}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := browseIDs(t, mb, "batch", false, 1); !slices.Equal(got, []string{old.ID, nu.ID}) {
		t.Errorf("migrating browse = %v, want %s then %s", got, old.ID, nu.ID)
	}
}
