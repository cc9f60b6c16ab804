package integration_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	_ "github.com/switchyard-dev/switchyard/adapters/nats"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/conformance/testenv/pgtest"
	"github.com/switchyard-dev/switchyard/internal/testclean"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/postgres"
	_ "github.com/switchyard-dev/switchyard/ledger/sqlite"
	"github.com/switchyard-dev/switchyard/scheduler"
)

type streamArgs struct {
	Chunks int `json:"chunks"`
}

func (streamArgs) Kind() string { return "test.stream" }

// streamEnv is one ledger (by DSN, reopenable: a second process) and one
// broker for the stream and wait tests.
type streamEnv struct {
	dsn string
	L   ledger.Ledger
	b   *broker.Broker
	c   *switchyard.Client
}

func (e *streamEnv) server(t *testing.T) *switchyard.Server {
	t.Helper()
	srv, err := switchyard.NewServer(e.b, &switchyard.ServerConfig{Ledger: e.L, Slots: 4, Lease: 3 * time.Second, PollWait: 50 * time.Millisecond,
		Retry: scheduler.RetryPolicy{Base: 20 * time.Millisecond, Jitter: scheduler.NoJitter, MaxAttempts: 3}})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// reopen opens the ledger again, as another process would, with a Client
// of its own.
func (e *streamEnv) reopen(t *testing.T) *switchyard.Client {
	t.Helper()
	L, err := ledger.Open(context.Background(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L.Close() })
	c, err := switchyard.NewClient(e.b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newStreamEnv(t *testing.T, ledgerKind, brokerKind string) *streamEnv {
	t.Helper()
	ctx := context.Background()
	e := &streamEnv{}
	switch ledgerKind {
	case "sqlite":
		e.dsn = "sqlite://" + filepath.Join(t.TempDir(), "ledger.db")
	case "postgres":
		e.dsn = pgtest.LedgerDSN(t)
	}
	var err error
	if e.L, err = ledger.Open(ctx, e.dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.L.Close() })
	url := "mem://" + conformance.Namespace(t)
	if brokerKind != "mem" {
		url = testclean.URL(t, brokerKind, conformance.Namespace(t), nil)
	}
	if e.b, err = broker.Open(ctx, url, &broker.Options{Dedup: e.L}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.b.Close() })
	if e.c, err = switchyard.NewClient(e.b, &switchyard.ClientConfig{Ledger: e.L}); err != nil {
		t.Fatal(err)
	}
	return e
}

// streamMatrix runs f on the SQLite and PostgreSQL ledgers, each with the
// in-process embedded broker and NATS JetStream.
func streamMatrix(t *testing.T, f func(t *testing.T, e *streamEnv)) {
	for _, lk := range []string{"sqlite", "postgres"} {
		for _, bk := range []string{"mem", "nats"} {
			t.Run(lk+"/"+bk, func(t *testing.T) {
				t.Parallel()
				f(t, newStreamEnv(t, lk, bk))
			})
		}
	}
}

// TestWatch_ReconnectAndRestart: a watcher that disconnects mid-stream and
// comes back from another process (a fresh ledger handle and Client) with
// its last offset gets every later chunk exactly once, after the state
// changes and progress in write order; the stream ends with completed.
func TestWatch_ReconnectAndRestart(t *testing.T) {
	t.Parallel()
	streamMatrix(t, reconnectAndRestart)
}

// TestWatch_OtherBrokers: the same on RabbitMQ, Redis (asynq) and SQS
// (the stream never touches the broker; the task's deliveries do).
func TestWatch_OtherBrokers(t *testing.T) {
	t.Parallel()
	for _, bk := range []string{"rabbitmq", "asynq", "sqs"} {
		t.Run(bk, func(t *testing.T) {
			t.Parallel()
			reconnectAndRestart(t, newStreamEnv(t, "sqlite", bk))
		})
	}
}

func reconnectAndRestart(t *testing.T, e *streamEnv) {
	{
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		srv := e.server(t)
		gate := make(chan struct{})
		_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[streamArgs]) error {
			for i := range tk.Args.Chunks {
				if i == tk.Args.Chunks/2 {
					select { // the watcher disconnects meanwhile
					case <-gate:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				if i%10 == 0 {
					if err := switchyard.Progress(ctx, float64(i)/float64(tk.Args.Chunks), fmt.Sprintf("chunk %d", i)); err != nil {
						return err
					}
				}
				if err := switchyard.Emit(ctx, []byte(fmt.Sprintf("c%d;", i))); err != nil {
					return err
				}
			}
			return nil
		}, nil)
		if err := srv.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer srv.Stop(context.Background())
		const n = 40
		res, err := e.c.Enqueue(ctx, streamArgs{Chunks: n}, &switchyard.EnqueueOpts{Lane: "interactive"})
		if err != nil {
			t.Fatal(err)
		}

		var got strings.Builder
		var kinds []string
		var last int64
		seen := 0
		for ev, err := range e.c.Watch(ctx, res.ID, 0, &switchyard.WatchOpts{Interval: 10 * time.Millisecond}) {
			if err != nil {
				t.Fatal(err)
			}
			last = ev.Offset
			kinds = append(kinds, describe(ev))
			if ev.Kind == ledger.StreamChunk {
				got.Write(ev.Data)
				if seen++; seen == 7 {
					break // disconnect mid-stream, before the handler passes the gate
				}
			}
		}
		close(gate)
		other := e.reopen(t)
		var final []string
		for ev, err := range other.Watch(ctx, res.ID, last, &switchyard.WatchOpts{Interval: 10 * time.Millisecond}) {
			if err != nil {
				t.Fatal(err)
			}
			if ev.Offset <= last {
				t.Fatalf("offset %d after resuming from %d", ev.Offset, last)
			}
			last = ev.Offset
			final = append(final, describe(ev))
			if ev.Kind == ledger.StreamChunk {
				got.Write(ev.Data)
			}
		}
		var want strings.Builder
		for i := range n {
			fmt.Fprintf(&want, "c%d;", i)
		}
		if got.String() != want.String() {
			t.Fatalf("chunks across the reconnect:\n got %s\nwant %s", got.String(), want.String())
		}
		if kinds[0] != "state:queued" || kinds[1] != "state:running" || kinds[2] != "progress:0.00:chunk 0" {
			t.Errorf("stream starts %v", kinds[:3])
		}
		if final[len(final)-1] != "state:completed" {
			t.Errorf("stream ends %v, want state:completed", final[len(final)-1])
		}
		p, err := other.LatestProgress(ctx, []string{res.ID})
		if err != nil || p[res.ID].Fraction != 0.75 || p[res.ID].Message != "chunk 30" {
			t.Errorf("LatestProgress = %+v %v", p, err)
		}
	}
}

func describe(ev switchyard.WatchEvent) string {
	switch ev.Kind {
	case ledger.StreamState:
		return "state:" + string(ev.State)
	case ledger.StreamProgress:
		return fmt.Sprintf("progress:%.2f:%s", ev.Fraction, ev.Message)
	}
	return "chunk:" + string(ev.Data)
}

// TestWatch_WorkerRestart: the worker stops mid-stream (its handler is
// cancelled and the task returned), another worker runs the task again;
// a watcher sees the first run's chunks, the return, and the second run's
// chunks, each once, in order.
func TestWatch_WorkerRestart(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t, "sqlite", "mem")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	started := make(chan struct{}, 2)
	handler := func(ctx context.Context, tk *switchyard.Task[streamArgs]) error {
		started <- struct{}{}
		for i := range tk.Args.Chunks {
			if err := switchyard.Emit(ctx, []byte(fmt.Sprintf("a%d-%d;", tk.Attempt, i))); err != nil {
				return err
			}
			if i == 2 {
				select {
				case <-ctx.Done(): // the first worker stops here
					return ctx.Err()
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
		return nil
	}
	srv1 := e.server(t)
	_ = switchyard.Register(srv1, handler, nil)
	if err := srv1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := e.c.Enqueue(ctx, streamArgs{Chunks: 5}, &switchyard.EnqueueOpts{Lane: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	waitFor(t, 10*time.Second, func() bool {
		es, _ := e.L.ReadStream(ctx, res.ID, 0, 0)
		return len(es) >= 5 // queued, running, three chunks
	})
	if err := srv1.StopAndCancel(ctx); err != nil {
		t.Fatal(err)
	}
	srv2 := e.server(t)
	_ = switchyard.Register(srv2, handler, nil)
	if err := srv2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv2.Stop(context.Background())
	var seq []string
	for ev, err := range e.reopen(t).Watch(ctx, res.ID, 0, &switchyard.WatchOpts{Interval: 10 * time.Millisecond}) {
		if err != nil {
			t.Fatal(err)
		}
		seq = append(seq, describe(ev))
	}
	s := strings.Join(seq, " ")
	// Chunks carry the attempt and the index: the first run's three, then
	// (after the return to queued and a new start) the second run's five.
	var idx []string
	for _, x := range seq {
		if strings.HasPrefix(x, "chunk:") {
			_, i, _ := strings.Cut(x, "-")
			idx = append(idx, strings.TrimSuffix(i, ";"))
		} else {
			idx = append(idx, x)
		}
	}
	want := "state:queued state:running 0 1 2 state:queued state:running 0 1 2 3 4 state:completed"
	if got := strings.Join(idx, " "); got != want {
		t.Fatalf("stream across a worker restart:\n got %s\nwant %s\n(%s)", got, want, s)
	}
}

// TestEmit_Limits: an oversized chunk or progress message is refused with
// the limit named and nothing written; a bad fraction is invalid; outside
// a handler both say so.
func TestEmit_Limits(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t, "sqlite", "mem")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := e.server(t)
	errs := make(chan []error, 1)
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[streamArgs]) error {
		errs <- []error{
			switchyard.Emit(ctx, make([]byte, ledger.MaxChunkBytes+1)),
			switchyard.Progress(ctx, 0.5, strings.Repeat("x", ledger.MaxProgressMessage+1)),
			switchyard.Progress(ctx, 2, ""),
			switchyard.Emit(ctx, make([]byte, ledger.MaxChunkBytes)),
		}
		return nil
	}, nil)
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())
	res, err := e.c.Enqueue(ctx, streamArgs{}, &switchyard.EnqueueOpts{Lane: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	got := <-errs
	for i, limit := range []string{"ledger.MaxChunkBytes", "ledger.MaxProgressMessage"} {
		var le *switchyard.LimitError
		if !errors.As(got[i], &le) || le.Limit != limit || !errors.Is(got[i], broker.ErrTooLarge) || !strings.Contains(got[i].Error(), limit) {
			t.Errorf("error %d = %v, want a LimitError naming %s", i, got[i], limit)
		}
	}
	if !errors.Is(got[2], broker.ErrInvalid) {
		t.Errorf("fraction 2: %v, want ErrInvalid", got[2])
	}
	if got[3] != nil {
		t.Errorf("a chunk at the limit: %v", got[3])
	}
	waitFor(t, 10*time.Second, func() bool {
		info, err := e.c.Task(ctx, res.ID)
		return err == nil && info.Task.State == ledger.Completed
	})
	es, err := e.L.ReadStream(ctx, res.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	chunks := 0
	for _, x := range es {
		if x.Kind != ledger.StreamState {
			chunks++
		}
	}
	if chunks != 1 {
		t.Errorf("%d entries written, want only the chunk at the limit", chunks)
	}
	if err := switchyard.Emit(ctx, []byte("x")); !errors.Is(err, scheduler.ErrNotInTask) {
		t.Errorf("Emit outside a handler: %v", err)
	}
	for _, err := range e.c.Watch(ctx, "no-such-task", 0, nil) {
		if !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("Watch of an unknown task: %v", err)
		}
	}
}

// TestStreamWriter: chunks written through a StreamWriter reach a watcher
// in order, each once; a Write after Close fails; an oversized chunk is
// refused with the limit named.
func TestStreamWriter(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t, "sqlite", "mem")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := e.server(t)
	errs := make(chan []error, 1)
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[streamArgs]) error {
		w, err := switchyard.NewStreamWriter(ctx, 20*time.Millisecond)
		if err != nil {
			return err
		}
		for i := range tk.Args.Chunks {
			if _, err := fmt.Fprintf(w, "t%d ", i); err != nil {
				return err
			}
			if i%100 == 0 {
				time.Sleep(30 * time.Millisecond) // a pause: the timer flushes
			}
		}
		_, big := w.Write(make([]byte, ledger.MaxChunkBytes+1))
		cerr := w.Close()
		_, after := w.Write([]byte("late"))
		errs <- []error{big, cerr, after}
		return nil
	}, nil)
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())
	const n = 1500
	res, err := e.c.Enqueue(ctx, streamArgs{Chunks: n}, &switchyard.EnqueueOpts{Lane: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	var got, want strings.Builder
	for i := range n {
		fmt.Fprintf(&want, "t%d ", i)
	}
	for ev, err := range e.c.Watch(ctx, res.ID, 0, &switchyard.WatchOpts{Interval: 10 * time.Millisecond}) {
		if err != nil {
			t.Fatal(err)
		}
		got.Write(ev.Data)
	}
	if got.String() != want.String() {
		t.Fatalf("chunks through the writer:\n got %.200s…\nwant %.200s…", got.String(), want.String())
	}
	es := <-errs
	var le *switchyard.LimitError
	if !errors.As(es[0], &le) || es[1] != nil || es[2] == nil {
		t.Errorf("oversized %v, close %v, write after close %v", es[0], es[1], es[2])
	}
}

// TestWatch_WakesOnNotes: a watcher in another process (its own ledger
// handle) whose polling interval is an hour still gets each chunk as it
// is emitted, and the end of the task: it wakes on the ledger's notes
// (each append sends one), with a handful of reads rather than a
// polling loop.
func TestWatch_WakesOnNotes(t *testing.T) {
	t.Parallel()
	for _, lk := range []string{"sqlite", "postgres"} {
		t.Run(lk, func(t *testing.T) {
			t.Parallel()
			e := newStreamEnv(t, lk, "mem")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			srv := e.server(t)
			next := make(chan struct{})
			_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[streamArgs]) error {
				for i := range tk.Args.Chunks {
					if err := switchyard.Emit(ctx, []byte(fmt.Sprintf("c%d;", i))); err != nil {
						return err
					}
					select { // the next chunk once the watcher has this one
					case <-next:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				return nil
			}, nil)
			if err := srv.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer srv.Stop(context.Background())
			L2, err := ledger.Open(ctx, e.dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { L2.Close() })
			counted := &countingLedger{Ledger: L2}
			watcher, err := switchyard.NewClient(e.b, &switchyard.ClientConfig{Ledger: counted})
			if err != nil {
				t.Fatal(err)
			}
			const n = 3
			res, err := e.c.Enqueue(ctx, streamArgs{Chunks: n}, &switchyard.EnqueueOpts{Lane: "interactive"})
			if err != nil {
				t.Fatal(err)
			}
			var got strings.Builder
			chunks := 0
			var end ledger.State
			for ev, err := range watcher.Watch(ctx, res.ID, 0, &switchyard.WatchOpts{Interval: time.Hour}) {
				if err != nil {
					t.Fatalf("watch (the chunks did not come through the notes?): %v", err)
				}
				switch ev.Kind {
				case ledger.StreamChunk:
					got.Write(ev.Data)
					if chunks++; chunks < n {
						next <- struct{}{}
					} else {
						close(next)
					}
				case ledger.StreamState:
					end = ev.State
				}
			}
			if got.String() != "c0;c1;c2;" || end != ledger.Completed {
				t.Fatalf("chunks %q, last state %s", got.String(), end)
			}
			// One read at the start, then one per wake: a chunk's note
			// (the running state comes with the first), the end's note.
			if r := counted.reads.Load(); r < n || r > 4*n {
				t.Errorf("the watcher read the stream %d times for %d chunks", r, n)
			}
		})
	}
}

// TestWait_IgnoresStreamNotes: Client.Wait on a task that streams many
// chunks reads the task on its state notes, not once per chunk.
func TestWait_IgnoresStreamNotes(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t, "sqlite", "mem")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := e.server(t)
	start, finish := make(chan struct{}), make(chan struct{})
	const n = 50
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[streamArgs]) error {
		<-start
		for i := range tk.Args.Chunks {
			if err := switchyard.Emit(ctx, []byte{byte(i)}); err != nil {
				return err
			}
		}
		<-finish
		return nil
	}, nil)
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())
	L2, err := ledger.Open(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L2.Close() })
	counted := &countingLedger{Ledger: L2}
	waiter, _ := switchyard.NewClient(e.b, &switchyard.ClientConfig{Ledger: counted})
	res, err := e.c.Enqueue(ctx, streamArgs{Chunks: n}, &switchyard.EnqueueOpts{Lane: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Wait(ctx, res.ID)
		done <- err
	}()
	waitFor(t, 10*time.Second, func() bool { return counted.gets.Load() > 0 }) // Wait listens, then reads
	close(start)
	waitFor(t, 10*time.Second, func() bool {
		es, err := e.L.ReadStream(ctx, res.ID, 0, 1000)
		chunks := 0
		for _, ev := range es {
			if ev.Kind == ledger.StreamChunk {
				chunks++
			}
		}
		return err == nil && chunks == n
	})
	time.Sleep(300 * time.Millisecond) // the chunks' notes reach the waiter (polled every 50ms)
	close(finish)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if g := counted.gets.Load(); g > 5 {
		t.Errorf("Wait read the task %d times for a task that emitted %d chunks", g, n)
	}
}

