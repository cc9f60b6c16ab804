package nats

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// TestBadIDs_DeadLetteredAtDecode: envelopes published behind the
// framework's back with an empty, overlong or control-character ID are
// dead-lettered as undecodable by Receive, never handed to the runtime
// (whose ledger refuses them, so they looped as "ledger unavailable").
func TestBadIDs_DeadLetteredAtDecode(t *testing.T) {
	t.Parallel()
	b := openBroker(t, testURL(t, sharedEndpoint(t), ""), nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, id := range []string{"", strings.Repeat("i", 300), "a\x01b"} {
		if err := injectRaw(ctx, driverOf(b), "work", broker.EncodeEnvelope(&broker.Message{ID: id, Lane: "work", Kind: "k", Body: []byte("bad")})); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "work", Max: 10, Wait: 2 * time.Second, Lease: time.Minute})
	if err != nil || len(ds) != 0 {
		t.Fatalf("receive: %d deliveries (%v), want none", len(ds), err)
	}
	n := 0
	for n < 3 {
		dead, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "work", Max: 10, Wait: 5 * time.Second, Lease: time.Minute, DeadLetters: true})
		if err != nil || len(dead) == 0 {
			t.Fatalf("dead letters: %d after %d, %v", len(dead), n, err)
		}
		for _, d := range dead {
			if d.DeadLetter == nil || d.DeadLetter.Reason != broker.ReasonUndecodable || !strings.Contains(d.DeadLetter.Error, "id") {
				t.Errorf("dead letter %+v", d.DeadLetter)
			}
		}
		n += len(dead)
		if err := b.Ack(ctx, dead...); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMaxAttempts_AboveMaxDeliverRefused: JetStream's MaxDeliver counts
// every delivery, nacks included; a message asking for more attempts than
// the consumers' max_deliver is refused at publish with ErrInvalid instead
// of being dead-lettered early as delivery_limit. With max_deliver=-1 it is
// accepted.
func TestMaxAttempts_AboveMaxDeliverRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := openBroker(t, testURL(t, sharedEndpoint(t), "max_deliver=3"), nil)
	if _, err := b.PublishOne(ctx, &broker.Message{Lane: "work", Kind: "k", MaxAttempts: 5}); !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), "max_deliver") {
		t.Fatalf("publish 5 attempts with max_deliver=3: %v, want ErrInvalid naming max_deliver", err)
	}
	if _, err := b.PublishOne(ctx, &broker.Message{Lane: "work", Kind: "k", MaxAttempts: 3}); err != nil {
		t.Fatalf("publish 3 attempts with max_deliver=3: %v", err)
	}
	u := openBroker(t, testURL(t, sharedEndpoint(t), "max_deliver=-1"), nil)
	if _, err := u.PublishOne(ctx, &broker.Message{Lane: "work", Kind: "k", MaxAttempts: 500}); err != nil {
		t.Fatalf("publish 500 attempts with max_deliver=-1: %v", err)
	}
}

// TestReceive_CancelledGivesBack: a Receive cancelled at any moment either
// returns the message to its caller or gives it back at once; it never
// keeps it leased until the AckWait (30 s here) ends; once its context is
// cancelled it returns the context's error and no deliveries (a caller that
// gave up drops them). Bounded: 40 rounds.
func TestReceive_CancelledGivesBack(t *testing.T) {
	t.Parallel()
	b := openBroker(t, testURL(t, sharedEndpoint(t), "ack_wait=30s&max_deliver=-1"), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m := &broker.Message{Lane: "work", Kind: "k", Body: []byte("x"), MaxAttempts: 1000}
	if _, err := b.PublishOne(ctx, m); err != nil {
		t.Fatal(err)
	}
	d := driverOf(b)
	for i := 0; i < 40; i++ {
		rctx, rcancel := context.WithCancel(ctx)
		d.fetched = nil
		switch i % 4 {
		case 0:
			rcancel() // already cancelled
		case 1:
			d.fetched = rcancel // cancelled right after the fetch took the message
		default:
			time.AfterFunc(time.Duration(i%7)*time.Millisecond, rcancel)
		}
		ds, err := b.Receive(rctx, broker.ReceiveRequest{Lane: "work", Max: 2, Wait: 200 * time.Millisecond, Lease: 30 * time.Second})
		rcancel()
		if err != nil && !broker.IsContext(err) {
			t.Fatalf("round %d: %v", i, err)
		}
		if err != nil && len(ds) > 0 {
			t.Fatalf("round %d: deliveries with an error", i)
		}
		if len(ds) > 0 && i%4 <= 1 {
			t.Fatalf("round %d: a Receive with a cancelled context returned %d deliveries", i, len(ds))
		}
		for _, d := range ds {
			if err := b.Nack(ctx, d, 0); err != nil {
				t.Fatal(err)
			}
		}
		// Whatever happened, the message is available again at once.
		got, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "work", Max: 1, Wait: 5 * time.Second, Lease: 30 * time.Second})
		if err != nil || len(got) != 1 || got[0].ID != m.ID {
			t.Fatalf("round %d: the message is held: %d deliveries, %v", i, len(got), err)
		}
		if err := b.Nack(ctx, got[0], 0); err != nil {
			t.Fatal(err)
		}
	}
}
