package switchyard

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// Cancellation stops a task from outside its handler; it needs a ledger.
// A task that has not started (queued, delayed, waiting to retry,
// awaiting review, or parked in AwaitEvent) never starts: a later delivery of it is acknowledged
// without running. A running task's handler has its context cancelled
// (context.Cause is scheduler.ErrCancelled) on whichever process runs it,
// through the ledger's control channel (ledger.Notes: PostgreSQL
// LISTEN/NOTIFY, or the SQLite store's notes table polled every 50 ms by
// default), within about a second at worst and typically tens of
// milliseconds (docs/BENCHMARKS.md). Either way the task ends cancelled
// exactly once, with the reason and the actor in its event log; it is
// not retried and not dead-lettered. Effects it confirmed stay confirmed;
// one it was performing when its context ended is recorded as unknown,
// and nothing repeats it since the task never runs again.
//
// The ledger records the task cancelled at once; a running handler may
// still be returning for a moment afterwards (its attempt is recorded
// with outcome "cancel" when it does).

// ErrFinished matches the error of cancelling a task that already
// finished; see *FinishedError.
var ErrFinished = errors.New("switchyard: the task already finished")

// FinishedError refuses an operation on a task that already finished
// (completed, failed, dead, rejected or cancelled). It matches ErrFinished
// and ledger.ErrConflict.
type FinishedError struct {
	ID    string
	State ledger.State
}

func (e *FinishedError) Error() string {
	return fmt.Sprintf("switchyard: task %s is already %s", e.ID, e.State)
}

// Is makes errors.Is(err, ErrFinished) and errors.Is(err,
// ledger.ErrConflict) true.
func (e *FinishedError) Is(target error) bool {
	return target == ErrFinished || target == ledger.ErrConflict
}

// MaxCancelReason bounds a cancellation's reason, in bytes.
const MaxCancelReason = 1024

// cancellable are the states Cancel moves to cancelled.
// A task parked in awaiting_event is among them: its wait's timeout
// message, when it comes, finds the task no longer parked and changes
// nothing, and a signal to it is refused (ErrWaitClosed).
var cancellable = []ledger.State{ledger.Queued, ledger.RetryWait, ledger.AwaitingReview, ledger.AwaitingEvent, ledger.Running}

// Cancel cancels task id (see above), recording reason and the actor
// "client". It returns the task as cancelled. An unknown task is
// ledger.ErrNotFound; a finished one is a *FinishedError naming its state;
// without a ledger it is ErrNoLedger.
func (c *Client) Cancel(ctx context.Context, id, reason string) (*ledger.Task, error) {
	return c.CancelBy(ctx, id, reason, "client")
}