// TestWatch_FollowReplay: a watcher that follows (WatchOpts.Follow) a
// task already dead, from another ledger handle and with an hour's
// polling interval, hears the end of its run after an operator replays it
// (Client.ReplayDead): the watcher's first read marks the task watched
// though it is terminal (ledger.Watcher.FollowTask), so the store sends
// the note of the replayed run's end. Nothing else wakes the watcher (the
// replay and the new run write no stream entry that notes), so without
// the mark it would see the end only at its next poll, an hour later: the
// test fails at its 30s bound.
func TestWatch_FollowReplay(t *testing.T) {
	t.Parallel()
	for _, lk := range []string{"sqlite", "postgres"} {
		t.Run(lk, func(t *testing.T) {
			t.Parallel()
			e := newStreamEnv(t, lk, "mem")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			srv := e.server(t)
			var fixed atomic.Bool
			_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[streamArgs]) error {
				if !fixed.Load() {
					return switchyard.Permanent(errors.New("downstream is down"))
				}
				return nil
			}, nil)
			if err := srv.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer srv.Stop(context.Background())
			res, err := e.c.Enqueue(ctx, streamArgs{}, &switchyard.EnqueueOpts{Lane: "interactive"})
			if err != nil {
				t.Fatal(err)
			}
			// Not Client.Wait, which would mark the task watched while it
			// runs: read the ledger until the task is dead and the broker
			// has its dead letter.
			var last string
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				tk, err := e.L.Get(ctx, res.ID)
				s, serr := e.b.Stats(ctx, "interactive")
				if err == nil && tk.State == ledger.Dead && serr == nil && s.DeadLettered == 1 {
					break
				}
				if tk != nil {
					last = fmt.Sprintf("task %s (%v), stats %+v (%v)", tk.State, err, s, serr)
				}
				if time.Now().After(deadline) {
					t.Fatalf("the task is not dead, with its dead letter, within 20s: %s", last)
				}
			}
			fixed.Store(true)
			watcher := e.reopen(t)
			var states []ledger.State
			replayed := false
			for ev, err := range watcher.Watch(ctx, res.ID, 0, &switchyard.WatchOpts{Follow: true, Interval: time.Hour}) {
				if err != nil {
					t.Fatalf("watch (states so far %v; the replayed run's end did not wake the watcher?): %v", states, err)
				}
				if ev.Kind != ledger.StreamState {
					continue
				}
				states = append(states, ev.State)
				if ev.State == ledger.Dead && !replayed {
					// The watcher has read the task (its stream comes
					// after that read): replay it now.
					replayed = true
					if n, err := e.c.ReplayDead(ctx, "interactive", 0, "operator:test"); err != nil || n != 1 {
						t.Fatalf("ReplayDead = %d, %v", n, err)
					}
				}
				if ev.State == ledger.Completed {
					break
				}
			}
			if !replayed || states[len(states)-1] != ledger.Completed {
				t.Fatalf("states %v: want dead, then the replayed run's completed", states)
			}
		})
	}
}
