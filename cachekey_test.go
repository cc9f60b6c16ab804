package switchyard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// TestEnqueue_CacheKey: the key reaches the handler as metadata
// scheduler.MetaCacheKey (in the job's headers for providerbatch), user
// metadata is kept, and a malformed key is refused at enqueue.
func TestEnqueue_CacheKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c, srv := setup(t)
	got := make(chan map[string]string, 1)
	headers := make(chan string, 1)
	if err := switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[echoArgs]) error {
		got <- tk.Metadata
		headers <- tk.Job.Headers["meta-"+scheduler.MetaCacheKey]
		return nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(ctx)
	if _, err := c.Enqueue(ctx, echoArgs{}, &switchyard.EnqueueOpts{CacheKey: "policy-v3", Metadata: map[string]string{"team": "a"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m[scheduler.MetaCacheKey] != "policy-v3" || m["team"] != "a" {
			t.Fatalf("metadata %v", m)
		}
		if h := <-headers; h != "policy-v3" {
			t.Fatalf("header %q", h)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("task not run in 30s")
	}
	_, err := c.Enqueue(ctx, echoArgs{}, &switchyard.EnqueueOpts{CacheKey: "has spaces"})
	if !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("bad cache key: %v", err)
	}
	if s, err := b.Stats(ctx, "batch"); err != nil || s.Ready != 0 {
		t.Errorf("refused enqueue left %+v, %v", s, err)
	}
}
