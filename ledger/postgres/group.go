package postgres

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Group commit. The hot writes of the runtime (Create, BeginRun, EndRun,
// PutStep, BeginEffect, SetEffect) are single statements that report
// "nothing to do" as zero rows, never as an error. So the writes that
// arrive while others are in flight can share one pipelined round trip and
// one commit: a few writer goroutines (one per pool connection but one)
// each take the writes queued (up to maxGroup) and send them as one pgx
// Batch, which PostgreSQL runs in one implicit transaction. Each caller
// gets its own statement's result.
//
// A write that finds no writer busy is sent at once (nothing waits for
// company), so latency under light load is one statement's; one that
// arrives while a writer is busy waits for it, at most GroupWait when
// another writer is free (see "Writers and waiting" below). When a statement of a group fails
// on the server (a foreign-key error for an unknown task, a deadlock with
// another group), the implicit transaction rolls the whole group back:
// every write of it is then run again on its own, so each caller gets its
// own outcome and no write is lost or applied twice. A failure of the
// connection itself is reported to every caller of the group, as it would
// be for a single statement (its outcome is unknown).
//
// Rows a group touches stay locked until it commits; groups are bounded
// (maxGroup), so that is one round trip and one commit.
//
// Within a group, the writes of one kind (Create, BeginRun, EndRun with
// a transition, PutStep, BeginEffect, SetEffect) are one array
// statement, not one statement each (batch.go).

// maxGroup bounds how many writes share one round trip and commit.
const maxGroup = 64

// Writers and waiting. A commit costs the server far more than a write
// in an array statement (docs/BENCHMARKS.md: ~300 µs of backend CPU per
// commit on the test VM, against ~100 µs per task, three writes, at 64
// writes a statement), so fewer, larger groups are cheaper. A writer that
// is not running a group starts one with the writes queued (up to
// maxGroup, oldest first) when no other writer is busy, when a full group
// is queued, or when the oldest queued write has waited GroupWait; not
// otherwise. So a write that arrives while no writer is busy is sent at
// once; one that arrives while a writer is busy waits for that writer's
// next group (or another writer finishing with no other busy), and never
// longer than GroupWait while a writer is free. Under load the groups
// grow instead of the number of commits, and only as many writers run at
// once as it takes to keep every write's wait within GroupWait.

// defaultGroupWait is Options.GroupWait's default.
const defaultGroupWait = time.Millisecond

type groupReq struct {
	sql  string
	args []any
	// scan reads the statement's row (QueryRow); nil means Exec.
	scan func(pgx.Row) error
	// kind, when set, is the array statement that completes this write
	// together with the others of its kind in a group (batch.go).
	kind  *batchKind
	tag   pgconn.CommandTag
	err   error        // the outcome, while the group is read
	state atomic.Int32 // reqQueued → reqTaken | reqAbandoned
	done  chan error
	at    time.Time // when it was queued
}

const (
	reqQueued int32 = iota
	reqTaken
	reqAbandoned
)

type grouper struct {
	// wait is how long the oldest queued write waits for a busy writer
	// before an idle one takes it (negative: an idle writer takes a write
	// at once).
	wait time.Duration
	// noArrays: the pool's exec mode cannot encode the array statements'
	// []any arguments (batch.go).
	noArrays bool
	mu       sync.Mutex
	q        []*groupReq // queued writes, oldest first
	busy     int         // writers running a group
	idle     int         // writers waiting on changed
	// changed is closed, and replaced, when a write arrives that may let
	// an idle writer start a group.
	changed chan struct{}
	stopped bool
	stop    chan struct{}
	wg      sync.WaitGroup
	// Counters, for tests and benchmarks.
	groups, writes, splits atomic.Int64
	// arrays counts the array statements sent, arrayWrites the writes
	// they completed.
	arrays, arrayWrites atomic.Int64
	// waited counts the groups an idle writer started because the oldest
	// write had waited GroupWait for a busy one, full those it started
	// because maxGroup writes were waiting.
	waited, full atomic.Int64
}

func newGrouper(wait time.Duration) *grouper {
	return &grouper{wait: wait, changed: make(chan struct{}), stop: make(chan struct{})}
}

// startGroup starts n writer goroutines.
func (s *Store) startGroup(n int) {
	g := newGrouper(s.opts.GroupWait)
	switch s.pool.Config().ConnConfig.DefaultQueryExecMode {
	case pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol:
		g.noArrays = true
	}
	s.g = g
	for range n {
		g.wg.Add(1)
		go s.groupLoop()
	}
}

func (s *Store) stopGroup() {
	g := s.g
	if g == nil {
		return
	}
	g.mu.Lock()
	g.stopped = true
	q := g.q
	g.q = nil
	g.mu.Unlock()
	close(g.stop)
	g.wg.Wait()
	// Writes still queued never ran: their callers get the error a write
	// submitted after Close gets.
	for _, r := range q {
		if r.state.CompareAndSwap(reqQueued, reqTaken) {
			r.done <- errClosedPool
		}
	}
}

var errClosedPool = errors.New("closed pool")

// push queues r and wakes the idle writers when r may start a group: it
// is the only write queued, or it fills a group.
func (g *grouper) push(r *groupReq) error {
	r.at = time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return errClosedPool
	}
	g.q = append(g.q, r)
	if n := len(g.q); g.idle > 0 && (n == 1 || n == maxGroup || g.busy == 0) {
		close(g.changed)
		g.changed = make(chan struct{})
	}
	return nil
}

