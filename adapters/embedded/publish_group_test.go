package embedded

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// An operation with a lone form runs it when it finds the writer idle, and
// when it is the only one of the group handed to it; grouped with others
// it runs its transaction form in their transaction.
func TestWriter_AloneOnlyWhenAlone(t *testing.T) {
	w, db := testWriter(t)
	ctx := context.Background()
	var mu sync.Mutex
	var ran []string
	op := func(name string, id int) (func(context.Context, *sql.Tx) error, func(context.Context) error) {
		return func(ctx context.Context, tx *sql.Tx) error {
				mu.Lock()
				ran = append(ran, name+":tx")
				mu.Unlock()
				return insertChild(id, 1)(ctx, tx)
			}, func(ctx context.Context) error {
				mu.Lock()
				ran = append(ran, name+":alone")
				mu.Unlock()
				_, err := db.ExecContext(ctx, `INSERT INTO child (id, parent) VALUES (?, 1)`, id)
				return err
			}
	}
	fn, alone := op("idle", 1)
	if err := w.doOr(ctx, fn, alone); err != nil {
		t.Fatal(err)
	}
	// Queued alone behind a transaction in flight: a group of one.
	release := hold(t, w)
	done := make(chan error, 1)
	go func() {
		fn, alone := op("queued", 2)
		done <- w.doOr(ctx, fn, alone)
	}()
	waitQueued(t, w, 1)
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Queued with another: both run in one transaction.
	release = hold(t, w)
	errs := make(chan error, 2)
	for i, name := range []string{"g1", "g2"} {
		go func() {
			fn, alone := op(name, 3+i)
			errs <- w.doOr(ctx, fn, alone)
		}()
		waitQueued(t, w, i+1)
	}
	release()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Join(ran, " "); got != "idle:alone queued:alone g1:tx g2:tx" {
		t.Errorf("ran %s", got)
	}
	if n := children(t, db); n != 4 {
		t.Errorf("%d rows, want 4", n)
	}
}

// The worst schedules of concurrent publishes through the broker, which
// coalesces them, on the embedded driver, whose lone publishes are one
// autocommitted INSERT: callers queued behind a held writer, among them
// two with one idempotency key, one too large, and one whose context ends
// while it waits. Each gets its own outcome; nothing of a failed caller
// is stored.
func TestPublish_CoalescedCallersGetTheirOwnOutcome(t *testing.T) {
	ctx := context.Background()
	d, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "q.db"), MaxMessageSize: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	msg := func(id, key string, size int) *broker.Message {
		return &broker.Message{ID: id, Lane: "batch", Kind: "k", IdempotencyKey: key, Body: []byte(strings.Repeat("x", size))}
	}
	// The lane's id first (a new lane's is written in a transaction of its
	// own).
	if _, err := b.PublishOne(ctx, msg(broker.NewID(), "", 1)); err != nil {
		t.Fatal(err)
	}
	release := hold(t, d.shared.w)
	type out struct {
		r   broker.PublishResult
		err error
	}
	cctx, cancel := context.WithCancel(ctx)
	ids := []string{broker.NewID(), broker.NewID(), broker.NewID(), broker.NewID(), broker.NewID(), broker.NewID()}
	calls := []struct {
		ctx context.Context
		m   *broker.Message
	}{
		{ctx, msg(ids[0], "", 10)},
		{cctx, msg(ids[1], "", 10)},
		{ctx, msg(ids[2], "same", 10)},
		{ctx, msg(ids[3], "same", 10)},
		{ctx, msg(ids[4], "", 4<<10)},
		{ctx, msg(ids[5], "", 10)},
	}
	outs := make([]chan out, len(calls))
	for i, c := range calls {
		outs[i] = make(chan out, 1)
		if i == 1 {
			continue // last, once the others wait
		}
		go func() {
			r, err := b.PublishOne(c.ctx, c.m)
			outs[i] <- out{r, err}
		}()
	}
	// Let them reach their queues (the broker's or the writer's), then
	// start the last one and end its context while the writer is still
	// held.
	time.Sleep(50 * time.Millisecond)
	go func() {
		r, err := b.PublishOne(calls[1].ctx, calls[1].m)
		outs[1] <- out{r, err}
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	time.Sleep(10 * time.Millisecond)
	release()
	got := make([]out, len(calls))
	for i := range outs {
		select {
		case got[i] = <-outs[i]:
		case <-time.After(10 * time.Second):
			t.Fatalf("publish %d hung", i)
		}
	}
	for _, i := range []int{0, 5} {
		if got[i].err != nil || got[i].r.ID != ids[i] || got[i].r.Duplicate {
			t.Errorf("plain publish %d: %+v", i, got[i])
		}
	}
	if !errors.Is(got[4].err, broker.ErrTooLarge) {
		t.Errorf("too large: %+v", got[4])
	}
	a, c := got[2], got[3]
	if a.err != nil || c.err != nil || a.r.Duplicate == c.r.Duplicate || a.r.ID != c.r.ID {
		t.Errorf("one idempotency key twice: %+v and %+v, want one new and one duplicate of it", a, c)
	}
	stored := map[string]bool{}
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 100, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, dv := range ds {
		stored[dv.ID] = true
	}
	// The cancelled caller's message was either taken into a batch before
	// its context ended (then its outcome is that batch's: stored, and
	// success) or dropped from its queue (its context's error, nothing
	// stored); either way it is told which.
	want := 4
	switch {
	case got[1].err == nil && (!stored[ids[1]] || got[1].r.ID != ids[1]):
		t.Errorf("cancelled caller told success, but its message is not stored: %+v", got[1])
	case got[1].err != nil && stored[ids[1]]:
		t.Errorf("cancelled caller told %v, but its message is stored", got[1].err)
	case got[1].err == nil:
		want = 5
	case !errors.Is(got[1].err, context.Canceled):
		t.Errorf("cancelled caller: %v, want its context's error", got[1].err)
	}
	if len(ds) != want || !stored[ids[0]] || !stored[ids[5]] || !stored[a.r.ID] || stored[ids[4]] {
		t.Errorf("stored %v (%d messages), want the first publish, %s, %s and %s", stored, len(ds), ids[0], ids[5], a.r.ID)
	}
}
