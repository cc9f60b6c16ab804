//go:build !switchyard_fuzzbuild

package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// TestOps_PeekAndListTakeNothingEveryAdapter (issue 20, item 1): on every
// broker that can browse, peeking and listing dead letters change neither
// the lane's order, nor attempts, nor the oldest ready age, and two
// listings at once both see every dead letter. On the brokers that cannot
// (RabbitMQ, SQS) the result says it read by leasing.
func TestOps_PeekAndListTakeNothingEveryAdapter(t *testing.T) {
	for _, kind := range []string{"embedded", "rabbitmq", "nats", "asynq", "redisstreams", "sqs"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnvURL(t, adapterURL(t, kind, adapterNamespace()), true, []string{"interactive", "batch"})
			var want []string
			for i := range 4 {
				r, err := e.ops.Enqueue(e.ctx, Scope{}, EnqueueRequest{Kind: "pdf.parse", Lane: "interactive", Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, r.ID)
			}
			browses := e.b.CanBrowse()
			time.Sleep(1200 * time.Millisecond)
			before := e.stats("interactive")
			for range 2 {
				r, err := e.ops.PeekLane(e.ctx, Scope{}, "interactive", 1)
				if err != nil || len(r.Messages) != 1 {
					t.Fatalf("peek -n 1: %+v %v", r, err)
				}
				if !browses {
					if r.Mode != ReadLease {
						t.Fatalf("peek on a broker that cannot browse says %q, want %q", r.Mode, ReadLease)
					}
					return // today's behaviour there, marked; nothing more to prove
				}
				if r.Mode != ReadBrowse || r.Messages[0].ID != want[0] {
					t.Fatalf("peek -n 1 = %s (%s), want %s (browse)", r.Messages[0].ID, r.Mode, want[0])
				}
			}
			r, err := e.ops.PeekLane(e.ctx, Scope{}, "interactive", 10)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range r.Messages {
				got = append(got, m.ID)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("after two peeks the lane reads %v, want %v (unchanged)", got, want)
			}
			after := e.stats("interactive")
			if after.Ready != 4 || after.InFlight != 0 {
				t.Fatalf("after peeking: %+v", after)
			}
			if e.b.Capabilities().OldestReadyAge && after.OldestReady < before.OldestReady {
				t.Fatalf("peeking reset the oldest ready age: %s before, %s after", before.OldestReady, after.OldestReady)
			}
			for i, id := range want {
				d := e.receiveOne("interactive")
				if d.ID != id || d.Attempt != 1 {
					t.Fatalf("delivery %d = %s attempt %d, want %s attempt 1", i, d.ID, d.Attempt, id)
				}
			}

			// Dead letters: two listings at once both see all of them.
			for range 3 {
				if _, err := e.ops.Enqueue(e.ctx, Scope{}, EnqueueRequest{Kind: "pdf.parse", Lane: "batch", Args: json.RawMessage(`{}`)}); err != nil {
					t.Fatal(err)
				}
			}
			if n := len(e.killN("batch", broker.ReasonPermanent, 3)); n != 3 {
				t.Fatalf("dead-lettered %d of 3", n)
			}
			var wg sync.WaitGroup
			lists := make([]*DeadListing, 4)
			errs := make([]error, 4)
			for i := range lists {
				wg.Add(1)
				go func() {
					defer wg.Done()
					lists[i], errs[i] = e.ops.DeadList(e.ctx, Scope{}, DeadFilter{Lane: "batch"})
				}()
			}
			wg.Wait()
			for i, l := range lists {
				if errs[i] != nil || len(l.Items) != 3 || l.Mode != ReadBrowse || l.More || l.Truncated {
					t.Fatalf("concurrent listing %d: %+v %v, want all 3 dead letters, browsed", i, l, errs[i])
				}
			}
			if s := e.stats("batch"); s.DeadLettered != 3 || s.InFlight != 0 {
				t.Errorf("after listing: %+v", s)
			}
			// A listing that stops at its limit says so.
			l, err := e.ops.DeadList(e.ctx, Scope{}, DeadFilter{Lane: "batch", Limit: 2})
			if err != nil || len(l.Items) != 2 || !l.More {
				t.Fatalf("listing with limit 2: %+v %v, want 2 and More", l, err)
			}
		})
	}
}

