package conformance

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// TestNackWithError: a nack that carries the failed attempt's error
// (Broker.NackWithError, what the scheduler uses for retries) behaves as
// Nack on every adapter — drivers that record the error
// (broker.NackErrorer) and those that do not alike: the message comes back
// no earlier than its delay with the next attempt, once, and an error text
// of any length or encoding is no reason to fail.
func TestNackWithError(t *testing.T, h *Harness) {
	b := Open(t, h, nil)
	m := newMsg("batch", "x.y", "z")
	publish(t, b, m)
	ds := receiveN(t, b, "batch", 1, 30*time.Second, 10*time.Second)
	if len(ds) != 1 {
		t.Fatal("nothing received")
	}
	const delay = time.Second
	due := time.Now().Add(delay)
	if err := b.NackWithError(ctxFor(t, 10*time.Second), ds[0], delay, errors.New("upstream 503")); err != nil {
		t.Fatalf("nack with error: %v", err)
	}
	got := expectNoneBefore(t, b, "batch", due, "nacked message came back before its delay")
	if len(got) == 0 {
		got = receiveN(t, b, "batch", 1, 30*time.Second, 10*time.Second)
	}
	if len(got) != 1 || got[0].ID != ds[0].ID || got[0].Attempt != 2 {
		t.Fatalf("after NackWithError got %d deliveries (want %s with attempt 2)", len(got), ds[0].ID)
	}
	// A long error with invalid UTF-8: cut and cleaned, never refused.
	long := errors.New("bad \xff " + strings.Repeat("x", 3*broker.MaxNackErrorLen))
	if err := b.NackWithError(ctxFor(t, 10*time.Second), got[0], 0, long); err != nil {
		t.Fatalf("nack with a long, invalid error: %v", err)
	}
	again := receiveN(t, b, "batch", 1, 30*time.Second, 10*time.Second)
	if len(again) != 1 || again[0].Attempt != 3 || again[0].ID != m.ID {
		t.Fatalf("after a zero-delay NackWithError got %d deliveries (want 1 with attempt 3)", len(again))
	}
	ack(t, b, again[0])
	expectNone(t, b, "batch", 300*time.Millisecond, "an acked message came back")
}
