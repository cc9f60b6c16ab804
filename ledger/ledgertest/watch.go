package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// watcherOf returns the store's ledger.Watcher, failing the test when it
// has none (both stores of this module implement it).
func watcherOf(t *testing.T, l ledger.Ledger) ledger.Watcher {
	t.Helper()
	w, ok := ledger.WatcherOf(l)
	if !ok {
		t.Fatalf("%T does not implement ledger.Watcher", l)
	}
	return w
}

// endRun ends task id's run number n with a move to `to`.
func endRun(ctx context.Context, l ledger.Ledger, id string, n int, to ledger.State) error {
	_, err := l.EndRun(ctx, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: id, Number: n, Outcome: "ok"},
		Transition: &ledger.TransitionRequest{ID: id, From: []ledger.State{ledger.Running}, To: to, Reason: string(to)}})
	return err
}

// WatchTask: a task watched while it runs sends the note of its end
// (EndRun's), to a listener that listened before the watch; one watched
// after its end is returned terminal (it needs no note). Watching an
// unknown task is ledger.ErrNotFound and does not create it.
func WatchTask(t *testing.T, mk Maker) {
	l := mk(t)
	n := notesOf(t, l)
	w := watcherOf(t, l)
	c := ctx(t)
	ch, err := n.Listen(c)
	if err != nil {
		t.Fatal(err)
	}
	// Watched before its end: the note comes.
	a := mustCreate(t, l, newTask(t))
	if _, err := l.BeginRun(c, ledger.RunStart{ID: a.ID, Attempt: 1, Worker: "w", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	got, err := w.WatchTask(c, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != a.ID || got.State != ledger.Running || string(got.Args) != string(a.Args) {
		t.Fatalf("WatchTask of a running task: %+v", got)
	}
	if err := endRun(c, l, a.ID, 1, ledger.Failed); err != nil {
		t.Fatal(err)
	}
	if nt := nextNote(t, ch, a.ID); nt.Topic != ledger.TopicState || nt.State != ledger.Failed {
		t.Fatalf("note of a watched task's end: %+v, want state failed", nt)
	}
	// The mark stays: a replayed task's next end notes too (the full
	// EndRun, its row holding an earlier end).
	mustTransition(t, l, a.ID, ledger.Queued, "replay")
	if _, err := l.BeginRun(c, ledger.RunStart{ID: a.ID, Attempt: 2, Worker: "w", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// (the replay's own move, to queued, sends no note)
	if err := endRun(c, l, a.ID, 2, ledger.Completed); err != nil {
		t.Fatal(err)
	}
	if nt := nextNote(t, ch, a.ID); nt.Topic != ledger.TopicState || nt.State != ledger.Completed {
		t.Fatalf("note of a watched task's second end: %+v, want state completed", nt)
	}

	// Watched after its end: WatchTask says it is terminal.
	b := mustCreate(t, l, newTask(t))
	if _, err := l.BeginRun(c, ledger.RunStart{ID: b.ID, Attempt: 1, Worker: "w", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := endRun(c, l, b.ID, 1, ledger.Completed); err != nil {
		t.Fatal(err)
	}
	if got, err := w.WatchTask(c, b.ID); err != nil || got.State != ledger.Completed {
		t.Fatalf("WatchTask after the end: %+v %v, want completed", got, err)
	}

	// An unknown task: not found, and not created.
	ghost := broker.NewID()
	if _, err := w.WatchTask(c, ghost); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("WatchTask of an unknown task: %v, want ErrNotFound", err)
	}
	if _, err := l.Get(c, ghost); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Get after WatchTask of an unknown task: %v, want ErrNotFound", err)
	}
}

// FollowTask: a task followed after its end (Client.Watch with Follow)
// is marked all the same: once an operator replays it, its next end
// (EndRun's, the full statement: its row holds the earlier end) sends
// its note. Following a task already watched, or an unknown one (not
// found, and not created), is as WatchTask.
func FollowTask(t *testing.T, mk Maker) {
	l := mk(t)
	n := notesOf(t, l)
	w := watcherOf(t, l)
	c := ctx(t)
	a := mustCreate(t, l, newTask(t))
	if _, err := l.BeginRun(c, ledger.RunStart{ID: a.ID, Attempt: 1, Worker: "w", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := endRun(c, l, a.ID, 1, ledger.Dead); err != nil {
		t.Fatal(err)
	}
	got, err := w.FollowTask(c, a.ID)
	if err != nil || got.ID != a.ID || got.State != ledger.Dead || string(got.Args) != string(a.Args) {
		t.Fatalf("FollowTask of a dead task: %+v %v", got, err)
	}
	if got, err := w.FollowTask(c, a.ID); err != nil || got.State != ledger.Dead {
		t.Fatalf("FollowTask again: %+v %v", got, err)
	}
	ch, err := n.Listen(c)
	if err != nil {
		t.Fatal(err)
	}
	mustTransition(t, l, a.ID, ledger.Queued, "replay")
	if _, err := l.BeginRun(c, ledger.RunStart{ID: a.ID, Attempt: 2, Worker: "w", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := endRun(c, l, a.ID, 2, ledger.Completed); err != nil {
		t.Fatal(err)
	}
	for {
		nt := nextNote(t, ch, a.ID) // (a store that notes every move may send the dead one late)
		if nt.Topic == ledger.TopicState && nt.State == ledger.Completed {
			break
		}
		if nt.Topic != ledger.TopicState || nt.State != ledger.Dead {
			t.Fatalf("note of a followed task's end after a replay: %+v, want state completed", nt)
		}
	}
	ghost := broker.NewID()
	if _, err := w.FollowTask(c, ghost); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("FollowTask of an unknown task: %v, want ErrNotFound", err)
	}
	if _, err := l.Get(c, ghost); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Get after FollowTask of an unknown task: %v, want ErrNotFound", err)
	}
}

// waitEnd is Client.Wait's protocol on the ledger: listen, watch (the
// first read), and read again on a note about id or a gap, until the task
// is terminal; a wake-up that does not come within 10s is an error.
func waitEnd(ctx context.Context, l ledger.Ledger, n ledger.Notes, w ledger.Watcher, id string) error {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := n.Listen(lctx)
	if err != nil {
		return err
	}
	t, err := w.WatchTask(ctx, id)
	for {
		if err != nil {
			return err
		}
		if t.State.Terminal() {
			return nil
		}
		timeout := time.After(10 * time.Second)
	wait:
		for {
			select {
			case nt, ok := <-ch:
				if !ok {
					return fmt.Errorf("notes closed waiting for %s", id)
				}
				if nt.TaskID == id && nt.Topic == ledger.TopicState || nt.Topic == ledger.TopicGap {
					break wait
				}
			case <-timeout:
				return fmt.Errorf("task %s: no wake-up within 10s (lost)", id)
			}
		}
		t, err = l.Get(ctx, id)
	}
}

// RaceWatchEnd: waiters that watch a task while its run ends (EndRun,
// alone or grouped, first end or a later one) are all woken: each either
// sees the task terminal as it watches, or hears its note. Bounded: a
// fixed number of tasks, each waiter gives up after 10s.
func RaceWatchEnd(t *testing.T, mk Maker) {
	l := mk(t)
	n := notesOf(t, l)
	w := watcherOf(t, l)
	c := ctx(t)
	const tasks = 60
	ids := make([]string, tasks)
	for i := range ids {
		tk := mustCreate(t, l, newTask(t))
		ids[i] = tk.ID
		if i%3 == 0 {
			// An earlier end in the row: EndRun's full statement.
			if _, err := l.BeginRun(c, ledger.RunStart{ID: tk.ID, Attempt: 1, Worker: "w", Lease: time.Minute}); err != nil {
				t.Fatal(err)
			}
			if err := endRun(c, l, tk.ID, 1, ledger.RetryWait); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := l.BeginRun(c, ledger.RunStart{ID: tk.ID, Attempt: 1 + boolInt(i%3 == 0), Worker: "w", Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2*tasks)
	for i, id := range ids {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				time.Sleep(time.Duration(i%5) * time.Millisecond)
			}
			errs[2*i] = waitEnd(c, l, n, w, id)
		}()
		go func() {
			defer wg.Done()
			if i%2 == 1 {
				time.Sleep(time.Duration(i%5) * time.Millisecond)
			}
			errs[2*i+1] = endRun(c, l, id, 1+boolInt(i%3 == 0), ledger.Completed)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
