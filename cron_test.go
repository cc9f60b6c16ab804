package switchyard_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	_ "github.com/switchyard-dev/switchyard/adapters/embedded"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/lanes"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/sqlite"
)

type tickArgs struct {
	Report string `json:"report"`
}

func (tickArgs) Kind() string { return "cron.tick" }

// fakeClock is a simulated clock: time moves only when the test calls
// Advance.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{now: t} }

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) At(t time.Time) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	if !t.After(f.now) {
		ch <- f.now
		return ch
	}
	f.waiters = append(f.waiters, fakeWaiter{at: t, ch: ch})
	return ch
}

func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	keep := f.waiters[:0]
	for _, w := range f.waiters {
		if w.at.After(f.now) {
			keep = append(keep, w)
			continue
		}
		w.ch <- f.now
	}
	f.waiters = keep
}

// cronProcess is what one scheduler process holds: its own ledger handle
// on the shared file, its own broker handle on the shared mem:// broker,
// a Client and a Cron.
type cronProcess struct {
	L      ledger.Ledger
	b      *broker.Broker
	client *switchyard.Client
	cron   *switchyard.Cron
}

func openCronProcess(t *testing.T, ledgerPath, brokerURL string, opts *switchyard.CronOpts) *cronProcess {
	t.Helper()
	ctx := context.Background()
	L, err := ledger.Open(ctx, "sqlite://"+ledgerPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L.Close() })
	b, err := broker.Open(ctx, brokerURL, &broker.Options{Dedup: L})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	client, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		t.Fatal(err)
	}
	c, err := switchyard.NewCron(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return &cronProcess{L: L, b: b, client: client, cron: c}
}

func cronMemName(t *testing.T) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "cron" + hex.EncodeToString(b[:])
}

// cronHandled is how many ticks a Cron has dealt with (created or found
// duplicate).
func cronHandled(c *switchyard.Cron) int64 {
	s := c.Stats()
	return s.Enqueued + s.Duplicates
}

