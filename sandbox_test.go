package switchyard_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

type chargeArgs struct {
	Order string `json:"order"`
	Cents int    `json:"cents"`
}

func (chargeArgs) Kind() string { return "billing.charge" }

// TestClient_ReplaySandbox: a task that charged a card and then failed
// permanently is dead; after the bug is fixed, a sandbox replay runs a copy
// to completion — its steps run, its effects are recorded as would_do and
// not one is performed — while the original stays dead in the ledger and
// in the dead-letter queue, with a sandbox_replayed event.
func TestClient_ReplaySandbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	L, b, c := withLedger(t)
	srv, _ := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, PollWait: 50 * time.Millisecond, Retry: switchyardRetry()})
	var (
		charges, emails, quotes atomic.Int32
		mu                      sync.Mutex
		buggy                   = true
		sandboxSeen             []string // per run: sandbox flag, effect results and metadata
	)
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[chargeArgs]) error {
		q, err := switchyard.Step(ctx, "quote", func(ctx context.Context) (int, error) {
			quotes.Add(1)
			return tk.Args.Cents + 30, nil
		})
		if err != nil {
			return err
		}
		receipt, err := switchyard.Effect(ctx, "charge-card", func(ctx context.Context) (string, error) {
			charges.Add(1)
			return "ch_" + tk.Args.Order, nil
		}, nil)
		if err != nil {
			return err
		}
		sent, err := switchyard.Effect(ctx, "email-receipt", func(ctx context.Context) (bool, error) {
			emails.Add(1)
			return true, nil
		}, nil)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if tk.Job.Sandbox {
			sandboxSeen = append(sandboxSeen, strings.Join([]string{"sandbox", receipt, strconv.FormatBool(sent), tk.Metadata["customer"],
				tk.Metadata[scheduler.MetaSandboxOf], strconv.Itoa(q)}, "|"))
		}
		if buggy {
			return switchyard.Permanent(errors.New("bookkeeping bug after charging"))
		}
		return nil
	}, nil)
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(ctx)

	r, err := c.Enqueue(ctx, chargeArgs{Order: "O-7", Cents: 1200}, &switchyard.EnqueueOpts{Lane: "interactive",
		IdempotencyKey: "charge-O-7", Metadata: map[string]string{"customer": "c-42"}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		info, err := c.Task(ctx, r.ID)
		s, serr := b.Stats(ctx, "interactive")
		return err == nil && info.Task.State == ledger.Dead && serr == nil && s.DeadLettered == 1
	})
	if charges.Load() != 1 || emails.Load() != 1 || quotes.Load() != 1 {
		t.Fatalf("before the replay: %d charges, %d emails, %d quotes; want 1 each", charges.Load(), emails.Load(), quotes.Load())
	}
	mu.Lock()
	buggy = false
	mu.Unlock()

	sid, err := c.ReplaySandbox(ctx, "interactive", r.ID, "operator:alice")
	if err != nil {
		t.Fatal(err)
	}
	if sid == "" || sid == r.ID {
		t.Fatalf("sandbox task ID %q (original %s)", sid, r.ID)
	}
	waitFor(t, 10*time.Second, func() bool {
		info, err := c.Task(ctx, sid)
		return err == nil && info.Task.State == ledger.Completed
	})
	info, err := c.Task(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Effects) != 2 {
		t.Fatalf("sandbox task effects %+v, want charge-card and email-receipt", info.Effects)
	}
	for _, e := range info.Effects {
		if e.State != ledger.EffectWouldDo || e.Attempt != 1 {
			t.Errorf("sandbox effect %s is %s (attempt %d), want would_do (attempt 1)", e.Key, e.State, e.Attempt)
		}
	}
	if charges.Load() != 1 || emails.Load() != 1 {
		t.Errorf("after the sandbox replay: %d charges, %d emails; the effects ran again", charges.Load(), emails.Load())
	}
	if quotes.Load() != 2 {
		t.Errorf("%d quote steps, want 2: the sandbox copy's steps run", quotes.Load())
	}
	mu.Lock()
	want := "sandbox||false|c-42|" + r.ID + "|1230"
	if len(sandboxSeen) != 1 || sandboxSeen[0] != want {
		t.Errorf("sandbox runs saw %q, want [%q] (zero effect results, metadata kept)", sandboxSeen, want)
	}
	mu.Unlock()
	st := info.Task
	if st.Kind != "billing.charge" || st.Lane != "interactive" || st.IdempotencyKey != "" || st.Metadata["customer"] != "c-42" ||
		st.Metadata[scheduler.MetaSandboxOf] != r.ID {
		t.Errorf("sandbox task record %+v", st)
	}
	if !hasEvent(info.Events, "sandbox_created", "operator:alice", r.ID) {
		t.Errorf("sandbox task events %+v lack sandbox_created by operator:alice", info.Events)
	}

	// The original: still dead, still in the dead-letter queue, with the
	// replay in its log.
	orig, err := c.Task(ctx, r.ID)
	if err != nil || orig.Task.State != ledger.Dead {
		t.Fatalf("original after the sandbox replay: %+v, %v", orig, err)
	}
	if !hasEvent(orig.Events, "sandbox_replayed", "operator:alice", sid) {
		t.Errorf("original's events %+v lack sandbox_replayed by operator:alice naming %s", orig.Events, sid)
	}
	for _, e := range orig.Effects {
		if e.State != ledger.EffectConfirmed {
			t.Errorf("original effect %s is %s, want confirmed", e.Key, e.State)
		}
	}
	s, err := b.Stats(ctx, "interactive")
	if err != nil || s.DeadLettered != 1 {
		t.Fatalf("interactive stats after the sandbox replay: %+v, %v; want the dead letter still there", s, err)
	}
	// It can be sandboxed again (it was given back, not taken).
	sid2, err := c.ReplaySandbox(ctx, "interactive", r.ID, "")
	if err != nil || sid2 == sid {
		t.Fatalf("second sandbox replay = %q, %v", sid2, err)
	}
	waitFor(t, 10*time.Second, func() bool {
		info, err := c.Task(ctx, sid2)
		return err == nil && info.Task.State == ledger.Completed
	})
	if charges.Load() != 1 || emails.Load() != 1 {
		t.Errorf("after two sandbox replays: %d charges, %d emails", charges.Load(), emails.Load())
	}
}

