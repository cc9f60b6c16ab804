package gcppubsub_test

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/switchyard-dev/switchyard/adapters/gcppubsub"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
)

// openBroker opens a Broker on a fresh namespace of the fake (extra URL
// parameters appended) and deletes the namespace at the end of the test.
func openBroker(t *testing.T, extra string, opts *broker.Options) (*broker.Broker, string) {
	t.Helper()
	addr := emulator(t)
	ns := conformance.Namespace(t)
	t.Cleanup(func() { deleteNamespace(addr, ns) })
	rawURL := testURL(addr, ns, extra)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := broker.Open(ctx, rawURL, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b, rawURL
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// receive receives from lane (or its dead letters) until it has n
// deliveries or timeout passes.
func receive(t *testing.T, b *broker.Broker, lane string, dead bool, n int, timeout time.Duration) []*broker.Delivery {
	t.Helper()
	var out []*broker.Delivery
	deadline := time.Now().Add(timeout)
	for len(out) < n && time.Now().Before(deadline) {
		ds, err := b.Receive(ctxT(t, 30*time.Second), broker.ReceiveRequest{Lane: lane, Max: n - len(out), Lease: 30 * time.Second, Wait: time.Second, DeadLetters: dead})
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		out = append(out, ds...)
	}
	return out
}

// TestDeadLetterNoStats: the conformance dead-letter case without its
// Stats assertions: a dead letter leaves the live subscription, keeps its
// reason, error and attempt history, and Replay and ReplayDead put it back
// as a fresh message.
func TestDeadLetterNoStats(t *testing.T) {
	t.Parallel()
	b, _ := openBroker(t, "", nil)
	rs, err := b.Publish(ctxT(t, 10*time.Second), &broker.Message{Lane: "batch", Kind: "pdf.parse", Body: []byte("bad pdf")})
	if err != nil || rs[0].Err != nil {
		t.Fatalf("publish: %v %v", err, rs[0].Err)
	}
	ds := receive(t, b, "batch", false, 1, 10*time.Second)
	if len(ds) != 1 {
		t.Fatal("nothing received")
	}
	start := time.Now().Add(-time.Second).UTC().Truncate(time.Millisecond)
	dl := &broker.DeadLetter{Reason: broker.ReasonPermanent, Error: "parse: unexpected EOF",
		Attempts: []broker.AttemptRecord{{Attempt: 1, Start: start, Duration: 250 * time.Millisecond, Class: "permanent", Error: "parse: unexpected EOF", Worker: "w1"}}}
	if err := b.DeadLetter(ctxT(t, 10*time.Second), ds[0], dl); err != nil {
		t.Fatalf("dead-letter: %v", err)
	}
	if live := receive(t, b, "batch", false, 1, 1500*time.Millisecond); len(live) != 0 {
		t.Fatalf("a dead-lettered message was delivered from the live subscription: %s", live[0].ID)
	}
	dead := receive(t, b, "batch", true, 1, 10*time.Second)
	if len(dead) != 1 {
		t.Fatal("the dead-letter subscription is empty")
	}
	d := dead[0]
	if d.ID != rs[0].ID || string(d.Body) != "bad pdf" || d.Kind != "pdf.parse" || d.DeadLetter == nil {
		t.Fatalf("dead letter = %s %s %q %+v", d.ID, d.Kind, d.Body, d.DeadLetter)
	}
	if d.DeadLetter.Reason != broker.ReasonPermanent || d.DeadLetter.Error != dl.Error || len(d.DeadLetter.Attempts) != 1 ||
		!d.DeadLetter.Attempts[0].Start.Equal(start) || d.DeadLetter.Attempts[0].Worker != "w1" || d.DeadLetter.At.IsZero() {
		t.Errorf("record = %+v, want %+v with a time", d.DeadLetter, dl)
	}
	if err := b.Replay(ctxT(t, 10*time.Second), d); err != nil {
		t.Fatalf("replay: %v", err)
	}
	back := receive(t, b, "batch", false, 1, 10*time.Second)
	if len(back) != 1 || back[0].ID != rs[0].ID || back[0].Attempt != 1 || back[0].DeadLetter != nil {
		t.Fatalf("replayed = %+v, want %s attempt 1 without a record", back, rs[0].ID)
	}
	if err := b.Ack(ctxT(t, 10*time.Second), back[0]); err != nil {
		t.Fatal(err)
	}
	if left := receive(t, b, "batch", true, 1, time.Second); len(left) != 0 {
		t.Errorf("the dead-letter subscription still holds %s after replay", left[0].ID)
	}
	for _, body := range []string{"a", "b"} {
		if _, err := b.PublishOne(ctxT(t, 10*time.Second), &broker.Message{Lane: "batch", Kind: "pdf.parse", Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range receive(t, b, "batch", false, 2, 10*time.Second) {
		if err := b.DeadLetter(ctxT(t, 10*time.Second), d, &broker.DeadLetter{Reason: broker.ReasonUnknownKind}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := b.ReplayDead(ctxT(t, 30*time.Second), "batch", 0)
	if err != nil || n != 2 {
		t.Fatalf("ReplayDead = %d, %v; want 2, nil", n, err)
	}
	if got := receive(t, b, "batch", false, 2, 10*time.Second); len(got) != 2 {
		t.Fatalf("ReplayDead: %d of 2 came back", len(got))
	}
}

// TestNativeDeadLetterPolicy: a message that Pub/Sub's own dead-letter
// policy moves (after max_deliveries deliveries that nobody acked, as when
// every consumer crashes before Broker's attempt check) comes out of the
// dead-letter subscription with ReasonDeliveryLimit, and replays.
func TestNativeDeadLetterPolicy(t *testing.T) {
	t.Parallel()
	const limit = 5
	// The driver is used directly: Broker would dead-letter the message
	// itself at its own attempt limit before Pub/Sub's policy.
	addr := emulator(t)
	ns := conformance.Namespace(t)
	t.Cleanup(func() { deleteNamespace(addr, ns) })
	d, err := openDriver(ctxT(t, 10*time.Second), testURL(addr, ns, "&max_deliveries=5"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	rs, err := d.Publish(ctxT(t, 10*time.Second), []*broker.Message{{ID: "m1", Lane: "batch", Kind: "k.k", Body: []byte("x")}})
	if err != nil || rs[0].Err != nil {
		t.Fatalf("publish: %v %v", err, rs)
	}
	last := 0
	deadline := time.Now().Add(30 * time.Second)
	for last < limit && time.Now().Before(deadline) {
		ds, err := d.Receive(ctxT(t, 10*time.Second), broker.ReceiveRequest{Lane: "batch", Max: 1, Lease: time.Second, Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for _, dv := range ds {
			if dv.Attempt != last+1 {
				t.Fatalf("delivery attempt %d after %d", dv.Attempt, last)
			}
			last = dv.Attempt
			if err := d.Nack(ctxT(t, 10*time.Second), dv, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if last != limit {
		t.Fatalf("delivered %d times, want %d", last, limit)
	}
	var dead []*broker.Delivery
	for time.Now().Before(deadline) && len(dead) == 0 {
		if dead, err = d.Receive(ctxT(t, 10*time.Second), broker.ReceiveRequest{Lane: "batch", Max: 1, Lease: 30 * time.Second, Wait: time.Second, DeadLetters: true}); err != nil {
			t.Fatal(err)
		}
	}
	if len(dead) != 1 || dead[0].ID != "m1" || dead[0].DeadLetter == nil || dead[0].DeadLetter.Reason != broker.ReasonDeliveryLimit {
		t.Fatalf("dead letters = %+v, want m1 with reason %s", dead, broker.ReasonDeliveryLimit)
	}
	if err := d.Replay(ctxT(t, 10*time.Second), dead[0]); err != nil {
		t.Fatal(err)
	}
	if live, _ := d.Receive(ctxT(t, 10*time.Second), broker.ReceiveRequest{Lane: "batch", Max: 1, Lease: 30 * time.Second, Wait: 5 * time.Second}); len(live) != 1 || live[0].Attempt != 1 {
		t.Fatalf("replayed = %+v, want m1 at attempt 1", live)
	}
	// A message above the policy's limit is refused at publish.
	rs, err = d.Publish(ctxT(t, 10*time.Second), []*broker.Message{{ID: "m2", Lane: "batch", Kind: "k.k", MaxAttempts: 6}})
	if err != nil || !errors.Is(rs[0].Err, broker.ErrInvalid) {
		t.Fatalf("publish with MaxAttempts 6 over max_deliveries 5 = %v, %v; want ErrInvalid", err, rs[0].Err)
	}
}

// TestUndecodableFraming: foreign data on the live topic reaches the
// dead-letter subscription as it was, with ReasonUndecodable; a record
// that does not parse is reported, never a panic.
func TestUndecodableFraming(t *testing.T) {
	t.Parallel()
	b, rawURL := openBroker(t, "", nil)
	if err := injectRaw(rawURL)(ctxT(t, 10*time.Second), "batch", []byte("{foreign}")); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, b, "batch", false, 1, 2*time.Second); len(got) != 0 {
		t.Fatalf("foreign data was delivered: %+v", got)
	}
	dead := receive(t, b, "batch", true, 1, 10*time.Second)
	if len(dead) != 1 || string(dead[0].Body) != "{foreign}" || dead[0].DeadLetter.Reason != broker.ReasonUndecodable {
		t.Fatalf("dead letters = %+v", dead)
	}
	// A message on the dead-letter topic that claims the framed form but
	// is not: shown as it is, undecodable.
	d := b.Driver().(*gcppubsub.Driver)
	_, deadTopic, _, _ := d.Names("batch")
	topics, _ := d.Clients()
	if _, err := topics.Publish(ctxT(t, 10*time.Second), &pb.PublishRequest{Topic: deadTopic, Messages: []*pb.PubsubMessage{
		{Data: []byte{0xff, 0xff, 0xff}, Attributes: map[string]string{"switchyard-dead-letter": "1"}}}}); err != nil {
		t.Fatal(err)
	}
	bad := receive(t, b, "batch", true, 1, 10*time.Second)
	if len(bad) != 1 || bad[0].DeadLetter == nil || bad[0].DeadLetter.Reason != broker.ReasonUndecodable {
		t.Fatalf("bad frame = %+v", bad)
	}
}
