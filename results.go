package switchyard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// Results: a handler's result (RegisterWithResult's return value,
// SetResult, or Task.SetResult) is stored in the ledger, JSON-encoded,
// when the task completes; it is kept as long as the task
// (ServerConfig.Retention) and bounded by ServerConfig.MaxResultBytes
// (*scheduler.ResultTooLargeError names the limit). Client.Result reads
// it; Client.Wait blocks until the task is done.

// ResultTooLargeError refuses a result above ServerConfig.MaxResultBytes.
type ResultTooLargeError = scheduler.ResultTooLargeError

// SetResult records v, JSON-encoded, as the result of the task whose
// handler ctx belongs to; it is stored when the task completes (a value
// given to Task.SetResult, or returned by a RegisterWithResult handler,
// takes precedence). A result above ServerConfig.MaxResultBytes is
// refused with a *ResultTooLargeError; outside a handler the error is
// scheduler.ErrNotInTask.
func SetResult(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return broker.KindError("set result", broker.Permanent, broker.ErrInvalid, "encode result: %v", err)
	}
	return scheduler.SetResult(ctx, b)
}

// ResultHandler processes tasks of one kind and returns their result.
type ResultHandler[T TaskArgs, R any] func(ctx context.Context, t *Task[T]) (R, error)

// RegisterWithResult registers h for T's kind; the R it returns with a
// nil error is the task's result (JSON-encoded). A result above
// ServerConfig.MaxResultBytes dead-letters the task with reason
// permanent_error and the limit in its error.
func RegisterWithResult[T TaskArgs, R any](srv *Server, h ResultHandler[T, R], opts *HandlerOpts) error {
	if h == nil {
		return broker.Invalidf("switchyard: nil handler")
	}
	return Register(srv, func(ctx context.Context, t *Task[T]) error {
		r, err := h(ctx, t)
		if err != nil {
			return err
		}
		if err := t.SetResult(r); err != nil {
			return Permanent(err)
		}
		return nil
	}, opts)
}

// Result is a task's outcome as far as it goes.
type Result struct {
	ID    string
	State ledger.State
	// Done: the task finished (completed, failed, dead, rejected or
	// cancelled). A dead task may still be replayed by an operator.
	Done bool
	// Value is the stored result of a completed task (JSON when the
	// handler was registered with this package), nil when it set none.
	Value json.RawMessage
	// Error is the last error (for a cancelled task, "cancelled: " and
	// the reason).
	Error     string
	UpdatedAt time.Time
}

// Decode decodes Value into v. A task that is not completed, or that
// stored no result, is an error matching ErrNoResult.
func (r *Result) Decode(v any) error {
	if r.State != ledger.Completed {
		return fmt.Errorf("switchyard: task %s is %s: %w", r.ID, r.State, ErrNoResult)
	}
	if r.Value == nil {
		return fmt.Errorf("switchyard: task %s completed without a result: %w", r.ID, ErrNoResult)
	}
	return json.Unmarshal(r.Value, v)
}

// ErrNoResult: the task has no result to decode (not completed, or none
// stored).
var ErrNoResult = errors.New("switchyard: no result")

func resultOf(t *ledger.Task) *Result {
	r := &Result{ID: t.ID, State: t.State, Done: t.State.Terminal(), Error: t.LastError, UpdatedAt: t.UpdatedAt}
	if t.State == ledger.Completed && t.Result != nil {
		r.Value = json.RawMessage(t.Result)
	}
	return r
}

// Result returns task id's state and, once it completed, its result. It
// does not wait (see Wait). An unknown task is ledger.ErrNotFound.
func (c *Client) Result(ctx context.Context, id string) (*Result, error) {
	if c.l == nil {
		return nil, ErrNoLedger
	}
	if id == "" {
		return nil, broker.Invalidf("switchyard: result: empty task id")
	}
	t, err := c.l.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return resultOf(t), nil
}

// Wait blocks until task id is done — completed, failed, dead, rejected
// or cancelled — or ctx ends, and returns its Result. It does not poll:
// it listens to the ledger's notes (ledger.Notes), marks the task watched
// (ledger.Watcher: its store then sends its state notes) as it first
// reads it, and reads the task again only when a note concerns it (or
// notes may have been missed). On
// a ledger without notes it reads the task every second. An unknown task
// is ledger.ErrNotFound; ctx's end is its error.
func (c *Client) Wait(ctx context.Context, id string) (*Result, error) {
	if c.l == nil {
		return nil, ErrNoLedger
	}
	if id == "" {
		return nil, broker.Invalidf("switchyard: wait: empty task id")
	}
	notes, ok := ledger.NotesOf(c.l)
	var ch <-chan ledger.Note
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if ok {
		var err error
		// Listen before reading, so that a move between the read and
		// the wait is heard.
		if ch, err = notes.Listen(lctx); err != nil {
			return nil, err
		}
	}
	// With notes, each read marks the task watched (ledger.Watcher), so
	// that the store sends its state note: one that may leave out the
	// notes of tasks nobody watches (ledger/postgres) sends it then. Once
	// marked, a read costs what Get does; marking again after a gap
	// covers a store that lost the mark (restored from before it).
	get := c.l.Get
	if w, ok := ledger.WatcherOf(c.l); ok && ch != nil {
		get = w.WatchTask
	}
	for {
		t, err := get(ctx, id)
		if err != nil {
			return nil, err
		}
		if t.State.Terminal() {
			return resultOf(t), nil
		}
		if err := waitNote(ctx, ch, id); err != nil {
			return nil, err
		}
	}
}

// waitNote waits for a note about id (or a gap) on ch, or for a second
// when ch is nil.
func waitNote(ctx context.Context, ch <-chan ledger.Note, id string) error {
	if ch == nil {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
			return nil
		}
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case n, ok := <-ch:
			if !ok {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("switchyard: wait for %s: the ledger closed: %w", id, broker.ErrClosed)
			}
			// A stream note (a chunk, a progress report) does not end
			// a task: only its state notes, or a gap, are worth a read.
			if n.TaskID == id && n.Topic != ledger.TopicStream || n.Topic == ledger.TopicGap {
				return nil
			}
		}
	}
}
