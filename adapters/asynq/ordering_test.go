package asynq_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// TestOrdering_NackedHolderNotBuried: a nacked task keeps its ordering
// key's lock and comes back first, even when far more tasks with the same
// key are queued than the dequeue script scans; meanwhile none of them
// starts.
func TestOrdering_NackedHolderNotBuried(t *testing.T) {
	t.Parallel()
	b, _, _ := interopSetup(t)
	ctx := context.Background()
	const n = 300
	msgs := make([]*broker.Message, n)
	for i := range msgs {
		msgs[i] = &broker.Message{Lane: "interactive", Kind: "chat.turn", Body: []byte(strconv.Itoa(i)), OrderingKey: "conv-1"}
	}
	msgs = append(msgs, &broker.Message{Lane: "interactive", Kind: "chat.turn", Body: []byte("other"), OrderingKey: "conv-2"})
	if _, err := b.Publish(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	first := recv(t, b, "interactive", 1, time.Minute)
	if len(first) != 1 || string(first[0].Body) != "0" {
		t.Fatalf("first delivery: %+v", first)
	}
	for _, delay := range []time.Duration{0, 300 * time.Millisecond} {
		if err := b.Nack(ctx, first[0], delay); err != nil {
			t.Fatal(err)
		}
		// Only the other key may start while seq 0 waits.
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ds, err := b.Receive(rctx, broker.ReceiveRequest{Lane: "interactive", Max: 1, Lease: time.Minute, Wait: 100 * time.Millisecond})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.OrderingKey == "conv-1" && string(d.Body) != "0" {
				t.Fatalf("seq %s of conv-1 started while seq 0 waited for its retry", d.Body)
			}
			if string(d.Body) == "0" {
				first = ds
				continue
			}
			if err := b.Ack(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
		if len(ds) == 0 || string(ds[0].Body) != "0" {
			first = recv(t, b, "interactive", 1, time.Minute)
		}
		if len(first) != 1 || string(first[0].Body) != "0" {
			t.Fatalf("after a nack (delay %s) got %d deliveries, want seq 0 again", delay, len(first))
		}
	}
	if first[0].Attempt != 3 {
		t.Errorf("attempt %d, want 3", first[0].Attempt)
	}
	if err := b.Ack(ctx, first[0]); err != nil {
		t.Fatal(err)
	}
	next := recv(t, b, "interactive", 1, time.Minute)
	if len(next) != 1 || string(next[0].Body) != "1" {
		t.Fatalf("after seq 0 was acked got %d deliveries, want seq 1", len(next))
	}
}