// TestClient_ReplaySandboxUnknownKind: a sandbox copy that fails is dead-lettered
// like any other task (here, its kind has no handler), and its effects are
// still never performed.
func TestClient_ReplaySandboxUnknownKind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	L, b, c := withLedger(t)
	// The first server knows no billing.charge: the task dies unknown_kind.
	srv, _ := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, PollWait: 50 * time.Millisecond})
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[refundArgs]) error { return nil }, nil)
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(ctx)
	r, err := c.Enqueue(ctx, chargeArgs{Order: "O-8"}, &switchyard.EnqueueOpts{Lane: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		s, err := b.Stats(ctx, "batch")
		return err == nil && s.DeadLettered == 1
	})
	sid, err := c.ReplaySandbox(ctx, "batch", r.ID, "operator:bob")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		info, err := c.Task(ctx, sid)
		s, serr := b.Stats(ctx, "batch")
		return err == nil && info.Task.State == ledger.Dead && serr == nil && s.DeadLettered == 2
	})
	// Both dead letters are there: the original and its sandbox copy, which
	// keeps its sandbox mark.
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 10, Lease: time.Minute, DeadLetters: true})
	if err != nil || len(ds) != 2 {
		t.Fatalf("dead letters %d, %v; want 2", len(ds), err)
	}
	for _, d := range ds {
		if d.DeadLetter == nil || d.DeadLetter.Reason != broker.ReasonUnknownKind {
			t.Errorf("dead letter %s: %+v, want unknown_kind", d.ID, d.DeadLetter)
		}
		if d.ID == sid && d.Headers[scheduler.HeaderSandbox] != r.ID {
			t.Errorf("sandbox dead letter headers %v lack %s=%s", d.Headers, scheduler.HeaderSandbox, r.ID)
		}
		_ = b.Nack(ctx, d, 0)
	}
}

