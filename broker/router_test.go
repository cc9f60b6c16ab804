package broker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"testing"
	"time"

	_ "github.com/switchyard-dev/switchyard/adapters/embedded" // mem:// and embedded://
	"github.com/switchyard-dev/switchyard/broker"
)

func memDriver(t *testing.T, params string) broker.Driver {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	d, err := broker.OpenDriver(context.Background(), "mem://r"+hex.EncodeToString(b[:])+params)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func depth(t *testing.T, d broker.Driver, lane string) broker.Stats {
	t.Helper()
	s, err := d.Stats(context.Background(), lane)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func recvOne(t *testing.T, b *broker.Broker, req broker.ReceiveRequest) *broker.Delivery {
	t.Helper()
	req.Max, req.Wait = 1, 3*time.Second
	if req.Lease == 0 {
		req.Lease = 10 * time.Second
	}
	ds, err := b.Receive(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 {
		t.Fatalf("receive %s (dead letters %v): got %d deliveries, want 1", req.Lane, req.DeadLetters, len(ds))
	}
	return ds[0]
}

func TestRouterRoutesPerLane(t *testing.T) {
	ctx := ctxT(t)
	a, fb := memDriver(t, ""), memDriver(t, "")
	r, err := broker.NewRouter(map[string]broker.Driver{"interactive": a}, fb)
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, lane := range []string{"interactive", "batch"} {
		if _, err := b.PublishOne(ctx, &broker.Message{Lane: lane, Kind: "k", Body: []byte(lane), IdempotencyKey: "key-" + lane}); err != nil {
			t.Fatal(err)
		}
	}
	if s := depth(t, a, "interactive"); s.Ready != 1 {
		t.Fatalf("interactive driver: %+v, want 1 ready", s)
	}
	if s := depth(t, fb, "batch"); s.Ready != 1 {
		t.Fatalf("fallback driver: %+v, want 1 ready", s)
	}
	if s := depth(t, a, "batch"); s.Ready != 0 {
		t.Fatalf("batch leaked to the interactive driver: %+v", s)
	}
	if lanes, _, err := b.Lanes(ctx); err != nil || len(lanes) != 2 {
		t.Fatalf("lanes %v (%v), want batch and interactive", lanes, err)
	}

	// Nack goes back to the origin and comes back with attempt 2.
	d := recvOne(t, b, broker.ReceiveRequest{Lane: "interactive"})
	if string(d.Body) != "interactive" || d.Attempt != 1 {
		t.Fatalf("got %q attempt %d", d.Body, d.Attempt)
	}
	if err := b.Nack(ctx, d, 0); err != nil {
		t.Fatal(err)
	}
	d = recvOne(t, b, broker.ReceiveRequest{Lane: "interactive"})
	if d.Attempt != 2 {
		t.Fatalf("after nack: attempt %d, want 2", d.Attempt)
	}
	// Extend moves the lease deadline of the router's delivery too.
	old := d.LeaseDeadline
	if err := b.Extend(ctx, 30*time.Second, d); err != nil {
		t.Fatal(err)
	}
	if !d.LeaseDeadline.After(old) {
		t.Fatalf("extend did not move the deadline: %v -> %v", old, d.LeaseDeadline)
	}
	if err := b.Ack(ctx, d); err != nil {
		t.Fatal(err)
	}
	if s := depth(t, a, "interactive"); s.Ready+s.InFlight != 0 {
		t.Fatalf("after ack: %+v", s)
	}

	// Dead letter and replay on the fallback's lane.
	d = recvOne(t, b, broker.ReceiveRequest{Lane: "batch"})
	if err := b.DeadLetter(ctx, d, &broker.DeadLetter{Reason: broker.ReasonPermanent, Error: "boom", Attempts: []broker.AttemptRecord{{Attempt: 1, Error: "boom"}}}); err != nil {
		t.Fatal(err)
	}
	if s := depth(t, fb, "batch"); s.DeadLettered != 1 {
		t.Fatalf("fallback after dead-letter: %+v", s)
	}
	dd := recvOne(t, b, broker.ReceiveRequest{Lane: "batch", DeadLetters: true})
	if dd.DeadLetter == nil || dd.DeadLetter.Reason != broker.ReasonPermanent || dd.DeadLetter.Error != "boom" || len(dd.DeadLetter.Attempts) != 1 {
		t.Fatalf("dead letter lost its details: %+v", dd.DeadLetter)
	}
	if err := b.Replay(ctx, dd); err != nil {
		t.Fatal(err)
	}
	d = recvOne(t, b, broker.ReceiveRequest{Lane: "batch"})
	if d.Attempt != 1 || d.IdempotencyKey != "key-batch" {
		t.Fatalf("replayed: attempt %d key %q", d.Attempt, d.IdempotencyKey)
	}
	// Release gives it back unspent.
	if err := b.Release(ctx, d, 0); err != nil {
		t.Fatal(err)
	}
	d = recvOne(t, b, broker.ReceiveRequest{Lane: "batch"})
	if d.Attempt != 1 {
		t.Fatalf("after release: attempt %d, want 1", d.Attempt)
	}
	if err := b.Ack(ctx, d); err != nil {
		t.Fatal(err)
	}
	// The routed lanes are listed even when empty.
	lanes, ok, err := b.Lanes(ctx)
	if err != nil || !ok || len(lanes) == 0 || lanes[0] != "interactive" {
		t.Fatalf("lanes: %v %v %v, want interactive first", lanes, ok, err)
	}
}

// noRelease hides a driver's Release, as an adapter without one would be.
type noRelease struct{ broker.Driver }

func TestRouterReleaseWithoutReleaser(t *testing.T) {
	ctx := ctxT(t)
	inner := memDriver(t, "")
	r, err := broker.NewRouter(nil, noRelease{inner})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := broker.New(r, nil)
	defer b.Close()
	if _, err := b.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "k", IdempotencyKey: "idem"}); err != nil {
		t.Fatal(err)
	}
	d := recvOne(t, b, broker.ReceiveRequest{Lane: "batch"})
	if err := b.Nack(ctx, d, 0); err != nil {
		t.Fatal(err)
	}
	d = recvOne(t, b, broker.ReceiveRequest{Lane: "batch"})
	if d.Attempt != 2 {
		t.Fatalf("attempt %d, want 2", d.Attempt)
	}
	id := d.ID
	if err := b.Release(ctx, d, 0); err != nil {
		t.Fatal(err)
	}
	d = recvOne(t, b, broker.ReceiveRequest{Lane: "batch"})
	if d.ID != id || d.Attempt != 2 || d.IdempotencyKey != "idem" {
		t.Fatalf("after release: id %s attempt %d key %q, want %s 2 idem", d.ID, d.Attempt, d.IdempotencyKey, id)
	}
	if err := b.Ack(ctx, d); err != nil {
		t.Fatal(err)
	}
	if s := depth(t, inner, "batch"); s.Ready+s.InFlight+s.Delayed != 0 {
		t.Fatalf("left: %+v", s)
	}
}

func TestRouterCapabilitiesIntersect(t *testing.T) {
	full, reduced := memDriver(t, ""), memDriver(t, "?reduced=true&max_message_size=1000")
	r, err := broker.NewRouter(map[string]broker.Driver{"batch": reduced}, full)
	if err != nil {
		t.Fatal(err)
	}
	c := r.Capabilities()
	fc, rc := full.Capabilities(), reduced.Capabilities()
	if !fc.Dedup || !fc.Ordering {
		t.Fatalf("the full embedded driver should dedup and order natively: %+v", fc)
	}
	if c.Dedup || c.Ordering || c.MaxAttempts || c.DedupWindow != 0 {
		t.Fatalf("intersection keeps features one route lacks: %+v", c)
	}
	if c.MaxDelay != rc.MaxDelay || c.MaxMessageSize != 1000 || c.MaxBatch != rc.MaxBatch {
		t.Fatalf("intersection limits %+v, want the reduced driver's %+v", c, rc)
	}
	got := broker.IntersectCapabilities(broker.Capabilities{MaxDelay: 0, MaxBatch: 10}, broker.Capabilities{MaxDelay: time.Hour, MaxBatch: 0})
	if got.MaxDelay != time.Hour || got.MaxBatch != 10 {
		t.Fatalf("0 must mean unlimited: %+v", got)
	}
}

func TestRouterBadInput(t *testing.T) {
	ctx := ctxT(t)
	if _, err := broker.NewRouter(nil, nil); !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("no routes: %v", err)
	}
	if _, err := broker.NewRouter(map[string]broker.Driver{"bad lane": memDriver(t, "")}, nil); !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("bad lane name: %v", err)
	}
	a := memDriver(t, "")
	r, err := broker.NewRouter(map[string]broker.Driver{"interactive": a}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := broker.New(r, nil)
	defer b.Close()
	if _, err := b.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "k"}); !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("publish to an unrouted lane: %v", err)
	}
	if _, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch"}); !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("receive from an unrouted lane: %v", err)
	}
	// A delivery from another driver is refused, not misrouted.
	if _, err := a.Publish(ctx, []*broker.Message{{ID: broker.NewID(), Lane: "interactive", Kind: "k", EnqueuedAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	ds, err := a.Receive(ctx, broker.ReceiveRequest{Lane: "interactive", Max: 1, Lease: time.Minute, Wait: time.Second})
	if err != nil || len(ds) != 1 {
		t.Fatalf("direct receive: %v %d", err, len(ds))
	}
	if err := r.Ack(ctx, ds); !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("ack of a foreign delivery: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Stats(ctx, "interactive"); !errors.Is(err, broker.ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

func TestMigratingDrainsFromAndPublishesToTo(t *testing.T) {
	ctx := ctxT(t)
	from, to := memDriver(t, ""), memDriver(t, "")
	old, _ := broker.New(from, nil)
	for i := 0; i < 20; i++ {
		if _, err := old.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "old"}); err != nil {
			t.Fatal(err)
		}
	}
	m := &broker.Migrating{From: from, To: to}
	b, err := broker.New(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := 0; i < 20; i++ {
		if _, err := b.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "new"}); err != nil {
			t.Fatal(err)
		}
	}
	if s := depth(t, to, "batch"); s.Ready != 20 {
		t.Fatalf("new work must go to To: %+v", s)
	}
	if s, _ := b.Stats(ctx, "batch"); s.Ready != 40 {
		t.Fatalf("migrating stats are the sum: %+v", s)
	}
	kinds := map[string]int{}
	seen := map[string]bool{}
	// Both sides are served while To still has work: the first 10 receives
	// must already include old messages.
	for i := 0; i < 40; i++ {
		d := recvOne(t, b, broker.ReceiveRequest{Lane: "batch"})
		if seen[d.ID] {
			t.Fatalf("delivered twice: %s", d.ID)
		}
		seen[d.ID] = true
		kinds[d.Kind]++
		if i == 9 && kinds["old"] == 0 {
			t.Fatalf("From is starved while To has work: %v", kinds)
		}
		if err := b.Ack(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if kinds["old"] != 20 || kinds["new"] != 20 {
		t.Fatalf("got %v", kinds)
	}
	if ok, err := m.Drained(ctx, "batch"); err != nil || !ok {
		t.Fatalf("drained: %v %v", ok, err)
	}
	if c := m.Capabilities(); c.Ordering || c.Dedup {
		t.Fatalf("migrating must leave ordering and dedup to Broker: %+v", c)
	}
	// Receive with nothing anywhere waits about req.Wait, no longer.
	start := time.Now()
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 1, Wait: 700 * time.Millisecond})
	if err != nil || len(ds) != 0 {
		t.Fatalf("empty receive: %v %d", err, len(ds))
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("empty receive took %v", el)
	}
}

func TestRouterURL(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	a := "embedded://" + dir + "/a.db?namespace=app"
	old := "embedded://" + dir + "/old.db?namespace=app"
	def := "mem://routerurl" + hex.EncodeToString([]byte(t.Name()))[:8]
	esc := func(s string) string { return url.QueryEscape(s) }

	// An old broker with work in "batch".
	ob, err := broker.Open(ctx, old, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "old"}); err != nil {
		t.Fatal(err)
	}
	ob.Close()

	raw := "router://?default=" + esc(def) + "&lane.interactive=" + esc(a) + "&lane.batch=" + esc(a) + "&from.batch=" + esc(old)
	b, err := broker.Open(ctx, raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Driver().(*broker.Router); !ok {
		t.Fatalf("router:// opened %T", b.Driver())
	}
	for _, lane := range []string{"interactive", "batch", "scheduled"} {
		if _, err := b.PublishOne(ctx, &broker.Message{Lane: lane, Kind: "new"}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]int{}
	for _, lane := range []string{"interactive", "batch", "batch", "scheduled"} {
		d := recvOne(t, b, broker.ReceiveRequest{Lane: lane})
		got[lane+"/"+d.Kind]++
		if err := b.Ack(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if got["batch/old"] != 1 || got["batch/new"] != 1 || got["interactive/new"] != 1 || got["scheduled/new"] != 1 {
		t.Fatalf("got %v", got)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// The new batch message went to a.db, not to the old broker.
	ab, err := broker.Open(ctx, a, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ab.Close()
	if s, _ := ab.Stats(ctx, "batch"); s.Ready != 0 {
		t.Fatalf("a.db batch: %+v", s)
	}

	for _, bad := range []string{
		"router://?lane.x=" + esc(a) + "&bogus=1",
		"router://?from.batch=" + esc(old),
		"router://?default=" + esc(a) + "&from.default=" + esc(a),
		"router://?default=" + esc("router://?default="+esc(a)),
		"router://host?default=" + esc(a),
		"router://?lane.bad%20lane=" + esc(a),
		"router://",
	} {
		if _, err := broker.Open(ctx, bad, nil); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", bad, err)
		}
	}
}