// next waits until this writer may start a group and returns its writes
// (appended to buf[:0]), or nil once the writer is stopped. ran says the
// writer has just finished a group.
func (g *grouper) next(buf []*groupReq, ran bool, timer *time.Timer) []*groupReq {
	g.mu.Lock()
	if ran {
		g.busy--
	}
	for {
		if g.stopped {
			g.mu.Unlock()
			return nil
		}
		var left time.Duration
		if n := len(g.q); n > 0 {
			take := g.busy == 0 || g.wait < 0
			if !take && n >= maxGroup {
				take = true
				g.full.Add(1)
			}
			if !take {
				left = g.wait - time.Since(g.q[0].at)
				if left <= 0 {
					take = true
					g.waited.Add(1)
				}
			}
			if take {
				k := min(n, maxGroup)
				buf = append(buf[:0], g.q[:k]...)
				m := copy(g.q, g.q[k:])
				clear(g.q[m:])
				g.q = g.q[:m]
				g.busy++
				g.mu.Unlock()
				return buf
			}
		}
		ch := g.changed
		g.idle++
		g.mu.Unlock()
		var tc <-chan time.Time
		if left > 0 {
			timer.Reset(left)
			tc = timer.C
		}
		select {
		case <-ch:
		case <-tc:
		case <-g.stop:
		}
		if tc != nil {
			timer.Stop()
		}
		g.mu.Lock()
		g.idle--
	}
}

func (s *Store) groupLoop() {
	g := s.g
	defer g.wg.Done()
	buf := make([]*groupReq, 0, maxGroup)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	ran := false
	for {
		buf = g.next(buf, ran, timer)
		if buf == nil {
			return
		}
		s.runGroup(buf)
		clear(buf)
		ran = true
	}
}

// groupTimeout bounds one group's round trip.
const groupTimeout = 30 * time.Second

