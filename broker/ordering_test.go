package broker_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/sqlite"
)

// Without native ordering and without a shared sequencer a keyed publish
// is refused with a typed error that says what is missing, and nothing is
// sent; unkeyed messages still go.
func TestOrdering_NoSequencerRefusesKeyedPublish(t *testing.T) {
	t.Parallel()
	b := openReducedAt(t, filepath.Join(t.TempDir(), "q.db"), nil)
	if b.Sequencer() != nil {
		t.Fatal("a broker opened without a ledger or Options.Sequencer must have no sequencer")
	}
	rs, err := b.Publish(context.Background(),
		&broker.Message{Lane: "l", Kind: "k", OrderingKey: "conv-1"},
		&broker.Message{Lane: "l", Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(rs[0].Err, broker.ErrNoSequencer) || broker.ClassOf(rs[0].Err) != broker.Permanent {
		t.Fatalf("keyed publish: err = %v, want a permanent ErrNoSequencer", rs[0].Err)
	}
	if msg := rs[0].Err.Error(); !strings.Contains(msg, "ledger") || !strings.Contains(msg, "Options.Sequencer") {
		t.Errorf("the error should say how to fix it: %s", msg)
	}
	if rs[1].Err != nil {
		t.Fatalf("unkeyed publish: %v", rs[1].Err)
	}
	st, err := b.Stats(context.Background(), "l")
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready+st.Delayed != 1 {
		t.Fatalf("%d messages on the lane, want only the unkeyed one", st.Ready+st.Delayed)
	}
}

// A ledger given as the Dedup store is found as the sequencer too, and
// AdoptSequencer hands one over later; a broker that has one keeps it.
func TestOrdering_SequencerFromLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	L, err := ledger.Open(ctx, "sqlite://"+filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L.Close() })
	b := openReducedAt(t, filepath.Join(dir, "a.db"), &broker.Options{Dedup: L})
	if b.Sequencer() == nil {
		t.Fatal("the ledger given as Dedup should order keys too")
	}
	c := openReducedAt(t, filepath.Join(dir, "b.db"), nil)
	if !c.AdoptSequencer(ledger.SequencerOf(L)) || c.Sequencer() == nil {
		t.Fatal("AdoptSequencer should take the ledger's sequencer")
	}
	mem := broker.NewMemorySequencer()
	if c.AdoptSequencer(mem) {
		t.Fatal("a broker with a sequencer must keep it")
	}
	native, err := broker.Open(ctx, "embedded://"+filepath.Join(dir, "n.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { native.Close() })
	if !native.AdoptSequencer(nil) || native.Sequencer() != nil {
		t.Fatal("a broker that orders natively needs no sequencer")
	}
}

// Two Brokers in one process (two "processes" of a fleet) sharing the
// ledger's sequencer: the key's second message waits while the first is
// leased by the other Broker, and runs after it is acked.
func TestOrdering_TwoBrokersShareLedgerSequencer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	L, err := ledger.Open(ctx, "sqlite://"+filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L.Close() })
	q := filepath.Join(dir, "q.db")
	b1 := openReducedAt(t, q, &broker.Options{Dedup: L, OrderingRetry: 50 * time.Millisecond})
	b2 := openReducedAt(t, q, &broker.Options{Dedup: L, OrderingRetry: 50 * time.Millisecond})
	for _, body := range []string{"A", "B"} {
		if _, err := b1.PublishOne(ctx, &broker.Message{Lane: "l", Kind: "k", Body: []byte(body), OrderingKey: "conv"}); err != nil {
			t.Fatal(err)
		}
	}
	first := recvKeyed(t, b1, 5*time.Second)
	if string(first.Body) != "A" {
		t.Fatalf("first = %q, want A", first.Body)
	}
	if got := recv(t, b2, "l", 700*time.Millisecond); len(got) != 0 {
		t.Fatalf("the other broker started %q while A runs", got[0].Body)
	}
	if err := b1.Ack(ctx, first); err != nil {
		t.Fatal(err)
	}
	// B is parked in whichever Broker received it (next in line), or back
	// on the broker: ask both.
	var second *broker.Delivery
	for deadline := time.Now().Add(10 * time.Second); second == nil && time.Now().Before(deadline); {
		for _, b := range []*broker.Broker{b2, b1} {
			if ds := recv(t, b, "l", 200*time.Millisecond); len(ds) > 0 {
				second = ds[0]
				break
			}
		}
	}
	if second == nil {
		t.Fatal("B never came")
	}
	if string(second.Body) != "B" {
		t.Fatalf("second = %q, want B", second.Body)
	}
	if _, ok := second.Headers[broker.HeaderOrderSeq]; ok {
		t.Error("the framework's sequence header leaked to the consumer")
	}
}