// TestClient_ReplaySandboxBadInput: unknown id, bad lane, bad id and no
// ledger are refused clearly, and the scan gives back every dead letter it
// looked at.
func TestClient_ReplaySandboxBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	L, b, c := withLedger(t)
	// Two dead letters in batch.
	for i := 0; i < 2; i++ {
		if _, err := b.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "billing.charge", Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 2, Lease: time.Minute, Wait: time.Second})
	if err != nil || len(ds) != 2 {
		t.Fatalf("receive %d, %v", len(ds), err)
	}
	for _, d := range ds {
		if err := b.DeadLetter(ctx, d, &broker.DeadLetter{Reason: broker.ReasonPermanent, Error: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.ReplaySandbox(ctx, "batch", "no-such-task", "operator:alice")
	if !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("unknown id: %v, want ledger.ErrNotFound", err)
	}
	if s, err := b.Stats(ctx, "batch"); err != nil || s.DeadLettered != 2 {
		t.Errorf("after a failed lookup: %+v, %v; want both dead letters back", s, err)
	}
	// The same id in another lane is not found either.
	if _, err := c.ReplaySandbox(ctx, "interactive", ds[0].ID, "x"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("id of another lane: %v, want ledger.ErrNotFound", err)
	}
	for _, lane := range []string{"", "-bad", "has space"} {
		if _, err := c.ReplaySandbox(ctx, lane, ds[0].ID, "x"); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("lane %q: %v, want broker.ErrInvalid", lane, err)
		}
	}
	for _, id := range []string{"", "a\nb", strings.Repeat("x", broker.MaxKeyLen+1)} {
		if _, err := c.ReplaySandbox(ctx, "batch", id, "x"); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("id %q: %v, want broker.ErrInvalid", id, err)
		}
	}
	noLedger, _ := switchyard.NewClient(b, nil)
	if _, err := noLedger.ReplaySandbox(ctx, "batch", ds[0].ID, "x"); !errors.Is(err, switchyard.ErrNoLedger) {
		t.Errorf("without a ledger: %v, want ErrNoLedger", err)
	}
	// A dead letter the ledger never saw can still be sandboxed.
	sid, err := c.ReplaySandbox(ctx, "batch", ds[1].ID, "operator:alice")
	if err != nil {
		t.Fatal(err)
	}
	tk, err := L.Get(ctx, sid)
	if err != nil || tk.Metadata[scheduler.MetaSandboxOf] != ds[1].ID {
		t.Fatalf("sandbox copy of an unrecorded dead letter: %+v, %v", tk, err)
	}
	if s, err := b.Stats(ctx, "batch"); err != nil || s.DeadLettered != 2 || s.Ready != 1 {
		t.Errorf("after the sandbox replay: %+v, %v; want 2 dead letters and the copy ready", s, err)
	}
}

// TestEnqueue_ReservedMetadata: metadata keys starting with "switchyard-"
// are refused, so no plain Enqueue can mark a task as a sandbox copy.
func TestEnqueue_ReservedMetadata(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, b, c := withLedger(t)
	_, err := c.Enqueue(ctx, chargeArgs{Order: "O-9"}, &switchyard.EnqueueOpts{Metadata: map[string]string{scheduler.MetaSandboxOf: "x"}})
	if !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("Enqueue with reserved metadata: %v, want broker.ErrInvalid", err)
	}
	if s, err := b.Stats(ctx, "batch"); err != nil || s.Ready != 0 {
		t.Errorf("refused enqueue left %+v, %v", s, err)
	}
}

func hasEvent(evs []ledger.Event, reason, actor, detailHas string) bool {
	for _, e := range evs {
		if e.Reason == reason && e.Actor == actor && strings.Contains(e.Detail, detailHas) {
			return true
		}
	}
	return false
}

