package broker_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/switchyard-dev/switchyard/adapters/embedded"
	"github.com/switchyard-dev/switchyard/broker"
)

// openReduced opens the embedded broker with its native ordering, dedup,
// attempt limit and long delays switched off, so Broker's fallbacks act.
// One process publishes and consumes, so the in-process sequencer is
// exact here.
func openReduced(t *testing.T) *broker.Broker {
	t.Helper()
	return openReducedAt(t, filepath.Join(t.TempDir(), "q.db"), &broker.Options{Sequencer: broker.NewMemorySequencer()})
}

func openReducedAt(t *testing.T, path string, opts *broker.Options) *broker.Broker {
	t.Helper()
	b, err := broker.Open(context.Background(), "embedded://"+path+"?reduced=true", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func recv(t *testing.T, b *broker.Broker, lane string, wait time.Duration) []*broker.Delivery {
	t.Helper()
	ds, err := b.Receive(context.Background(), broker.ReceiveRequest{Lane: lane, Max: 10, Lease: 30 * time.Second, Wait: wait})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// A message of an ordering key given back with Release (or a long nack)
// keeps its place: the key's next message still waits for it, and runs
// after it finishes.
func TestBroker_ReleaseKeepsOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openReduced(t)
	if b.Capabilities().Ordering {
		t.Fatal("reduced mode should not order natively")
	}
	a := &broker.Message{Lane: "l", Kind: "k", Body: []byte("A"), OrderingKey: "key"}
	bm := &broker.Message{Lane: "l", Kind: "k", Body: []byte("B"), OrderingKey: "key"}
	if _, err := b.Publish(ctx, a, bm); err != nil {
		t.Fatal(err)
	}
	ds := recv(t, b, "l", 5*time.Second)
	if len(ds) != 1 || string(ds[0].Body) != "A" {
		t.Fatalf("first receive %d messages, want only A", len(ds))
	}
	if err := b.Release(ctx, ds[0], 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// Neither A (released) nor B (behind A) may run for now.
	if got := recv(t, b, "l", 900*time.Millisecond); len(got) != 0 {
		t.Fatalf("got %q while A was released", got[0].Body)
	}
	var first *broker.Delivery
	deadline := time.Now().Add(10 * time.Second)
	for first == nil && time.Now().Before(deadline) {
		if got := recv(t, b, "l", time.Second); len(got) > 0 {
			if len(got) != 1 || string(got[0].Body) != "A" || got[0].Attempt != 1 {
				t.Fatalf("after the release got %d messages, first %q attempt %d; want A alone, attempt 1", len(got), got[0].Body, got[0].Attempt)
			}
			first = got[0]
		}
	}
	if first == nil {
		t.Fatal("A never came back: its key is stuck")
	}
	if err := b.Ack(ctx, first); err != nil {
		t.Fatal(err)
	}
	var second []*broker.Delivery
	deadline = time.Now().Add(10 * time.Second)
	for len(second) == 0 && time.Now().Before(deadline) {
		second = recv(t, b, "l", time.Second)
	}
	if len(second) != 1 || string(second[0].Body) != "B" {
		t.Fatalf("after A was acked got %d messages, want B", len(second))
	}
}

// A message dead-lettered in the middle of a held nack is replayed as a
// fresh message: attempt 1, no hop state.
func TestBroker_ReplayAfterHeldNack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openReduced(t) // MaxDelay 1s: a 1.5s nack is held
	if _, err := b.PublishOne(ctx, &broker.Message{Lane: "l", Kind: "k", IdempotencyKey: "idem"}); err != nil {
		t.Fatal(err)
	}
	ds := recv(t, b, "l", 5*time.Second)
	if err := b.Nack(ctx, ds[0], 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	var d *broker.Delivery
	deadline := time.Now().Add(10 * time.Second)
	for d == nil && time.Now().Before(deadline) {
		if got := recv(t, b, "l", time.Second); len(got) > 0 {
			d = got[0]
		}
	}
	if d == nil || d.Attempt != 2 {
		t.Fatalf("held nack came back as %+v, want attempt 2", d)
	}
	if err := b.DeadLetter(ctx, d, &broker.DeadLetter{Reason: broker.ReasonPermanent}); err != nil {
		t.Fatal(err)
	}
	if n, err := b.ReplayDead(ctx, "l", 0); err != nil || n != 1 {
		t.Fatalf("ReplayDead = %d, %v", n, err)
	}
	var back []*broker.Delivery
	deadline = time.Now().Add(10 * time.Second)
	for len(back) == 0 && time.Now().Before(deadline) {
		back = recv(t, b, "l", time.Second)
	}
	if len(back) != 1 || back[0].Attempt != 1 || back[0].IdempotencyKey != "idem" {
		t.Fatalf("replayed = %d deliveries, first %+v; want attempt 1 with its key", len(back), back)
	}
	for k := range back[0].Headers {
		t.Errorf("framework header %s survived the replay", k)
	}
}

// A tampered attempt-base header cannot wrap the attempt number around
// (before, 9223372036854775807 made it negative, so the message never
// reached its attempt limit): it is clamped and the message dead-lettered.
func TestBroker_AttemptBaseNeverWraps(t *testing.T) {
	t.Parallel()
	b := openReduced(t)
	ctx := context.Background()
	if _, err := b.PublishOne(ctx, &broker.Message{Lane: "l", Kind: "k", MaxAttempts: 5,
		Headers: map[string]string{broker.HeaderAttemptBase: "9223372036854775807"}}); err != nil {
		t.Fatal(err)
	}
	if ds := recv(t, b, "l", 200*time.Millisecond); len(ds) != 0 {
		t.Fatalf("delivered at attempt %d, want dead-lettered", ds[0].Attempt)
	}
	dead, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "l", Max: 1, Lease: time.Minute, DeadLetters: true})
	if err != nil || len(dead) != 1 || dead[0].DeadLetter.Reason != broker.ReasonMaxAttempts {
		t.Fatalf("dead letters: %d, %v", len(dead), err)
	}
}
