package migrate_test

import (
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/migrate"
)

// TestSourceSequencer: keyed messages numbered on a source without native
// ordering by the fleet's ledger, moved to a target without native
// ordering numbered by the same ledger (the CLI's --ledger), start on the
// target in their order at once. The source's numbers are dropped on the
// way and never offered again; without Options.SourceSequencer releasing
// them, the key's first copy waits until the ledger has skipped each old
// number as lost (the stall window per number: about two minutes for the
// eight per key of TestMatrix's rabbitmq-to-nats pair).
func TestSourceSequencer(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t, 2*time.Minute)
	ns := namespace(t)
	dir := t.TempDir()
	L, err := ledger.Open(ctx, "sqlite://"+filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L.Close() })
	sq := ledger.SequencerOf(L)
	// The embedded broker without native ordering stands for RabbitMQ,
	// NATS or SQS standard on both sides.
	fromURL := "embedded://" + filepath.Join(dir, "from.db") + "?reduced=true&namespace=" + ns
	toURL := "embedded://" + filepath.Join(dir, "to.db") + "?reduced=true&namespace=" + ns
	src, err := broker.Open(ctx, fromURL, &broker.Options{Sequencer: sq})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	if src.Capabilities().Ordering {
		t.Fatal("the reduced embedded broker orders natively: this test needs one that does not")
	}
	const n = 3
	for i := range n {
		if _, err := src.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "k", OrderingKey: "key", Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := migrate.RunURL(ctx, fromURL, toURL, &broker.Options{Sequencer: sq},
		&migrate.Options{Lanes: []string{"batch"}, SourceSequencer: sq})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Moved != n {
		t.Fatalf("moved %d of %d: %+v", rep.Moved, n, rep)
	}
	// The first copy on the target (the lowest of the numbers the target's
	// Broker gave them) may start now: the old numbers are finished.
	drv, err := broker.OpenDriver(ctx, toURL)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := drv.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 10, Lease: time.Minute, Wait: time.Second})
	if err != nil || len(ds) != n {
		t.Fatalf("the target holds %d messages (%v), want %d", len(ds), err, n)
	}
	first := int64(0)
	for _, d := range ds {
		seq, err := strconv.ParseInt(d.Headers[broker.HeaderOrderSeq], 10, 64)
		if err != nil {
			t.Fatalf("copy %s carries no ordering number: %v", d.ID, d.Headers)
		}
		if first == 0 || seq < first {
			first = seq
		}
		if err := drv.(broker.Releaser).Release(ctx, d, 0); err != nil {
			t.Fatal(err)
		}
	}
	drv.Close()
	sp, ok := sq.(broker.SequencerPosition)
	if !ok {
		t.Fatal("the ledger's sequencer does not report positions")
	}
	g, ahead, err := sp.AcquirePosition(ctx, "batch", "key", first, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if g != broker.GrantRun {
		t.Fatalf("the key's first copy on the target (number %d): grant %v with %d ahead, want GrantRun (%v): the source's numbers were not released", first, g, ahead, broker.GrantRun)
	}
	if err := sq.Release(ctx, "batch", "key", first, false); err != nil {
		t.Fatal(err)
	}
	// And the workers' Broker hands them out in their order.
	dst, err := broker.Open(ctx, toURL, &broker.Options{Sequencer: sq})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dst.Close() })
	for i := range n {
		var got []*broker.Delivery
		for try := 0; len(got) == 0 && try < 20; try++ {
			if got, err = dst.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: n, Lease: time.Minute, Wait: time.Second}); err != nil {
				t.Fatal(err)
			}
		}
		if len(got) != 1 || string(got[0].Body) != fmt.Sprint(i) {
			t.Fatalf("receive %d on the target: %d deliveries %v, want the message %d alone", i, len(got), bodies(got), i)
		}
		if err := dst.Ack(ctx, got...); err != nil {
			t.Fatal(err)
		}
	}
}

func bodies(ds []*broker.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Body)
	}
	return out
}