func recvKeyed(t *testing.T, b *broker.Broker, wait time.Duration) *broker.Delivery {
	t.Helper()
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if ds := recv(t, b, "l", time.Until(deadline)); len(ds) > 0 {
			if len(ds) != 1 {
				t.Fatalf("%d messages of one key at once", len(ds))
			}
			return ds[0]
		}
	}
	t.Fatal("nothing received")
	return nil
}

// A keyed message whose sequence header is missing, malformed or never
// assigned is dead-lettered with ReasonBadSequence, never run out of
// order or left holding its key.
func TestOrdering_BadSequenceDeadLettered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	L, err := ledger.Open(ctx, "sqlite://"+filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L.Close() })
	b := openReducedAt(t, filepath.Join(dir, "q.db"), &broker.Options{Dedup: L})
	// Number the key once so that the row exists.
	if _, err := b.PublishOne(ctx, &broker.Message{Lane: "l", Kind: "k", Body: []byte("ok"), OrderingKey: "conv"}); err != nil {
		t.Fatal(err)
	}
	bad := map[string]map[string]string{
		"missing":   nil,
		"malformed": {broker.HeaderOrderSeq: "12x"},
		"zero":      {broker.HeaderOrderSeq: "0"},
		"unknown":   {broker.HeaderOrderSeq: "9223372036854775000"},
	}
	for id, h := range bad {
		m := &broker.Message{ID: id, Lane: "l", Kind: "k", OrderingKey: "conv", Headers: h, EnqueuedAt: time.Now()}
		if rs, err := b.Driver().Publish(ctx, []*broker.Message{m}); err != nil || rs[0].Err != nil {
			t.Fatalf("inject %s: %v %v", id, err, rs)
		}
	}
	good := recvKeyed(t, b, 5*time.Second)
	if string(good.Body) != "ok" {
		t.Fatalf("got %q, want the valid message", good.Body)
	}
	if err := b.Ack(ctx, good); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var dead []*broker.Delivery
	for len(dead) < len(bad) && time.Now().Before(deadline) {
		_ = recv(t, b, "l", 200*time.Millisecond) // drives the filter
		ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "l", Max: 10, Lease: time.Minute, DeadLetters: true})
		if err != nil {
			t.Fatal(err)
		}
		dead = append(dead, ds...)
	}
	if len(dead) != len(bad) {
		t.Fatalf("%d dead letters, want %d", len(dead), len(bad))
	}
	for _, d := range dead {
		if d.DeadLetter == nil || d.DeadLetter.Reason != broker.ReasonBadSequence || d.DeadLetter.Error == "" {
			t.Errorf("%s: dead letter %+v, want reason %s with an error", d.ID, d.DeadLetter, broker.ReasonBadSequence)
		}
	}
}

// A keyed message parked by a Broker that then stops receiving (its
// slots busy, say) is given back to the broker when its parking time is
// up, and another consumer runs it; nothing waits for the lease.
func TestOrdering_ParkedMessageGivenBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	L, err := ledger.Open(ctx, "sqlite://"+filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L.Close() })
	q := filepath.Join(dir, "q.db")
	b1 := openReducedAt(t, q, &broker.Options{Dedup: L, OrderingRetry: 50 * time.Millisecond})
	b2 := openReducedAt(t, q, &broker.Options{Dedup: L, OrderingRetry: 50 * time.Millisecond})
	for _, body := range []string{"A", "B"} {
		if _, err := b1.PublishOne(ctx, &broker.Message{Lane: "l", Kind: "k", Body: []byte(body), OrderingKey: "conv"}); err != nil {
			t.Fatal(err)
		}
	}
	// Both arrive in one receive: A runs, B (next in line) is parked in b1.
	ds, err := b1.Receive(ctx, broker.ReceiveRequest{Lane: "l", Max: 10, Lease: time.Minute, Wait: 2 * time.Second})
	if err != nil || len(ds) != 1 || string(ds[0].Body) != "A" {
		t.Fatalf("first receive: %d deliveries, %v; want A alone", len(ds), err)
	}
	if err := b1.Ack(ctx, ds[0]); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	b := recvKeyed(t, b2, 15*time.Second) // b1 never receives again
	if string(b.Body) != "B" {
		t.Fatalf("got %q, want B", b.Body)
	}
	if waited := time.Since(began); waited > 10*time.Second {
		t.Errorf("B came back after %v: it waited for its lease, not its parking time", waited)
	}
}

