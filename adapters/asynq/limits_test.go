package asynq

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

// openLimits opens a Broker in a fresh namespace and returns it with its
// driver; the namespace's keys are deleted afterwards.
func openLimits(t *testing.T) (*broker.Broker, *Driver) {
	t.Helper()
	addr := testenv.Redis.Endpoint(t)
	ns := conformance.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := broker.Open(ctx, "redis://"+addr+"/0?namespace="+ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Close()
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d := b.Driver().(*Driver)
		if keys, err := d.rdb.Keys(c, "asynq:{"+d.QueueName("l")+"}:*").Result(); err == nil && len(keys) > 0 {
			d.rdb.Del(c, keys...)
		}
	})
	return b, b.Driver().(*Driver)
}

// inject writes a pending task as a plain asynq client (or someone editing
// Redis) would: hash field msg, state pending, id pushed to pending.
func inject(t *testing.T, d *Driver, id string, msg []byte) {
	t.Helper()
	ctx := context.Background()
	k := d.keys("l")
	if msg != nil {
		if err := d.rdb.HSet(ctx, k.task+id, "msg", msg, "state", "pending").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.rdb.LPush(ctx, k.pending, id).Err(); err != nil {
		t.Fatal(err)
	}
}

func deadLetters(t *testing.T, b *broker.Broker, want int) []*broker.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dead, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "l", Max: 10, Lease: time.Minute, DeadLetters: true})
	if err != nil || len(dead) != want {
		t.Fatalf("dead letters: %d, %v; want %d", len(dead), err, want)
	}
	return dead
}

// TestBadIDs_DeadLetteredAtDecode: tasks a plain asynq client (or a tampered
// hash) gave an empty, overlong or control-character ID are dead-lettered
// as undecodable, never delivered to the runtime, where the ledger refuses
// them and they looped.
func TestBadIDs_DeadLetteredAtDecode(t *testing.T) {
	t.Parallel()
	b, d := openLimits(t)
	ids := []string{"", strings.Repeat("i", 300), "a\nb"}
	for _, id := range ids {
		inject(t, d, id, (&taskMessage{Type: "k", ID: id, Queue: d.QueueName("l"), Retry: 3}).encode())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "l", Max: 10, Lease: time.Minute, Wait: 300 * time.Millisecond})
	if err != nil || len(ds) != 0 {
		t.Fatalf("receive: %d deliveries, %v; want none", len(ds), err)
	}
	for _, dv := range deadLetters(t, b, len(ids)) {
		if dv.DeadLetter.Reason != broker.ReasonUndecodable || !strings.Contains(dv.DeadLetter.Error, "id") {
			t.Errorf("dead letter %q: %+v", dv.ID, dv.DeadLetter)
		}
	}
}

// TestMissingTaskHash_DeadLettered: a pending id whose task hash is gone,
// or has no msg field, was removed by the dequeue script with no dead
// letter and no log. It is now a dead letter with ReasonUndecodable naming
// the id.
func TestMissingTaskHash_DeadLettered(t *testing.T) {
	t.Parallel()
	b, d := openLimits(t)
	inject(t, d, "ghost", nil)
	k := d.keys("l")
	if err := d.rdb.HSet(context.Background(), k.task+"half", "state", "pending").Err(); err != nil {
		t.Fatal(err)
	}
	inject(t, d, "half", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "l", Max: 10, Lease: time.Minute, Wait: 300 * time.Millisecond})
	if err != nil || len(ds) != 0 {
		t.Fatalf("receive: %d deliveries, %v; want none", len(ds), err)
	}
	got := map[string]bool{}
	for _, dv := range deadLetters(t, b, 2) {
		got[dv.ID] = true
		if dv.DeadLetter.Reason != broker.ReasonUndecodable || !strings.Contains(dv.DeadLetter.Error, dv.ID) {
			t.Errorf("dead letter %q: %+v", dv.ID, dv.DeadLetter)
		}
	}
	if !got["ghost"] || !got["half"] {
		t.Errorf("dead letters %v, want ghost and half", got)
	}
	if n, _ := d.rdb.LLen(ctx, k.active).Result(); n != 0 {
		t.Errorf("%d ids left in active", n)
	}
}

// TestReceive_CancelledHoldsNothing: a Receive cancelled at any point
// either returns the task or leaves it available at once, with no attempt
// spent; it never keeps it leased until the lease (30 s here) ends.
// Bounded: 120 rounds.
func TestReceive_CancelledHoldsNothing(t *testing.T) {
	t.Parallel()
	b, _ := openLimits(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m := &broker.Message{Lane: "l", Kind: "k", Body: []byte("x"), MaxAttempts: 1000}
	if _, err := b.PublishOne(ctx, m); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 120; i++ {
		rctx, rcancel := context.WithTimeout(ctx, time.Duration(i%40)*50*time.Microsecond)
		ds, err := b.Receive(rctx, broker.ReceiveRequest{Lane: "l", Max: 1, Wait: 20 * time.Millisecond, Lease: 30 * time.Second})
		rcancel()
		if err != nil && (!broker.IsContext(err) || len(ds) > 0) {
			t.Fatalf("round %d: %d deliveries, %v", i, len(ds), err)
		}
		for _, d := range ds {
			if err := b.Release(ctx, d, 0); err != nil {
				t.Fatal(err)
			}
		}
		got, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "l", Max: 1, Wait: 3 * time.Second, Lease: 30 * time.Second})
		if err != nil || len(got) != 1 || got[0].ID != m.ID || got[0].Attempt != 1 {
			t.Fatalf("round %d: the task is held or spent: %d deliveries, %v", i, len(got), err)
		}
		if err := b.Release(ctx, got[0], 0); err != nil {
			t.Fatal(err)
		}
	}
}
