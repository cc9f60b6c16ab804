package scheduler_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/sqlite"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// TestScheduler_History: a scheduler over a ledger with a history writes
// its per-lane counts there: processed counts every handler attempt that
// ended (successes and failures), failed the failed ones, dead the tasks
// dead-lettered, including one whose kind has no handler (no attempt).
// An operator reading the ledger (another process, as far as the store
// knows) sees them while the scheduler runs and after it stops.
func TestScheduler_History(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	L, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L.Close() })
	b, err := broker.Open(ctx, "mem://"+conformance.Namespace(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s, err := scheduler.New(b, &scheduler.Config{Ledger: L, Slots: 4, Lease: 3 * time.Second,
		Heartbeat: 50 * time.Millisecond, PollWait: 50 * time.Millisecond, WorkerID: "w-hist"})
	if err != nil {
		t.Fatal(err)
	}
	var flaky atomic.Int32
	handlers := map[string]scheduler.HandlerFunc{
		"test.ok": func(ctx context.Context, job *scheduler.Job) ([]byte, error) { return nil, nil },
		"test.bad": func(ctx context.Context, job *scheduler.Job) ([]byte, error) {
			return nil, scheduler.Permanent(errors.New("bad input"))
		},
		// Fails its first attempt, then succeeds: one failed, two processed.
		"test.flaky": func(ctx context.Context, job *scheduler.Job) ([]byte, error) {
			if flaky.Add(1) == 1 {
				return nil, scheduler.RetryAfter(10*time.Millisecond, errors.New("flaky"))
			}
			return nil, nil
		},
	}
	for k, fn := range handlers {
		if err := s.Handle(k, fn, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []broker.Message{
		{Lane: "batch", Kind: "test.ok"}, {Lane: "batch", Kind: "test.ok"}, {Lane: "batch", Kind: "test.ok"},
		{Lane: "batch", Kind: "test.bad"},
		{Lane: "interactive", Kind: "test.flaky", MaxAttempts: 3},
		{Lane: "interactive", Kind: "test.nohandler"},
	} {
		m.Body = []byte(`{}`)
		if _, err := b.PublishOne(ctx, &m); err != nil {
			t.Fatal(err)
		}
	}
	// A second handle on the file: what an admin process reads.
	R, err := sqlite.Open(ctx, path, &sqlite.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { R.Close() })
	since := time.Now().Add(-2 * time.Minute)
	sum := func() (p, f, d map[string]int64) {
		pts, err := R.ListHistory(ctx, since, "")
		if err != nil {
			t.Fatal(err)
		}
		p, f, d = map[string]int64{}, map[string]int64{}, map[string]int64{}
		for _, pt := range pts {
			p[pt.Lane] += pt.Processed
			f[pt.Lane] += pt.Failed
			d[pt.Lane] += pt.Dead
		}
		return
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// While it runs: the counts reach the ledger within heartbeats.
	waitFor(t, 20*time.Second, "history in the ledger", func() bool {
		p, _, d := sum()
		return p["batch"] == 4 && p["interactive"] == 2 && d["interactive"] == 1
	})
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	p, f, d := sum()
	want := map[string][3]int64{"batch": {4, 1, 1}, "interactive": {2, 1, 1}}
	for lane, w := range want {
		if got := [3]int64{p[lane], f[lane], d[lane]}; got != w {
			t.Errorf("lane %s: processed/failed/dead = %v, want %v", lane, got, w)
		}
	}
	if len(p) != 2 {
		t.Errorf("history has lanes %v, want batch and interactive only", p)
	}
	// Every point is a whole minute, recorded under this server only.
	pts, _ := R.ListHistory(ctx, since, "batch")
	for _, pt := range pts {
		if pt.Minute.Second() != 0 || pt.Minute.Nanosecond() != 0 || pt.Lane != "batch" {
			t.Errorf("point %+v", pt)
		}
	}
	var _ ledger.History = R
}