// cronWaitFor polls cond for up to 20 s of real time.
func cronWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// cronTasks returns the ledger's tasks in the scheduled lane, by key.
func cronTasks(t *testing.T, L ledger.Ledger) map[string]*ledger.Task {
	t.Helper()
	tasks, err := L.List(context.Background(), ledger.Filter{Lane: lanes.Scheduled, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]*ledger.Task{}
	for _, task := range tasks {
		if _, dup := m[task.IdempotencyKey]; dup {
			t.Errorf("two tasks with key %s", task.IdempotencyKey)
		}
		m[task.IdempotencyKey] = task
	}
	if len(m) != len(tasks) {
		t.Errorf("%d tasks, %d distinct keys", len(tasks), len(m))
	}
	return m
}

// TestCron_TwoProcessesOneLedger: two Crons, each with its own ledger and
// broker handle on one SQLite ledger file and one mem:// broker, run a
// per-second schedule over a simulated minute. Every tick is enqueued
// exactly once: 61 ledger tasks (ticks 0..60 s) with the right keys, and
// the broker carries exactly those 61 task IDs, after 122 Enqueue calls. Run on the
// embedded broker's native dedup, and with reduced=true, where the broker
// relies on Options.Dedup (the ledger).
func TestCron_TwoProcessesOneLedger(t *testing.T) {
	for _, reduced := range []bool{false, true} {
		name := "native-dedup"
		if reduced {
			name = "ledger-dedup"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "ledger.db")
			url := "mem://" + cronMemName(t)
			if reduced {
				url += "?reduced=true"
			}
			t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
			clk := newFakeClock(t0)
			// CatchUp 500 ms: Start enqueues the tick at t0 itself and
			// nothing older.
			opts := &switchyard.CronOpts{Clock: clk, CatchUp: 500 * time.Millisecond}
			procs := []*cronProcess{openCronProcess(t, path, url, opts), openCronProcess(t, path, url, opts)}
			for _, p := range procs {
				if err := p.cron.Add("every-second", "* * * * * *", tickArgs{Report: "r"}, &switchyard.EnqueueOpts{Tenant: "acme"}); err != nil {
					t.Fatal(err)
				}
				if err := p.cron.Start(ctx); err != nil {
					t.Fatal(err)
				}
			}
			const seconds = 60
			for k := 0; k <= seconds; k++ {
				if k > 0 {
					clk.Advance(time.Second)
				}
				for _, p := range procs {
					cronWaitFor(t, "both crons to handle the tick", func() bool { return cronHandled(p.cron) == int64(k+1) })
				}
			}
			for _, p := range procs {
				p.cron.Stop()
			}
			var created, dups int64
			for i, p := range procs {
				s := p.cron.Stats()
				t.Logf("process %d: %+v", i, s)
				if s.Failed != 0 || s.Skipped != 0 {
					t.Errorf("process %d: %+v", i, s)
				}
				created += s.Enqueued
				dups += s.Duplicates
			}
			// Each process handled every tick once. Enqueued can be
			// below one per tick: when the other process's duplicate
			// re-publish (Client.Enqueue re-publishes a still-queued
			// task) reaches the broker first, the creator's own publish
			// is reported as a duplicate too. The ledger and broker
			// counts below are the exactly-once check.
			if created+dups != 2*(seconds+1) || created > seconds+1 || created == 0 {
				t.Errorf("created %d, duplicates %d; want %d calls, at most %d created", created, dups, 2*(seconds+1), seconds+1)
			}
			tasks := cronTasks(t, procs[0].L)
			if len(tasks) != seconds+1 {
				t.Errorf("ledger holds %d tasks, want %d", len(tasks), seconds+1)
			}
			for k := 0; k <= seconds; k++ {
				key := switchyard.TickKey("every-second", t0.Add(time.Duration(k)*time.Second))
				task := tasks[key]
				if task == nil {
					t.Errorf("no task for %s", key)
					continue
				}
				if task.Tenant != "acme" || task.Kind != "cron.tick" || task.Metadata["cron"] != "every-second" {
					t.Errorf("task %s: tenant %q kind %q metadata %v", key, task.Tenant, task.Kind, task.Metadata)
				}
			}
			// The broker carries exactly the ledger's 61 task IDs. With
			// native dedup, one message each. Through Options.Dedup, the
			// process that found the tick already created re-publishes it
			// under the same ID (Client.Enqueue does, in case the creator
			// died before publishing), and Broker sends a re-publish of
			// the claiming ID again: two copies of one task, which a
			// ledger-backed server runs once.
			ids := map[string]int{}
			for {
				ds, err := procs[1].b.Receive(ctx, broker.ReceiveRequest{Lane: lanes.Scheduled, Max: 100, Lease: time.Minute, Wait: 50 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				if len(ds) == 0 {
					break
				}
				for _, d := range ds {
					ids[d.ID]++
				}
			}
			byID := map[string]bool{}
			for _, task := range tasks {
				byID[task.ID] = true
			}
			msgs := 0
			for id, n := range ids {
				msgs += n
				if !byID[id] {
					t.Errorf("broker message %s is not a ledger task", id)
				}
			}
			t.Logf("broker: %d messages, %d distinct task IDs", msgs, len(ids))
			if len(ids) != seconds+1 {
				t.Errorf("broker holds %d distinct tasks, want %d", len(ids), seconds+1)
			}
			if !reduced && msgs != seconds+1 {
				t.Errorf("broker with native dedup holds %d messages, want %d", msgs, seconds+1)
			}
		})
	}
}

// TestCron_CatchUpAfterDowntime: a process enqueues a per-minute schedule
// for 10 minutes and stops; 30 minutes later another starts on the same
// ledger. It enqueues the missed ticks, at most MaxCatchUp (the most
// recent), and finds the ones already enqueued duplicates.
func TestCron_CatchUpAfterDowntime(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	url := "mem://" + cronMemName(t)
	t0 := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	clk := newFakeClock(t0)
	a := openCronProcess(t, path, url, &switchyard.CronOpts{Clock: clk, CatchUp: -1})
	if err := a.cron.Add("minutely", "* * * * *", tickArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.cron.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for k := 1; k <= 10; k++ {
		clk.Advance(time.Minute)
		cronWaitFor(t, "tick", func() bool { return cronHandled(a.cron) == int64(k) })
	}
	a.cron.Stop()
	if s := a.cron.Stats(); s.Enqueued != 10 || s.Duplicates != 0 {
		t.Fatalf("first process: %+v, want 10 enqueued (no look-back with CatchUp < 0)", s)
	}
	clk.Advance(30 * time.Minute) // downtime: 08:10 → 08:40

	// The second process looks back 1 h, to 07:40: 60 ticks, 07:41–08:40.
	// With MaxCatchUp 35 it enqueues the latest 35, 08:06–08:40, of which
	// 08:06–08:10 are duplicates (the first process enqueued them); the
	// 25 older ones (07:41–08:05) are skipped.
	b := openCronProcess(t, path, url, &switchyard.CronOpts{Clock: clk, MaxCatchUp: 35, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := b.cron.Add("minutely", "* * * * *", tickArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.cron.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cronWaitFor(t, "catch-up", func() bool { return cronHandled(b.cron) == 35 })
	b.cron.Stop()
	s := b.cron.Stats()
	if s.Enqueued != 30 || s.Duplicates != 5 || s.Skipped != 25 {
		t.Errorf("second process: %+v, want 30 enqueued, 5 duplicates, 25 skipped", s)
	}
	tasks := cronTasks(t, b.L)
	if len(tasks) != 40 {
		t.Errorf("ledger holds %d tasks, want 40 (08:01–08:40)", len(tasks))
	}
	for m := 1; m <= 40; m++ {
		if key := switchyard.TickKey("minutely", t0.Add(time.Duration(m)*time.Minute)); tasks[key] == nil {
			t.Errorf("no task for %s", key)
		}
	}
}

// TestCron_TimeZone: a daily schedule in a time zone ticks at its local
// time, and the key carries the tick in UTC.
func TestCron_TimeZone(t *testing.T) {
	ctx := context.Background()
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip("no time zone database on this machine:", err)
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	t0 := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC) // 01:00 in Paris
	clk := newFakeClock(t0)
	p := openCronProcess(t, path, "mem://"+cronMemName(t), &switchyard.CronOpts{Clock: clk, Location: paris, CatchUp: -1})
	if err := p.cron.Add("nightly", "30 2 * * *", tickArgs{}, &switchyard.EnqueueOpts{Lane: lanes.Batch}); err != nil {
		t.Fatal(err)
	}
	if err := p.cron.Start(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(90 * time.Minute) // 02:30 Paris = 01:30 UTC
	cronWaitFor(t, "tick", func() bool { return cronHandled(p.cron) == 1 })
	p.cron.Stop()
	task, err := p.L.GetByKey(ctx, "", "cron/nightly/2026-11-29T01:30:00Z")
	if err != nil {
		t.Fatal(err)
	}
	if task.Lane != lanes.Batch {
		t.Errorf("lane %q, want batch (from opts)", task.Lane)
	}
}

func TestCron_Invalid(t *testing.T) {
	if _, err := switchyard.NewCron(nil, nil); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("nil client: %v", err)
	}
	b, err := broker.Open(context.Background(), "mem://"+cronMemName(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	client, _ := switchyard.NewClient(b, nil)
	c, err := switchyard.NewCron(client, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, spec string
		opts       *switchyard.EnqueueOpts
	}{
		{"bad spec", "not a spec", nil},
		{"empty spec", "", nil},
		{"every", "@every 1m", nil},
		{"tz only", "CRON_TZ=UTC", nil},
		{"bad tz", "CRON_TZ=Nowhere/Atall * * * * *", nil},
		{"seven fields", "0 0 0 * * * *", nil},
		{"key", "* * * * *", &switchyard.EnqueueOpts{IdempotencyKey: "k"}},
		{"run at", "* * * * *", &switchyard.EnqueueOpts{RunAt: time.Now()}},
		{"bad name!", "* * * * *", nil},
	} {
		name := tc.name
		if name != "bad name!" {
			name = "ok-name"
		}
		if err := c.Add(name, tc.spec, tickArgs{}, tc.opts); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("%s: Add = %v, want ErrInvalid", tc.name, err)
		}
	}
	if err := c.Add("ok", "@hourly", tickArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Add("ok", "@daily", tickArgs{}, nil); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("duplicate name: %v", err)
	}
	if err := c.Add("nil-args", "@daily", nil, nil); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("nil args: %v", err)
	}
	c.Stop() // before Start: harmless
	if err := c.Add("late", "@daily", tickArgs{}, nil); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("Add after Stop: %v", err)
	}
}
