package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// The write path. Every write runs on one goroutine that owns the single
// writer connection. Writes that arrive while a transaction is running
// are taken together into the next one (group commit): each runs inside
// its own SAVEPOINT, so a failing write rolls back alone, and one COMMIT
// (one fsync) makes the whole group durable before any caller hears
// "done". Serially this costs what one transaction per write costs; under
// concurrency it divides the fsyncs by the group size. Writes that arrive
// while a group's statements run join it before its COMMIT (runGroup).
//
// A write's statements run with a background context: a caller whose
// context ends while its write waits in the queue gets the context error
// and the write never runs; once the write has started the caller waits
// for it (bounded by the busy timeout), so a context error always means
// "not written".

// maxGroup bounds how many writes share one transaction.
const maxGroup = 128

type writeFn func(ctx context.Context, tx *sql.Tx) error

type writeReq struct {
	fn writeFn
	// kind, when set, is the grouped statement that completes this write
	// together with the others of its kind in a group (batch.go); item
	// is its arguments and results. fn is still the write alone.
	kind  *batchKind
	item  batchItem
	err   error        // the write's own outcome in a grouped statement
	state atomic.Int32 // reqQueued → reqTaken, or reqQueued → reqAbandoned
	done  chan error
}

const (
	reqQueued int32 = iota
	reqTaken
	reqAbandoned
)

// writer is the state only the writer goroutine touches.
type writer struct {
	stmts   map[string]*sql.Stmt // prepared on the writer connection
	unready map[string]bool      // seen inside a transaction; prepared after it
	group   []*writeReq
}

// startWriter starts the writer goroutine.
func (s *Store) startWriter() {
	s.reqs = make(chan *writeReq)
	s.stop = make(chan struct{})
	s.stopped = make(chan struct{})
	s.wr = &writer{stmts: map[string]*sql.Stmt{}, unready: map[string]bool{}}
	go s.writeLoop()
}

func (s *Store) writeLoop() {
	defer close(s.stopped)
	for {
		var first *writeReq
		select {
		case first = <-s.reqs:
		case <-s.stop:
			return
		}
		g := append(s.wr.group[:0], first)
	gather:
		for len(g) < maxGroup {
			select {
			case r := <-s.reqs:
				g = append(g, r)
			default:
				break gather
			}
		}
		s.runGroup(g)
		for i := range g {
			g[i] = nil
		}
		s.wr.group = g
		s.prepareUnready()
	}
}

// maxLateRounds bounds how many times a group takes in the writes that
// arrived while it ran (lateWrites).
const maxLateRounds = 4

// runGroup runs the writes of g in one transaction and answers each.
//
// Before its COMMIT the group takes in the writes that arrived while its
// statements ran (without waiting for any: only those already queued),
// runs them in the same transaction, and does so again, up to
// maxLateRounds times and maxGroup writes in all. Without it, a write
// that arrives just after a group started waits for that group's
// statements and its commit (the fsync), then for its own group's: with
// it, it shares the commit it would have waited for. Each write is still
// answered only after the COMMIT that holds it; a write of a task that an
// earlier write of the transaction touched runs after it and sees it, as
// within one round.
func (s *Store) runGroup(g []*writeReq) {
	live := takeLive(g[:0:0], g)
	if len(live) == 0 {
		return
	}
	s.txns.Add(1)
	ctx := context.Background()
	errs := make([]error, len(live))
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		s.writes.Add(int64(len(live)))
		for _, r := range live {
			r.done <- err
		}
		return
	}
	// done is the number of writes of live that have run.
	done := 0
	if len(live) == 1 {
		// A write alone needs no savepoint: its error rolls the
		// transaction back, and nothing else is in it.
		errs[0] = call(ctx, tx, live[0].fn)
		if errs[0] != nil {
			tx.Rollback()
			s.writes.Add(1)
			live[0].done <- errs[0]
			return
		}
		done = 1
	}
	for round := 0; ; round++ {
		if done < len(live) {
			if !s.runWrites(ctx, tx, live, errs, done) {
				s.writes.Add(int64(len(live)))
				return
			}
			done = len(live)
		}
		if round == maxLateRounds || len(live) >= maxGroup {
			break
		}
		n := len(live)
		live = s.lateWrites(live)
		if len(live) == n {
			break
		}
		s.lateJoins.Add(int64(len(live) - n))
		errs = append(errs, make([]error, len(live)-n)...)
	}
	s.writes.Add(int64(len(live)))
	cerr := tx.Commit()
	for i, r := range live {
		if errs[i] == nil {
			errs[i] = cerr
		}
		r.done <- errs[i]
	}
}

