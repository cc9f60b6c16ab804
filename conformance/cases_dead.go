package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

func receiveDead(t testing.TB, b *broker.Broker, lane string, n int, timeout time.Duration) []*broker.Delivery {
	t.Helper()
	return receiveUntil(t, b, broker.ReceiveRequest{Lane: lane, Lease: 30 * time.Second, DeadLetters: true}, n, timeout)
}

// TestDeadLetter: a dead-lettered message leaves the live queue and sits in
// the lane's dead-letter queue with its reason, error and attempt history;
// replay puts it back as a fresh message (point 5).
func TestDeadLetter(t *testing.T, h *Harness) {
	b := Open(t, h, nil)
	rs := publish(t, b, newMsg("batch", "pdf.parse", "bad pdf"))
	ds := receiveN(t, b, "batch", 1, 30*time.Second, 10*time.Second)
	if len(ds) != 1 {
		t.Fatal("nothing received")
	}
	start := time.Now().Add(-time.Second).UTC().Truncate(time.Millisecond)
	dl := &broker.DeadLetter{
		Reason: broker.ReasonPermanent, Error: "parse: unexpected EOF",
		Attempts: []broker.AttemptRecord{{Attempt: 1, Start: start, Duration: 250 * time.Millisecond, Class: "permanent", Error: "parse: unexpected EOF", Worker: "w1"}},
	}
	if err := b.DeadLetter(ctxFor(t, 10*time.Second), ds[0], dl); err != nil {
		t.Fatalf("dead-letter: %v", err)
	}
	expectNone(t, b, "batch", 1500*time.Millisecond, "a dead-lettered message was delivered from the live queue")
	eventually(t, 10*time.Second, func() string {
		s := stats(t, b, "batch")
		if s.DeadLettered != 1 || s.Ready != 0 || s.InFlight != 0 {
			return "stats " + statsString(s) + ", want dead=1 and nothing live"
		}
		return ""
	})
	dead := receiveDead(t, b, "batch", 1, 10*time.Second)
	if len(dead) != 1 {
		t.Fatal("dead-letter queue is empty")
	}
	d := dead[0]
	if d.ID != rs[0].ID || string(d.Body) != "bad pdf" || d.Kind != "pdf.parse" {
		t.Errorf("dead letter = %s %s %q, want %s pdf.parse %q", d.ID, d.Kind, d.Body, rs[0].ID, "bad pdf")
	}
	if d.DeadLetter == nil {
		t.Fatal("dead letter has no record")
	}
	if d.DeadLetter.Reason != broker.ReasonPermanent || d.DeadLetter.Error != dl.Error {
		t.Errorf("record = %s %q, want %s %q", d.DeadLetter.Reason, d.DeadLetter.Error, broker.ReasonPermanent, dl.Error)
	}
	if len(d.DeadLetter.Attempts) != 1 || d.DeadLetter.Attempts[0].Error != "parse: unexpected EOF" || d.DeadLetter.Attempts[0].Worker != "w1" ||
		!d.DeadLetter.Attempts[0].Start.Equal(start) || d.DeadLetter.Attempts[0].Duration != 250*time.Millisecond {
		t.Errorf("attempt history = %+v, want %+v", d.DeadLetter.Attempts, dl.Attempts)
	}
	if d.DeadLetter.At.IsZero() {
		t.Error("dead letter has no time")
	}
	if err := b.Replay(ctxFor(t, 10*time.Second), d); err != nil {
		t.Fatalf("replay: %v", err)
	}
	back := receiveN(t, b, "batch", 1, 30*time.Second, 10*time.Second)
	if len(back) != 1 {
		t.Fatal("replayed message did not come back to the live queue")
	}
	if back[0].ID != rs[0].ID || back[0].Attempt != 1 || back[0].DeadLetter != nil {
		t.Errorf("replayed = %s attempt %d record %v, want %s attempt 1 and no record", back[0].ID, back[0].Attempt, back[0].DeadLetter, rs[0].ID)
	}
	ack(t, b, back[0])
	if left := receiveDead(t, b, "batch", 1, time.Second); len(left) != 0 {
		t.Errorf("dead-letter queue still holds %s after replay", left[0].ID)
	}
	// ReplayDead moves everything back in one call.
	publish(t, b, newMsg("batch", "pdf.parse", "a"), newMsg("batch", "pdf.parse", "b"))
	two := receiveN(t, b, "batch", 2, 30*time.Second, 10*time.Second)
	for _, d := range two {
		if err := b.DeadLetter(ctxFor(t, 10*time.Second), d, &broker.DeadLetter{Reason: broker.ReasonUnknownKind}); err != nil {
			t.Fatalf("dead-letter: %v", err)
		}
	}
	n, err := b.ReplayDead(ctxFor(t, 30*time.Second), "batch", 0)
	if err != nil || n != 2 {
		t.Fatalf("ReplayDead = %d, %v; want 2, nil", n, err)
	}
	ack(t, b, receiveN(t, b, "batch", 2, 30*time.Second, 10*time.Second)...)
}

