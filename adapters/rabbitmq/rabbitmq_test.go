package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustPublish(t testing.TB, d broker.Driver, msgs ...*broker.Message) {
	t.Helper()
	now := time.Now()
	for _, m := range msgs {
		if m.ID == "" {
			m.ID = broker.NewID()
		}
		m.EnqueuedAt = now
	}
	rs, err := d.Publish(ctxT(t, 30*time.Second), msgs)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatalf("publish: %v", r.Err)
		}
	}
}

func receiveOne(t testing.TB, d broker.Driver, req broker.ReceiveRequest, within time.Duration) *broker.Delivery {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		req.Max, req.Wait = 1, min(time.Until(deadline), time.Second)
		ds, err := d.Receive(ctxT(t, within+10*time.Second), req)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		if len(ds) == 1 {
			return ds[0]
		}
	}
	return nil
}

// TestLease_StuckConsumer: a consumer that is alive but never settles its
// delivery loses it when the lease ends; another consumer gets it with the
// next attempt, and the stuck one's Ack, Nack, Extend and DeadLetter return
// ErrLeaseLost without breaking its channel.
func TestLease_StuckConsumer(t *testing.T) {
	t.Parallel()
	u := testURL(t, newNS(t), "", "", nil)
	t.Cleanup(func() { cleanupNamespace(u, "work") })
	stuck, other := openDriver(t, u), openDriver(t, u)
	mustPublish(t, stuck, &broker.Message{Lane: "work", Kind: "k", Body: []byte("x")})
	d1 := receiveOne(t, stuck, broker.ReceiveRequest{Lane: "work", Lease: 700 * time.Millisecond}, 10*time.Second)
	if d1 == nil || d1.Attempt != 1 {
		t.Fatalf("first delivery: %+v", d1)
	}
	// Extend once: the lease now ends later than first promised.
	if err := stuck.Extend(ctxT(t, 5*time.Second), []*broker.Delivery{d1}, 1500*time.Millisecond); err != nil {
		t.Fatalf("extend: %v", err)
	}
	extended := d1.LeaseDeadline
	d2 := receiveOne(t, other, broker.ReceiveRequest{Lane: "work", Lease: 30 * time.Second}, 15*time.Second)
	if d2 == nil {
		t.Fatal("not redelivered after the lease ended")
	}
	if time.Now().Before(extended) {
		t.Fatalf("redelivered before the extended deadline %s", extended.Format("15:04:05.000"))
	}
	if d2.ID != d1.ID || d2.Attempt != 2 {
		t.Fatalf("redelivery %s attempt %d, want %s attempt 2", d2.ID, d2.Attempt, d1.ID)
	}
	ctx := ctxT(t, 10*time.Second)
	for name, err := range map[string]error{
		"ack":         stuck.Ack(ctx, []*broker.Delivery{d1}),
		"nack":        stuck.Nack(ctx, d1, 0),
		"extend":      stuck.Extend(ctx, []*broker.Delivery{d1}, time.Minute),
		"dead-letter": stuck.DeadLetter(ctx, d1, &broker.DeadLetter{Reason: broker.ReasonPermanent}),
	} {
		if !errors.Is(err, broker.ErrLeaseLost) {
			t.Errorf("%s after the lease ended: %v, want ErrLeaseLost", name, err)
		}
	}
	// The stuck consumer's channel is intact: it can still work.
	mustPublish(t, stuck, &broker.Message{Lane: "work", Kind: "k", Body: []byte("y")})
	if err := other.Ack(ctx, []*broker.Delivery{d2}); err != nil {
		t.Fatalf("ack by the lease holder: %v", err)
	}
	d3 := receiveOne(t, stuck, broker.ReceiveRequest{Lane: "work", Lease: 30 * time.Second}, 10*time.Second)
	if d3 == nil || string(d3.Body) != "y" || d3.Attempt != 1 {
		t.Fatalf("after a lost lease the consumer received %+v, want the new message", d3)
	}
	if err := stuck.Ack(ctx, []*broker.Delivery{d3}); err != nil {
		t.Fatalf("ack: %v", err)
	}
	if err := stuck.Ack(ctx, []*broker.Delivery{d3}); !errors.Is(err, broker.ErrLeaseLost) {
		t.Errorf("second ack of one delivery: %v, want ErrLeaseLost", err)
	}
	st, err := stuck.Stats(ctx, "work")
	if err != nil || st.Ready != 0 || st.InFlight != 0 {
		t.Errorf("stats at the end = %+v, %v; want empty", st, err)
	}
}

// crash closes the driver's connection without returning anything, as a
// killed process would, and stops it reconnecting.
func (d *Driver) crash() {
	d.closed.Store(true)
	d.conn.close()
}