// takeLive appends to live the writes of g whose callers still wait,
// marking them taken.
func takeLive(live, g []*writeReq) []*writeReq {
	for _, r := range g {
		if r.state.CompareAndSwap(reqQueued, reqTaken) {
			live = append(live, r)
		}
	}
	return live
}

// lateWrites appends to live the writes queued now, up to maxGroup in
// all, without waiting for any.
func (s *Store) lateWrites(live []*writeReq) []*writeReq {
	for len(live) < maxGroup {
		select {
		case r := <-s.reqs:
			live = takeLive(live, []*writeReq{r})
		default:
			return live
		}
	}
	return live
}

// runWrites runs the writes live[from:] in tx, each in its own savepoint
// or grouped statement (batch.go), setting their outcomes in errs. False
// means the transaction failed: it was rolled back and every write of
// live answered.
func (s *Store) runWrites(ctx context.Context, tx *sql.Tx, live []*writeReq, errs []error, from int) bool {
	idx := make(map[*writeReq]int, len(live)-from)
	for i := from; i < len(live); i++ {
		idx[live[i]] = i
	}
	failGroup := func(err error) bool {
		tx.Rollback()
		for _, r := range live {
			r.done <- err
		}
		return false
	}
	// alone runs one write in its own savepoint.
	alone := func(r *writeReq) bool {
		i := idx[r]
		if _, err := s.txExec(ctx, tx, "SAVEPOINT w"); err != nil {
			return failGroup(err)
		}
		errs[i] = call(ctx, tx, r.fn)
		if errs[i] != nil {
			if _, err := s.txExec(ctx, tx, "ROLLBACK TO w"); err != nil {
				return failGroup(err)
			}
		}
		if _, err := s.txExec(ctx, tx, "RELEASE w"); err != nil {
			return failGroup(err)
		}
		return true
	}
	for _, st := range planGroup(live[from:]) {
		if st.kind == nil {
			if !alone(st.reqs[0]) {
				return false
			}
			continue
		}
		// A grouped statement runs in its own savepoint: an error in it
		// (not a write's own refusal) undoes it and splits it, every
		// write then running alone.
		if _, err := s.txExec(ctx, tx, "SAVEPOINT w"); err != nil {
			return failGroup(err)
		}
		for _, r := range st.reqs {
			r.err = nil
		}
		berr := callBatch(ctx, s, tx, st.kind, st.reqs)
		if berr != nil {
			if _, err := s.txExec(ctx, tx, "ROLLBACK TO w"); err != nil {
				return failGroup(err)
			}
		}
		if _, err := s.txExec(ctx, tx, "RELEASE w"); err != nil {
			return failGroup(err)
		}
		if berr != nil {
			s.splits.Add(1)
			for _, r := range st.reqs {
				if !alone(r) {
					return false
				}
			}
			continue
		}
		s.batches.Add(1)
		s.batchWrites.Add(int64(len(st.reqs)))
		for _, r := range st.reqs {
			errs[idx[r]] = r.err
		}
	}
	return true
}

// call runs fn, turning a panic into an error so that the writer
// goroutine survives it and the transaction is rolled back.
func call(ctx context.Context, tx *sql.Tx, fn writeFn) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic in a ledger write: %v", p)
		}
	}()
	return fn(ctx, tx)
}

// prepareUnready prepares, between transactions, the statements first
// met inside one (preparing on the single connection while a transaction
// holds it would deadlock).
func (s *Store) prepareUnready() {
	for q := range s.wr.unready {
		if st, err := s.w.PrepareContext(context.Background(), q); err == nil {
			s.wr.stmts[q] = st
		}
		delete(s.wr.unready, q)
	}
}