// TestOps_UnknownLanes (issue 20, item 3): peek, dead-letter listing, move,
// pause and ingestion refuse a lane nobody knows, naming the known ones.
func TestOps_UnknownLanes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	checks := map[string]func() error{
		"peek":     func() error { _, err := e.ops.Peek(e.ctx, Scope{}, "nosuch", 1); return err },
		"dlq ls":   func() error { _, err := e.ops.DeadLetters(e.ctx, Scope{}, DeadFilter{Lane: "nosuch"}); return err },
		"dlq show": func() error { _, err := e.ops.DeadLetter(e.ctx, Scope{}, "nosuch", "x"); return err },
		"purge":    func() error { _, err := e.ops.Purge(e.ctx, Scope{}, DeadFilter{Lane: "nosuch"}, "t", nil); return err },
		"move": func() error {
			_, err := e.ops.Move(e.ctx, Scope{}, DeadFilter{Lane: "batch"}, "nosuch", "t", nil)
			return err
		},
		"pause":  func() error { return e.ops.PauseLane(e.ctx, "nosuch", "t") },
		"resume": func() error { return e.ops.ResumeLane(e.ctx, "nosuch", "t") },
		"enqueue (tenant token)": func() error {
			_, err := e.ops.Enqueue(e.ctx, Scope{Tenant: "acme"}, EnqueueRequest{Kind: "pdf.parse", Lane: "nosuch", Args: json.RawMessage(`{}`)})
			return err
		},
	}
	for name, f := range checks {
		err := f()
		if !errors.Is(err, ErrUnknownLane) || !errors.Is(err, broker.ErrInvalid) ||
			!strings.Contains(err.Error(), `unknown lane "nosuch" (known lanes: batch, human-review, interactive, scheduled)`) {
			t.Errorf("%s on an unknown lane: %v, want ErrUnknownLane naming the known lanes", name, err)
		}
	}
	if s := e.stats("nosuch"); s.Ready != 0 {
		t.Errorf("the unknown lane got messages: %+v", s)
	}
	// A lane the broker holds messages in is known.
	if _, err := e.b.PublishOne(e.ctx, &broker.Message{Lane: "reports", Kind: "pdf.parse", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if ms, err := e.ops.Peek(e.ctx, Scope{}, "reports", 1); err != nil || len(ms) != 1 {
		t.Errorf("peek at a lane with messages: %d %v", len(ms), err)
	}
}

// TestOps_DeadAttemptsMade (issue 20, item 8): without a ledger a dead
// letter whose history holds only its last attempt still counts every
// attempt it had.
func TestOps_DeadAttemptsMade(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	id := e.enqueue("batch", "", `{}`)
	var last *broker.Delivery
	for attempt := 1; attempt <= 2; attempt++ {
		ds, err := e.b.Receive(e.ctx, broker.ReceiveRequest{Lane: "batch", Max: 1, Lease: time.Minute, Wait: 5 * time.Second})
		if err != nil || len(ds) != 1 || ds[0].Attempt != attempt {
			t.Fatalf("attempt %d: %v %v", attempt, ds, err)
		}
		last = ds[0]
		if attempt == 1 {
			if err := e.b.Nack(e.ctx, last, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	dl := &broker.DeadLetter{Reason: broker.ReasonMaxAttempts, Error: "attempt 2 of 2 failed: boom",
		Attempts: []broker.AttemptRecord{{Attempt: 2, Error: "boom"}}}
	if err := e.b.DeadLetter(e.ctx, last, dl); err != nil {
		t.Fatal(err)
	}
	it, err := e.ops.DeadLetter(e.ctx, Scope{}, "batch", id)
	if err != nil || it.AttemptsMade != 2 || len(it.Attempts) != 1 {
		t.Fatalf("dead letter: %+v %v, want 2 attempts made with a history of 1", it, err)
	}
}