// TestClient_ReplaySandboxThroughReview: a sandbox copy that waits for a
// reviewer stays a sandbox copy after approval (the approval re-publishes
// it without the sandbox header; the ledger record still marks it).
func TestClient_ReplaySandboxThroughReview(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	L, b, c := withLedger(t)
	srv, _ := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, PollWait: 50 * time.Millisecond})
	var charges atomic.Int32
	var sandboxRuns atomic.Int32
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[chargeArgs]) error {
		if !tk.Job.Sandbox {
			return switchyard.Permanent(errors.New("declined"))
		}
		sandboxRuns.Add(1)
		if tk.Review == nil {
			return switchyard.AwaitApproval("large charge", "charge "+tk.Args.Order)
		}
		_, err := switchyard.Effect(ctx, "charge-card", func(ctx context.Context) (string, error) {
			charges.Add(1)
			return "ch", nil
		}, nil)
		return err
	}, nil)
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(ctx)
	r, err := c.Enqueue(ctx, chargeArgs{Order: "O-10"}, &switchyard.EnqueueOpts{Lane: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		s, err := b.Stats(ctx, "interactive")
		return err == nil && s.DeadLettered == 1
	})
	sid, err := c.ReplaySandbox(ctx, "interactive", r.ID, "operator:alice")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		info, err := c.Task(ctx, sid)
		return err == nil && info.Task.State == ledger.AwaitingReview
	})
	if err := c.Approve(ctx, sid, "bob", "go ahead"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		info, err := c.Task(ctx, sid)
		return err == nil && info.Task.State == ledger.Completed
	})
	info, _ := c.Task(ctx, sid)
	if charges.Load() != 0 || len(info.Effects) != 1 || info.Effects[0].State != ledger.EffectWouldDo || sandboxRuns.Load() != 2 {
		t.Errorf("after approval: %d charges, effects %+v, %d sandbox runs; want 0, one would_do, 2", charges.Load(), info.Effects, sandboxRuns.Load())
	}
}

type notifyArgs struct {
	Order string `json:"order"`
}

func (notifyArgs) Kind() string { return "billing.notify" }

// TestClient_ReplaySandboxChildTasks: a task a sandboxed handler enqueues is
// a sandbox copy too — its effects are recorded as would_do, not performed
// — and its idempotency key is its own, so the real run's child task is
// still created when the original is really replayed.
func TestClient_ReplaySandboxChildTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	L, b, c := withLedger(t)
	srv, _ := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, PollWait: 50 * time.Millisecond, Retry: switchyardRetry()})
	var (
		sends    atomic.Int32
		mu       sync.Mutex
		buggy    = true
		children = map[string]bool{} // child task ID → ran in sandbox
	)
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[chargeArgs]) error {
		mu.Lock()
		b := buggy
		mu.Unlock()
		if b && !tk.Job.Sandbox {
			return switchyard.Permanent(errors.New("bug"))
		}
		_, err := c.Enqueue(ctx, notifyArgs{Order: tk.Args.Order}, &switchyard.EnqueueOpts{IdempotencyKey: "notify-" + tk.Args.Order})
		return err
	}, nil)
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[notifyArgs]) error {
		_, err := switchyard.Effect(ctx, "send", func(ctx context.Context) (bool, error) {
			sends.Add(1)
			return true, nil
		}, nil)
		mu.Lock()
		children[tk.ID] = tk.Job.Sandbox
		mu.Unlock()
		return err
	}, nil)
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(ctx)
	r, err := c.Enqueue(ctx, chargeArgs{Order: "O-9"}, &switchyard.EnqueueOpts{Lane: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		s, err := b.Stats(ctx, "batch")
		return err == nil && s.DeadLettered == 1
	})
	sid, err := c.ReplaySandbox(ctx, "batch", r.ID, "operator:alice")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(children) == 1
	})
	if sends.Load() != 0 {
		t.Fatalf("the sandboxed handler's child task performed its effect %d times", sends.Load())
	}
	var childID string
	for id, sandboxed := range children {
		childID = id
		if !sandboxed {
			t.Fatalf("child task %s of a sandbox run ran for real", id)
		}
	}
	var child *ledger.Task
	waitFor(t, 10*time.Second, func() bool {
		info, err := c.Task(ctx, childID)
		if err == nil {
			child = info.Task
		}
		return err == nil && info.Task.State == ledger.Completed && len(info.Effects) == 1 && info.Effects[0].State == ledger.EffectWouldDo
	})
	if child.Metadata[scheduler.MetaSandboxOf] != sid || child.IdempotencyKey != "sandbox:"+sid+":notify-O-9" {
		t.Fatalf("child task metadata %v, key %q; want sandbox of %s and its own key", child.Metadata, child.IdempotencyKey, sid)
	}
	// The real replay, with the bug fixed, enqueues the real child, which
	// performs its effect once.
	mu.Lock()
	buggy = false
	mu.Unlock()
	if _, err := c.ReplayDead(ctx, "batch", 0, "operator:alice"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return sends.Load() == 1 })
	// The handler records the child after its effect returns: wait for it.
	waitFor(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(children) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	if len(children) != 2 {
		t.Fatalf("%d child tasks ran, want the sandbox one and the real one", len(children))
	}
}