// TestPoison_DeliveryLimit: a message that takes down every consumer that
// receives it (before Broker can count its attempts) reaches the
// dead-letter queue through RabbitMQ's x-delivery-limit, with
// ReasonDeliveryLimit.
func TestPoison_DeliveryLimit(t *testing.T) {
	t.Parallel()
	u := testURL(t, newNS(t), "", "", url.Values{"delivery_limit": {"2"}})
	t.Cleanup(func() { cleanupNamespace(u, "work") })
	keeper := openDriver(t, u)
	poison := &broker.Message{Lane: "work", Kind: "k", Body: []byte("poison")}
	mustPublish(t, keeper, poison)
	// delivery_limit=2: delivered three times (counts none, 1, 2), then
	// dead-lettered on the third return.
	for i := 1; i <= 3; i++ {
		victim := openDriver(t, u)
		d := receiveOne(t, victim, broker.ReceiveRequest{Lane: "work", Lease: time.Minute}, 10*time.Second)
		if d == nil || d.ID != poison.ID || d.Attempt != i {
			t.Fatalf("delivery %d: %+v", i, d)
		}
		victim.crash()
	}
	dead := receiveOne(t, keeper, broker.ReceiveRequest{Lane: "work", Lease: time.Minute, DeadLetters: true}, 15*time.Second)
	if dead == nil {
		t.Fatal("the poison message is not in the dead-letter queue")
	}
	if dead.ID != poison.ID || string(dead.Body) != "poison" || dead.DeadLetter == nil || dead.DeadLetter.Reason != broker.ReasonDeliveryLimit {
		t.Fatalf("dead letter %s %q record %+v, want %s with reason %s", dead.ID, dead.Body, dead.DeadLetter, poison.ID, broker.ReasonDeliveryLimit)
	}
	if dead.DeadLetter.At.IsZero() || dead.DeadLetter.Error == "" {
		t.Errorf("native dead letter lacks time or text: %+v", dead.DeadLetter)
	}
	if d := receiveOne(t, keeper, broker.ReceiveRequest{Lane: "work", Lease: time.Minute}, time.Second); d != nil {
		t.Fatalf("the poison message is still live: attempt %d", d.Attempt)
	}
	// Replay gives it a fresh start.
	if err := keeper.Replay(ctxT(t, 10*time.Second), dead); err != nil {
		t.Fatalf("replay: %v", err)
	}
	back := receiveOne(t, keeper, broker.ReceiveRequest{Lane: "work", Lease: time.Minute}, 10*time.Second)
	if back == nil || back.ID != poison.ID || back.Attempt != 1 {
		t.Fatalf("replayed: %+v, want attempt 1", back)
	}
	if err := keeper.Ack(ctxT(t, 10*time.Second), []*broker.Delivery{back}); err != nil {
		t.Fatal(err)
	}
}

