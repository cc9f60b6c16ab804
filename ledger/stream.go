package ledger

import (
	"context"
	"time"
)

// # Streams
//
// A running task reports progress and streams output (model tokens, log
// lines) through the ledger, beside its event log and never on the task
// broker. Progress and chunk entries share one per-task sequence with the
// task's events: every entry and every event takes the next number
// (Task's event counter), so a reader that merges both by that number sees
// them in the order they were written, and an offset (the last number
// read) resumes a watch exactly where it stopped: nothing lost, nothing
// repeated. Offsets are increasing, not dense.

// StreamKind is the kind of a stream entry.
type StreamKind string

// Stream entry kinds.
const (
	// StreamState is a state change, read from the task's event log.
	StreamState StreamKind = "state"
	// StreamProgress is a progress report: Fraction and Message.
	StreamProgress StreamKind = "progress"
	// StreamChunk is a piece of streamed output: Data.
	StreamChunk StreamKind = "chunk"
)

// Limits on stream entries. An entry above them is refused with
// broker.ErrInvalid naming the limit.
const (
	// MaxChunkBytes is the largest chunk AppendStream accepts.
	MaxChunkBytes = 64 << 10
	// MaxProgressMessage is the longest progress message, in bytes.
	MaxProgressMessage = 1 << 10
	// MaxStreamBatch is the most entries one AppendStream call takes.
	MaxStreamBatch = 1000
)

// StreamEntry is one entry of a task's stream.
type StreamEntry struct {
	TaskID string
	// Offset is the entry's place in the task's sequence (assigned by
	// AppendStream; an event's Seq for a state entry).
	Offset int64
	At     time.Time
	Kind   StreamKind
	// Attempt is the attempt that wrote a progress or chunk entry.
	Attempt int

	// State entries: the move (From → State) and its reason code.
	From, State State
	Reason      string

	// Progress entries: Fraction in [0, 1] and a short Message.
	Fraction float64
	Message  string

	// Chunk entries: the bytes, as emitted.
	Data []byte
}

// WaitState is the state of a durable wait (AwaitEvent).
type WaitState string

// Wait states.
const (
	// WaitPending: recorded (its token may be handed out) while the task
	// still runs; it becomes waiting when the task parks.
	WaitPending WaitState = "pending"
	// WaitSignalled: the event arrived; Payload holds it. Final.
	WaitSignalled WaitState = "signalled"
	// WaitTimedOut: the timeout passed first. Final.
	WaitTimedOut WaitState = "timed_out"
)

// Wait is a durable wait of a task for a named event.
type Wait struct {
	TaskID string
	Name   string
	// CorrelationKey, when not empty, lets a signal find the wait without
	// the task ID. Among open waits (pending) a key is unique per tenant.
	CorrelationKey string
	Tenant         string
	// TokenHash is the SHA-256 of the wait's one-time callback token.
	TokenHash []byte
	State     WaitState
	Payload   []byte
	// Timeout is how long the wait lasts once the task parks.
	Timeout   time.Duration
	CreatedAt time.Time
	UpdatedAt time.Time
}

// WaitTarget selects one open wait for SignalWait: by task and name, by
// tenant and correlation key, or by token hash (exactly one of them).
type WaitTarget struct {
	TaskID, Name           string
	Tenant, CorrelationKey string
	TokenHash              []byte
}

// StreamStore is the part of Ledger that keeps task streams and durable
// waits. Both SQL stores implement it (migration 0007).
type StreamStore interface {
	// AppendStream appends progress and chunk entries (Kind
	// StreamProgress or StreamChunk; TaskID, Offset and At are set by the
	// store) of task taskID in one write, and returns the offset of the
	// last. Entries above the limits, or more than MaxStreamBatch, are
	// refused (broker.ErrInvalid); an unknown task is ErrNotFound.
	AppendStream(ctx context.Context, taskID string, attempt int, es []StreamEntry) (last int64, err error)
	// ReadStream returns the task's entries with Offset > after, oldest
	// first: state changes from its event log merged with its progress and
	// chunk entries. limit 0 means 100, above 1000 means 1000.
	ReadStream(ctx context.Context, taskID string, after int64, limit int) ([]StreamEntry, error)
	// LatestProgress returns the newest progress entry of each of ids that
	// has one (at most 1000 ids).
	LatestProgress(ctx context.Context, ids []string) (map[string]StreamEntry, error)
	// PruneStreams deletes progress and chunk entries written before
	// `before` of tasks in a terminal state (the stream's retention; Prune
	// deletes a task's whole stream with the task), and returns how many.
	PruneStreams(ctx context.Context, before time.Time) (int, error)

	// PutWait records w (State pending) unless the task already has a wait
	// of that name, in which case it returns that one and created=false.
	// A correlation key another open wait of the tenant holds is
	// ErrConflict.
	PutWait(ctx context.Context, w Wait) (stored Wait, created bool, err error)
	// GetWait returns a task's wait by name, or ErrNotFound.
	GetWait(ctx context.Context, taskID, name string) (Wait, error)
	// FindWait returns the wait target selects, in whatever state
	// (ErrNotFound when none): by correlation key, the open one, else the
	// one that held the key last.
	FindWait(ctx context.Context, target WaitTarget) (Wait, error)
	// SignalWait moves the selected wait from pending to signalled with
	// payload, and returns it. No matching wait is ErrNotFound; a wait
	// already signalled or timed out is ErrConflict (nothing changes).
	SignalWait(ctx context.Context, target WaitTarget, payload []byte) (Wait, error)
	// ExpireWait moves a pending wait to timed_out (ErrConflict when it is
	// signalled or timed out already).
	ExpireWait(ctx context.Context, taskID, name string) (Wait, error)
}
