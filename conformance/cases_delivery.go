package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// TestPublishReceiveAck: every portable field round-trips, the first
// delivery is attempt 1, and an acked message never comes back (contract
// point 1).
func TestPublishReceiveAck(t *testing.T, h *Harness) {
	// The message carries an ordering key; one Broker publishes and
	// consumes it, so an in-process sequencer serves where the broker has
	// no native ordering.
	opts := *h.Options.WithDefaults()
	if opts.Sequencer == nil {
		opts.Sequencer = broker.NewMemorySequencer()
	}
	b := Open(t, h, &opts)
	runAt := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	m := &broker.Message{
		Lane: "interactive", Kind: "email.send", Body: []byte(`{"to":"a@example.com"}`),
		Headers:        map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "x-app": "demo"},
		IdempotencyKey: "idem-1", OrderingKey: "user-42", Tenant: "acme", RunAt: runAt, MaxAttempts: 7,
	}
	rs := publish(t, b, m)
	if rs[0].ID == "" || rs[0].Duplicate {
		t.Fatalf("publish result %+v: want an ID and no duplicate", rs[0])
	}
	ds := receiveN(t, b, "interactive", 1, 30*time.Second, 10*time.Second)
	if len(ds) != 1 {
		t.Fatalf("received %d messages, want 1", len(ds))
	}
	d := ds[0]
	if d.ID != rs[0].ID || d.Lane != m.Lane || d.Kind != m.Kind || !bytes.Equal(d.Body, m.Body) {
		t.Errorf("delivery id/lane/kind/body = %s/%s/%s/%q, want %s/%s/%s/%q", d.ID, d.Lane, d.Kind, d.Body, rs[0].ID, m.Lane, m.Kind, m.Body)
	}
	for k, v := range m.Headers {
		if d.Headers[k] != v {
			t.Errorf("header %s = %q, want %q", k, d.Headers[k], v)
		}
	}
	if d.IdempotencyKey != m.IdempotencyKey || d.OrderingKey != m.OrderingKey || d.Tenant != m.Tenant {
		t.Errorf("keys = %q/%q/%q, want %q/%q/%q", d.IdempotencyKey, d.OrderingKey, d.Tenant, m.IdempotencyKey, m.OrderingKey, m.Tenant)
	}
	if !d.RunAt.Equal(runAt) {
		t.Errorf("RunAt = %v, want %v", d.RunAt, runAt)
	}
	if d.EnqueuedAt.Truncate(time.Millisecond).Sub(m.EnqueuedAt.Truncate(time.Millisecond)).Abs() > time.Millisecond {
		t.Errorf("EnqueuedAt = %v, want %v", d.EnqueuedAt, m.EnqueuedAt)
	}
	if d.MaxAttempts != 7 {
		t.Errorf("MaxAttempts = %d, want 7", d.MaxAttempts)
	}
	if d.Attempt != 1 {
		t.Errorf("Attempt = %d, want 1", d.Attempt)
	}
	if d.LeaseDeadline.Before(time.Now()) {
		t.Errorf("LeaseDeadline %v is already past", d.LeaseDeadline)
	}
	if d.DeadLetter != nil {
		t.Errorf("live delivery carries a dead-letter record %+v", d.DeadLetter)
	}
	ack(t, b, d)
	// Acked: nothing comes back, even after a lease would have ended.
	b2 := Open(t, h, nil)
	expectNone(t, b2, "interactive", 2*time.Second, "an acked message was delivered again")
}

// TestBatchPublish: 250 messages in one call arrive exactly once each
// within their lease.
//
// A message may come back after its lease ends (contract point 2) without
// the driver being at fault: a receive whose response is lost leaves the
// messages it took leased to nobody until their lease ends (SQS: an SDK
// retry of ReceiveMessage after a connection error). The case therefore
// receives until it has every message, for longer than a lease, and counts
// a second delivery as a failure only when it came before the first one's
// lease deadline. With a receive window as long as the lease, such a loss
// ended the window just as the first receive's messages came back, and
// they were counted as duplicates within their lease.
func TestBatchPublish(t *testing.T, h *Harness) {
	TestBatchPublishLease(t, h, time.Minute)
}

