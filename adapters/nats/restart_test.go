package nats

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// TestRestart_NothingLost: a private server is stopped and started in the
// middle of a run of several thousand messages. Publishers retry what
// failed with the same ID and idempotency key (a retried unknown outcome is
// deduplicated); consumers keep receiving through the outage. Every message
// arrives, and none is lost.
func TestRestart_NothingLost(t *testing.T) {
	t.Parallel()
	srv := startPrivateServer(t)
	b := openBroker(t, testURL(t, srv.URL(), "ack_wait=5s"), nil)
	const total = 4000
	msgs := make([]*broker.Message, total)
	for i := range msgs {
		msgs[i] = &broker.Message{ID: broker.NewID(), Lane: "batch", Kind: "k", Body: []byte(fmt.Sprintf("m-%05d", i)), IdempotencyKey: fmt.Sprintf("key-%05d", i)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var (
		mu       sync.Mutex
		seen     = map[string]int{}
		pubErrs  int
		recvErrs int
		ackErrs  int
	)
	// Publisher: batches of 100, each failed message retried until stored.
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		for start := 0; start < total && ctx.Err() == nil; start += 100 {
			pending := msgs[start:min(start+100, total)]
			for len(pending) > 0 && ctx.Err() == nil {
				rs, err := b.Publish(ctx, pending...)
				var retry []*broker.Message
				for i, m := range pending {
					if err != nil || rs[i].Err != nil {
						retry = append(retry, m)
					}
				}
				if len(retry) > 0 {
					mu.Lock()
					pubErrs += len(retry)
					mu.Unlock()
					time.Sleep(100 * time.Millisecond)
				}
				pending = retry
			}
			time.Sleep(5 * time.Millisecond) // spread the run over the restart
		}
	}()
	// Consumers.
	var wg sync.WaitGroup
	for c := 0; c < 2; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				mu.Lock()
				done := len(seen) == total
				mu.Unlock()
				if done {
					return
				}
				ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 100, Wait: time.Second})
				if err != nil {
					mu.Lock()
					recvErrs++
					mu.Unlock()
					time.Sleep(100 * time.Millisecond)
					continue
				}
				mu.Lock()
				for _, d := range ds {
					seen[d.ID]++
				}
				mu.Unlock()
				if err := b.Ack(ctx, ds...); err != nil {
					mu.Lock()
					ackErrs++
					mu.Unlock()
				}
			}
		}()
	}
	// Restart the server once a quarter of the messages have arrived.
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n >= total/4 || ctx.Err() != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("stopping the server after %d messages", total/4)
	srv.Stop()
	time.Sleep(time.Second)
	srv.Start()
	t.Log("server restarted")
	<-pubDone
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	dups := 0
	for _, m := range msgs {
		if seen[m.ID] == 0 {
			t.Errorf("message %s (%s) lost", m.ID, m.Body)
		}
		dups += seen[m.ID] - 1
	}
	t.Logf("%d messages, %d distinct received, %d redeliveries; errors during the outage: publish %d, receive %d, ack %d",
		total, len(seen), dups, pubErrs, recvErrs, ackErrs)
	if pubErrs+recvErrs == 0 {
		t.Error("the outage produced no errors at all: was the server really restarted?")
	}
}

// TestFetch_StallIsShort: a pull request the server loses (it restarts
// while a Receive waits) costs at most one pull expiry: the waiting Receive
// re-pulls and returns a message published after the restart well before
// its own 30 s wait ends. (Consume() has been seen stalling for 30 s here.)
func TestFetch_StallIsShort(t *testing.T) {
	t.Parallel()
	srv := startPrivateServer(t)
	rawURL := testURL(t, srv.URL(), "pull_expiry=1s")
	b := openBroker(t, rawURL, nil)
	receive(t, b, broker.ReceiveRequest{Lane: "l", Max: 1}) // create the consumer
	type result struct {
		ds  []*broker.Delivery
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		// Keep receiving through the outage, as a worker does.
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			ds, err := b.Receive(context.Background(), broker.ReceiveRequest{Lane: "l", Max: 1, Wait: time.Until(deadline)})
			if err == nil && len(ds) == 0 {
				continue
			}
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			done <- result{ds, err, time.Now()}
			return
		}
		done <- result{}
	}()
	time.Sleep(500 * time.Millisecond) // the Receive is waiting on a pull
	srv.Stop()
	time.Sleep(500 * time.Millisecond)
	srv.Start()
	// Publish once the driver has reconnected.
	var published time.Time
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		rs, err := b.Publish(ctxT(t, 5*time.Second), &broker.Message{Lane: "l", Kind: "k", Body: []byte("after")})
		if err == nil && rs[0].Err == nil {
			published = time.Now()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if published.IsZero() {
		t.Fatal("could not publish after the restart")
	}
	r := <-done
	if len(r.ds) != 1 {
		t.Fatal("the waiting Receive never got the message published after the restart")
	}
	lag := r.at.Sub(published)
	t.Logf("delivered %s after the publish", lag)
	if lag > 5*time.Second {
		t.Errorf("a lost pull stalled delivery for %s; the pull expiry is 1s", lag)
	}
}
