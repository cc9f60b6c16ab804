package scheduler_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/switchyard-dev/switchyard/adapters/embedded"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/sqlite"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// laneCounter counts handled tasks per lane.
type laneCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *laneCounter) handler(ctx context.Context, job *scheduler.Job) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[job.Lane]++
	return nil, nil
}

func (c *laneCounter) get(lane string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[lane]
}

// controlsSetup opens a file ledger twice (the scheduler's handle and an
// operator's), an in-process broker, and a scheduler polling lane pauses
// every 20ms; everything closes with the test.
func controlsSetup(t *testing.T, wrap func(ledger.Ledger) ledger.Ledger, obs func(scheduler.Event)) (*scheduler.Scheduler, *broker.Broker, ledger.LaneControls, *laneCounter) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	mine, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mine.Close() })
	operator, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { operator.Close() })
	b, err := broker.Open(ctx, "mem://"+conformance.Namespace(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	var L ledger.Ledger = mine
	if wrap != nil {
		L = wrap(mine)
	}
	s, err := scheduler.New(b, &scheduler.Config{Ledger: L, ControlInterval: 20 * time.Millisecond,
		PollWait: 50 * time.Millisecond, Lease: 5 * time.Second, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	c := &laneCounter{}
	if err := s.Handle("test.work", c.handler, nil); err != nil {
		t.Fatal(err)
	}
	return s, b, operator, c
}

func publish(t *testing.T, b *broker.Broker, lane string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := b.PublishOne(context.Background(), &broker.Message{Lane: lane, Kind: "test.work", Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestScheduler_LedgerPause: a pause written to the ledger by another
// handle (another process, as far as the scheduler knows) stops a running
// scheduler from starting tasks of that lane while other lanes go on; a
// lane is paused while the ledger or Pause says so; resuming in both
// starts it again.
func TestScheduler_LedgerPause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, b, operator, c := controlsSetup(t, nil, nil)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(ctx)

	// Warm up: the batch lane runs.
	publish(t, b, "batch", 1)
	waitFor(t, 10*time.Second, "first batch task", func() bool { return c.get("batch") == 1 })

	if err := operator.SetLanePaused(ctx, "batch", true, "operator:alice"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "ledger pause applied", func() bool { p, _ := s.LanePaused("batch"); return p })
	publish(t, b, "batch", 3)
	publish(t, b, "interactive", 3)
	// The interactive tasks, published after the batch ones, all run: the
	// dispatcher had every chance to start a batch task meanwhile.
	waitFor(t, 10*time.Second, "interactive tasks while batch is paused", func() bool { return c.get("interactive") == 3 })
	if n := c.get("batch"); n != 1 {
		t.Fatalf("%d batch tasks ran, want only the one before the pause", n)
	}

	// Paused in both places: resuming one leaves it paused.
	if err := s.Pause("batch"); err != nil {
		t.Fatal(err)
	}
	if err := s.Resume("batch"); err != nil {
		t.Fatal(err)
	}
	if p, known := s.LanePaused("batch"); !p || !known {
		t.Fatalf("LanePaused after an in-process resume = %v, %v; want still paused by the ledger", p, known)
	}
	if err := s.Pause("batch"); err != nil {
		t.Fatal(err)
	}
	if err := operator.SetLanePaused(ctx, "batch", false, "operator:alice"); err != nil {
		t.Fatal(err)
	}
	publish(t, b, "interactive", 2)
	waitFor(t, 10*time.Second, "interactive tasks while batch is paused in-process", func() bool { return c.get("interactive") == 5 })
	if p, _ := s.LanePaused("batch"); !p || c.get("batch") != 1 {
		t.Fatalf("after the ledger resume with Pause in force: paused=%v, %d batch tasks ran", p, c.get("batch"))
	}
	if err := s.Resume("batch"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "batch tasks after resume", func() bool { return c.get("batch") == 4 })
	if _, known := s.LanePaused("no-such-lane"); known {
		t.Error("LanePaused reports an unknown lane as known")
	}
}

// TestScheduler_LedgerPauseAtStart: a lane paused in the ledger before
// Start never starts a task until it is resumed.
func TestScheduler_LedgerPauseAtStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, b, operator, c := controlsSetup(t, nil, nil)
	if err := operator.SetLanePaused(ctx, "batch", true, "operator:alice"); err != nil {
		t.Fatal(err)
	}
	publish(t, b, "batch", 2)
	publish(t, b, "interactive", 2)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(ctx)
	if p, _ := s.LanePaused("batch"); !p {
		t.Fatal("a lane paused in the ledger is not paused right after Start")
	}
	waitFor(t, 10*time.Second, "interactive tasks", func() bool { return c.get("interactive") == 2 })
	if n := c.get("batch"); n != 0 {
		t.Fatalf("%d batch tasks ran while paused", n)
	}
	if err := operator.SetLanePaused(ctx, "batch", false, "operator:alice"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "batch tasks after resume", func() bool { return c.get("batch") == 2 })
}

// flakyControls fails PausedLanes while fail is set.
type flakyControls struct {
	*sqlite.Store
	fail atomic.Bool
}

var errControlsDown = errors.New("ledger unreachable (test)")

func (f *flakyControls) PausedLanes(ctx context.Context) ([]ledger.LanePause, error) {
	if f.fail.Load() {
		return nil, broker.Wrap("test: paused lanes", broker.Transient, errControlsDown)
	}
	return f.Store.PausedLanes(ctx)
}

// TestScheduler_LedgerPausePollFails: while reading the pauses fails, the
// failure is observed, the scheduler keeps running and keeps the last
// pauses it read; when reads work again, a resume there applies.
func TestScheduler_LedgerPausePollFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var fc *flakyControls
	var failures atomic.Int32
	obs := func(e scheduler.Event) {
		if e.Type == scheduler.EventControlFailed && errors.Is(e.Err, errControlsDown) {
			failures.Add(1)
		}
	}
	s, b, operator, c := controlsSetup(t, func(l ledger.Ledger) ledger.Ledger {
		fc = &flakyControls{Store: l.(*sqlite.Store)}
		return fc
	}, obs)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(ctx)
	if err := operator.SetLanePaused(ctx, "batch", true, "operator:alice"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "ledger pause applied", func() bool { p, _ := s.LanePaused("batch"); return p })
	fc.fail.Store(true)
	if err := operator.SetLanePaused(ctx, "batch", false, "operator:alice"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "poll failures observed", func() bool { return failures.Load() >= 3 })
	publish(t, b, "batch", 1)
	publish(t, b, "interactive", 1)
	waitFor(t, 10*time.Second, "interactive task while polls fail", func() bool { return c.get("interactive") == 1 })
	if p, _ := s.LanePaused("batch"); !p || c.get("batch") != 0 {
		t.Fatalf("while polls fail: paused=%v, %d batch tasks ran; want the last known pause kept", p, c.get("batch"))
	}
	fc.fail.Store(false)
	waitFor(t, 10*time.Second, "batch task after polls recover", func() bool { return c.get("batch") == 1 })
}
