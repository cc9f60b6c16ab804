package broker_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

func openFair(t *testing.T, fair map[string]int) *broker.Broker {
	t.Helper()
	b, err := broker.Open(context.Background(), "embedded://"+filepath.Join(t.TempDir(), "q.db"), &broker.Options{Fair: fair})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// tenantsOnDistinctShards returns a flood tenant and a quiet tenant that
// hash to different shards of n.
func tenantsOnDistinctShards(t *testing.T, n int) (string, string) {
	flood := "tenant-flood"
	for i := range 100 {
		quiet := fmt.Sprintf("tenant-quiet-%d", i)
		if broker.FairShard(quiet, n) != broker.FairShard(flood, n) {
			return flood, quiet
		}
	}
	t.Fatal("no quiet tenant on another shard")
	return "", ""
}

func publishN(t *testing.T, b *broker.Broker, lane, tenant string, n int) {
	t.Helper()
	msgs := make([]*broker.Message, n)
	for i := range msgs {
		msgs[i] = &broker.Message{Lane: lane, Kind: "k", Tenant: tenant, Body: []byte(tenant)}
	}
	rs, err := b.Publish(context.Background(), msgs...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
}

// drainUntilQuietDone receives in batches of 8 (acking everything) until
// every quiet message is received, and returns how many flood messages it
// received on the way.
func drainUntilQuietDone(t *testing.T, b *broker.Broker, lane, quiet string, quietN int) (floodSeen int) {
	t.Helper()
	ctx := context.Background()
	got := 0
	for guard := 0; got < quietN; guard++ {
		if guard > 10000 {
			t.Fatalf("quiet tenant got %d of %d", got, quietN)
		}
		ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: 8, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Tenant == quiet {
				got++
			} else {
				floodSeen++
			}
			if d.Lane != lane {
				t.Fatalf("delivery of fair lane %s carries lane %s", lane, d.Lane)
			}
		}
		if err := b.Ack(ctx, ds...); err != nil {
			t.Fatal(err)
		}
	}
	return floodSeen
}

// TestFairLane_QuietTenantIsNotStarved is the point of a fair lane: a
// tenant enqueuing 20 tasks after another's 2,000 gets them all within a
// few batches, where a plain lane serves the whole flood first.
func TestFairLane_QuietTenantIsNotStarved(t *testing.T) {
	const floodN, quietN = 2000, 20
	b := openFair(t, map[string]int{"batch": 8})
	flood, quiet := tenantsOnDistinctShards(t, 8)
	publishN(t, b, "batch", flood, floodN)
	publishN(t, b, "batch", quiet, quietN)
	publishN(t, b, "plain", flood, floodN)
	publishN(t, b, "plain", quiet, quietN)

	fair := drainUntilQuietDone(t, b, "batch", quiet, quietN)
	plain := drainUntilQuietDone(t, b, "plain", quiet, quietN)
	t.Logf("flood messages received before the quiet tenant's last: fair lane %d, plain lane %d", fair, plain)
	// Each batch of 8 is split evenly between the two non-empty shards.
	if fair > quietN+8 {
		t.Errorf("fair lane: %d flood messages before the quiet tenant's %d; want at most %d", fair, quietN, quietN+8)
	}
	if plain != floodN {
		t.Errorf("plain lane: %d flood messages first; want the whole flood, %d (FIFO)", plain, floodN)
	}
	// Nothing lost: the rest of the flood is still there.
	st, err := b.Stats(context.Background(), "batch")
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready != int64(floodN-fair) {
		t.Errorf("fair lane stats: ready %d, want %d", st.Ready, floodN-fair)
	}
}

func TestFairLane_StatsLanesDeadLettersReplay(t *testing.T) {
	ctx := context.Background()
	b := openFair(t, map[string]int{"batch": 4})
	// One message per tenant on several shards.
	var tenants []string
	seen := map[int]bool{}
	for i := 0; len(seen) < 3; i++ {
		tn := fmt.Sprintf("t%d", i)
		if s := broker.FairShard(tn, 4); !seen[s] {
			seen[s] = true
			tenants = append(tenants, tn)
		}
	}
	for _, tn := range tenants {
		publishN(t, b, "batch", tn, 1)
	}
	st, err := b.Stats(ctx, "batch")
	if err != nil || st.Ready != 3 || st.Lane != "batch" {
		t.Fatalf("stats %+v, %v; want 3 ready in batch", st, err)
	}
	lanes, ok, err := b.Lanes(ctx)
	if err != nil || !ok || len(lanes) != 1 || lanes[0] != "batch" {
		t.Fatalf("lanes %v (%v, %v); want [batch]: shards fold into their lane", lanes, ok, err)
	}
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 10, Lease: time.Minute})
	if err != nil || len(ds) != 3 {
		t.Fatalf("received %d, %v; want 3", len(ds), err)
	}
	for _, d := range ds {
		if err := b.DeadLetter(ctx, d, &broker.DeadLetter{Reason: broker.ReasonPermanent, Error: "boom"}); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := b.Stats(ctx, "batch"); st.DeadLettered != 3 || st.Ready != 0 {
		t.Fatalf("after dead-lettering: %+v", st)
	}
	dead, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 10, Lease: time.Minute, DeadLetters: true})
	if err != nil || len(dead) != 3 {
		t.Fatalf("dead letters %d, %v; want 3 from every shard", len(dead), err)
	}
	for _, d := range dead {
		if d.DeadLetter == nil || d.DeadLetter.Reason != broker.ReasonPermanent {
			t.Fatalf("dead letter without its reason: %+v", d.DeadLetter)
		}
		if err := b.Replay(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := b.Stats(ctx, "batch"); st.DeadLettered != 0 || st.Ready != 3 {
		t.Fatalf("after replay: %+v", st)
	}
}

func TestFairLane_DedupAndOrderingPerTenant(t *testing.T) {
	ctx := context.Background()
	b := openFair(t, map[string]int{"batch": 8})
	m1 := &broker.Message{Lane: "batch", Kind: "k", Tenant: "acme", IdempotencyKey: "k1", OrderingKey: "doc-1"}
	m2 := &broker.Message{Lane: "batch", Kind: "k", Tenant: "acme", IdempotencyKey: "k1", OrderingKey: "doc-1"}
	r1, err := b.PublishOne(ctx, m1)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.PublishOne(ctx, m2)
	if err != nil {
		t.Fatal(err)
	}
	if !r2.Duplicate || r2.ID != r1.ID {
		t.Fatalf("second publish of one key in a fair lane: %+v, want a duplicate of %s", r2, r1.ID)
	}
	if m1.Lane != "batch" {
		t.Fatalf("the caller's message was moved to lane %q", m1.Lane)
	}
	// Ordering: two messages of one key and tenant, the second is not
	// delivered while the first is leased.
	m3 := &broker.Message{Lane: "batch", Kind: "k", Tenant: "acme", OrderingKey: "doc-1"}
	if _, err := b.PublishOne(ctx, m3); err != nil {
		t.Fatal(err)
	}
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 10, Lease: time.Minute})
	if err != nil || len(ds) != 1 || ds[0].ID != r1.ID {
		t.Fatalf("received %d (%v); want only the first of the key", len(ds), err)
	}
	if err := b.Ack(ctx, ds...); err != nil {
		t.Fatal(err)
	}
	ds, err = b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 10, Lease: time.Minute})
	if err != nil || len(ds) != 1 || ds[0].ID != m3.ID {
		t.Fatalf("received %d (%v); want the second of the key", len(ds), err)
	}
}

