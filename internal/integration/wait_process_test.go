package integration_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/conformance/testenv/pgtest"
	"github.com/switchyard-dev/switchyard/ledger"
)

const (
	waitChildEnv       = "SWITCHYARD_TEST_WAIT_CHILD"
	waitChildLedgerEnv = "SWITCHYARD_TEST_WAIT_LEDGER"
	waitChildTasksEnv  = "SWITCHYARD_TEST_WAIT_TASKS"
)

type waitArgs struct {
	I int `json:"i"`
}

func (waitArgs) Kind() string { return "test.wait" }

// waitChild is the worker process of TestWait_AcrossProcesses: a Server on
// the shared ledger (and a broker of its own, in process) that enqueues
// the tasks, prints their IDs, runs them all at once, and holds each in
// its handler until its parent writes "end <id> ok" (the handler returns
// nil: completed) or "end <id> fail" (a permanent error: dead) on its
// stdin. It stops when its stdin closes, its parent is gone, or after two
// minutes.
func waitChild() {
	ctx := context.Background()
	fail := func(err error) {
		fmt.Println("ERROR", err)
		os.Exit(2)
	}
	n, err := strconv.Atoi(os.Getenv(waitChildTasksEnv))
	if err != nil {
		fail(err)
	}
	L, err := ledger.Open(ctx, os.Getenv(waitChildLedgerEnv))
	if err != nil {
		fail(err)
	}
	b, err := broker.Open(ctx, "mem://wait-child-"+strconv.Itoa(os.Getpid()), &broker.Options{Dedup: L})
	if err != nil {
		fail(err)
	}
	c, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		fail(err)
	}
	srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, Slots: n + 4, Lease: 30 * time.Second,
		PollWait: 50 * time.Millisecond})
	if err != nil {
		fail(err)
	}
	var mu sync.Mutex
	gates := map[string]chan bool{}
	gate := func(id string) chan bool {
		mu.Lock()
		defer mu.Unlock()
		g := gates[id]
		if g == nil {
			g = make(chan bool, 1)
			gates[id] = g
		}
		return g
	}
	if err := switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[waitArgs]) error {
		select {
		case ok := <-gate(tk.ID):
			if !ok {
				return switchyard.Permanent(errors.New("told to fail"))
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, nil); err != nil {
		fail(err)
	}
	if err := srv.Start(ctx); err != nil {
		fail(err)
	}
	for i := range n {
		res, err := c.Enqueue(ctx, waitArgs{I: i}, &switchyard.EnqueueOpts{Lane: "interactive"})
		if err != nil {
			fail(err)
		}
		fmt.Println("TASK", res.ID)
	}
	fmt.Println("READY")
	parent := os.Getppid()
	go func() {
		for end := time.Now().Add(2 * time.Minute); time.Now().Before(end) && os.Getppid() == parent; {
			time.Sleep(100 * time.Millisecond)
		}
		os.Exit(3)
	}()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "end" {
			fail(fmt.Errorf("bad command %q", sc.Text()))
		}
		gate(f[1]) <- f[2] == "ok"
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = srv.Stop(sctx)
	os.Exit(0)
}

// readLedger is the waiting process's ledger: it tells when a Wait's
// first read of a task — its WatchTask, which marks the task watched —
// has returned.
type readLedger struct {
	ledger.Ledger
	mu   sync.Mutex
	read map[string]chan struct{}
}

func (l *readLedger) Unwrap() ledger.Ledger { return l.Ledger }

// readOf returns the channel closed once task id has been read by
// WatchTask.
func (l *readLedger) readOf(id string) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := l.read[id]
	if ch == nil {
		ch = make(chan struct{})
		l.read[id] = ch
	}
	return ch
}

