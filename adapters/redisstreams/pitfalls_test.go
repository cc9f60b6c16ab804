package redisstreams

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/broker"
)

// waitPast sleeps until every delivery's lease has ended.
func waitPast(ds []*broker.Delivery) {
	var last time.Time
	for _, d := range ds {
		if d.LeaseDeadline.After(last) {
			last = d.LeaseDeadline
		}
	}
	if w := time.Until(last) + 50*time.Millisecond; w > 0 {
		time.Sleep(w)
	}
}

func publishN(t *testing.T, b *broker.Broker, lane string, n int, tag string) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for i := 0; i < n; i++ {
		r, err := b.PublishOne(ctxFor(t, 10*time.Second), &broker.Message{Lane: lane, Kind: "pit.fall", Body: []byte(fmt.Sprintf("%s-%d", tag, i))})
		if err != nil {
			t.Fatal(err)
		}
		ids[r.ID] = true
	}
	return ids
}

// TestPendingSurviveRestart: entries a consumer leased and never acked
// come back after their leases when the consumer restarts, under its own
// consumer name or under another — the pending list of a consumer that is
// gone is not a place where messages are stranded (a known trap of Redis
// Streams consumers that only ever read ">").
func TestPendingSurviveRestart(t *testing.T) {
	t.Parallel()
	addr := sharedAddr(t)
	for _, other := range []bool{false, true} {
		name := "same-consumer"
		if other {
			name = "other-consumer"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			base := testURL(t, addr, "")
			a := openBroker(t, base+"&consumer=first", nil)
			want := publishN(t, a, "batch", 20, "p")
			got := receiveN(t, a, broker.ReceiveRequest{Lane: "batch", Lease: 500 * time.Millisecond}, 20, 10*time.Second)
			if len(got) != 20 {
				t.Fatalf("leased %d of 20", len(got))
			}
			a.Close() // a crash or restart: nothing acked
			consumer := "first"
			if other {
				consumer = "second"
			}
			b := openBroker(t, base+"&consumer="+consumer, nil)
			waitPast(got)
			back := receiveN(t, b, broker.ReceiveRequest{Lane: "batch", Lease: 30 * time.Second}, 20, 15*time.Second)
			seen := map[string]bool{}
			for _, d := range back {
				if !want[d.ID] || seen[d.ID] {
					t.Fatalf("unexpected or repeated delivery %s", d.ID)
				}
				seen[d.ID] = true
				if d.Attempt != 2 {
					t.Errorf("%s came back with attempt %d, want 2", d.ID, d.Attempt)
				}
			}
			if len(seen) != 20 {
				t.Fatalf("%d of 20 pending entries came back after the restart", len(seen))
			}
			if err := b.Ack(ctxFor(t, 10*time.Second), back...); err != nil {
				t.Fatal(err)
			}
			rdb := driverOf(b).Client()
			q := driverOf(b).keys.queue("batch", false)
			pend, err := rdb.XPending(ctxFor(t, 10*time.Second), q.stream, group).Result()
			if err != nil {
				t.Fatal(err)
			}
			if pend.Count != 0 {
				t.Fatalf("after acking everything: %d pending, want 0", pend.Count)
			}
		})
	}
}

