package conformance

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// TestBadID: envelopes written behind the framework's back whose ID is
// empty, longer than broker.MaxKeyLen or holds control characters are never
// delivered (the runtime's ledger refuses such IDs, so they would loop);
// they are dead-lettered with ReasonUndecodable, and the messages behind
// them flow (point 11). Drivers check decoded messages with
// broker.CheckDecoded (broker.DecodeEnvelope does it for envelopes).
func TestBadID(t *testing.T, h *Harness) {
	h.require(t, CanInjectRaw)
	if h.InjectRaw == nil {
		t.Fatal("the harness must set InjectRaw, or declare why it cannot in Harness.Cannot[conformance.CanInjectRaw]: every broker can carry bytes Switchyard did not write")
	}
	b := Open(t, h, nil)
	publish(t, b, newMsg("batch", "warm.up", "x"))
	ack(t, b, receiveN(t, b, "batch", 1, 30*time.Second, 10*time.Second)...)
	ids := []string{"", strings.Repeat("i", broker.MaxKeyLen+44), "bad\nid"}
	for _, id := range ids {
		env := broker.EncodeEnvelope(&broker.Message{ID: id, Lane: "batch", Kind: "doc.embed", Body: []byte("bad id")})
		if err := h.InjectRaw(ctxFor(t, 10*time.Second), "batch", env); err != nil {
			t.Fatalf("inject: %v", err)
		}
	}
	good := publish(t, b, newMsg("batch", "doc.embed", "fine"))
	ds := receiveN(t, b, "batch", 2, 30*time.Second, 5*time.Second)
	if len(ds) != 1 || ds[0].ID != good[0].ID {
		t.Fatalf("received %d messages, want only the valid one %s", len(ds), good[0].ID)
	}
	ack(t, b, ds[0])
	dead := receiveDead(t, b, "batch", len(ids), 20*time.Second)
	if len(dead) != len(ids) {
		t.Fatalf("%d dead letters, want %d", len(dead), len(ids))
	}
	for _, d := range dead {
		if d.DeadLetter == nil || d.DeadLetter.Reason != broker.ReasonUndecodable {
			t.Errorf("dead letter record = %+v, want reason %s", d.DeadLetter, broker.ReasonUndecodable)
		}
	}
	ack(t, b, dead...)
	expectNone(t, b, "batch", 2*time.Second, "a message with a bad ID was retried")
}