// TestMaxAttempts: a message whose consumers never finish (they crash, or
// their leases end) reaches the dead-letter queue after its attempt limit
// and is not delivered again (point 5).
func TestMaxAttempts(t *testing.T, h *Harness) {
	b := Open(t, h, nil)
	m := newMsg("batch", "poison.pill", "crashes every consumer")
	m.MaxAttempts = 2
	publish(t, b, m)
	for attempt := 1; attempt <= 2; attempt++ {
		ds := receiveN(t, b, "batch", 1, time.Second, 15*time.Second)
		if len(ds) != 1 {
			t.Fatalf("attempt %d not delivered", attempt)
		}
		if ds[0].Attempt != attempt {
			t.Fatalf("attempt = %d, want %d", ds[0].Attempt, attempt)
		}
		waitPast(ds[0].LeaseDeadline) // abandon it, as a crashed consumer would
	}
	expectNone(t, b, "batch", 3*time.Second, "delivered beyond its attempt limit")
	dead := receiveDead(t, b, "batch", 1, 15*time.Second)
	if len(dead) != 1 {
		t.Fatal("message over its attempt limit is not in the dead-letter queue")
	}
	if dead[0].ID != m.ID {
		t.Fatalf("dead letter %s, want %s", dead[0].ID, m.ID)
	}
	if r := dead[0].DeadLetter.Reason; r != broker.ReasonMaxAttempts && r != broker.ReasonDeliveryLimit {
		t.Errorf("reason = %q, want %q (or %q from native redrive)", r, broker.ReasonMaxAttempts, broker.ReasonDeliveryLimit)
	}
	ack(t, b, dead[0])
}

// TestUndecodable: bytes that are not a Switchyard message are never
// delivered or retried; they go to the dead-letter queue with a reason, and
// they do not block the messages behind them (point 11).
func TestUndecodable(t *testing.T, h *Harness) {
	h.require(t, CanInjectRaw)
	if h.InjectRaw == nil {
		t.Fatal("the harness must set InjectRaw, or declare why it cannot in Harness.Cannot[conformance.CanInjectRaw]: every broker can carry bytes Switchyard did not write")
	}
	b := Open(t, h, nil)
	// Create the lane's queues first, as a running system would have them.
	publish(t, b, newMsg("batch", "warm.up", "x"))
	ack(t, b, receiveN(t, b, "batch", 1, 30*time.Second, 10*time.Second)...)
	if err := h.InjectRaw(ctxFor(t, 10*time.Second), "batch", []byte("\x00\xffnot a message{")); err != nil {
		t.Fatalf("inject: %v", err)
	}
	good := publish(t, b, newMsg("batch", "doc.embed", "fine"))
	ds := receiveN(t, b, "batch", 2, 30*time.Second, 5*time.Second)
	if len(ds) != 1 || ds[0].ID != good[0].ID {
		ids := []string{}
		for _, d := range ds {
			ids = append(ids, fmt.Sprintf("%s(kind %q)", d.ID, d.Kind))
		}
		t.Fatalf("received %v, want only the valid message %s", ids, good[0].ID)
	}
	ack(t, b, ds[0])
	dead := receiveDead(t, b, "batch", 1, 15*time.Second)
	if len(dead) != 1 {
		t.Fatal("the undecodable message is not in the dead-letter queue")
	}
	if dead[0].DeadLetter == nil || dead[0].DeadLetter.Reason != broker.ReasonUndecodable {
		t.Fatalf("dead letter record = %+v, want reason %s", dead[0].DeadLetter, broker.ReasonUndecodable)
	}
	ack(t, b, dead[0])
	expectNone(t, b, "batch", 2*time.Second, "the undecodable message was retried")
}