// txExec runs q in tx, through the writer's prepared statement when there
// is one. Only write functions (on the writer goroutine) call it.
func (s *Store) txExec(ctx context.Context, tx *sql.Tx, q string, args ...any) (sql.Result, error) {
	if s.direct {
		return tx.ExecContext(ctx, q, args...)
	}
	if st := s.wr.stmts[q]; st != nil {
		return tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	s.wr.unready[q] = true
	return tx.ExecContext(ctx, q, args...)
}

// txQueryRow is txExec for a query returning one row.
func (s *Store) txQueryRow(ctx context.Context, tx *sql.Tx, q string, args ...any) *sql.Row {
	if s.direct {
		return tx.QueryRowContext(ctx, q, args...)
	}
	if st := s.wr.stmts[q]; st != nil {
		return tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	s.wr.unready[q] = true
	return tx.QueryRowContext(ctx, q, args...)
}

// txQuery is txExec for a query returning rows.
func (s *Store) txQuery(ctx context.Context, tx *sql.Tx, q string, args ...any) (*sql.Rows, error) {
	if s.direct {
		return tx.QueryContext(ctx, q, args...)
	}
	if st := s.wr.stmts[q]; st != nil {
		return tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	s.wr.unready[q] = true
	return tx.QueryContext(ctx, q, args...)
}

// write runs fn in a write transaction on the writer goroutine; see the
// comment at the top of this file.
func (s *Store) write(ctx context.Context, op string, fn writeFn) error {
	return s.writeKind(ctx, op, fn, nil, nil)
}

// writeKind is write for a write that a group may complete with the
// others of its kind in one grouped statement (batch.go); fn is the
// write alone, as in write.
func (s *Store) writeKind(ctx context.Context, op string, fn writeFn, kind *batchKind, item batchItem) error {
	if s.closed.Load() {
		return store.Closed(op)
	}
	if err := ctx.Err(); err != nil {
		return s.classify(op, err)
	}
	if s.direct {
		return s.classify(op, s.writeDirect(ctx, fn))
	}
	r := &writeReq{fn: fn, kind: kind, item: item, done: make(chan error, 1)}
	select {
	case s.reqs <- r:
	case <-ctx.Done():
		return s.classify(op, ctx.Err())
	case <-s.stop:
		return store.Closed(op)
	}
	select {
	case err := <-r.done:
		return s.classify(op, err)
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqQueued, reqAbandoned) {
			return s.classify(op, ctx.Err())
		}
		return s.classify(op, <-r.done)
	}
}

// readStmts caches statements prepared on the reader pool.
type readStmts struct {
	mu sync.RWMutex
	m  map[string]*sql.Stmt
}

func (s *Store) readStmt(ctx context.Context, q string) *sql.Stmt {
	s.rs.mu.RLock()
	st := s.rs.m[q]
	s.rs.mu.RUnlock()
	if st != nil {
		return st
	}
	st, err := s.r.PrepareContext(ctx, q)
	if err != nil {
		return nil
	}
	s.rs.mu.Lock()
	defer s.rs.mu.Unlock()
	if old := s.rs.m[q]; old != nil {
		st.Close()
		return old
	}
	s.rs.m[q] = st
	return st
}

// rQueryRow runs a read through the reader pool's prepared statement.
func (s *Store) rQueryRow(ctx context.Context, q string, args ...any) *sql.Row {
	if st := s.readStmt(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return s.r.QueryRowContext(ctx, q, args...)
}

// rQuery is rQueryRow for many rows.
func (s *Store) rQuery(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if st := s.readStmt(ctx, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return s.r.QueryContext(ctx, q, args...)
}

// writeDirect runs fn in its own transaction on the calling goroutine:
// the plain pattern, kept only so the benchmark can compare it with group
// commit (it is not thread-safe with the statement cache, so it runs
// unprepared).
func (s *Store) writeDirect(ctx context.Context, fn writeFn) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(ctx, tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}