// TestBatchPublishLease is TestBatchPublish with leases of the given
// length (TestBatchPublish: one minute). A test that makes a receive lose
// its response on purpose (adapters/sqs, TestBatchPublishLostReceive)
// waits for the lost messages' lease to end: a shorter lease shortens that
// wait and checks the same. A lease shorter than the receiving of all 250
// messages takes only brings some of them back after their lease, which
// the case tells apart from duplicates within it.
func TestBatchPublishLease(t *testing.T, h *Harness, lease time.Duration) {
	b := Open(t, h, nil)
	const n = 250
	msgs := make([]*broker.Message, n)
	for i := range msgs {
		msgs[i] = newMsg("batch", "doc.embed", fmt.Sprintf("chunk-%03d", i))
	}
	rs := publish(t, b, msgs...)
	ids := map[string]bool{}
	for _, r := range rs {
		if ids[r.ID] {
			t.Fatalf("publish returned ID %s twice", r.ID)
		}
		ids[r.ID] = true
	}
	// last holds each message's latest delivery: the one to ack.
	last := map[string]*broker.Delivery{}
	deliveries := 0
	deadline := time.Now().Add(lease + time.Minute)
	for len(last) < n {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		ds, err := b.Receive(ctxFor(t, left+10*time.Second), broker.ReceiveRequest{Lane: "batch", Max: n - len(last), Lease: lease, Wait: min(left, time.Second)})
		if err != nil {
			t.Fatalf("receive from batch: %v", err)
		}
		// Received no earlier than now: a redelivery seen now came after
		// its predecessor's deadline if now is past it.
		now := time.Now()
		for _, d := range ds {
			deliveries++
			if !ids[d.ID] {
				t.Errorf("received unknown ID %s", d.ID)
			}
			if prev, ok := last[d.ID]; ok && now.Before(prev.LeaseDeadline) {
				t.Errorf("message %s delivered again at %s within its lease (deadline %s)",
					d.ID, now.Format("15:04:05.000"), prev.LeaseDeadline.Format("15:04:05.000"))
			}
			last[d.ID] = d
		}
	}
	if len(last) != n {
		t.Fatalf("received %d distinct messages of %d (%d deliveries)", len(last), n, deliveries)
	}
	if deliveries > n {
		t.Logf("%d deliveries of %d messages: some came back after their lease", deliveries, n)
	}
	latest := make([]*broker.Delivery, 0, n)
	var earliest time.Time
	for _, d := range last {
		latest = append(latest, d)
		if earliest.IsZero() || d.LeaseDeadline.Before(earliest) {
			earliest = d.LeaseDeadline
		}
	}
	// An ack that came after its delivery's lease may fail with
	// ErrLeaseLost or not hold (contract point 2, see StaleAck): such a
	// message may come back once more. Any other is a failure.
	err := b.Ack(ctxFor(t, 30*time.Second), latest...)
	acked := time.Now()
	if err != nil && !(errors.Is(err, broker.ErrLeaseLost) && !acked.Before(earliest)) {
		t.Fatalf("ack: %v", err)
	}
	for _, d := range receiveUntil(t, b, broker.ReceiveRequest{Lane: "batch", Lease: 30 * time.Second}, 1, time.Second) {
		prev, ok := last[d.ID]
		if !ok || acked.Before(prev.LeaseDeadline) {
			t.Fatalf("an acked message was delivered again: got %s (attempt %d) at %s", d.ID, d.Attempt, time.Now().Format("15:04:05.000"))
		}
		t.Logf("%s came back after an ack past its lease (deadline %s)", d.ID, prev.LeaseDeadline.Format("15:04:05.000"))
	}
}

