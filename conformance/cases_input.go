package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// TestTooLarge: a message over the broker's size limit is refused at
// publish with the typed error, and nothing is enqueued (point 11).
func TestTooLarge(t *testing.T, h *Harness) {
	b := Open(t, h, nil)
	max := b.Capabilities().MaxMessageSize
	if max <= 0 {
		h.skipf(t, "the driver declares no message size limit (Capabilities.MaxMessageSize = 0), so nothing can be too large")
	}
	big := &broker.Message{Lane: "batch", Kind: "doc.ingest", Body: make([]byte, max+1)}
	ok := newMsg("batch", "doc.ingest", "small")
	rs, err := b.Publish(ctxFor(t, 30*time.Second), big, ok)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	if !errors.Is(rs[0].Err, broker.ErrTooLarge) || !errors.Is(rs[0].Err, broker.ErrPermanent) {
		t.Fatalf("oversized publish error = %v, want ErrTooLarge (permanent)", rs[0].Err)
	}
	var tl *broker.TooLargeError
	if !errors.As(rs[0].Err, &tl) || tl.Max != max || tl.Size <= max {
		t.Errorf("TooLargeError = %+v, want Max %d and Size > Max", tl, max)
	}
	if rs[1].Err != nil {
		t.Fatalf("the valid message in the same batch failed: %v", rs[1].Err)
	}
	ds := receiveN(t, b, "batch", 2, 30*time.Second, 3*time.Second)
	if len(ds) != 1 || string(ds[0].Body) != "small" {
		t.Fatalf("received %d messages, want only the small one", len(ds))
	}
	ack(t, b, ds...)
	// A message exactly at the limit is accepted... where the broker's
	// limit is on the same measure. Drivers report their true limit, so a
	// message of Size() == max must go through.
	edge := &broker.Message{ID: broker.NewID(), Lane: "batch", Kind: "doc.ingest"}
	edge.Body = make([]byte, max-edge.Size())
	if _, err := b.PublishOne(ctxFor(t, 30*time.Second), edge); err != nil {
		t.Fatalf("a message of exactly the limit (%d bytes) was refused: %v", max, err)
	}
	ack(t, b, receiveN(t, b, "batch", 1, 30*time.Second, 10*time.Second)...)
}

// TestInvalid: malformed messages get a clear ErrInvalid and are not sent.
func TestInvalid(t *testing.T, h *Harness) {
	b := Open(t, h, nil)
	bad := []*broker.Message{
		{Lane: "", Kind: "k"},
		{Lane: "batch", Kind: ""},
		{Lane: "bad lane!", Kind: "k"},
		{Lane: "batch", Kind: strings.Repeat("k", broker.MaxNameLen+1)},
		{Lane: "batch", Kind: "k", IdempotencyKey: "a\nb"},
		{Lane: "batch", Kind: "k", MaxAttempts: -1},
		nil,
	}
	rs, err := b.Publish(ctxFor(t, 10*time.Second), bad...)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	for i, r := range rs {
		if !errors.Is(r.Err, broker.ErrInvalid) {
			t.Errorf("message %d: error %v, want ErrInvalid", i, r.Err)
		}
	}
	if _, err := b.Receive(ctxFor(t, 10*time.Second), broker.ReceiveRequest{Lane: "no spaces allowed"}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("receive from an invalid lane: %v, want ErrInvalid", err)
	}
	expectNone(t, b, "batch", 500*time.Millisecond, "an invalid message was enqueued")
}

// TestBadURL: unknown query parameters and schemes are clear errors.
func TestBadURL(t *testing.T, h *Harness) {
	sep := "?"
	if strings.Contains(h.URL, "?") {
		sep = "&"
	}
	ctx := ctxFor(t, 30*time.Second)
	_, err := broker.Open(ctx, h.URL+sep+"no_such_parameter=1", nil)
	if !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), "no_such_parameter") {
		t.Errorf("unknown parameter: %v, want ErrInvalid naming it", err)
	}
	_, err = broker.Open(ctx, "nosuchscheme://x", nil)
	if !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("unknown scheme: %v, want ErrInvalid", err)
	}
}