func (l *readLedger) WatchTask(ctx context.Context, id string) (*ledger.Task, error) {
	w, ok := ledger.WatcherOf(l.Ledger)
	if !ok {
		return nil, errors.New("the ledger has no Watcher")
	}
	t, err := w.WatchTask(ctx, id)
	if err == nil {
		ch := l.readOf(id)
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
	return t, err
}

func (l *readLedger) FollowTask(ctx context.Context, id string) (*ledger.Task, error) {
	w, ok := ledger.WatcherOf(l.Ledger)
	if !ok {
		return nil, errors.New("the ledger has no Watcher")
	}
	return w.FollowTask(ctx, id)
}

// TestWait_AcrossProcesses: Client.Wait in this process on tasks that a
// worker process (waitChild: a Server on the same PostgreSQL ledger, its
// own connections) runs and ends, so that the only way a waiter hears
// an end is the store's note (NOTIFY) from the other process. Of the
// tasks, a third are waited for before their end (each waiter has read
// the task, and so marked it watched, before the worker is told to end
// them, all together: grouped EndRuns); a third at the same moment (the
// waiter starts as the end is sent); a third after their end is in the
// ledger. Half complete, half die. Every Wait must return the task's
// terminal state within 20s (Wait does not poll when the ledger has
// notes: a lost wake-up blocks it until then). With the PostgreSQL
// store's WatchTask reduced to a plain read (Get), every waiter of the
// first two thirds timed out in a trial (those that wait after the end
// read it terminal and need no note).
func TestWait_AcrossProcesses(t *testing.T) {
	if os.Getenv(waitChildEnv) != "" {
		waitChild()
		return
	}
	t.Parallel()
	const per = 20 // tasks per timing
	dsn := pgtest.LedgerDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	L, err := ledger.Open(ctx, dsn) // migrates the schema before the worker opens it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L.Close() })
	b, err := broker.Open(ctx, "mem://"+conformance.Namespace(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	rl := &readLedger{Ledger: L, read: map[string]chan struct{}{}}
	c, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: rl})
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestWait_AcrossProcesses$", "-test.count=1")
	cmd.Env = append(os.Environ(), waitChildEnv+"=1", waitChildLedgerEnv+"="+dsn, waitChildTasksEnv+"="+strconv.Itoa(3*per))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	var stop sync.Once
	stopChild := func() { // close its stdin, then kill it if it does not exit
		stop.Do(func() {
			stdin.Close()
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("worker process: %v", err)
				}
			case <-time.After(20 * time.Second):
				cmd.Process.Signal(syscall.SIGKILL)
				<-exited
				t.Errorf("worker process did not stop within 20s of its stdin closing: killed")
			}
		})
	}
	t.Cleanup(stopChild)
	idc := make(chan string, 3*per)
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			l := sc.Text()
			switch {
			case strings.HasPrefix(l, "ERROR"):
				t.Errorf("worker process: %s", l)
			case strings.HasPrefix(l, "TASK "):
				idc <- strings.TrimPrefix(l, "TASK ")
			case l == "READY":
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		exited <- cmd.Wait()
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		t.Fatal("the worker process did not enqueue its tasks within 60s")
	}
	close(idc)
	var ids []string
	for id := range idc {
		ids = append(ids, id)
	}
	if len(ids) != 3*per {
		t.Fatalf("the worker enqueued %d tasks, want %d", len(ids), 3*per)
	}
	// Every task is in its handler (running) before any waits.
	waitFor(t, 30*time.Second, func() bool {
		for _, id := range ids {
			if tk, err := L.Get(ctx, id); err != nil || tk.State != ledger.Running {
				return false
			}
		}
		return true
	})

	wantState := map[string]ledger.State{}
	for i, id := range ids {
		wantState[id] = ledger.Completed
		if i%2 == 1 {
			wantState[id] = ledger.Dead
		}
	}
	var mu sync.Mutex
	end := func(ids ...string) { // tell the worker to end ids, in one write
		var sb strings.Builder
		for _, id := range ids {
			how := "ok"
			if wantState[id] == ledger.Dead {
				how = "fail"
			}
			fmt.Fprintf(&sb, "end %s %s\n", id, how)
		}
		mu.Lock()
		defer mu.Unlock()
		if _, err := io.WriteString(stdin, sb.String()); err != nil {
			t.Errorf("writing to the worker: %v", err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	wait := func(id, when string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			r, err := c.Wait(wctx, id)
			switch {
			case err != nil:
				errs <- fmt.Errorf("task %s (waited for %s its end): %v (a lost wake-up?)", id, when, err)
			case r.State != wantState[id] || !r.Done:
				errs <- fmt.Errorf("task %s (waited for %s its end): Wait returned %s, want %s", id, when, r.State, wantState[id])
			}
		}()
	}
	before, same, after := ids[:per], ids[per:2*per], ids[2*per:]
	// Before: each waiter has read (and marked) its task, then the worker
	// ends them all at once.
	for _, id := range before {
		wait(id, "before")
	}
	for _, id := range before {
		select {
		case <-rl.readOf(id):
		case <-time.After(20 * time.Second):
			t.Fatalf("the waiter of %s did not read it within 20s", id)
		}
	}
	end(before...)
	// At the same moment: the waiter starts as its task's end is sent.
	for _, id := range same {
		wait(id, "as")
		end(id)
	}
	// After: the worker ends them, and they are terminal in the ledger
	// before anyone waits.
	end(after...)
	waitFor(t, 20*time.Second, func() bool {
		for _, id := range after {
			if tk, err := L.Get(ctx, id); err != nil || !tk.State.Terminal() {
				return false
			}
		}
		return true
	})
	for _, id := range after {
		wait(id, "after")
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	stopChild()
}