// TestReclaimDoesNotStarveNewWork: with a backlog of expired leases far
// larger than a batch, a receive still hands out new work (at least half
// its batch), and the expired ones are not starved either.
func TestReclaimDoesNotStarveNewWork(t *testing.T) {
	t.Parallel()
	b := openBroker(t, testURL(t, sharedAddr(t), ""), nil)
	old := publishN(t, b, "batch", 200, "old")
	leased := receiveN(t, b, broker.ReceiveRequest{Lane: "batch", Lease: 300 * time.Millisecond}, 200, 15*time.Second)
	if len(leased) != 200 {
		t.Fatalf("leased %d of 200", len(leased))
	}
	waitPast(leased)
	fresh := publishN(t, b, "batch", 10, "new")
	ds, err := b.Receive(ctxFor(t, 10*time.Second), broker.ReceiveRequest{Lane: "batch", Max: 10, Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var nNew, nOld int
	for _, d := range ds {
		switch {
		case fresh[d.ID] && d.Attempt == 1:
			nNew++
		case old[d.ID] && d.Attempt == 2:
			nOld++
		default:
			t.Errorf("delivery %s with attempt %d is neither new nor reclaimed", d.ID, d.Attempt)
		}
	}
	if len(ds) != 10 || nNew < 5 || nOld < 1 {
		t.Fatalf("a batch of %d held %d new and %d reclaimed entries; want 10 with at least 5 new and some reclaimed", len(ds), nNew, nOld)
	}
}

// TestTrimNeverDropsUnacked: acked entries leave the stream, unacked ones
// stay whatever the stream's size; max_len bounds a lane by refusing
// publishes (transient), never by dropping.
func TestTrimNeverDropsUnacked(t *testing.T) {
	t.Parallel()
	b := openBroker(t, testURL(t, sharedAddr(t), "max_len=5"), nil)
	d := driverOf(b)
	q := d.keys.queue("batch", false)
	publishN(t, b, "batch", 5, "x")
	_, err := b.PublishOne(ctxFor(t, 10*time.Second), &broker.Message{Lane: "batch", Kind: "pit.fall"})
	if err == nil || broker.ClassOf(err) != broker.Transient {
		t.Fatalf("publish to a full lane = %v, want a transient refusal", err)
	}
	ds := receiveN(t, b, broker.ReceiveRequest{Lane: "batch", Lease: 30 * time.Second}, 5, 10*time.Second)
	if len(ds) != 5 {
		t.Fatalf("received %d of 5 (a publish refused as full must not have dropped anything)", len(ds))
	}
	if err := b.Ack(ctxFor(t, 10*time.Second), ds[:2]...); err != nil {
		t.Fatal(err)
	}
	// The trim (every second, on receive) removes the acked head, never
	// an unacked entry: the stream ends up exactly the three unacked.
	time.Sleep(trimEvery + 100*time.Millisecond)
	if _, err := b.Receive(ctxFor(t, 10*time.Second), broker.ReceiveRequest{Lane: "batch", Max: 1}); err != nil {
		t.Fatal(err)
	}
	if n := d.Client().XLen(ctxFor(t, 10*time.Second), q.stream).Val(); n != 3 {
		t.Fatalf("stream length %d after acking 2 of 5 and a trim, want 3 (the unacked)", n)
	}
	if _, err := b.PublishOne(ctxFor(t, 10*time.Second), &broker.Message{Lane: "batch", Kind: "pit.fall"}); err != nil {
		t.Fatalf("publish after room was made: %v", err)
	}
	// The three unacked entries are still deliverable after their leases.
	if err := b.Nack(ctxFor(t, 10*time.Second), ds[2], 0); err != nil {
		t.Fatal(err)
	}
	again := receiveN(t, b, broker.ReceiveRequest{Lane: "batch", Lease: 30 * time.Second}, 2, 10*time.Second)
	if len(again) != 2 {
		t.Fatalf("got %d of the nacked and the new entry", len(again))
	}
}

// TestForeignEntries: entries another producer XADDs — without field "e",
// or with garbage in it — are dead-lettered as undecodable with what they
// held, never delivered, never retried.
func TestForeignEntries(t *testing.T) {
	t.Parallel()
	b := openBroker(t, testURL(t, sharedAddr(t), ""), nil)
	d := driverOf(b)
	ctx := ctxFor(t, 30*time.Second)
	for _, vals := range [][]any{{"foo", "bar"}, {"e", "\x00garbage"}, {"e", ""}} {
		if err := d.Client().XAdd(ctx, &redis.XAddArgs{Stream: d.StreamKey("batch", false), Values: vals}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	good, err := b.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "ok.kind"})
	if err != nil {
		t.Fatal(err)
	}
	ds := receiveN(t, b, broker.ReceiveRequest{Lane: "batch", Lease: 30 * time.Second}, 4, 3*time.Second)
	if len(ds) != 1 || ds[0].ID != good.ID {
		t.Fatalf("received %d deliveries, want only %s", len(ds), good.ID)
	}
	dead := receiveN(t, b, broker.ReceiveRequest{Lane: "batch", Lease: 30 * time.Second, DeadLetters: true}, 3, 10*time.Second)
	if len(dead) != 3 {
		t.Fatalf("%d dead letters, want 3", len(dead))
	}
	for _, dv := range dead {
		if dv.DeadLetter == nil || dv.DeadLetter.Reason != broker.ReasonUndecodable || dv.DeadLetter.Error == "" {
			t.Errorf("dead letter %s = %+v, want reason undecodable with the cause", dv.ID, dv.DeadLetter)
		}
	}
}

// TestWrongTypeKey: a key of the namespace that holds something else is a
// permanent error, not a hang or a panic.
func TestWrongTypeKey(t *testing.T) {
	t.Parallel()
	b := openBroker(t, testURL(t, sharedAddr(t), ""), nil)
	d := driverOf(b)
	ctx := ctxFor(t, 10*time.Second)
	if err := d.Client().Set(ctx, d.keys.queue("batch", false).lease, "not a zset", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "k"}); err != nil {
		t.Fatal(err) // publishing does not touch the lease set
	}
	_, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 1})
	if err == nil || broker.ClassOf(err) != broker.Permanent {
		t.Fatalf("receive with a lease key of the wrong type = %v, want a permanent error", err)
	}
}

// TestTooLarge: the size limit is max_message_size, at publish.
func TestTooLarge(t *testing.T) {
	t.Parallel()
	b := openBroker(t, testURL(t, sharedAddr(t), "max_message_size=4096"), nil)
	_, err := b.PublishOne(ctxFor(t, 10*time.Second), &broker.Message{Lane: "batch", Kind: "k", Body: make([]byte, 5000)})
	var tl *broker.TooLargeError
	if !errors.Is(err, broker.ErrTooLarge) || !errors.As(err, &tl) || tl.Max != 4096 {
		t.Fatalf("publish of 5000 bytes = %v, want ErrTooLarge with limit 4096", err)
	}
}
