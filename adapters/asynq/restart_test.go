package asynq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/internal/redisproc"
)

// TestRestart_NothingLost restarts a private, AOF-persistent redis-server
// in the middle of a run with a producer and a consumer going: every
// message published (acknowledged by Publish) is delivered, and the queue
// drains to empty. Graceful restart (SIGTERM) with appendfsync everysec,
// and a crash (SIGKILL) with appendfsync always.
func TestRestart_NothingLost(t *testing.T) {
	for _, tc := range []struct {
		name, fsync string
		crash       bool
	}{
		{"sigterm-everysec", "everysec", false},
		{"sigkill-always", "always", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := redisproc.Start(t, tc.fsync)
			runRestart(t, p, tc.crash)
		})
	}
}

func runRestart(t *testing.T, p *redisproc.Server, crash bool) {
	const total, batch = 2000, 50
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	b, err := broker.Open(ctx, p.URL("redis", "namespace=restart"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	var (
		mu        sync.Mutex
		published = map[string]bool{}
		seen      = map[string]int{}
		pubErrs   int
		recvErrs  int
	)
	restartAt := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // producer: pre-assigned IDs, so a retry after an unknown outcome is idempotent
		defer wg.Done()
		for i := 0; i < total; i += batch {
			msgs := make([]*broker.Message, 0, batch)
			for j := i; j < i+batch; j++ {
				msgs = append(msgs, &broker.Message{ID: fmt.Sprintf("m-%05d", j), Lane: "batch", Kind: "restart.test", Body: []byte("x")})
			}
			for attempt := 0; ctx.Err() == nil; attempt++ {
				pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
				rs, err := b.Publish(pctx, msgs...)
				pcancel()
				failed := err != nil
				for _, r := range rs {
					failed = failed || r.Err != nil
				}
				if !failed {
					break
				}
				mu.Lock()
				pubErrs++
				mu.Unlock()
				time.Sleep(100 * time.Millisecond)
			}
			mu.Lock()
			for _, m := range msgs {
				published[m.ID] = true
			}
			mu.Unlock()
			if i == total/2 {
				once.Do(func() { close(restartAt) })
			}
		}
	}()
	go func() { // consumer
		defer wg.Done()
		for ctx.Err() == nil {
			mu.Lock()
			done := len(seen) == total
			mu.Unlock()
			if done {
				return
			}
			rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
			ds, err := b.Receive(rctx, broker.ReceiveRequest{Lane: "batch", Max: batch, Lease: 3 * time.Second, Wait: 200 * time.Millisecond})
			rcancel()
			if err != nil {
				mu.Lock()
				recvErrs++
				mu.Unlock()
				time.Sleep(50 * time.Millisecond)
				continue
			}
			mu.Lock()
			for _, d := range ds {
				seen[d.ID]++
			}
			mu.Unlock()
			actx, acancel := context.WithTimeout(ctx, 2*time.Second)
			_ = b.Ack(actx, ds...) // a lost ack means a redelivery after the lease, never a loss
			acancel()
		}
	}()
	select {
	case <-restartAt:
	case <-ctx.Done():
		t.Fatal("producer never reached the middle of the run")
	}
	if crash {
		if err := p.Kill(); err != nil {
			t.Fatal(err)
		}
	} else if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := p.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	dups := 0
	for id := range published {
		if seen[id] == 0 {
			t.Errorf("message %s was published but never delivered", id)
		}
		if seen[id] > 1 {
			dups++
		}
	}
	if len(published) != total {
		t.Fatalf("producer published %d of %d", len(published), total)
	}
	t.Logf("restart: %d messages, %d publish errors retried, %d receive errors, %d delivered more than once (at-least-once: an ack lost in the restart)", total, pubErrs, recvErrs, dups)
	// The queue drains: nothing pending, leased or parked.
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := b.Stats(ctx, "batch")
		if err == nil && s.Ready == 0 && s.InFlight == 0 && s.Delayed == 0 && s.DeadLettered == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue did not drain after the restart: %+v, %v", s, err)
		}
		// Redeliveries of lost acks: take and ack them.
		if ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: batch, Lease: 3 * time.Second, Wait: time.Second}); err == nil {
			_ = b.Ack(ctx, ds...)
		}
	}
}
