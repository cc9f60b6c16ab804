package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// gateDriver is a Publish-only driver whose publishes block until released,
// recording each batch it was given.
type gateDriver struct {
	Driver
	mu      sync.Mutex
	batches [][]string // message IDs per Publish call
	entered chan struct{}
	release chan struct{}
	fail    string // a batch holding this ID fails as a whole
}

func (d *gateDriver) Publish(ctx context.Context, msgs []*Message) ([]PublishResult, error) {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	d.mu.Lock()
	d.batches = append(d.batches, ids)
	d.mu.Unlock()
	d.entered <- struct{}{}
	select {
	case <-d.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	rs := make([]PublishResult, len(msgs))
	for i, m := range msgs {
		if m.ID == d.fail {
			return nil, errors.New("batch refused")
		}
		rs[i] = PublishResult{ID: m.ID}
		if m.Kind == "bad" {
			rs[i].Err = Invalidf("bad message %s", m.ID)
		}
	}
	return rs, nil
}

func newGate() *gateDriver {
	return &gateDriver{entered: make(chan struct{}, 100), release: make(chan struct{})}
}

func msgs(prefix string, n int) []*Message {
	out := make([]*Message, n)
	for i := range out {
		out[i] = &Message{ID: fmt.Sprintf("%s%d", prefix, i), Lane: "batch", Kind: "k"}
	}
	return out
}

type pubOut struct {
	rs  []PublishResult
	err error
}

func goPublish(g *groupCommit, ctx context.Context, ms []*Message) chan pubOut {
	ch := make(chan pubOut, 1)
	go func() {
		rs, err := g.publish(ctx, ms)
		ch <- pubOut{rs, err}
	}()
	return ch
}

// waitQueued waits until n batches are queued behind the one in flight.
func waitQueued(t *testing.T, g *groupCommit, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.mu.Lock()
		q := len(g.queue)
		g.mu.Unlock()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d batches queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestGroupCommit_CoalescesConcurrentBatches(t *testing.T) {
	t.Parallel()
	d := newGate()
	g := &groupCommit{d: d, inFlight: 1}
	ctx := context.Background()
	first := goPublish(g, ctx, msgs("a", 1))
	<-d.entered // a lone caller publishes at once
	b := goPublish(g, ctx, msgs("b", 2))
	waitQueued(t, g, 1)
	c := goPublish(g, ctx, []*Message{{ID: "c0", Kind: "bad"}, {ID: "c1", Kind: "k"}})
	waitQueued(t, g, 2)
	d.release <- struct{}{}
	if r := <-first; r.err != nil || len(r.rs) != 1 || r.rs[0].ID != "a0" {
		t.Fatalf("first: %+v", r)
	}
	<-d.entered
	d.release <- struct{}{}
	rb, rc := <-b, <-c
	if rb.err != nil || len(rb.rs) != 2 || rb.rs[0].ID != "b0" || rb.rs[1].ID != "b1" || rb.rs[1].Err != nil {
		t.Fatalf("b: %+v", rb)
	}
	if rc.err != nil || len(rc.rs) != 2 || rc.rs[0].Err == nil || rc.rs[1].Err != nil || rc.rs[1].ID != "c1" {
		t.Fatalf("c: %+v", rc)
	}
	if got := fmt.Sprint(d.batches); got != "[[a0] [b0 b1 c0 c1]]" {
		t.Fatalf("driver batches %s, want [[a0] [b0 b1 c0 c1]]", got)
	}
	if g.busy != 0 || len(g.queue) != 0 {
		t.Fatalf("not idle after the last publish: busy=%v queue=%d", g.busy, len(g.queue))
	}
}

func TestGroupCommit_BoundsAndKeys(t *testing.T) {
	t.Parallel()
	d := newGate()
	g := &groupCommit{d: d, max: 3, inFlight: 1}
	ctx := context.Background()
	first := goPublish(g, ctx, msgs("a", 1))
	<-d.entered
	keyed := func(id, key string) *Message {
		return &Message{ID: id, Lane: "batch", Kind: "k", IdempotencyKey: key}
	}
	outs := []chan pubOut{
		goPublish(g, ctx, []*Message{keyed("b0", "k1")}),
	}
	waitQueued(t, g, 1)
	outs = append(outs, goPublish(g, ctx, []*Message{keyed("c0", "k1")})) // same key: a later batch
	waitQueued(t, g, 2)
	outs = append(outs, goPublish(g, ctx, msgs("d", 2)))
	waitQueued(t, g, 3)
	outs = append(outs, goPublish(g, ctx, msgs("e", 2))) // over max with d
	waitQueued(t, g, 4)
	d.release <- struct{}{}
	<-first
	for range 3 {
		<-d.entered
		d.release <- struct{}{}
	}
	for i, ch := range outs {
		if r := <-ch; r.err != nil {
			t.Fatalf("publish %d: %v", i, r.err)
		}
	}
	if got := fmt.Sprint(d.batches); got != "[[a0] [b0] [c0 d0 d1] [e0 e1]]" {
		t.Fatalf("driver batches %s", got)
	}
}

func TestGroupCommit_ErrorsAndCancellation(t *testing.T) {
	t.Parallel()
	d := newGate()
	d.fail = "b0"
	g := &groupCommit{d: d, inFlight: 1}
	ctx := context.Background()
	first := goPublish(g, ctx, msgs("a", 1))
	<-d.entered
	b := goPublish(g, ctx, msgs("b", 1))
	waitQueued(t, g, 1)
	c := goPublish(g, ctx, msgs("c", 1))
	waitQueued(t, g, 2)
	// A caller whose context ends while queued leaves without sending.
	cctx, cancel := context.WithCancel(ctx)
	gone := goPublish(g, cctx, msgs("x", 1))
	waitQueued(t, g, 3)
	cancel()
	if r := <-gone; r.err == nil || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled while queued: %+v", r)
	}
	d.release <- struct{}{}
	<-first
	<-d.entered
	d.release <- struct{}{}
	// The batch failed as a whole: both of its callers hear it.
	if r := <-b; r.err == nil {
		t.Fatalf("b: %+v", r)
	}
	if r := <-c; r.err == nil {
		t.Fatalf("c: %+v", r)
	}
	if got := fmt.Sprint(d.batches); got != "[[a0] [b0 c0]]" {
		t.Fatalf("driver batches %s", got)
	}
}

func TestGroupCommit_GroupOutlivesOneCancelledCaller(t *testing.T) {
	t.Parallel()
	d := newGate()
	g := &groupCommit{d: d, inFlight: 1}
	ctx := context.Background()
	first := goPublish(g, ctx, msgs("a", 1))
	<-d.entered
	lctx, cancel := context.WithCancel(ctx)
	lead := goPublish(g, lctx, msgs("b", 1))
	waitQueued(t, g, 1)
	other := goPublish(g, ctx, msgs("c", 1))
	waitQueued(t, g, 2)
	d.release <- struct{}{}
	<-first
	<-d.entered // the group b0+c0 is in flight, led by b's caller
	cancel()    // the leader's context ends; c's has not
	time.Sleep(20 * time.Millisecond)
	d.release <- struct{}{}
	if r := <-other; r.err != nil || r.rs[0].ID != "c0" {
		t.Fatalf("c: %+v", r)
	}
	if r := <-lead; r.err != nil {
		t.Fatalf("b: %+v", r)
	}
}

func TestGroupCommit_InFlightLimit(t *testing.T) {
	t.Parallel()
	d := newGate()
	g := &groupCommit{d: d, inFlight: 2}
	ctx := context.Background()
	a := goPublish(g, ctx, msgs("a", 1))
	<-d.entered
	b := goPublish(g, ctx, msgs("b", 1))
	<-d.entered // a second place: published at once
	c := goPublish(g, ctx, msgs("c", 1))
	waitQueued(t, g, 1)
	d.release <- struct{}{}
	d.release <- struct{}{}
	<-d.entered
	d.release <- struct{}{}
	for _, ch := range []chan pubOut{a, b, c} {
		if r := <-ch; r.err != nil {
			t.Fatal(r.err)
		}
	}
	if len(d.batches) != 3 || g.busy != 0 {
		t.Fatalf("batches %v, busy %d", d.batches, g.busy)
	}
}

func TestGroupCommit_Unlimited(t *testing.T) {
	t.Parallel()
	d := newGate()
	g := &groupCommit{d: d, inFlight: publishInFlight(d)}
	ctx := context.Background()
	var outs []chan pubOut
	for i := range 3 {
		outs = append(outs, goPublish(g, ctx, msgs(fmt.Sprint(i), 1)))
		<-d.entered // each goes straight to the driver
	}
	for range outs {
		d.release <- struct{}{}
	}
	for _, ch := range outs {
		if r := <-ch; r.err != nil {
			t.Fatal(r.err)
		}
	}
}

// echoDriver answers every publish at once, recording its batches.
type echoDriver struct {
	Driver
	mu      sync.Mutex
	batches [][]*Message
}

func (d *echoDriver) Publish(ctx context.Context, msgs []*Message) ([]PublishResult, error) {
	d.mu.Lock()
	d.batches = append(d.batches, msgs)
	d.mu.Unlock()
	rs := make([]PublishResult, len(msgs))
	for i, m := range msgs {
		rs[i] = PublishResult{ID: m.ID}
	}
	return rs, nil
}

// Many callers at once, through both ways in (a free place, whose caller
// may take queued batches into its own, and the queue): each gets exactly
// its own results, no driver batch holds one idempotency key twice or
// exceeds max, and the publisher ends idle.
func TestGroupCommit_ConcurrentCallersGetTheirOwnResults(t *testing.T) {
	t.Parallel()
	d := &echoDriver{}
	g := &groupCommit{d: d, inFlight: 1, max: 5}
	ctx := context.Background()
	var wg sync.WaitGroup
	for c := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				ms := msgs(fmt.Sprintf("c%d-%d-", c, i), 1+i%3)
				if i%4 == 0 {
					ms[0].IdempotencyKey = fmt.Sprint("k", i%8) // shared by callers
				}
				rs, err := g.publish(ctx, ms)
				if err != nil || len(rs) != len(ms) {
					t.Errorf("caller %d: %v, %d results for %d", c, err, len(rs), len(ms))
					return
				}
				for j := range ms {
					if rs[j].ID != ms[j].ID {
						t.Errorf("caller %d got %s for %s", c, rs[j].ID, ms[j].ID)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, b := range d.batches {
		if len(b) > 5 {
			t.Errorf("a driver batch of %d messages, max 5", len(b))
		}
		keys := map[string]bool{}
		for _, m := range b {
			if m.IdempotencyKey != "" && keys[m.IdempotencyKey] {
				t.Errorf("key %s twice in one driver batch", m.IdempotencyKey)
			}
			keys[m.IdempotencyKey] = m.IdempotencyKey != ""
		}
	}
	if g.busy != 0 || len(g.queue) != 0 {
		t.Fatalf("not idle: busy=%v queue=%d", g.busy, len(g.queue))
	}
}

// The caller woken to publish next forms its group when it runs, not when
// it is woken: a batch that arrives in between — typically the next one of
// a caller just served — goes in the same driver publish, not the one
// after it.
func TestGroupCommit_GroupFormedByTheLeaderWhenItRuns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		late bool
		want string
	}{
		{true, "[[a0] [b0 c0]]"},
		{false, "[[a0] [b0] [c0]]"}, // without LateGroupCommit: formed when woken
	} {
		t.Run(fmt.Sprint("late=", tc.late), func(t *testing.T) {
			t.Parallel()
			testGroupFormed(t, tc.late, tc.want)
		})
	}
}

func testGroupFormed(t *testing.T, late bool, want string) {
	var comeBack func()
	d := newGate()
	g := &groupCommit{d: d, inFlight: 1, late: late}
	ctx := context.Background()
	first := goPublish(g, ctx, msgs("a", 1))
	<-d.entered
	b := goPublish(g, ctx, msgs("b", 1))
	waitQueued(t, g, 1)
	var c chan pubOut
	var once sync.Once
	g.testLeading = func() { once.Do(comeBack) }
	comeBack = func() {
		// b's caller has been woken to publish; a served caller comes back.
		// (Not waitQueued: this is the leader's goroutine, not the test's.)
		c = goPublish(g, ctx, msgs("c", 1))
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			g.mu.Lock()
			q := len(g.queue)
			g.mu.Unlock()
			if q == 1 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("%d batches queued, want 1", q)
				return
			}
		}
	}
	// Every driver publish from here on is let through as it comes.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case d.release <- struct{}{}:
			case <-stop:
				return
			}
		}
	}()
	if r := <-first; r.err != nil {
		t.Fatalf("first: %+v", r)
	}
	if r := <-b; r.err != nil || r.rs[0].ID != "b0" {
		t.Fatalf("b: %+v", r)
	}
	if r := <-c; r.err != nil || r.rs[0].ID != "c0" {
		t.Fatalf("c: %+v", r)
	}
	d.mu.Lock()
	got := fmt.Sprint(d.batches)
	d.mu.Unlock()
	if got != want {
		t.Fatalf("driver batches %s, want %s", got, want)
	}
}
