package switchyard

import (
	"context"
	"errors"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// ErrNoOutbox is returned by EnqueueTx and EnqueueManyTx when the Client
// has no ledger, or one whose store has no outbox (ledger.OutboxOf).
var ErrNoOutbox = errors.New("switchyard: this needs a ledger with an outbox (ClientConfig.Ledger: ledger/sqlite or ledger/postgres)")

// EnqueueTx enqueues a task inside the caller's database transaction tx:
// the task exists if and only if tx commits. The task and an outbox row
// are written in tx; once tx commits, a relay (every Server with the
// ledger runs one, and so does this Client from its first EnqueueTx on)
// publishes the task to its lane's broker — within milliseconds on
// PostgreSQL, which notifies relays at commit; on SQLite at the relay's
// next poll (RelayConfig.PollInterval). A rollback leaves no task and
// publishes nothing.
//
// tx is the ledger store's transaction type: for ledger/postgres a pgx.Tx
// (pgxpool.Tx, say) or a *sql.Tx of the pgx stdlib driver, on the ledger's
// database; for ledger/sqlite a *sql.Tx on the ledger's database file.
// A transaction of another type, one already committed or rolled back, or
// one on another database is refused with an error matching
// ledger.ErrTxType, ledger.ErrTxClosed or ledger.ErrForeignTx (and
// broker.ErrInvalid), and nothing is written.
//
// On SQLite the transaction holds the database's write lock from its
// first write (use _txlock=immediate) to its end, and the ledger's own
// writes wait for it up to the ledger's busy timeout: keep it short.
//
// Options and validation are Enqueue's. A duplicate idempotency key
// returns the task holding it (Duplicate=true) and writes nothing; the
// result's ID is final either way, and a new task's is valid only once tx
// commits. Without an outbox-capable ledger the error is ErrNoOutbox.
func (c *Client) EnqueueTx(ctx context.Context, tx any, args TaskArgs, opts *EnqueueOpts) (*EnqueueResult, error) {
	rs, err := c.EnqueueManyTx(ctx, tx, []EnqueueItem{{Args: args, Opts: opts}})
	if err != nil {
		return nil, err
	}
	if rs[0].Err != nil {
		return nil, rs[0].Err
	}
	r := rs[0].EnqueueResult
	return &r, nil
}

// EnqueueManyTx is EnqueueTx for a batch: one statement on PostgreSQL
// (one round trip, after the one that checks tx's database), one SAVEPOINT
// on SQLite. It returns one result per item, in order: an item that does
// not validate gets its own error and is not written; the others are. The
// error is non-nil when the call as a whole failed (tx's type, state or
// database, or a database error), and then nothing of the batch was
// written in tx — on PostgreSQL a database error aborts tx, as any
// statement's does, and tx must be rolled back.
func (c *Client) EnqueueManyTx(ctx context.Context, tx any, items []EnqueueItem) ([]EnqueueManyResult, error) {
	o := c.outbox()
	if o == nil {
		return nil, ErrNoOutbox
	}
	res, ots, idx := c.outboxTasks(ctx, items)
	if len(ots) > 0 {
		crs, err := o.CreateTx(ctx, tx, ots)
		if err != nil {
			return nil, err
		}
		fillOutboxResults(res, idx, crs)
	}
	c.startRelay()
	return res, nil
}

// outbox returns the ledger's outbox, or nil.
func (c *Client) outbox() ledger.Outbox {
	if c.l == nil {
		return nil
	}
	return ledger.OutboxOf(c.l)
}

// outboxTasks builds and validates the messages of items, as EnqueueMany
// does, and returns the outbox tasks of the valid ones with their indexes
// in items; the invalid ones have their error in res.
func (c *Client) outboxTasks(ctx context.Context, items []EnqueueItem) ([]EnqueueManyResult, []ledger.OutboxTask, []int) {
	res := make([]EnqueueManyResult, len(items))
	var ots []ledger.OutboxTask
	var idx []int
	for i, it := range items {
		m, o, err := c.message(ctx, it.Args, it.Opts)
		if err != nil {
			res[i].Err = err
			continue
		}
		ot := outboxTask(m, o)
		if c.beforePublish != nil {
			// Trace context is taken now, where the task is enqueued; the
			// relay publishes with these headers.
			c.beforePublish(ctx, m)
			ot.Headers = m.Headers
		}
		ots = append(ots, ot)
		idx = append(idx, i)
	}
	return res, ots, idx
}

func fillOutboxResults(res []EnqueueManyResult, idx []int, crs []ledger.CreateResult) {
	for k, cr := range crs {
		i := idx[k]
		switch {
		case cr.Err != nil:
			res[i].Err = cr.Err
		default:
			res[i].EnqueueResult = EnqueueResult{ID: cr.Task.ID, Duplicate: !cr.Created}
		}
	}
}

// outboxMessage is the message the relay publishes for an outbox item.
func outboxMessage(it ledger.OutboxItem) *broker.Message {
	t := it.Task
	return &broker.Message{ID: t.ID, Lane: t.Lane, Kind: t.Kind, Body: t.Args, IdempotencyKey: t.IdempotencyKey,
		Tenant: t.Tenant, OrderingKey: t.OrderingKey, RunAt: t.RunAt, MaxAttempts: t.MaxAttempts, Headers: it.Headers}
}
