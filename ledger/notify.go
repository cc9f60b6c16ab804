package ledger

import (
	"context"
	"strconv"
	"strings"
)

// Notes is an optional interface of a Ledger: a control channel between
// the processes that share the ledger, independent of the task broker.
// Both stores implement it: ledger/postgres with LISTEN/NOTIFY (a note
// reaches listeners when its transaction commits), ledger/sqlite with a
// small table (ledger_notes) that one goroutine per store polls at
// sqlite.Options.NotifyInterval (50 ms by default).
//
// Every event whose new state is terminal or awaiting_review produces a
// Note{Topic: TopicState} in the same transaction as the move (a database
// trigger, or the move's own statement where the store keeps the event in
// the task row, so every path — the runtime, an operator, a bulk
// operation — is covered) — for a task that is watched (Watcher), or a
// move to cancelled: a store that implements Watcher may leave out the
// other tasks' state notes (ledger/postgres leaves out those of the
// runtime's moves, EndRun's; ledger/sqlite sends them all). A reader that
// waits for a task's state notes marks it watched first (WatcherOf). A
// listener that wants every task's moves (a live view of all tasks)
// cannot count on state notes: it reads the ledger (List) instead.
// Every AppendStream (progress reports, chunks)
// produces a Note{Topic: TopicStream} in its transaction too, its Detail
// the offset of the last entry appended, so that followers of a task's
// stream (Client.Watch) wake when it grows instead of polling. Notify
// sends other notes.
//
// Delivery is best effort and at most once per listener: a listener that
// falls behind, or whose connection drops, gets a Note{Topic: TopicGap}
// and must re-read the ledger for what it cares about. Notes are hints;
// the ledger stays the truth.
//
// Use NotesOf to find the interface behind a wrapper (WithCodec).
type Notes interface {
	// Notify sends n to every listener of every process sharing the
	// ledger. n.Topic must be a valid name (broker.ValidateName) and
	// n.TaskID a task ID; Detail is at most MaxNoteDetail bytes.
	Notify(ctx context.Context, n Note) error
	// Listen returns the notes sent from now on, until ctx ends; then the
	// channel is closed. Each call is its own listener (one poller or
	// connection per store serves them all).
	Listen(ctx context.Context) (<-chan Note, error)
}

// Watcher is an optional interface of a Ledger with Notes: a reader that
// waits for a task's state notes (TopicState) registers with it first.
// Both stores implement it; use WatcherOf to find it behind a wrapper.
type Watcher interface {
	// WatchTask marks task id watched and returns it as it is once the
	// mark is made: either in a terminal state, or watched — then every
	// later move of the task that notes (see Notes) sends its state note,
	// from any process, until the task is pruned (the mark is never
	// cleared). A listener that called Listen before WatchTask, and sees
	// a task that is not terminal, so hears of its end. An unknown task
	// is ErrNotFound (it is not created).
	WatchTask(ctx context.Context, id string) (*Task, error)
	// FollowTask is WatchTask for a reader that keeps waiting past the
	// task's end (Client.Watch with Follow: a dead or failed task may be
	// replayed): it marks the task watched whatever its state, a terminal
	// one too, so that a later run's end sends its state note as well.
	FollowTask(ctx context.Context, id string) (*Task, error)
}

// WatcherOf returns L's Watcher, looking through wrappers that have an
// Unwrap() Ledger method (WithCodec's, whose payloads it opens). ok is
// false when the store has none.
func WatcherOf(L Ledger) (Watcher, bool) {
	if cl := codecLedgerOf(L); cl != nil {
		w, ok := WatcherOf(cl.Ledger)
		if !ok {
			return nil, false
		}
		return codecWatcher{w: w, l: cl}, true
	}
	if w, ok := L.(Watcher); ok {
		return w, true
	}
	if u, ok := L.(interface{ Unwrap() Ledger }); ok {
		return WatcherOf(u.Unwrap())
	}
	return nil, false
}

// Note is one notification.
type Note struct {
	// Topic says what happened: TopicState, TopicGap, or a caller's own.
	Topic string
	// TaskID is the task the note is about ("" for TopicGap).
	TaskID string
	// State is the task's new state, for TopicState.
	State State
	// Detail is free text (at most MaxNoteDetail bytes).
	Detail string
}

// Note topics.
const (
	// TopicState: task TaskID moved to State (a terminal state or
	// awaiting_review), written by the store in the move's transaction.
	TopicState = "state"
	// TopicGap: the listener may have missed notes (it fell behind, or
	// the store's connection was re-established): re-read the ledger.
	TopicGap = "gap"
	// TopicStream: task TaskID's stream grew (AppendStream committed);
	// Detail is the offset of the last entry appended, in decimal.
	TopicStream = "stream"
)

// MaxNoteDetail bounds Note.Detail (PostgreSQL's NOTIFY payload limit is
// 8000 bytes, with the topic and task ID).
const MaxNoteDetail = 4000

// NotesOf returns L's Notes, looking through wrappers that have an
// Unwrap() Ledger method (WithCodec's). ok is false when the store has
// none.
func NotesOf(L Ledger) (Notes, bool) {
	return unwrapTo[Notes](L)
}

// unwrapTo returns the first of L and the ledgers it wraps (through an
// Unwrap() Ledger method, as WithCodec's) that is a T.
func unwrapTo[T any](L Ledger) (T, bool) {
	for L != nil {
		if v, ok := L.(T); ok {
			return v, true
		}
		u, ok := L.(interface{ Unwrap() Ledger })
		if !ok {
			break
		}
		L = u.Unwrap()
	}
	var zero T
	return zero, false
}

// EncodeNote is the wire form of a note (ledger/postgres's NOTIFY
// payload): topic|state|len(task)|task detail, where len is the task ID's
// length in bytes, so that no character of an ID or a detail can break
// the parse.
func EncodeNote(n Note) string {
	return n.Topic + "|" + string(n.State) + "|" + strconv.Itoa(len(n.TaskID)) + "|" + n.TaskID + n.Detail
}

// DecodeNote parses EncodeNote's form; ok is false for anything else.
func DecodeNote(s string) (Note, bool) {
	parts := strings.SplitN(s, "|", 4)
	if len(parts) != 4 || parts[0] == "" {
		return Note{}, false
	}
	n, err := strconv.Atoi(parts[2])
	if err != nil || n < 0 || n > len(parts[3]) {
		return Note{}, false
	}
	return Note{Topic: parts[0], State: State(parts[1]), TaskID: parts[3][:n], Detail: parts[3][n:]}, true
}
