package ledgertest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// notesOf returns the store's ledger.Notes, failing the test when it has
// none (both stores of this module implement it).
func notesOf(t *testing.T, l ledger.Ledger) ledger.Notes {
	t.Helper()
	n, ok := ledger.NotesOf(l)
	if !ok {
		t.Fatalf("%T does not implement ledger.Notes", l)
	}
	return n
}

// nextNote waits for the first note about id (or of topic gap, which it
// reports as such), up to 10s.
func nextNote(t *testing.T, ch <-chan ledger.Note, id string) ledger.Note {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case n, ok := <-ch:
			if !ok {
				t.Fatalf("note channel closed while waiting for a note about %s", id)
			}
			if n.TaskID == id || n.Topic == ledger.TopicGap {
				return n
			}
		case <-timeout:
			t.Fatalf("no note about %s within 10s", id)
		}
	}
}

// NotesState: a move to a terminal state (or awaiting_review) reaches
// every listener, with the new state, whatever made it (EndRun's, of a
// watched task); a move to a state that is neither (running, retry_wait)
// sends none.
func NotesState(t *testing.T, mk Maker) {
	l := mk(t)
	n := notesOf(t, l)
	c := ctx(t)
	lc, cancel := context.WithCancel(c)
	defer cancel()
	a, err := n.Listen(lc)
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Listen(lc)
	if err != nil {
		t.Fatal(err)
	}
	task := mustCreate(t, l, newTask(t))
	mustTransition(t, l, task.ID, ledger.Running, "attempt_started")
	mustTransition(t, l, task.ID, ledger.RetryWait, "retry")
	mustTransition(t, l, task.ID, ledger.Cancelled, "cancelled")
	for _, ch := range []<-chan ledger.Note{a, b} {
		got := nextNote(t, ch, task.ID)
		if got.Topic != ledger.TopicState || got.State != ledger.Cancelled {
			t.Fatalf("first note about the task: %+v, want state cancelled (running and retry_wait send none)", got)
		}
	}
	// A task completed through EndRun notifies too, when it is watched
	// (a store may leave the note of an unwatched one out: WatchTask).
	t2 := mustCreate(t, l, newTask(t))
	run, err := l.BeginRun(c, ledger.RunStart{ID: t2.ID, Attempt: 1, Worker: "w", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watcherOf(t, l).WatchTask(c, t2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := l.EndRun(c, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: t2.ID, Number: run.Attempt, Outcome: "ok"},
		Transition: &ledger.TransitionRequest{ID: t2.ID, From: []ledger.State{ledger.Running}, To: ledger.Completed, Reason: "completed"}}); err != nil {
		t.Fatal(err)
	}
	if got := nextNote(t, a, t2.ID); got.State != ledger.Completed {
		t.Fatalf("note after EndRun: %+v, want completed", got)
	}
	// A listener whose context ends has its channel closed.
	cancel()
	for range a {
	}
}

// NotesNotify: Notify reaches listeners with its topic, task and detail
// intact (whatever characters they hold); bad notes are refused with
// broker.ErrInvalid and send nothing.
func NotesNotify(t *testing.T, mk Maker) {
	l := mk(t)
	n := notesOf(t, l)
	c := ctx(t)
	ch, err := n.Listen(c)
	if err != nil {
		t.Fatal(err)
	}
	id := "task|with|pipes-" + broker.NewID()
	want := ledger.Note{Topic: "progress", TaskID: id, State: ledger.Running, Detail: "50%|half way ✓"}
	for _, bad := range []ledger.Note{
		{Topic: "", TaskID: id},
		{Topic: "bad topic", TaskID: id},
		{Topic: ledger.TopicState, TaskID: id},
		{Topic: ledger.TopicGap, TaskID: id},
		{Topic: "progress", TaskID: ""},
		{Topic: "progress", TaskID: id, Detail: strings.Repeat("x", ledger.MaxNoteDetail+1)},
		{Topic: "progress", TaskID: id, State: "nonsense"},
	} {
		if err := n.Notify(c, bad); err == nil || !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("Notify(%+v): %v, want ErrInvalid", bad.Topic, err)
		}
	}
	if err := n.Notify(c, want); err != nil {
		t.Fatal(err)
	}
	if got := nextNote(t, ch, id); got != want {
		t.Fatalf("note: %+v, want %+v", got, want)
	}
}

// NotesStream: AppendStream sends a ledger.TopicStream note about the
// task, its Detail the offset of the last entry appended; an append
// refused (an unknown task) sends none; a caller cannot send the topic.
func NotesStream(t *testing.T, mk Maker) {
	l := mk(t)
	n := notesOf(t, l)
	c := ctx(t)
	ch, err := n.Listen(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Notify(c, ledger.Note{Topic: ledger.TopicStream, TaskID: "x"}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("Notify of the store's stream topic: %v, want ErrInvalid", err)
	}
	ghost := broker.NewID()
	if _, err := l.AppendStream(c, ghost, 1, []ledger.StreamEntry{{Kind: ledger.StreamChunk, Data: []byte("x")}}); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("append to an unknown task: %v", err)
	}
	task := mustCreate(t, l, newTask(t))
	last, err := l.AppendStream(c, task.ID, 1, []ledger.StreamEntry{{Kind: ledger.StreamChunk, Data: []byte("a")}, {Kind: ledger.StreamProgress, Fraction: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	// Notes come in commit order: one about the refused append would
	// come before this one.
	timeout := time.After(10 * time.Second)
	for {
		var got ledger.Note
		select {
		case got = <-ch:
		case <-timeout:
			t.Fatal("no stream note within 10s")
		}
		if got.TaskID == ghost {
			t.Errorf("a note about a refused append: %+v", got)
		}
		if got.TaskID != task.ID {
			continue
		}
		if got.Topic != ledger.TopicStream || got.Detail != strconv.FormatInt(last, 10) {
			t.Fatalf("note after AppendStream: %+v, want topic %s, detail %d", got, ledger.TopicStream, last)
		}
		return
	}
}

// NotesClosed: Listen after Close is broker.ErrClosed, and a listener's
// channel is closed by Close.
func NotesClosed(t *testing.T, mk Maker) {
	l := mk(t)
	n := notesOf(t, l)
	ch, err := n.Listen(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-ch:
		for ok {
			_, ok = <-ch
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a listener's channel stayed open after Close")
	}
	if _, err := n.Listen(ctx(t)); !errors.Is(err, broker.ErrClosed) {
		t.Fatalf("Listen after Close: %v, want ErrClosed", err)
	}
}