// TestLease: a leased message is invisible to other consumers until its
// lease ends, then comes back with the next attempt number (points 2, 3).
func TestLease(t *testing.T, h *Harness) {
	a, b := Open(t, h, nil), Open(t, h, nil)
	publish(t, a, newMsg("interactive", "chat.reply", "hello"))
	ds := receiveN(t, a, "interactive", 1, time.Second, 10*time.Second)
	if len(ds) != 1 {
		t.Fatal("nothing received")
	}
	first := ds[0]
	got := expectNoneBefore(t, b, "interactive", first.LeaseDeadline, "delivered to a second consumer inside the first one's lease")
	if len(got) == 0 {
		got = receiveN(t, b, "interactive", 1, 30*time.Second, time.Until(first.LeaseDeadline)+10*time.Second)
	}
	if len(got) != 1 {
		t.Fatalf("message not redelivered within 10s after its lease ended at %s", first.LeaseDeadline.Format("15:04:05.000"))
	}
	if got[0].ID != first.ID || got[0].Attempt != 2 {
		t.Fatalf("redelivery = %s attempt %d, want %s attempt 2", got[0].ID, got[0].Attempt, first.ID)
	}
	if time.Now().Before(first.LeaseDeadline) {
		t.Fatalf("redelivered before the lease deadline %s", first.LeaseDeadline)
	}
	ack(t, b, got[0])
}

// TestExtendLease: a consumer that keeps extending its lease keeps the
// message hidden well past the first deadline (point 2).
func TestExtendLease(t *testing.T, h *Harness) {
	a, b := Open(t, h, nil), Open(t, h, nil)
	publish(t, a, newMsg("interactive", "llm.call", "long"))
	ds := receiveN(t, a, "interactive", 1, time.Second, 10*time.Second)
	if len(ds) != 1 {
		t.Fatal("nothing received")
	}
	d := ds[0]
	lease := time.Until(d.LeaseDeadline)
	if lease < 300*time.Millisecond {
		lease = time.Second
	}
	holdUntil := d.LeaseDeadline.Add(2 * lease)
	for time.Now().Before(holdUntil) {
		if err := a.Extend(ctxFor(t, 10*time.Second), lease, d); err != nil {
			t.Fatalf("extend: %v", err)
		}
		// Poll from the other consumer for a third of the lease.
		ds := receiveUntil(t, b, broker.ReceiveRequest{Lane: "interactive", Lease: 30 * time.Second}, 1, lease/3)
		if len(ds) > 0 {
			t.Fatalf("delivered to a second consumer although the lease was extended (attempt %d)", ds[0].Attempt)
		}
	}
	ack(t, a, d)
	expectNone(t, b, "interactive", lease+500*time.Millisecond, "an acked message was delivered again")
}

// TestStaleAck: an ack from a consumer whose lease passed to another never
// removes the other consumer's delivery.
func TestStaleAck(t *testing.T, h *Harness) {
	a, b := Open(t, h, nil), Open(t, h, nil)
	publish(t, a, newMsg("interactive", "x.y", "z"))
	d1 := receiveN(t, a, "interactive", 1, time.Second, 10*time.Second)
	if len(d1) != 1 {
		t.Fatal("nothing received")
	}
	d2 := receiveN(t, b, "interactive", 1, 30*time.Second, time.Until(d1[0].LeaseDeadline)+10*time.Second)
	if len(d2) != 1 {
		t.Fatal("not redelivered after the first lease ended")
	}
	err := a.Ack(ctxFor(t, 10*time.Second), d1[0])
	if err != nil && !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("stale ack: %v; want nil or ErrLeaseLost", err)
	}
	// The second consumer still owns the message: a nack brings it back.
	if err := b.Nack(ctxFor(t, 10*time.Second), d2[0], 0); err != nil {
		t.Fatalf("nack by the lease holder after a stale ack: %v", err)
	}
	d3 := receiveN(t, b, "interactive", 1, 30*time.Second, 10*time.Second)
	if len(d3) != 1 {
		t.Fatal("a stale ack removed the message the second consumer held")
	}
	if d3[0].Attempt != 3 {
		t.Errorf("attempt = %d, want 3", d3[0].Attempt)
	}
	ack(t, b, d3[0])
}