// flakySeq fails its first Release calls, as a shared ledger does for a
// moment under load (SQLite's writer lock held by another process).
type flakySeq struct {
	broker.Sequencer
	fails    int
	released int
}

func (f *flakySeq) Release(ctx context.Context, lane, key string, seq int64, done bool) error {
	if f.fails > 0 {
		f.fails--
		return errors.New("database is locked")
	}
	f.released++
	return f.Sequencer.Release(ctx, lane, key, seq, done)
}

// A release that fails for a moment is retried: the key's next message
// starts right after the ack instead of waiting for the stall window.
func TestOrdering_ReleaseRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	seq := &flakySeq{Sequencer: broker.NewMemorySequencer(), fails: 2}
	b := openReducedAt(t, filepath.Join(t.TempDir(), "q.db"), &broker.Options{Sequencer: seq})
	for _, id := range []string{"a", "b"} {
		if _, err := b.Publish(ctx, &broker.Message{ID: id, Lane: "l", Kind: "k", OrderingKey: "conv"}); err != nil {
			t.Fatal(err)
		}
	}
	ds := recv(t, b, "l", time.Second)
	if len(ds) != 1 || ds[0].ID != "a" {
		t.Fatalf("first receive: %d deliveries, want a alone", len(ds))
	}
	if err := b.Ack(ctx, ds[0]); err != nil {
		t.Fatal(err)
	}
	if seq.released != 1 || seq.fails != 0 {
		t.Fatalf("release landed %d times with %d failures left, want once after two failures", seq.released, seq.fails)
	}
	var got []*broker.Delivery
	for range 50 {
		if got = recv(t, b, "l", 200*time.Millisecond); len(got) > 0 {
			break
		}
	}
	if len(got) != 1 || got[0].ID != "b" {
		t.Fatalf("after the ack: %d deliveries, want b", len(got))
	}
}

// A delivery whose settling failed for good is forgotten (Broker.Forget):
// b keeps no entry for it, its key stays held, and its redelivery after the
// lease takes its place over, so the key's next message still runs after it.
func TestOrdering_ForgetAfterFailedSettle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openReducedAt(t, filepath.Join(t.TempDir(), "q.db"), &broker.Options{Sequencer: broker.NewMemorySequencer()})
	for _, id := range []string{"a", "b"} {
		if _, err := b.Publish(ctx, &broker.Message{ID: id, Lane: "l", Kind: "k", OrderingKey: "conv"}); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "l", Max: 10, Lease: 300 * time.Millisecond, Wait: time.Second})
	if err != nil || len(ds) != 1 || ds[0].ID != "a" {
		t.Fatalf("first receive: %d deliveries (%v), want a alone", len(ds), err)
	}
	if n := broker.Tracked(b); n != 1 {
		t.Fatalf("tracked %d deliveries after the receive, want 1", n)
	}
	b.Forget(ds[0]) // as the runtime does after an ack that failed for good
	b.Forget(ds[0])
	b.Forget(nil)
	if n := broker.Tracked(b); n != 0 {
		t.Fatalf("tracked %d deliveries after Forget, want 0", n)
	}
	// The key stays held: b does not run while a's lease lasts, and a
	// comes back, first, once it has passed.
	var got []*broker.Delivery
	for range 50 {
		if got = recv(t, b, "l", 200*time.Millisecond); len(got) > 0 {
			break
		}
	}
	if len(got) != 1 || got[0].ID != "a" {
		t.Fatalf("after the lease: %d deliveries (%v), want a again", len(got), ids(got))
	}
	if err := b.Ack(ctx, got[0]); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if got = recv(t, b, "l", 200*time.Millisecond); len(got) > 0 {
			break
		}
	}
	if len(got) != 1 || got[0].ID != "b" {
		t.Fatalf("after a's ack: %d deliveries (%v), want b", len(got), ids(got))
	}
	if err := b.Ack(ctx, got[0]); err != nil {
		t.Fatal(err)
	}
	if n := broker.Tracked(b); n != 0 {
		t.Fatalf("tracked %d deliveries at the end, want 0", n)
	}
}

func ids(ds []*broker.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}
