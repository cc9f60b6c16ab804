package scheduler

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// A batch flood whose handlers block holds only the shared slot: an
// interactive task still starts on its lane's reserved slots, and once the
// batch handlers return, the workers take the rest of the flood themselves
// (finishedNext).
func TestReservedSlotsUnderBlockingFlood(t *testing.T) {
	_, b := OpenTestEnv(t, "resvflood")
	ctx := context.Background()
	// 4 slots: interactive reserves 2, scheduled 1, one is shared.
	s, err := New(b, &Config{Slots: 4, Prefetch: 8, PollWait: 20 * time.Millisecond, Retry: RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var running, peak, done atomic.Int64
	const flood = 20
	all := make(chan struct{})
	if err := s.Handle("flood.block", func(ctx context.Context, job *Job) ([]byte, error) {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		running.Add(-1)
		if done.Add(1) == flood {
			close(all)
		}
		return nil, nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	interactive := make(chan struct{})
	var once sync.Once
	if err := s.Handle("flood.urgent", func(ctx context.Context, job *Job) ([]byte, error) {
		once.Do(func() { close(interactive) })
		return nil, nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	for range flood {
		if _, err := b.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "flood.block", Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(ctx)
	deadline := time.After(30 * time.Second)
	for running.Load() == 0 {
		select {
		case <-deadline:
			t.Fatal("no batch task started")
		case <-time.After(5 * time.Millisecond):
		}
	}
	if _, err := b.PublishOne(ctx, &broker.Message{Lane: "interactive", Kind: "flood.urgent", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-interactive:
	case <-deadline:
		t.Fatal("the interactive task did not start while the batch flood blocked")
	}
	// Until a batch task has finished, the lane has no duration figures
	// and borrows no reserved slot: only the shared one is its.
	if p := peak.Load(); p != 1 {
		t.Fatalf("%d batch tasks ran at once on the one shared slot", p)
	}
	close(release)
	select {
	case <-all:
	case <-deadline:
		t.Fatalf("%d of %d batch tasks done", done.Load(), flood)
	}
}
