package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// Outbox is an optional interface of a Ledger: the transactional outbox.
// A task written with an outbox row is published to its broker by a relay
// (the root package's Client and Server run one) once the row is
// committed, and the row is deleted once the broker has taken the
// message. Both stores implement it; get it with OutboxOf, which sees
// through WithCodec.
//
// Rows are claimed by lease: any number of relays share one outbox, and a
// relay that dies between publishing a row and deleting it leaves the row
// to be published again when its lease passes. That second copy is
// harmless: it carries the task's ID, and the runtime runs a task the
// ledger knows once.
type Outbox interface {
	// CreateTx records ts as CreateMany would, inside the caller's open
	// transaction tx, and gives every task it creates an outbox row. The
	// transaction types a store takes are its own: PostgreSQL takes a
	// pgx.Tx or a *sql.Tx of the pgx stdlib driver on the ledger's
	// database and schema; SQLite a *sql.Tx on the ledger's file. Nothing
	// is visible to others until tx commits; a rollback leaves neither
	// task nor row.
	//
	// A tx of another type is refused with ErrTxType, a transaction
	// already committed or rolled back with ErrTxClosed, and one on
	// another database with ErrForeignTx (all permanent, matching
	// broker.ErrInvalid); then nothing was written in tx. A task repeating
	// an idempotency key gets the task holding it (Created=false) and no
	// outbox row.
	CreateTx(ctx context.Context, tx any, ts []OutboxTask) ([]CreateResult, error)
	// CreateOutbox records ts as CreateMany does, in one ledger write,
	// every created task with an outbox row leased to owner for lease: the
	// caller publishes the task itself and then calls DoneOutbox, and if
	// it fails or dies, a relay publishes the task once the lease has
	// passed (or at once after ReleaseOutbox). lease 0 leaves the rows to
	// the relays at once.
	CreateOutbox(ctx context.Context, ts []OutboxTask, owner string, lease time.Duration) ([]CreateResult, error)
	// ClaimOutbox leases up to limit rows whose lease has passed to owner
	// for lease, oldest first, and returns them. Relays that claim at the
	// same time get different rows.
	ClaimOutbox(ctx context.Context, owner string, limit int, lease time.Duration) ([]OutboxItem, error)
	// DoneOutbox deletes the rows of taskIDs that owner holds.
	DoneOutbox(ctx context.Context, owner string, taskIDs []string) error
	// ReleaseOutbox gives the rows of taskIDs that owner holds back, to
	// be claimed again after retryIn, counting a failed try and recording
	// lastError on them.
	ReleaseOutbox(ctx context.Context, owner string, taskIDs []string, retryIn time.Duration, lastError string) error
	// OutboxStats counts the rows and finds the oldest one's creation.
	OutboxStats(ctx context.Context) (OutboxStats, error)
}

// OutboxNotifier is an optional interface of an Outbox store that can tell
// a relay at once that rows were committed (PostgreSQL's LISTEN/NOTIFY).
type OutboxNotifier interface {
	// ListenOutbox returns a channel that receives a value soon after
	// every commit that added outbox rows (several commits may share one
	// value), until ctx ends; then the channel is closed. It reconnects by
	// itself after a connection loss and sends a value on reconnecting,
	// since a notification may have been missed meanwhile.
	ListenOutbox(ctx context.Context) (<-chan struct{}, error)
}

// OutboxTask is one task for CreateTx or CreateOutbox: the task and the
// message headers to publish it with.
type OutboxTask struct {
	Task    *Task
	Headers map[string]string
}

// OutboxItem is a claimed outbox row.
type OutboxItem struct {
	TaskID string
	// Task is the task as the ledger holds it, or nil when it is gone
	// (pruned): the row is then only to be deleted.
	Task      *Task
	Headers   map[string]string
	Tries     int // failed publishes so far
	CreatedAt time.Time
}

// OutboxStats describes the outbox.
type OutboxStats struct {
	// Depth is the number of rows: committed tasks not yet published
	// (rows being published right now included).
	Depth int
	// Oldest is the creation time of the oldest row, zero when empty.
	Oldest time.Time
}

// Transaction errors of Outbox.CreateTx. They come wrapped in a permanent
// *broker.Error of kind broker.ErrInvalid; check them with errors.Is.
var (
	// ErrTxType: the transaction is of a type the store does not take.
	ErrTxType = errors.New("ledger: transaction of a type this store does not take")
	// ErrTxClosed: the transaction was already committed or rolled back.
	ErrTxClosed = errors.New("ledger: transaction already committed or rolled back")
	// ErrForeignTx: the transaction is on another database (or schema)
	// than the ledger's.
	ErrForeignTx = errors.New("ledger: transaction on another database than the ledger's")
)