// TestFairLane_WaitSeesEveryShard: a receive waiting on an idle fair lane
// returns a message published to any shard during the wait.
func TestFairLane_WaitSeesEveryShard(t *testing.T) {
	ctx := context.Background()
	b := openFair(t, map[string]int{"batch": 8})
	for i := range 8 {
		tn := ""
		for j := 0; ; j++ {
			tn = fmt.Sprintf("w%d-%d", i, j)
			if broker.FairShard(tn, 8) == i {
				break
			}
		}
		done := make(chan error, 1)
		go func() {
			time.Sleep(20 * time.Millisecond)
			_, err := b.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "k", Tenant: tn})
			done <- err
		}()
		ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 1, Lease: time.Minute, Wait: 20 * time.Second})
		if err != nil || len(ds) != 1 || ds[0].Tenant != tn {
			t.Fatalf("shard %d: received %d, %v", i, len(ds), err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := b.Ack(ctx, ds...); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFairNamesAndParsing(t *testing.T) {
	if got := broker.FairShardName("batch", 0); got != "batch" {
		t.Errorf("shard 0 = %q", got)
	}
	if got := broker.FairShardName("batch", 3); got != "batch:fair-3" {
		t.Errorf("shard 3 = %q", got)
	}
	for _, c := range []struct {
		in   string
		lane string
		n    int
		ok   bool
	}{
		{"batch:fair-3", "batch", 3, true},
		{"a:b:fair-12", "a:b", 12, true},
		{"batch", "", 0, false},
		{"batch:fair-0", "", 0, false},
		{"batch:fair-03", "", 0, false},
		{"batch:fair-x", "", 0, false},
		{":fair-1", "", 0, false},
	} {
		lane, n, ok := broker.SplitFairShard(c.in)
		if lane != c.lane || n != c.n || ok != c.ok {
			t.Errorf("SplitFairShard(%q) = %q, %d, %v", c.in, lane, n, ok)
		}
	}
	good, err := broker.ParseFair("batch, bulk:16 ,a:b:4")
	if err != nil || good["batch"] != broker.DefaultFairShards || good["bulk"] != 16 || good["a:b"] != 4 {
		t.Errorf("ParseFair = %v, %v", good, err)
	}
	for _, bad := range []string{"", ",", "batch:0", "batch:65", "batch,batch:2", "bad lane", "batch:fair-2"} {
		if _, err := broker.ParseFair(bad); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("ParseFair(%q) = %v; want ErrInvalid", bad, err)
		}
	}
	ctx := context.Background()
	b, err := broker.Open(ctx, "mem://?fair=batch:4", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Fair("batch") != 4 || b.Fair("other") != 0 {
		t.Errorf("Open with fair=batch:4: Fair(batch)=%d", b.Fair("batch"))
	}
	if b.LaneOf("batch:fair-2") != "batch" || b.LaneOf("other:fair-2") != "other:fair-2" {
		t.Error("LaneOf does not fold only the configured lane's shards")
	}
	if _, err := broker.Open(ctx, "mem://?fair=batch:0", nil); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("Open with a bad fair parameter: %v", err)
	}
	if _, err := broker.New(b.Driver(), &broker.Options{Fair: map[string]int{"batch": 100}}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("New with 100 shards: %v", err)
	}
}

// TestBroker_FairLaneSettlesOnShard: a delivery from a fair lane carries
// the lane's own name, and every settlement of it (extend, nack, release,
// dead-letter, replay, ack) reaches the shard its message sits in.
func TestBroker_FairLaneSettlesOnShard(t *testing.T) {
	t.Parallel()
	const lane = "batch"
	// A short MaxDelay makes a longer nack a re-published hop, which must
	// land on the shard too.
	b, err := broker.Open(context.Background(), "embedded://"+filepath.Join(t.TempDir(), "q.db"),
		&broker.Options{Fair: map[string]int{lane: 4}, MaxDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	tenant := ""
	for i := 0; tenant == ""; i++ {
		if c := fmt.Sprintf("tenant-%d", i); broker.FairShard(c, 4) != 0 {
			tenant = c
		}
	}
	publishN(t, b, lane, tenant, 1)
	shard := broker.FairShardName(lane, broker.FairShard(tenant, 4))

	receive := func(dead bool, attempt int) *broker.Delivery {
		t.Helper()
		ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: 1, Lease: time.Minute, DeadLetters: dead, Wait: time.Minute})
		if err != nil || len(ds) != 1 {
			t.Fatalf("receive (dead letters: %v): %d deliveries, %v", dead, len(ds), err)
		}
		d := ds[0]
		if d.Lane != lane || broker.WireLane(d) != shard || broker.Wire(d).Lane != shard {
			t.Fatalf("delivery lane %q, wire lane %q; want %q on shard %q", d.Lane, broker.WireLane(d), lane, shard)
		}
		if !dead && d.Attempt != attempt {
			t.Fatalf("attempt %d; want %d", d.Attempt, attempt)
		}
		return d
	}
	stats := func() broker.Stats {
		t.Helper()
		st, err := b.Driver().Stats(ctx, shard)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	d := receive(false, 1)
	before := d.LeaseDeadline
	if err := b.Extend(ctx, time.Hour, d); err != nil {
		t.Fatalf("extend: %v", err)
	}
	if !d.LeaseDeadline.After(before) {
		t.Errorf("extend left the lease deadline at %v (was %v)", d.LeaseDeadline, before)
	}
	if err := b.Nack(ctx, d, 0); err != nil {
		t.Fatalf("nack: %v", err)
	}
	d = receive(false, 2)
	if err := b.Nack(ctx, d, 30*time.Millisecond); err != nil {
		t.Fatalf("nack beyond MaxDelay: %v", err)
	}
	if st := stats(); st.Ready+st.Delayed != 1 {
		t.Fatalf("shard stats after a held nack: %+v; want the hop on the shard", st)
	}
	d = receive(false, 3)
	if err := b.Release(ctx, d, 0); err != nil {
		t.Fatalf("release: %v", err)
	}
	d = receive(false, 3)
	if err := b.DeadLetter(ctx, d, &broker.DeadLetter{Reason: broker.ReasonPermanent, Error: "boom"}); err != nil {
		t.Fatalf("dead-letter: %v", err)
	}
	if st := stats(); st.DeadLettered != 1 || st.Ready+st.InFlight+st.Delayed != 0 {
		t.Fatalf("shard stats after dead-lettering: %+v", st)
	}
	dl := receive(true, 0)
	if err := b.Replay(ctx, dl); err != nil {
		t.Fatalf("replay: %v", err)
	}
	d = receive(false, 1)
	if err := b.Ack(ctx, d); err != nil {
		t.Fatalf("ack: %v", err)
	}
	if st := stats(); st != (broker.Stats{Lane: st.Lane}) {
		t.Errorf("shard stats after ack: %+v; want empty", st)
	}
}
