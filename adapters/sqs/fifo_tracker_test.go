package sqs

import (
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

func trackerDelivery(queue, group, id string) (*handle, *broker.Delivery) {
	h := &handle{queue: queue, group: group, receipt: id}
	return h, &broker.Delivery{Message: broker.Message{ID: id}, Handle: h, LeaseDeadline: time.Now().Add(time.Minute)}
}

// TestGroupTracker: of several messages of one group in one response only
// the first is handed out; the next follows its ack, a nack releases the
// rest, and a fresh response from SQS replaces stale state.
func TestGroupTracker(t *testing.T) {
	t.Parallel()
	g := newGroupTracker()
	h1, d1 := trackerDelivery("q", "k:a", "1")
	h2, d2 := trackerDelivery("q", "k:a", "2")
	h3, d3 := trackerDelivery("q", "k:a", "3")
	hb, db := trackerDelivery("q", "k:b", "b")
	if !g.admit(h1, d1, true) || g.admit(h2, d2, false) || g.admit(h3, d3, false) || !g.admit(hb, db, true) {
		t.Fatal("admit: want only the first of each group handed out")
	}
	if r := g.ready("q", 10); len(r) != 0 {
		t.Fatalf("ready while the group is busy: %d", len(r))
	}
	if held := g.held(h1); len(held) != 2 || held[0] != d2 || held[1] != d3 {
		t.Fatalf("held behind 1: %v", held)
	}
	if rest := g.done(h1, false); len(rest) != 0 {
		t.Fatal("ack released the held messages")
	}
	if r := g.ready("other", 10); len(r) != 0 {
		t.Fatal("ready for another queue")
	}
	r := g.ready("q", 10)
	if len(r) != 1 || r[0] != d2 {
		t.Fatalf("after ack of 1: ready %v, want message 2", r)
	}
	if rest := g.done(h1, true); rest != nil {
		t.Fatal("a stale done acted")
	}
	if rest := g.done(h2, true); len(rest) != 1 || rest[0] != d3 {
		t.Fatalf("nack of 2 released %v, want message 3", rest)
	}
	if r := g.ready("q", 10); len(r) != 0 {
		t.Fatal("released messages still held")
	}
	// SQS redelivers group a: the tracker's memory of it is replaced.
	h4, d4 := trackerDelivery("q", "k:a", "4")
	g.admit(h3, d3, true)
	if !g.admit(h4, d4, true) {
		t.Fatal("a fresh response's first message was held back")
	}
	if got := g.drain(); len(got) != 0 {
		t.Fatalf("drain: %v", got)
	}
}

func TestDedupCache(t *testing.T) {
	t.Parallel()
	c := newDedupCache(time.Minute)
	now := time.Now()
	if _, dup := c.claim("q", "k", "1", now); dup {
		t.Fatal("first claim is a duplicate")
	}
	if id, dup := c.claim("q", "k", "2", now.Add(time.Second)); !dup || id != "1" {
		t.Fatalf("second claim = %s, %v", id, dup)
	}
	if _, dup := c.claim("q", "k", "1", now); dup {
		t.Fatal("the same message re-sent counts as a duplicate of itself")
	}
	if _, dup := c.claim("q2", "k", "3", now); dup {
		t.Fatal("keys leak across queues")
	}
	if _, dup := c.claim("q", "k", "4", now.Add(2*time.Minute)); dup {
		t.Fatal("claim outlived the window")
	}
	c.release("q", "k", "4")
	if _, dup := c.claim("q", "k", "5", now.Add(2*time.Minute)); dup {
		t.Fatal("released claim still held")
	}
}
