package sqs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

func openBroker(t *testing.T, rawURL string) *broker.Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := broker.Open(ctx, rawURL, nil)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestCapabilities(t *testing.T) {
	t.Parallel()
	ep := testenv.SQS.Endpoint(t)
	std := openBroker(t, testURL(ep, namespace(t), false, "")).Capabilities()
	fifo := openBroker(t, testURL(ep, namespace(t)+"f", true, "")).Capabilities()
	if std.Dedup || std.Ordering || std.MaxDelay != 15*time.Minute || std.MaxBatch != 10 || std.MaxMessageSize <= 0 {
		t.Errorf("standard capabilities %+v", std)
	}
	if !fifo.Dedup || fifo.DedupWindow != 5*time.Minute || !fifo.Ordering {
		t.Errorf("FIFO capabilities %+v", fifo)
	}
}

// TestFIFO_GroupOrdering: messages of one ordering key come in publish
// order and never two at once, even when SQS returns several of a group
// in one response; different keys are delivered side by side.
func TestFIFO_GroupOrdering(t *testing.T) {
	t.Parallel()
	b := openBroker(t, testURL(testenv.SQS.Endpoint(t), namespace(t), true, ""))
	const perKey = 4
	keys := []string{"alpha", "beta", "gamma"}
	var msgs []*broker.Message
	for i := 0; i < perKey; i++ {
		for _, k := range keys {
			msgs = append(msgs, &broker.Message{Lane: "work", Kind: "k", OrderingKey: k, Body: []byte(fmt.Sprintf("%s-%d", k, i))})
		}
	}
	rs, err := b.Publish(ctxT(t, 30*time.Second), msgs...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	next := map[string]int{}
	deadline := time.Now().Add(30 * time.Second)
	total := 0
	parallel := false
	for total < len(msgs) && time.Now().Before(deadline) {
		ds, err := b.Receive(ctxT(t, 10*time.Second), broker.ReceiveRequest{Lane: "work", Max: 10, Lease: 30 * time.Second, Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		held := map[string]bool{}
		for _, d := range ds {
			if held[d.OrderingKey] {
				t.Fatalf("key %s delivered twice in one receive", d.OrderingKey)
			}
			held[d.OrderingKey] = true
			if want := fmt.Sprintf("%s-%d", d.OrderingKey, next[d.OrderingKey]); string(d.Body) != want {
				t.Fatalf("key %s: got %s, want %s", d.OrderingKey, d.Body, want)
			}
			next[d.OrderingKey]++
		}
		// While these are held, nothing more of their keys may come.
		more, err := b.Receive(ctxT(t, 10*time.Second), broker.ReceiveRequest{Lane: "work", Max: 10, Lease: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range more {
			if held[d.OrderingKey] {
				t.Fatalf("key %s leased twice at once", d.OrderingKey)
			}
			if err := b.Nack(ctxT(t, 10*time.Second), d, 0); err != nil {
				t.Fatal(err)
			}
		}
		if len(held) > 1 {
			parallel = true
		}
		if err := b.Ack(ctxT(t, 10*time.Second), ds...); err != nil {
			t.Fatal(err)
		}
		total += len(ds)
	}
	if total != len(msgs) {
		t.Fatalf("received %d of %d", total, len(msgs))
	}
	if !parallel {
		t.Log("different keys never arrived in the same receive (allowed: the emulator returns small FIFO batches)")
	}
}

// TestFIFO_Dedup: an idempotency key published twice yields one message;
// the second publish reports the first ID when this process made the
// first, and SQS drops the copy either way.
func TestFIFO_Dedup(t *testing.T) {
	t.Parallel()
	u := testURL(testenv.SQS.Endpoint(t), namespace(t), true, "")
	a, other := openBroker(t, u), openBroker(t, u)
	first, err := a.PublishOne(ctxT(t, 10*time.Second), &broker.Message{Lane: "work", Kind: "k", IdempotencyKey: "order-7", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := a.PublishOne(ctxT(t, 10*time.Second), &broker.Message{Lane: "work", Kind: "k", IdempotencyKey: "order-7", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if !second.Duplicate || second.ID != first.ID {
		t.Errorf("second publish = %+v, want a duplicate of %s", second, first.ID)
	}
	// Another process: it cannot know, but SQS drops the copy.
	if _, err := other.PublishOne(ctxT(t, 10*time.Second), &broker.Message{Lane: "work", Kind: "k", IdempotencyKey: "order-7", Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	// Another tenant is another key.
	third, err := a.PublishOne(ctxT(t, 10*time.Second), &broker.Message{Lane: "work", Kind: "k", IdempotencyKey: "order-7", Tenant: "globex"})
	if err != nil || third.Duplicate {
		t.Fatalf("other tenant: %+v, %v", third, err)
	}
	got := map[string]int{}
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		ds, err := a.Receive(ctxT(t, 10*time.Second), broker.ReceiveRequest{Lane: "work", Max: 10, Lease: 30 * time.Second, Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			got[d.Tenant]++
		}
		if err := a.Ack(ctxT(t, 10*time.Second), ds...); err != nil {
			t.Fatal(err)
		}
	}
	if got["acme"] != 1 || got["globex"] != 1 {
		t.Fatalf("deliveries per tenant %v, want one each", got)
	}
}

// TestRedrive_DeliveryLimit: a message that keeps being abandoned is moved
// by SQS's redrive policy and comes out of the dead-letter queue with
// ReasonDeliveryLimit.
func TestRedrive_DeliveryLimit(t *testing.T) {
	t.Parallel()
	for _, fifo := range []bool{false, true} {
		t.Run(fmt.Sprintf("fifo=%v", fifo), func(t *testing.T) {
			t.Parallel()
			b := openBroker(t, testURL(testenv.SQS.Endpoint(t), namespace(t), fifo, "&max_receives=1"))
			r, err := b.PublishOne(ctxT(t, 10*time.Second), &broker.Message{Lane: "work", Kind: "k", Body: []byte("poison")})
			if err != nil {
				t.Fatal(err)
			}
			ds, err := b.Receive(ctxT(t, 10*time.Second), broker.ReceiveRequest{Lane: "work", Max: 1, Lease: time.Second, Wait: 5 * time.Second})
			if err != nil || len(ds) != 1 {
				t.Fatalf("first receive: %d, %v", len(ds), err)
			}
			time.Sleep(time.Until(ds[0].LeaseDeadline) + 200*time.Millisecond)
			var dead []*broker.Delivery
			deadline := time.Now().Add(15 * time.Second)
			for len(dead) == 0 && time.Now().Before(deadline) {
				// A live receive makes SQS apply the redrive policy.
				live, err := b.Receive(ctxT(t, 10*time.Second), broker.ReceiveRequest{Lane: "work", Max: 1, Lease: time.Second, Wait: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				if len(live) > 0 {
					t.Fatalf("delivered again beyond max_receives=1 (attempt %d)", live[0].Attempt)
				}
				dead, err = b.Receive(ctxT(t, 10*time.Second), broker.ReceiveRequest{Lane: "work", Max: 1, Lease: 30 * time.Second, Wait: time.Second, DeadLetters: true})
				if err != nil {
					t.Fatal(err)
				}
			}
			if len(dead) != 1 || dead[0].ID != r.ID || string(dead[0].Body) != "poison" {
				t.Fatalf("dead letters %v, want %s", dead, r.ID)
			}
			if dead[0].DeadLetter == nil || dead[0].DeadLetter.Reason != broker.ReasonDeliveryLimit {
				t.Fatalf("record %+v, want reason %s", dead[0].DeadLetter, broker.ReasonDeliveryLimit)
			}
		})
	}
}