func (s *Store) runGroup(rs []*groupReq) {
	live := rs[:0:0]
	for _, r := range rs {
		if r.state.CompareAndSwap(reqQueued, reqTaken) {
			live = append(live, r)
		}
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	defer cancel()
	s.g.groups.Add(1)
	s.g.writes.Add(int64(len(live)))
	if len(live) == 1 {
		live[0].done <- s.runOne(ctx, live[0])
		return
	}
	stmts, arrays := planGroup(live, s.g.noArrays)
	b := &pgx.Batch{}
	for i, st := range stmts {
		if i == arrays {
			b.Queue(arrayPlanSQL)
		}
		if st.kind == nil {
			b.Queue(st.reqs[0].sql, st.reqs[0].args...)
			continue
		}
		b.Queue(st.kind.array, st.kind.arrays(st.reqs)...)
		s.g.arrays.Add(1)
		s.g.arrayWrites.Add(int64(len(st.reqs)))
	}
	br := s.pool.SendBatch(ctx, b)
	serverErr := false
	for i, st := range stmts {
		if i == arrays {
			if _, err := br.Exec(); isServerErr(err) {
				serverErr = true
			}
		}
		if st.kind != nil {
			rows, err := br.Query()
			if err == nil {
				err = readArray(rows, st.reqs)
			}
			if err != nil {
				for _, r := range st.reqs {
					r.err = err
				}
			}
			if isServerErr(err) {
				serverErr = true
			}
			continue
		}
		r := st.reqs[0]
		if r.scan != nil {
			r.err = r.scan(br.QueryRow())
		} else {
			r.tag, r.err = br.Exec()
		}
		if isServerErr(r.err) {
			serverErr = true
		}
	}
	cerr := br.Close()
	if isServerErr(cerr) {
		serverErr = true
	}
	if serverErr {
		// The group was rolled back as a whole: run each write alone.
		s.g.splits.Add(1)
		for _, r := range live {
			r.done <- s.runOne(ctx, r)
		}
		return
	}
	for _, r := range live {
		err := r.err
		if err == nil || errors.Is(err, pgx.ErrNoRows) {
			if cerr != nil {
				err = cerr // the commit failed: nothing of the group holds
			}
		}
		r.done <- err
	}
}

func isServerErr(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe)
}

func (s *Store) runOne(ctx context.Context, r *groupReq) error {
	r.err = nil
	if r.scan != nil {
		return r.scan(s.pool.QueryRow(ctx, r.sql, r.args...))
	}
	var err error
	r.tag, err = s.pool.Exec(ctx, r.sql, r.args...)
	return err
}

// submit runs r through the group writer, or directly when group commit is
// off. A caller whose ctx ends while r still waits gets the context error
// and r never runs; once r is taken the caller waits for its outcome.
func (s *Store) submit(ctx context.Context, r *groupReq) error {
	if err := ctx.Err(); err != nil {
		// Once queued, r may be taken before the select below sees the
		// context done: a caller already cancelled must never write.
		return err
	}
	if s.g == nil {
		return s.runOne(ctx, r)
	}
	r.done = make(chan error, 1)
	if err := s.g.push(r); err != nil {
		return err
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqQueued, reqAbandoned) {
			return ctx.Err()
		}
		return <-r.done
	}
}

// queryRow runs a one-row write statement through the group writer.
func (s *Store) queryRow(ctx context.Context, sql string, scan func(pgx.Row) error, args ...any) error {
	return s.submit(ctx, &groupReq{sql: sql, args: args, scan: scan})
}

// queryRowKind is queryRow for a write of a kind that a group completes
// with one array statement (batch.go).
func (s *Store) queryRowKind(ctx context.Context, k *batchKind, scan func(pgx.Row) error, args ...any) error {
	return s.submit(ctx, &groupReq{sql: k.single, args: args, scan: scan, kind: k})
}

// exec runs a write statement through the group writer.
func (s *Store) exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r := &groupReq{sql: sql, args: args}
	err := s.submit(ctx, r)
	return r.tag, err
}

// GroupStats reports how many groups the writer sent, how many writes
// they carried, and how many groups were split after a server error.
func (s *Store) GroupStats() (groups, writes, splits int64) {
	if s.g == nil {
		return 0, 0, 0
	}
	return s.g.groups.Load(), s.g.writes.Load(), s.g.splits.Load()
}

// ArrayStats reports how many array statements the group writer sent and
// how many writes they completed (batch.go).
func (s *Store) ArrayStats() (stmts, writes int64) {
	if s.g == nil {
		return 0, 0
	}
	return s.g.arrays.Load(), s.g.arrayWrites.Load()
}

// GroupStarts reports how many groups an idle writer started because the
// oldest queued write had waited GroupWait for a busy writer (waited),
// and how many because a full group was queued (full); the other groups
// started on a write that found no writer busy, or on the writes queued
// when a writer finished.
func (s *Store) GroupStarts() (waited, full int64) {
	if s.g == nil {
		return 0, 0
	}
	return s.g.waited.Load(), s.g.full.Load()
}
