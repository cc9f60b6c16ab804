package embedded

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"sync"

	"github.com/switchyard-dev/switchyard/internal/groupctx"
)

// writer runs the write transactions of concurrent callers on one database
// — publishes, receives and acks of every driver sharing it — and gathers
// them: while one transaction is in flight, the operations that arrive are
// queued, and when it ends they run together in the next one (group
// commit), each inside its own savepoint. A commit (a WAL append, its
// locks and syscalls) is most of what such an operation costs, and the
// database has one connection, so they would only have queued for it one
// transaction each.
//
// A caller that finds the writer idle runs at once in its own transaction
// (or, for a single statement, in SQLite's own autocommit: doOr), so a
// lone caller never waits. Each operation's outcome is exactly its own:
// one that fails is rolled back to its savepoint and reported to its caller
// while the others go on; a failed commit (or a failed savepoint) is
// reported to every operation of the group, never only to some. A caller
// returns only after the transaction that holds its operation has committed
// or failed. A queued operation whose context ends before it is taken is
// dropped without running; once taken, its caller waits for the outcome.
type writer struct {
	s *sharedDB

	mu    sync.Mutex
	busy  bool
	queue []*writeOp // waiting, in arrival order; only while busy
}

// writeOp is one caller's part of a transaction.
type writeOp struct {
	ctx context.Context
	fn  func(ctx context.Context, tx *sql.Tx) error
	// alone, when set, runs instead of fn when the operation is a
	// transaction's only one (see doOr).
	alone func(ctx context.Context) error

	// Set before done is closed.
	err error
	// lead is set instead when this caller is to run a group (its own
	// operation first) on behalf of the others.
	lead []*writeOp
	done chan struct{}
}

// maxGroupOps bounds the operations of one transaction: a group's last
// caller waits for every operation before its own.
const maxGroupOps = 64

const (
	savepointSQL = `SAVEPOINT sy_op`
	releaseSQL   = `RELEASE sy_op`
	rollbackSQL  = `ROLLBACK TO sy_op`
)

// do runs fn in a write transaction, alone or with the operations of
// concurrent callers, and returns fn's error or the transaction's. The
// error is unclassified; a context error is ctx's own.
func (w *writer) do(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return w.doOr(ctx, fn, nil)
}

// doOr is do, where alone (when not nil) does fn's work without a
// transaction and runs instead of fn when the operation would be a
// transaction's only one: a single statement, which SQLite commits by
// itself as atomically, saving the BEGIN and COMMIT. Grouped with
// others, fn runs in their transaction as with do.
func (w *writer) doOr(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error, alone func(ctx context.Context) error) error {
	op := &writeOp{ctx: ctx, fn: fn, alone: alone}
	w.mu.Lock()
	if !w.busy {
		w.busy = true
		w.mu.Unlock()
		defer w.handOff() // even if fn panics
		// Callers about to write (runnable, not yet running) get a chance
		// to join this transaction: on a busy machine they otherwise
		// arrive one by one, each just after the previous commit.
		runtime.Gosched()
		w.mu.Lock()
		if len(w.queue) == 0 {
			w.mu.Unlock()
			if alone != nil {
				return alone(ctx)
			}
			return w.runOne(ctx, fn)
		}
		n := min(len(w.queue), maxGroupOps-1)
		group := make([]*writeOp, 0, n+1)
		group = append(append(group, op), w.queue[:n]...)
		w.queue = append(w.queue[:0], w.queue[n:]...)
		w.mu.Unlock()
		w.runGroup(group)
		return op.err
	}
	op.done = make(chan struct{})
	w.queue = append(w.queue, op)
	w.mu.Unlock()
	select {
	case <-op.done:
	case <-ctx.Done():
		w.mu.Lock()
		for i, q := range w.queue {
			if q == op {
				// Not taken yet: nothing of it ran.
				w.queue = append(w.queue[:i], w.queue[i+1:]...)
				w.mu.Unlock()
				return ctx.Err()
			}
		}
		w.mu.Unlock()
		// Taken: its outcome is on the way.
		<-op.done
	}
	if op.lead != nil {
		defer w.handOff()
		w.runGroup(op.lead)
	}
	return op.err
}

// handOff ends the caller's turn: the next group of queued operations goes
// to the first of them to run, or the writer becomes idle.
func (w *writer) handOff() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queue) == 0 {
		w.busy = false
		return
	}
	n := min(len(w.queue), maxGroupOps)
	group := make([]*writeOp, n)
	copy(group, w.queue[:n])
	w.queue = append(w.queue[:0], w.queue[n:]...)
	group[0].lead = group
	close(group[0].done)
}

// runOne is a transaction of one operation, under its caller's context.
func (w *writer) runOne(ctx context.Context, fn func(context.Context, *sql.Tx) error) error {
	tx, err := w.s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(ctx, tx); err != nil {
		return err
	}
	return tx.Commit()
}

// runGroup runs group's operations in one transaction and gives each its
// outcome. The transaction's context ends only when every caller's has.
func (w *writer) runGroup(group []*writeOp) {
	defer func() {
		for _, op := range group[1:] {
			close(op.done)
		}
	}()
	if len(group) == 1 {
		op := group[0]
		op.err = w.callOne(op)
		return
	}
	ctxs := make([]context.Context, len(group))
	for i, op := range group {
		ctxs[i] = op.ctx
	}
	ctx, release := groupctx.Any(ctxs...)
	defer release()
	fail := func(err error) {
		for _, op := range group {
			if op.err == nil {
				op.err = err
			}
		}
	}
	// ran marks the operations whose changes are in the transaction: a
	// failed commit is theirs to report (the others have their own error).
	ran := make([]bool, len(group))
	tx, err := w.s.db.BeginTx(ctx, nil)
	if err != nil {
		fail(err)
		return
	}
	defer tx.Rollback()
	stmt := func(q string) (*sql.Stmt, error) {
		st, err := w.s.stmt(q)
		if err != nil {
			return nil, err
		}
		return tx.StmtContext(ctx, st), nil
	}
	sp, err := stmt(savepointSQL)
	if err == nil {
		var rel, rb *sql.Stmt
		if rel, err = stmt(releaseSQL); err == nil {
			rb, err = stmt(rollbackSQL)
		}
		for i, op := range group {
			if err != nil {
				break
			}
			if cerr := op.ctx.Err(); cerr != nil {
				op.err = cerr // gave up before its turn: not run
				continue
			}
			if _, err = sp.ExecContext(ctx); err != nil {
				break
			}
			if op.err = callFn(op.fn, ctx, tx); op.err != nil {
				if _, err = rb.ExecContext(ctx); err != nil {
					break
				}
			} else {
				ran[i] = true
			}
			_, err = rel.ExecContext(ctx)
		}
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		for i, op := range group {
			if ran[i] || op.err == nil {
				op.err = err
			}
		}
	}
}

// callOne runs a group of one under its caller's context, as runOne.
func (w *writer) callOne(op *writeOp) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("embedded: write panicked: %v", p)
		}
	}()
	if op.alone != nil {
		return op.alone(op.ctx)
	}
	return w.runOne(op.ctx, op.fn)
}

// callFn runs one operation of a group; a panic fails that operation
// instead of leaving the group's callers waiting for ever.
func callFn(fn func(context.Context, *sql.Tx) error, ctx context.Context, tx *sql.Tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("embedded: write panicked: %v", p)
		}
	}()
	return fn(ctx, tx)
}
