package rabbitmq

import (
	"context"
	"math"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/switchyard-dev/switchyard/broker"
)

// TestBadIDs_DeadLetteredAtDecode: envelopes published behind the
// framework's back with an empty, overlong (300-byte) or control-character
// ID are dead-lettered as undecodable at receive, never handed to the
// runtime (whose ledger refuses them, so they looped), and the connection
// keeps working for every lane.
func TestBadIDs_DeadLetteredAtDecode(t *testing.T) {
	t.Parallel()
	u := testURL(t, newNS(t), "", "", nil)
	t.Cleanup(func() { cleanupNamespace(u, "work") })
	d := openDriver(t, u)
	ctx := ctxT(t, time.Minute)
	for _, id := range []string{"", strings.Repeat("i", 300), "a\nb"} {
		if err := d.injectRaw(ctx, "work", broker.EncodeEnvelope(&broker.Message{ID: id, Lane: "work", Kind: "k", Body: []byte("bad")})); err != nil {
			t.Fatal(err)
		}
	}
	good := &broker.Message{Lane: "work", Kind: "k", Body: []byte("good")}
	mustPublish(t, d, good)
	got := receiveOne(t, d, broker.ReceiveRequest{Lane: "work", Lease: time.Minute}, 15*time.Second)
	if got == nil || got.ID != good.ID {
		t.Fatalf("received %+v, want only the good message", got)
	}
	if err := d.Ack(ctx, []*broker.Delivery{got}); err != nil {
		t.Fatal(err)
	}
	if d2 := receiveOne(t, d, broker.ReceiveRequest{Lane: "work", Lease: time.Minute}, time.Second); d2 != nil {
		t.Fatalf("a bad-ID message was delivered: id %q", d2.ID)
	}
	for i := 0; i < 3; i++ {
		dead := receiveOne(t, d, broker.ReceiveRequest{Lane: "work", Lease: time.Minute, DeadLetters: true}, 10*time.Second)
		if dead == nil || dead.DeadLetter == nil || dead.DeadLetter.Reason != broker.ReasonUndecodable || !strings.Contains(dead.DeadLetter.Error, "id") {
			t.Fatalf("dead letter %d: %+v", i, dead)
		}
		if err := d.Ack(ctx, []*broker.Delivery{dead}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLongID_PublishAndReplay: a 256-byte ID (the portable limit) is longer
// than an AMQP message-id may be; publishing, nacking, dead-lettering and
// replaying it must not put it in the message-id property (amqp091-go
// fails the frame and the connection drops for every lane).
func TestLongID_PublishAndReplay(t *testing.T) {
	t.Parallel()
	u := testURL(t, newNS(t), "", "", nil)
	t.Cleanup(func() { cleanupNamespace(u, "work") })
	ctx := ctxT(t, time.Minute)
	b, err := broker.Open(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	id := strings.Repeat("L", broker.MaxKeyLen)
	if _, err := b.PublishOne(ctx, &broker.Message{ID: id, Lane: "work", Kind: "k", Body: []byte("x")}); err != nil {
		t.Fatalf("publish a %d-byte id: %v", len(id), err)
	}
	recv := func(dead bool) *broker.Delivery {
		t.Helper()
		ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "work", Max: 1, Wait: 10 * time.Second, Lease: time.Minute, DeadLetters: dead})
		if err != nil || len(ds) != 1 || ds[0].ID != id {
			t.Fatalf("receive (dead=%v): %d, %v", dead, len(ds), err)
		}
		return ds[0]
	}
	d := recv(false)
	if err := b.Nack(ctx, d, 0); err != nil {
		t.Fatalf("nack: %v", err)
	}
	d = recv(false)
	if d.Attempt != 2 {
		t.Errorf("after a nack: attempt %d, want 2", d.Attempt)
	}
	if err := b.DeadLetter(ctx, d, &broker.DeadLetter{Reason: broker.ReasonPermanent, Error: "boom"}); err != nil {
		t.Fatalf("dead-letter: %v", err)
	}
	if err := b.Replay(ctx, recv(true)); err != nil {
		t.Fatalf("replay: %v", err)
	}
	if err := b.Ack(ctx, recv(false)); err != nil {
		t.Fatal(err)
	}
}

// TestNack_NotCappedByDeliveryLimit: explicit nacks do not spend the
// queue's x-delivery-limit, so a message asking for more attempts than the
// limit gets them all (before, it was dead-lettered as delivery_limit
// after limit+1 deliveries).
func TestNack_NotCappedByDeliveryLimit(t *testing.T) {
	t.Parallel()
	u := testURL(t, newNS(t), "", "", url.Values{"delivery_limit": {"2"}})
	t.Cleanup(func() { cleanupNamespace(u, "work") })
	d := openDriver(t, u)
	ctx := ctxT(t, time.Minute)
	m := &broker.Message{Lane: "work", Kind: "k", Body: []byte("x"), MaxAttempts: 6}
	mustPublish(t, d, m)
	for i := 1; i <= 6; i++ {
		got := receiveOne(t, d, broker.ReceiveRequest{Lane: "work", Lease: time.Minute}, 10*time.Second)
		if got == nil || got.ID != m.ID || got.Attempt != i {
			t.Fatalf("delivery %d: %+v", i, got)
		}
		if i == 6 {
			if err := d.Ack(ctx, []*broker.Delivery{got}); err != nil {
				t.Fatal(err)
			}
			break
		}
		if err := d.Nack(ctx, got, 0); err != nil {
			t.Fatal(err)
		}
	}
	if dead := receiveOne(t, d, broker.ReceiveRequest{Lane: "work", Lease: time.Minute, DeadLetters: true}, time.Second); dead != nil {
		t.Fatalf("dead-lettered: %+v", dead.DeadLetter)
	}
}

// TestReceive_CancelledHoldsNothing: a Receive whose context has ended
// returns the context's error and no deliveries, even when a message is
// already buffered for it (before, it handed the message to a caller that
// had given up, which left it unacked until the channel closed), and
// touches no channel; the message stays available. Bounded: 30 rounds.
func TestReceive_CancelledHoldsNothing(t *testing.T) {
	t.Parallel()
	u := testURL(t, newNS(t), "", "", nil)
	t.Cleanup(func() { cleanupNamespace(u, "work") })
	ctx := ctxT(t, 2*time.Minute)
	b, err := broker.Open(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m := &broker.Message{Lane: "work", Kind: "k", Body: []byte("x"), MaxAttempts: 1000}
	if _, err := b.PublishOne(ctx, m); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i++ {
		got, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "work", Max: 1, Wait: 5 * time.Second, Lease: time.Minute})
		// (Not asserting the attempt: the idle release is not what this
		// test is about; TestIdleRelease_PublishRace is.)
		if err != nil || len(got) != 1 || got[0].ID != m.ID {
			t.Fatalf("round %d: %d deliveries, %v; want the message", i, len(got), err)
		}
		if err := b.Release(ctx, got[0], 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // pushed to the consumer's buffer meanwhile
		rctx, rcancel := context.WithCancel(ctx)
		rcancel()
		ds, err := b.Receive(rctx, broker.ReceiveRequest{Lane: "work", Max: 1, Wait: time.Second, Lease: time.Minute})
		if len(ds) > 0 || !broker.IsContext(err) {
			t.Fatalf("round %d: a cancelled Receive returned %d deliveries, %v; want the context's error", i, len(ds), err)
		}
	}
}

// TestAttemptOf_NeverWraps: tampered attempt headers are clamped, so the
// attempt is never negative or wrapped (a negative one never reaches the
// attempt limit, and the message would loop).
func TestAttemptOf_NeverWraps(t *testing.T) {
	t.Parallel()
	for _, h := range []amqp.Table{
		{hdrPrior: int64(math.MaxInt64)},
		{hdrPrior: int64(math.MaxInt64), hdrDeliveryCount: int64(math.MaxInt64)},
		{hdrPrior: int64(-5)},
		{hdrPrior: "-9223372036854775808"},
	} {
		if a := attemptOf(h); a < 1 || a > 2*broker.MaxAttemptsLimit+1 {
			t.Errorf("attemptOf(%v) = %d", h, a)
		}
	}
}