// CancelBy is Cancel with the actor recorded in the task's event log
// ("operator:alice", "user:42").
func (c *Client) CancelBy(ctx context.Context, id, reason, actor string) (*ledger.Task, error) {
	if c.l == nil {
		return nil, ErrNoLedger
	}
	if id == "" {
		return nil, broker.Invalidf("switchyard: cancel: empty task id")
	}
	if len(reason) > MaxCancelReason {
		return nil, broker.Invalidf("switchyard: cancel: the reason is %d bytes, the limit is %d", len(reason), MaxCancelReason)
	}
	if reason == "" {
		reason = "cancelled"
	}
	msg := "cancelled: " + reason
	// The state may move under us (running → retry_wait, say): try again
	// while it is still one Cancel applies to.
	for range 8 {
		t, err := c.l.Transition(ctx, ledger.TransitionRequest{ID: id, From: cancellable, To: ledger.Cancelled,
			Reason: "cancelled", Detail: reason, Actor: actor, LastError: &msg})
		if err == nil {
			return t, nil
		}
		var ce *ledger.ConflictError
		if !errors.As(err, &ce) {
			return nil, err
		}
		if ce.Current.Terminal() {
			return nil, &FinishedError{ID: id, State: ce.Current}
		}
		if !slices.Contains(cancellable, ce.Current) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("switchyard: cancel %s: the task's state kept changing: %w", id, ledger.ErrConflict)
}

// ConcurrencyPolicy says which task wins when a task is enqueued with a
// ConcurrencyKey that a live task (queued, delayed, retrying, awaiting
// review or an event, or running) of the same tenant and kind already holds.
type ConcurrencyPolicy int

const (
	// CancelInProgress (the default): the new task runs and the older
	// live ones are cancelled, running ones included — the chat where the
	// user sent another message.
	CancelInProgress ConcurrencyPolicy = iota
	// CancelNewest: the new task is cancelled at once (it is recorded,
	// cancelled, and never published) while an older one is live.
	CancelNewest
)

func (p ConcurrencyPolicy) String() string {
	switch p {
	case CancelInProgress:
		return "cancel-in-progress"
	case CancelNewest:
		return "cancel-newest"
	}
	return fmt.Sprintf("ConcurrencyPolicy(%d)", int(p))
}

// metaConcurrencyKey is the ledger metadata key holding a task's
// EnqueueOpts.ConcurrencyKey.
const metaConcurrencyKey = reservedPrefix + "concurrency-key"

// checkConcurrency validates the concurrency options of o.
func (c *Client) checkConcurrency(o *EnqueueOpts) error {
	if o.ConcurrencyKey == "" {
		if o.OnConcurrent != CancelInProgress {
			return broker.Invalidf("switchyard: OnConcurrent without a ConcurrencyKey")
		}
		return nil
	}
	if c.l == nil {
		return fmt.Errorf("switchyard: ConcurrencyKey: %w", ErrNoLedger)
	}
	if len(o.ConcurrencyKey) > broker.MaxKeyLen {
		return broker.Invalidf("switchyard: concurrency key is %d bytes, the limit is %d", len(o.ConcurrencyKey), broker.MaxKeyLen)
	}
	if o.OnConcurrent != CancelInProgress && o.OnConcurrent != CancelNewest {
		return broker.Invalidf("switchyard: unknown concurrency policy %d", int(o.OnConcurrent))
	}
	return nil
}

// liveSharing lists the live tasks other than t that share its
// concurrency key (same tenant and kind), created before it. It reads
// the tenant's live tasks of t's kind, a page of 1000 at a time.
func (c *Client) liveSharing(ctx context.Context, t *ledger.Task, key string) ([]*ledger.Task, error) {
	var out []*ledger.Task
	after := ""
	for {
		ts, err := c.l.List(ctx, ledger.Filter{Tenant: t.Tenant, Kind: t.Kind, States: cancellable, Limit: 1000, After: after})
		if err != nil {
			return nil, err
		}
		for _, o := range ts {
			if o.ID != t.ID && o.Tenant == t.Tenant && o.Metadata[metaConcurrencyKey] == key && older(o, t) {
				out = append(out, o)
			}
		}
		if len(ts) < 1000 {
			return out, nil
		}
		after = ts[len(ts)-1].ID
	}
}

// older reports whether a was created before b (IDs break ties; the
// ledger's IDs sort by creation time).
func older(a, b *ledger.Task) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.Before(b.CreatedAt)
	}
	return a.ID < b.ID
}

// concurrencyBeforePublish applies CancelNewest to a task just recorded:
// it reports true when the task was cancelled and must not be published.
func (c *Client) concurrencyBeforePublish(ctx context.Context, t *ledger.Task, o *EnqueueOpts) (bool, error) {
	if o.ConcurrencyKey == "" || o.OnConcurrent != CancelNewest {
		return false, nil
	}
	live, err := c.liveSharing(ctx, t, o.ConcurrencyKey)
	if err != nil || len(live) == 0 {
		return false, err
	}
	_, err = c.CancelBy(ctx, t.ID, "task "+live[0].ID+" with the same concurrency key is in progress", "switchyard:cancel-newest")
	if err != nil {
		return false, err
	}
	return true, nil
}

// concurrencyAfterPublish applies CancelInProgress to a task just
// published: the older live tasks sharing its key are cancelled. A task
// that finished meanwhile is left as it is.
func (c *Client) concurrencyAfterPublish(ctx context.Context, t *ledger.Task, o *EnqueueOpts) error {
	if o.ConcurrencyKey == "" || o.OnConcurrent != CancelInProgress {
		return nil
	}
	live, err := c.liveSharing(ctx, t, o.ConcurrencyKey)
	if err != nil {
		return err
	}
	for _, old := range live {
		_, err := c.CancelBy(ctx, old.ID, "superseded by task "+t.ID+" with the same concurrency key", "switchyard:cancel-in-progress")
		if err != nil && !errors.Is(err, ErrFinished) && !errors.Is(err, ledger.ErrNotFound) {
			return err
		}
	}
	return nil
}

// CancelCause reports whether ctx is a handler's context cancelled
// because its task was cancelled from outside (Client.Cancel, the admin
// API, a newer task with the same ConcurrencyKey).
func CancelCause(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), scheduler.ErrCancelled)
}