// TestStats: ready, in-flight, delayed and dead-lettered counts.
func TestStats(t *testing.T, h *Harness) {
	b := Open(t, h, nil)
	delayed := newMsg("batch", "s.t", "delayed")
	delayed.RunAt = time.Now().Add(10 * time.Minute)
	publish(t, b, newMsg("batch", "s.t", "a"), newMsg("batch", "s.t", "b"), newMsg("batch", "s.t", "c"), delayed)
	ds := receiveN(t, b, "batch", 2, time.Minute, 10*time.Second)
	if len(ds) != 2 {
		t.Fatalf("received %d, want 2", len(ds))
	}
	if err := b.DeadLetter(ctxFor(t, 10*time.Second), ds[1], &broker.DeadLetter{Reason: broker.ReasonPermanent, Error: "x"}); err != nil {
		t.Fatalf("dead-letter: %v", err)
	}
	eventually(t, 15*time.Second, func() string {
		s := stats(t, b, "batch")
		if s.Ready != 1 || s.InFlight != 1 || s.Delayed != 1 || s.DeadLettered != 1 {
			return "stats " + statsString(s) + ", want ready=1 in_flight=1 delayed=1 dead=1"
		}
		if b.Capabilities().OldestReadyAge && s.OldestReady <= 0 {
			return "OldestReady is zero with a message ready"
		}
		return ""
	})
	ack(t, b, ds[0])
	empty := stats(t, b, "never-used")
	if empty.Ready != 0 || empty.InFlight != 0 || empty.Delayed != 0 || empty.DeadLettered != 0 {
		t.Errorf("stats of an unused lane = %s, want all zero", statsString(empty))
	}
}

// TestReceiveCancel: a waiting Receive returns promptly when its context is
// cancelled (point 12: no hangs).
func TestReceiveCancel(t *testing.T, h *Harness) {
	b := Open(t, h, nil)
	// Make sure the lane exists, so the wait is a real long poll.
	publish(t, b, newMsg("interactive", "c.d", "x"))
	ack(t, b, receiveN(t, b, "interactive", 1, 30*time.Second, 10*time.Second)...)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(300 * time.Millisecond); cancel() }()
	start := time.Now()
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "interactive", Max: 1, Lease: time.Minute, Wait: 20 * time.Second})
	el := time.Since(start)
	if len(ds) != 0 {
		t.Fatalf("received %d messages from an empty lane", len(ds))
	}
	if err != nil && !broker.IsContext(err) {
		t.Errorf("cancelled receive error = %v, want nil or a context error", err)
	}
	if el > 5*time.Second {
		t.Errorf("cancelled receive took %s to return", el)
	}
}

// TestOutage: while the broker is unreachable, calls fail with transient
// errors within their deadlines instead of hanging; afterwards work resumes
// and nothing published before the outage is lost (point 12).
func TestOutage(t *testing.T, h *Harness) {
	h.require(t, CanDisrupt)
	if h.Disrupt == nil {
		h.skipf(t, "the harness sets no Disrupt and does not declare why (Harness.Cannot[conformance.CanDisrupt]): the outage case cannot run")
	}
	b := Open(t, h, nil)
	before := publish(t, b, newMsg("batch", "o.k", "before"))
	restore, err := h.Disrupt(ctxFor(t, 60*time.Second))
	if err != nil {
		t.Fatalf("disrupt: %v", err)
	}
	restored := false
	defer func() {
		if !restored {
			_ = restore(context.Background())
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	start := time.Now()
	_, perr := b.PublishOne(ctx, newMsg("batch", "o.k", "during"))
	cancel()
	if el := time.Since(start); el > 15*time.Second {
		t.Errorf("publish during the outage took %s", el)
	}
	if perr != nil && broker.ClassOf(perr) == broker.Permanent {
		t.Errorf("publish during the outage: %v is classified permanent, want transient or unknown outcome", perr)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	start = time.Now()
	_, rerr := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 1, Lease: 30 * time.Second, Wait: time.Second})
	cancel()
	if el := time.Since(start); el > 15*time.Second {
		t.Errorf("receive during the outage took %s", el)
	}
	if rerr != nil && broker.ClassOf(rerr) == broker.Permanent {
		t.Errorf("receive during the outage: %v is classified permanent", rerr)
	}
	if err := restore(ctxFor(t, 60*time.Second)); err != nil {
		t.Fatalf("restore: %v", err)
	}
	restored = true
	// Work resumes: the message from before the outage is there, and new
	// publishes succeed (allowing the adapter time to reconnect).
	var after broker.PublishResult
	eventually(t, 60*time.Second, func() string {
		r, err := b.PublishOne(ctxFor(t, 10*time.Second), newMsg("batch", "o.k", "after"))
		if err != nil {
			return "publish after restore: " + err.Error()
		}
		after = r
		return ""
	})
	want := map[string]bool{before[0].ID: true, after.ID: true}
	got := map[string]bool{}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) && !(got[before[0].ID] && got[after.ID]) {
		ds, err := b.Receive(ctxFor(t, 15*time.Second), broker.ReceiveRequest{Lane: "batch", Max: 10, Lease: 30 * time.Second, Wait: time.Second})
		if err != nil {
			continue // still reconnecting
		}
		for _, d := range ds {
			got[d.ID] = true
			_ = b.Ack(ctxFor(t, 10*time.Second), d)
		}
	}
	for id := range want {
		if !got[id] {
			t.Errorf("message %s lost across the outage", id)
		}
	}
}