// TxError returns the permanent, invalid-kind error op returns for one of
// the transaction errors, with detail.
func TxError(op string, sentinel error, format string, args ...any) error {
	return &broker.Error{Op: op, Class: broker.Permanent, Kind: broker.ErrInvalid,
		Err: fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))}
}

// OutboxOf returns L's outbox, seeing through WithCodec (the returned
// Outbox then seals task arguments on the way in and opens them on the
// way out, as the wrapper does), or nil when L's store has none.
func OutboxOf(L Ledger) Outbox {
	switch l := L.(type) {
	case nil:
		return nil
	case *codecLedger:
		return codecOutboxOf(l)
	case *codecLanes:
		return codecOutboxOf(l.codecLedger)
	}
	o, _ := L.(Outbox)
	return o
}

func codecOutboxOf(l *codecLedger) Outbox {
	inner := OutboxOf(l.Ledger)
	if inner == nil {
		return nil
	}
	co := &codecOutbox{Outbox: inner, l: l}
	if n, ok := inner.(OutboxNotifier); ok {
		return &codecOutboxNotifier{codecOutbox: co, OutboxNotifier: n}
	}
	return co
}

type codecOutbox struct {
	Outbox
	l *codecLedger
}

type codecOutboxNotifier struct {
	*codecOutbox
	OutboxNotifier
}

// seal returns ts with their arguments (and results) sealed as Create
// seals them, and an ID assigned where empty; a task that does not seal
// is reported in errs.
func (c *codecOutbox) seal(ctx context.Context, ts []OutboxTask) ([]OutboxTask, []error) {
	out := make([]OutboxTask, len(ts))
	var errs []error
	for i, ot := range ts {
		out[i] = ot
		if ot.Task == nil {
			continue
		}
		t := *ot.Task
		if t.ID == "" {
			t.ID = broker.NewID()
		}
		var err error
		if t.Args, err = c.l.seal(ctx, "args", t.Args, argsAAD(&t)); err == nil {
			t.Result, err = c.l.seal(ctx, "result", t.Result, resultAAD(t.ID))
		}
		if err != nil {
			if errs == nil {
				errs = make([]error, len(ts))
			}
			errs[i] = err
			continue
		}
		out[i].Task = &t
	}
	return out, errs
}

func (c *codecOutbox) create(ctx context.Context, ts []OutboxTask, do func([]OutboxTask) ([]CreateResult, error)) ([]CreateResult, error) {
	sealed, errs := c.seal(ctx, ts)
	var send []OutboxTask
	var idx []int
	for i := range sealed {
		if errs != nil && errs[i] != nil {
			continue
		}
		send = append(send, sealed[i])
		idx = append(idx, i)
	}
	out := make([]CreateResult, len(ts))
	for i := range errs {
		out[i].Err = errs[i]
	}
	if len(send) == 0 {
		return out, nil
	}
	rs, err := do(send)
	if err != nil {
		return nil, err
	}
	for k, r := range rs {
		if r.Task != nil {
			if r.Task, r.Err = c.l.openTask(ctx, r.Task); r.Err != nil {
				r.Task, r.Created = nil, false
			}
		}
		out[idx[k]] = r
	}
	return out, nil
}

func (c *codecOutbox) CreateTx(ctx context.Context, tx any, ts []OutboxTask) ([]CreateResult, error) {
	return c.create(ctx, ts, func(s []OutboxTask) ([]CreateResult, error) { return c.Outbox.CreateTx(ctx, tx, s) })
}

func (c *codecOutbox) CreateOutbox(ctx context.Context, ts []OutboxTask, owner string, lease time.Duration) ([]CreateResult, error) {
	return c.create(ctx, ts, func(s []OutboxTask) ([]CreateResult, error) { return c.Outbox.CreateOutbox(ctx, s, owner, lease) })
}

// ClaimOutbox opens the claimed tasks' arguments. A task whose arguments
// do not open (a key that is gone) is left out, and its row released for
// a minute with the error recorded as its last_error, for an operator to
// see.
func (c *codecOutbox) ClaimOutbox(ctx context.Context, owner string, limit int, lease time.Duration) ([]OutboxItem, error) {
	items, err := c.Outbox.ClaimOutbox(ctx, owner, limit, lease)
	if err != nil {
		return nil, err
	}
	out := items[:0]
	for _, it := range items {
		if it.Task != nil {
			if _, err := c.l.openTask(ctx, it.Task); err != nil {
				_ = c.Outbox.ReleaseOutbox(ctx, owner, []string{it.TaskID}, time.Minute, err.Error())
				continue
			}
		}
		out = append(out, it)
	}
	return out, nil
}