// TestNackDelay_Buckets: nack delays in different buckets come back no
// earlier than asked, with the next attempt.
//
// The idle release is set far beyond the test: with the default (100 ms),
// a slow Stats call under load let the release cancel the consumer tag
// while RabbitMQ was pushing the 150 ms message back to it, and a quorum
// queue counts that as a delivery (x-delivery-count raised, attempt 3).
// The idle release no longer cancels a tag with credit (consume.go;
// TestIdleRelease_PublishRace), but the release is not what this test is
// about.
func TestNackDelay_Buckets(t *testing.T) {
	t.Parallel()
	u := testURL(t, newNS(t), "", "", url.Values{"idle_release": {"10m"}})
	t.Cleanup(func() { cleanupNamespace(u, "work") })
	d := openDriver(t, u)
	delays := []time.Duration{300 * time.Millisecond, 1200 * time.Millisecond, 150 * time.Millisecond}
	var msgs []*broker.Message
	for i := range delays {
		msgs = append(msgs, &broker.Message{Lane: "work", Kind: "k", Body: []byte(fmt.Sprint(i))})
	}
	mustPublish(t, d, msgs...)
	due := map[string]time.Time{}
	for range delays {
		dv := receiveOne(t, d, broker.ReceiveRequest{Lane: "work", Lease: time.Minute}, 10*time.Second)
		if dv == nil {
			t.Fatal("missing delivery")
		}
		var i int
		fmt.Sscan(string(dv.Body), &i)
		due[dv.ID] = time.Now().Add(delays[i])
		if err := d.Nack(ctxT(t, 10*time.Second), dv, delays[i]); err != nil {
			t.Fatalf("nack: %v", err)
		}
	}
	st, err := d.Stats(ctxT(t, 10*time.Second), "work")
	// Under load the Stats call can end after the shortest delay: a
	// message whose due time has passed may have left its delay queue
	// (and be buffered by the consumer, counted nowhere). One whose due
	// time is still ahead when Stats returns must be counted delayed.
	var stillDue int64
	statsAt := time.Now()
	for _, at := range due {
		if at.After(statsAt) {
			stillDue++
		}
	}
	if err != nil || st.Delayed < stillDue || st.Delayed > int64(len(delays)) {
		t.Errorf("stats while delayed = %+v, %v; want delayed between %d and %d", st, err, stillDue, len(delays))
	}
	for range delays {
		dv := receiveOne(t, d, broker.ReceiveRequest{Lane: "work", Lease: time.Minute}, 10*time.Second)
		if dv == nil {
			t.Fatal("a delayed nack did not come back")
		}
		if now := time.Now(); now.Before(due[dv.ID]) {
			t.Errorf("%s back %s early", dv.Body, due[dv.ID].Sub(now))
		}
		if dv.Attempt != 2 {
			t.Errorf("%s attempt %d, want 2", dv.Body, dv.Attempt)
		}
		if err := d.Ack(ctxT(t, 10*time.Second), []*broker.Delivery{dv}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReconnect: the broker closes the adapter's connections twice in the
// middle of a run of several thousand tasks (rabbitmqctl
// close_all_user_connections, for this test's own user). Publishing and
// consuming resume; every task completes and its effect is applied once.
func TestReconnect(t *testing.T) {
	user, pass := tempUser(t)
	u := testURL(t, newNS(t), user, pass, nil)
	t.Cleanup(func() { cleanupNamespace(u, "work") })
	const n = 6000
	ctx := ctxT(t, 5*time.Minute)
	pubB, err := broker.Open(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pubB.Close()
	conB, err := broker.Open(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conB.Close()

	ids := make([]string, n)
	for i := range ids {
		ids[i] = broker.NewID()
	}
	var (
		mu        sync.Mutex
		effects   = map[string]int{} // deliveries per task; the effect is applied on the first
		delivered atomic.Int64
		pubErrs   atomic.Int64
		ackErrs   atomic.Int64
	)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				ds, err := conB.Receive(ctx, broker.ReceiveRequest{Lane: "work", Max: 50, Lease: 30 * time.Second, Wait: 500 * time.Millisecond})
				if err != nil {
					if broker.ClassOf(err) == broker.Permanent {
						t.Errorf("receive: permanent error %v", err)
						return
					}
					time.Sleep(50 * time.Millisecond)
					continue
				}
				delivered.Add(int64(len(ds)))
				mu.Lock()
				for _, d := range ds {
					effects[d.ID]++ // an idempotent effect keyed by task ID
				}
				mu.Unlock()
				time.Sleep(20 * time.Millisecond) // the handlers' work
				if err := conB.Ack(ctx, ds...); err != nil {
					// The connection went away under these deliveries:
					// RabbitMQ redelivers them; the effect is not repeated.
					ackErrs.Add(1)
				}
			}
		}()
	}
	// Close the connections twice while tasks are being published and
	// processed. rabbitmqctl takes about a second to start, so the
	// disruptor runs beside the publisher.
	var disrupted atomic.Int64
	published := make(chan struct{})
	disruptorDone := make(chan struct{})
	go func() {
		defer close(disruptorDone)
		for i := 0; i < 2; i++ {
			select {
			case <-published:
				return
			case <-time.After(300 * time.Millisecond):
			}
			if err := closeUserConnections(ctx, user); err != nil {
				t.Errorf("close connections: %v", err)
				return
			}
			disrupted.Add(1)
		}
	}()
	// Publish in paced batches, retrying a batch's failed messages with the
	// same IDs (an unknown outcome may have enqueued them: consumers dedupe).
	for start := 0; start < n; start += 100 {
		time.Sleep(60 * time.Millisecond)
		pending := ids[start:min(start+100, n)]
		for len(pending) > 0 {
			msgs := make([]*broker.Message, len(pending))
			for i, id := range pending {
				msgs[i] = &broker.Message{ID: id, Lane: "work", Kind: "k", Body: make([]byte, 256)}
			}
			rs, err := pubB.Publish(ctx, msgs...)
			if err != nil {
				t.Fatalf("publish: %v", err)
			}
			var retry []string
			for i, r := range rs {
				if r.Err != nil {
					if broker.ClassOf(r.Err) == broker.Permanent {
						t.Fatalf("publish: permanent error %v", r.Err)
					}
					retry = append(retry, pending[i])
				}
			}
			if len(retry) > 0 {
				pubErrs.Add(int64(len(retry)))
				time.Sleep(100 * time.Millisecond)
			}
			pending = retry
		}
	}
	close(published)
	<-disruptorDone
	if disrupted.Load() == 0 {
		t.Fatal("the connections were never closed during the run")
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		mu.Lock()
		got := len(effects)
		mu.Unlock()
		if got == n {
			break
		}
		if time.Now().After(deadline) {
			close(done)
			wg.Wait()
			t.Fatalf("%d of %d tasks completed", got, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(done)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if effects[id] == 0 {
			t.Errorf("task %s lost", id)
		}
	}
	dups := int(delivered.Load()) - n
	t.Logf("%d tasks, %d disruptions: %d redeliveries, %d publish retries, %d failed ack batches", n, disrupted.Load(), dups, pubErrs.Load(), ackErrs.Load())
	if len(effects) != n {
		t.Errorf("%d distinct effects, want %d", len(effects), n)
	}
}
