package rabbitmq

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/switchyard-dev/switchyard/broker"
)

// TestReceive_CancelledKeepsChannel: Receives cancelled at random moments
// (as a scheduler's fetch loop is when its server stops) while other
// goroutines ack and nack (republish, then ack) what was received before.
// A cancelled Receive must neither close the channel the other leases live
// on (their acks were lost, RabbitMQ requeued the messages and the nacked
// ones came back twice) nor let a frame reach a channel the broker no longer
// has open (504 CHANNEL_ERROR "expected 'channel.open'", which closes the
// connection). Every message is delivered exactly twice (attempt 1, nacked;
// attempt 2, acked), no settlement loses its lease, the connection is never
// replaced, and the queue ends empty. Bounded: 300 messages, 2 minutes.
func TestReceive_CancelledKeepsChannel(t *testing.T) {
	t.Parallel()
	const n = 300
	u := testURL(t, newNS(t), "", "", nil)
	t.Cleanup(func() { cleanupNamespace(u, "work") })
	d := openDriver(t, u)
	ctx := ctxT(t, 3*time.Minute)
	gen0 := d.conn.gen
	connClosed := d.conn.cur.conn.NotifyClose(make(chan *amqp.Error, 1))
	msgs := make([]*broker.Message, n)
	for i := range msgs {
		msgs[i] = &broker.Message{Lane: "work", Kind: "k", Body: []byte("x")}
	}
	mustPublish(t, d, msgs...)

	var mu sync.Mutex
	seen := map[string][]int{} // attempts received, by ID
	var acked, lost atomic.Int64
	var otherErr atomic.Value
	settle := make(chan *broker.Delivery, 64)
	var settlers sync.WaitGroup
	for range 4 {
		settlers.Add(1)
		go func() {
			defer settlers.Done()
			for dv := range settle {
				sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				var err error
				if dv.Attempt == 1 {
					err = d.Nack(sctx, dv, 0)
				} else {
					err = d.Ack(sctx, []*broker.Delivery{dv})
				}
				cancel()
				switch {
				case errors.Is(err, broker.ErrLeaseLost):
					lost.Add(1)
				case err != nil:
					otherErr.CompareAndSwap(nil, err)
				case dv.Attempt != 1:
					acked.Add(1)
				}
			}
		}()
	}
	deadline := time.Now().Add(2 * time.Minute)
	for acked.Load() < n && time.Now().Before(deadline) && lost.Load() == 0 && otherErr.Load() == nil {
		// A Receive cancelled after 0-3 ms: often while it opens a
		// consumer (basic.qos, basic.consume) or cancels one.
		rctx, cancel := context.WithTimeout(ctx, time.Duration(rand.N(3000))*time.Microsecond)
		ds, err := d.Receive(rctx, broker.ReceiveRequest{Lane: "work", Max: 1 + rand.N(8), Wait: 200 * time.Millisecond, Lease: time.Minute})
		cancel()
		if err != nil && !broker.IsContext(err) {
			otherErr.CompareAndSwap(nil, err)
			break
		}
		for _, dv := range ds {
			mu.Lock()
			seen[dv.ID] = append(seen[dv.ID], dv.Attempt)
			mu.Unlock()
			settle <- dv
		}
	}
	close(settle)
	settlers.Wait()
	select {
	case e := <-connClosed:
		t.Errorf("the connection closed: %v", e)
	case <-time.After(200 * time.Millisecond):
	}
	if g := d.conn.gen; g != gen0 {
		t.Errorf("the connection was replaced %d times", g-gen0)
	}
	if err, _ := otherErr.Load().(error); err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if k := lost.Load(); k > 0 {
		t.Errorf("%d settlements lost their lease: a cancelled Receive closed the channel they were on", k)
	}
	if k := acked.Load(); k != n {
		t.Fatalf("%d of %d messages completed in 2 minutes", k, n)
	}
	for id, as := range seen {
		if len(as) != 2 || as[0] != 1 || as[1] != 2 {
			t.Errorf("message %s delivered as attempts %v, want [1 2]", id, as)
		}
	}
	// Nothing left behind: no copy of a nacked message on the queue.
	time.Sleep(500 * time.Millisecond)
	st, err := d.Stats(ctx, "work")
	if err != nil || st.Ready+st.InFlight+st.Delayed != 0 {
		t.Errorf("stats at the end = %+v, %v; want empty", st, err)
	}
}

// TestNack_AckLostLeavesOneCopy: a delayed nack whose ack is lost with its
// channel after the copy was published (the channel closes between the
// two) leaves one copy of the message, not two: the original, which
// RabbitMQ redelivers, is recognised as replaced and dropped. Without that,
// the original came back at once as attempt 2 and the copy after the delay
// as attempt 2 too. Bounded: one message, 20 seconds.
func TestNack_AckLostLeavesOneCopy(t *testing.T) {
	u := testURL(t, newNS(t), "", "", nil)
	t.Cleanup(func() { cleanupNamespace(u, "work") })
	d := openDriver(t, u)
	ctx := ctxT(t, time.Minute)
	mustPublish(t, d, &broker.Message{Lane: "work", Kind: "k", Body: []byte("x")})
	d1 := receiveOne(t, d, broker.ReceiveRequest{Lane: "work", Lease: time.Minute}, 10*time.Second)
	if d1 == nil || d1.Attempt != 1 {
		t.Fatalf("first delivery: %+v", d1)
	}
	testHookCopied = func(l *lease) { _ = l.ch.Close() } // the ack is lost
	t.Cleanup(func() { testHookCopied = nil })
	err := d.Nack(ctx, d1, 500*time.Millisecond)
	testHookCopied = nil
	if !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("nack whose ack was lost: %v, want ErrLeaseLost", err)
	}
	var got []*broker.Delivery
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		ds, err := d.Receive(ctx, broker.ReceiveRequest{Lane: "work", Max: 10, Wait: time.Until(deadline), Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ds...)
	}
	if len(got) != 1 || got[0].ID != d1.ID || got[0].Attempt != 2 {
		for _, g := range got {
			t.Logf("delivered: %s attempt %d", g.ID, g.Attempt)
		}
		t.Fatalf("after the nack %d deliveries, want one copy (attempt 2)", len(got))
	}
	if err := d.Ack(ctx, got); err != nil {
		t.Fatal(err)
	}
	if st, err := d.Stats(ctx, "work"); err != nil || st.Ready+st.Delayed+st.InFlight != 0 {
		t.Errorf("stats at the end = %+v, %v; want empty", st, err)
	}
}
