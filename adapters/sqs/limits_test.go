package sqs_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

// TestBadIDs_DeadLetteredAtDecode: envelopes sent behind the framework's
// back with an empty, overlong or control-character ID are dead-lettered
// as undecodable by Receive, never handed to the runtime.
func TestBadIDs_DeadLetteredAtDecode(t *testing.T) {
	t.Parallel()
	u := testURL(testenv.SQS.Endpoint(t), namespace(t), false, "")
	b := openBroker(t, u)
	ctx := ctxT(t, time.Minute)
	inject := injectRaw(u)
	ids := []string{"", strings.Repeat("i", 300), "a\x02b"}
	for _, id := range ids {
		if err := inject(ctx, "work", broker.EncodeEnvelope(&broker.Message{ID: id, Lane: "work", Kind: "k", Body: []byte{0, 1}})); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "work", Max: 10, Wait: time.Second, Lease: time.Minute})
	if err != nil || len(ds) != 0 {
		t.Fatalf("receive: %d deliveries, %v; want none", len(ds), err)
	}
	n := 0
	for deadline := time.Now().Add(20 * time.Second); n < len(ids) && time.Now().Before(deadline); {
		dead, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "work", Max: 10, Wait: time.Second, Lease: time.Minute, DeadLetters: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range dead {
			if d.DeadLetter == nil || d.DeadLetter.Reason != broker.ReasonUndecodable || !strings.Contains(d.DeadLetter.Error, "id") {
				t.Errorf("dead letter %+v", d.DeadLetter)
			}
		}
		n += len(dead)
		if len(dead) > 0 {
			if err := b.Ack(ctx, dead...); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n != len(ids) {
		t.Fatalf("%d dead letters, want %d", n, len(ids))
	}
}

// TestMaxAttempts_AboveMaxReceivesRefused: every receive counts toward the
// redrive policy, nacks included; a message asking for more attempts than
// max_receives is refused at publish with ErrInvalid instead of being moved
// early with ReasonDeliveryLimit.
func TestMaxAttempts_AboveMaxReceivesRefused(t *testing.T) {
	t.Parallel()
	b := openBroker(t, testURL(testenv.SQS.Endpoint(t), namespace(t), false, "&max_receives=5"))
	ctx := ctxT(t, time.Minute)
	if _, err := b.PublishOne(ctx, &broker.Message{Lane: "work", Kind: "k", MaxAttempts: 6}); !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), "max_receives") {
		t.Fatalf("publish 6 attempts with max_receives=5: %v, want ErrInvalid naming max_receives", err)
	}
	if _, err := b.PublishOne(ctx, &broker.Message{Lane: "work", Kind: "k", MaxAttempts: 5}); err != nil {
		t.Fatalf("publish 5 attempts with max_receives=5: %v", err)
	}
}