// TestNackDelay: a nacked message comes back no earlier than its delay,
// with the next attempt number (point 4).
func TestNackDelay(t *testing.T, h *Harness) {
	b := Open(t, h, nil)
	publish(t, b, newMsg("batch", "x.y", "z"))
	ds := receiveN(t, b, "batch", 1, 30*time.Second, 10*time.Second)
	if len(ds) != 1 {
		t.Fatal("nothing received")
	}
	const delay = 1500 * time.Millisecond
	at := time.Now()
	if err := b.Nack(ctxFor(t, 10*time.Second), ds[0], delay); err != nil {
		t.Fatalf("nack: %v", err)
	}
	got := expectNoneBefore(t, b, "batch", at.Add(delay), "nacked message came back before its delay")
	if len(got) == 0 {
		got = receiveN(t, b, "batch", 1, 30*time.Second, 10*time.Second)
	}
	if len(got) != 1 {
		t.Fatal("nacked message did not come back within 10s after its delay")
	}
	if el := time.Since(at); el < delay-100*time.Millisecond {
		t.Fatalf("came back after %s, before the %s delay", el, delay)
	}
	if got[0].Attempt != 2 || got[0].ID != ds[0].ID {
		t.Fatalf("got %s attempt %d, want %s attempt 2", got[0].ID, got[0].Attempt, ds[0].ID)
	}
	// A zero-delay nack comes back at once.
	if err := b.Nack(ctxFor(t, 10*time.Second), got[0], 0); err != nil {
		t.Fatalf("nack 0: %v", err)
	}
	again := receiveN(t, b, "batch", 1, 30*time.Second, 10*time.Second)
	if len(again) != 1 || again[0].Attempt != 3 {
		t.Fatalf("after a zero-delay nack got %d deliveries (want 1 with attempt 3)", len(again))
	}
	ack(t, b, again[0])
}

// TestCloseWithoutAck: a consumer that goes away holding a lease loses
// nothing; another consumer gets the message after the lease (point 1).
func TestCloseWithoutAck(t *testing.T, h *Harness) {
	a := Open(t, h, nil)
	publish(t, a, newMsg("interactive", "x.y", "keep me"))
	ds := receiveN(t, a, "interactive", 1, time.Second, 10*time.Second)
	if len(ds) != 1 {
		t.Fatal("nothing received")
	}
	if err := a.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	b := Open(t, h, nil)
	got := receiveN(t, b, "interactive", 1, 30*time.Second, time.Until(ds[0].LeaseDeadline)+15*time.Second)
	if len(got) != 1 {
		t.Fatal("message lost after its consumer closed without acking")
	}
	if got[0].ID != ds[0].ID || got[0].Attempt < 2 {
		t.Fatalf("got %s attempt %d, want %s attempt ≥ 2", got[0].ID, got[0].Attempt, ds[0].ID)
	}
	ack(t, b, got[0])
}

// TestRelease: a delivery given back with Release (a snooze, work returned
// at shutdown) comes back after its delay with the same attempt number.
func TestRelease(t *testing.T, h *Harness) {
	b := Open(t, h, nil)
	publish(t, b, newMsg("batch", "rate.limited", "wait for capacity"))
	ds := receiveN(t, b, "batch", 1, 30*time.Second, 10*time.Second)
	if len(ds) != 1 {
		t.Fatal("nothing received")
	}
	const delay = 1500 * time.Millisecond
	due := time.Now().Add(delay)
	if err := b.Release(ctxFor(t, 10*time.Second), ds[0], delay); err != nil {
		t.Fatalf("release: %v", err)
	}
	got := expectNoneBefore(t, b, "batch", due, "released message came back before its delay")
	if len(got) == 0 {
		got = receiveN(t, b, "batch", 1, 30*time.Second, 10*time.Second)
	}
	if len(got) != 1 {
		t.Fatal("released message did not come back")
	}
	if got[0].ID != ds[0].ID || got[0].Attempt != 1 {
		t.Fatalf("got %s attempt %d, want %s attempt 1 (a release spends no attempt)", got[0].ID, got[0].Attempt, ds[0].ID)
	}
	ack(t, b, got[0])
}
