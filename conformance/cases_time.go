package conformance

import (
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// TestDelay: a message with a run-at time is not delivered before it
// (point 9).
func TestDelay(t *testing.T, h *Harness) {
	b := Open(t, h, nil)
	runAt := time.Now().Add(2 * time.Second)
	m := newMsg("scheduled", "report.daily", "later")
	m.RunAt = runAt
	publish(t, b, m)
	publish(t, b, newMsg("scheduled", "report.now", "now"))
	ds := receiveN(t, b, "scheduled", 1, 30*time.Second, 10*time.Second)
	if len(ds) != 1 || string(ds[0].Body) != "now" {
		t.Fatalf("want the undelayed message first, got %d deliveries", len(ds))
	}
	ack(t, b, ds[0])
	got := expectNoneBefore(t, b, "scheduled", runAt, "delayed message delivered before its run-at")
	if len(got) == 0 {
		got = receiveN(t, b, "scheduled", 1, 30*time.Second, 10*time.Second)
	}
	if len(got) != 1 {
		t.Fatal("delayed message not delivered within 10s after its run-at")
	}
	if time.Now().Before(runAt.Add(-100 * time.Millisecond)) {
		t.Fatalf("delivered at %s, before its run-at %s", time.Now().Format("15:04:05.000"), runAt.Format("15:04:05.000"))
	}
	if got[0].Attempt != 1 || !got[0].RunAt.Equal(m.RunAt) {
		t.Errorf("attempt %d run-at %v, want 1 and %v", got[0].Attempt, got[0].RunAt, m.RunAt)
	}
	ack(t, b, got[0])
}

// TestLongDelayHeld: a run-at beyond the broker's native maximum is held by
// the framework and still delivered on time, as attempt 1, with its fields
// restored (point 9). Options.MaxDelay shrinks the maximum so the case runs
// in seconds on every broker.
func TestLongDelayHeld(t *testing.T, h *Harness) {
	opts := *h.Options.WithDefaults()
	opts.MaxDelay = time.Second
	b := Open(t, h, &opts)
	runAt := time.Now().Add(3 * time.Second)
	m := &broker.Message{Lane: "scheduled", Kind: "reminder.send", Body: []byte("in three hops"), RunAt: runAt, IdempotencyKey: "reminder-7", Tenant: "acme"}
	rs := publish(t, b, m)
	got := expectNoneBefore(t, b, "scheduled", runAt, "held message delivered before its run-at")
	if len(got) == 0 {
		got = receiveN(t, b, "scheduled", 1, 30*time.Second, 10*time.Second)
	}
	if len(got) != 1 {
		t.Fatal("held message not delivered within 10s after its run-at")
	}
	d := got[0]
	if time.Now().Before(runAt.Add(-100 * time.Millisecond)) {
		t.Fatalf("delivered before its run-at")
	}
	if d.ID != rs[0].ID || d.Attempt != 1 || d.IdempotencyKey != "reminder-7" || !d.RunAt.Equal(m.RunAt) {
		t.Errorf("got %s attempt %d key %q run-at %v; want %s attempt 1 key reminder-7 run-at %v", d.ID, d.Attempt, d.IdempotencyKey, d.RunAt, rs[0].ID, m.RunAt)
	}
	for k := range d.Headers {
		if k == broker.HeaderHoldUntil || k == broker.HeaderHeldKey || k == broker.HeaderAttemptBase {
			t.Errorf("framework header %s leaked to the consumer", k)
		}
	}
	// The key stays claimed while the message is held and after.
	if r := publish(t, b, &broker.Message{Lane: "scheduled", Kind: "reminder.send", IdempotencyKey: "reminder-7", Tenant: "acme"})[0]; !r.Duplicate {
		ack(t, b, d)
		if more := receiveN(t, b, "scheduled", 1, 30*time.Second, 2*time.Second); len(more) > 0 {
			t.Fatal("the idempotency key of a held message was not deduplicated")
		}
		return
	}
	ack(t, b, d)
}

// TestLongNackHeld: a nack delay beyond the broker's maximum is held by the
// framework; the attempt number keeps growing (points 3, 4).
func TestLongNackHeld(t *testing.T, h *Harness) {
	opts := *h.Options.WithDefaults()
	opts.MaxDelay = time.Second
	b := Open(t, h, &opts)
	rs := publish(t, b, newMsg("batch", "retry.later", "x"))
	ds := receiveN(t, b, "batch", 1, 30*time.Second, 10*time.Second)
	if len(ds) != 1 {
		t.Fatal("nothing received")
	}
	const delay = 2500 * time.Millisecond
	due := time.Now().Add(delay)
	if err := b.Nack(ctxFor(t, 10*time.Second), ds[0], delay); err != nil {
		t.Fatalf("nack: %v", err)
	}
	got := expectNoneBefore(t, b, "batch", due, "held nack came back before its delay")
	if len(got) == 0 {
		got = receiveN(t, b, "batch", 1, 30*time.Second, 10*time.Second)
	}
	if len(got) != 1 {
		t.Fatal("held nack did not come back within 10s after its delay")
	}
	if got[0].ID != rs[0].ID || got[0].Attempt != 2 {
		t.Fatalf("got %s attempt %d, want %s attempt 2", got[0].ID, got[0].Attempt, rs[0].ID)
	}
	// And once more, to see the attempt keep counting across hops.
	if err := b.Nack(ctxFor(t, 10*time.Second), got[0], 1500*time.Millisecond); err != nil {
		t.Fatalf("nack: %v", err)
	}
	again := receiveN(t, b, "batch", 1, 30*time.Second, 15*time.Second)
	if len(again) != 1 || again[0].Attempt != 3 {
		t.Fatalf("third delivery: %d deliveries, want 1 with attempt 3", len(again))
	}
	ack(t, b, again[0])
}
