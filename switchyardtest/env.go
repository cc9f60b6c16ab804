package switchyardtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/adapters/embedded"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/lanes"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/sqlite"
)

// Options configure New. A nil *Options means defaults.
type Options struct {
	// Server is the base configuration of Env.Server. New sets its Ledger,
	// Now and Faults; PollWait defaults to 10ms, and the retry policy's
	// back-off applies on the fake clock. Defaults to nil: the scheduler's
	// defaults.
	Server *switchyard.ServerConfig
	// NoLedger runs without a ledger: broker-level guarantees only, and
	// Step and Effect always call their functions. Defaults to false.
	NoLedger bool
	// Start is the fake clock's first reading. Defaults to the time New is
	// called.
	Start time.Time
	// IdleTimeout bounds how long RunUntilIdle waits for due work to
	// finish before it fails the test, saying what is still pending: a
	// guard against a handler that never returns, not a timing assertion.
	// Defaults to 30s.
	IdleTimeout time.Duration
}

// Env is an in-process Switchyard for a test: the embedded broker in
// memory, an in-memory ledger, a Client and a Server, on a fake clock.
type Env struct {
	t      testing.TB
	Clock  *Clock
	Broker *broker.Broker
	Ledger ledger.Ledger // nil with Options.NoLedger
	Client *switchyard.Client
	Server *switchyard.Server

	lanes   []string // the lanes RunUntilIdle watches
	idleFor time.Duration
	rec     *recorder
	faults  *faults

	startOnce sync.Once
	startErr  error
	cancel    context.CancelFunc
}

// New builds an Env and registers its shutdown with t.Cleanup. Register
// handlers on env.Server before the first RunUntilIdle, which starts it.
func New(t testing.TB, opts *Options) *Env {
	t.Helper()
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Start.IsZero() {
		o.Start = time.Now()
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 30 * time.Second
	}
	e := &Env{t: t, Clock: NewClock(o.Start), idleFor: o.IdleTimeout, faults: &faults{}}
	ctx := context.Background()

	var id [6]byte
	_, _ = rand.Read(id[:])
	drv, err := embedded.Open(ctx, embedded.Config{Memory: true, MemoryName: "switchyardtest-" + hex.EncodeToString(id[:]),
		Poll: 5 * time.Millisecond, Now: e.Clock.Now})
	if err != nil {
		t.Fatalf("switchyardtest: embedded broker: %v", err)
	}
	e.rec = &recorder{Driver: drv}
	e.Broker, err = broker.New(e.rec, &broker.Options{Now: e.Clock.Now})
	if err != nil {
		_ = drv.Close()
		t.Fatalf("switchyardtest: broker: %v", err)
	}
	t.Cleanup(func() { _ = e.Broker.Close() })

	if !o.NoLedger {
		st, err := sqlite.Open(ctx, sqlite.Memory, &sqlite.Options{Now: e.Clock.Now})
		if err != nil {
			t.Fatalf("switchyardtest: ledger: %v", err)
		}
		e.Ledger = st
		t.Cleanup(func() { _ = st.Close() })
	}

	var sc switchyard.ServerConfig
	if o.Server != nil {
		sc = *o.Server
	}
	sc.Ledger, sc.Now, sc.Faults = e.Ledger, e.Clock.Now, e.faults.check
	if sc.PollWait <= 0 {
		sc.PollWait = 10 * time.Millisecond
	}
	ls := sc.Lanes
	if ls == nil {
		ls = lanes.Defaults()
	}
	for _, l := range ls {
		if !l.Manual { // a manual lane waits for a reviewer, not a handler
			e.lanes = append(e.lanes, l.Name)
		}
	}
	if e.Server, err = switchyard.NewServer(e.Broker, &sc); err != nil {
		t.Fatalf("switchyardtest: server: %v", err)
	}
	if e.Client, err = switchyard.NewClient(e.Broker, &switchyard.ClientConfig{Ledger: e.Ledger}); err != nil {
		t.Fatalf("switchyardtest: client: %v", err)
	}
	t.Cleanup(e.stop)
	return e
}

func (e *Env) start() error {
	e.startOnce.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		e.cancel = cancel
		e.startErr = e.Server.Start(ctx)
	})
	return e.startErr
}

func (e *Env) stop() {
	if e.cancel == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.idleFor)
	defer cancel()
	if err := e.Server.Stop(ctx); err != nil {
		e.t.Errorf("switchyardtest: stopping the server: %v", err)
	}
	e.cancel()
}

// RunUntilIdle starts the server if it has not started, then returns once
// no lane has a task that is due or running: every task due on the fake
// clock has run to an end (done, failed, dead-lettered, or back to waiting
// for a retry or a delay). Tasks on manual lanes (human-review) wait for a
// reviewer and do not count. It fails the test, naming what is pending,
// when the work does not settle within Options.IdleTimeout.
func (e *Env) RunUntilIdle() {
	e.t.Helper()
	if err := e.start(); err != nil {
		e.t.Fatalf("switchyardtest: starting the server: %v", err)
	}
	deadline := time.Now().Add(e.idleFor)
	for {
		pending, err := e.pending()
		if err != nil {
			e.t.Fatalf("switchyardtest: %v", err)
		}
		if pending == "" {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("switchyardtest: not idle after %v: %s", e.idleFor, pending)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Advance moves the fake clock forward by d, then runs what became due
// (RunUntilIdle): delayed tasks, retries whose back-off has passed, and
// redeliveries of leases that expired.
func (e *Env) Advance(d time.Duration) {
	e.t.Helper()
	e.Clock.Advance(d)
	e.RunUntilIdle()
}

// pending says which lanes still have due or running tasks; "" when none.
func (e *Env) pending() (string, error) {
	var busy []string
	for _, l := range e.lanes {
		st, err := e.Broker.Stats(context.Background(), l)
		if err != nil {
			return "", fmt.Errorf("stats of lane %s: %w", l, err)
		}
		if st.Ready > 0 || st.InFlight > 0 {
			busy = append(busy, fmt.Sprintf("lane %s has %d ready and %d running", l, st.Ready, st.InFlight))
		}
	}
	return strings.Join(busy, "; "), nil
}

// Stats returns the broker's counts for a lane: a task waiting for a retry
// or a delay is Delayed, a dead-lettered one DeadLettered.
func (e *Env) Stats(lane string) broker.Stats {
	e.t.Helper()
	st, err := e.Broker.Stats(context.Background(), lane)
	if err != nil {
		e.t.Fatalf("switchyardtest: stats of lane %s: %v", lane, err)
	}
	return st
}

// Task returns a task's record from the ledger with its attempts, events
// and effects. It fails the test without a ledger or when the task is
// unknown.
func (e *Env) Task(id string) *switchyard.TaskInfo {
	e.t.Helper()
	ti, err := e.Client.Task(context.Background(), id)
	if err != nil {
		e.t.Fatalf("switchyardtest: task %s: %v", id, err)
	}
	return ti
}
