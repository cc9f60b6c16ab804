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
// one commit: a few writer goroutines each take the first waiting write,
// gather the others waiting (up to maxGroup), and send them as one pgx
// Batch, which PostgreSQL runs in one implicit transaction. Each caller
// gets its own statement's result.
//
// A write alone is sent at once (nothing waits for company), so latency
// under light load is one statement's. When a statement of a group fails
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
}

const (
	reqQueued int32 = iota
	reqTaken
	reqAbandoned
)

type grouper struct {
	reqs chan *groupReq
	stop chan struct{}
	wg   sync.WaitGroup
	// Counters, for tests and benchmarks.
	groups, writes, splits atomic.Int64
	// arrays counts the array statements sent, arrayWrites the writes
	// they completed.
	arrays, arrayWrites atomic.Int64
}

// startGroup starts n writer goroutines.
func (s *Store) startGroup(n int) {
	g := &grouper{reqs: make(chan *groupReq), stop: make(chan struct{})}
	s.g = g
	for range n {
		g.wg.Add(1)
		go s.groupLoop()
	}
}

func (s *Store) stopGroup() {
	if s.g == nil {
		return
	}
	close(s.g.stop)
	s.g.wg.Wait()
}

func (s *Store) groupLoop() {
	g := s.g
	defer g.wg.Done()
	buf := make([]*groupReq, 0, maxGroup)
	for {
		var first *groupReq
		select {
		case first = <-g.reqs:
		case <-g.stop:
			return
		}
		buf = append(buf[:0], first)
	gather:
		for len(buf) < maxGroup {
			select {
			case r := <-g.reqs:
				buf = append(buf, r)
			default:
				break gather
			}
		}
		s.runGroup(buf)
		clear(buf)
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
	stmts, arrays := planGroup(live)
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
		// A select below picks at random between a writer ready to take r
		// and a context already done: a cancelled caller must never write.
		return err
	}
	if s.g == nil {
		return s.runOne(ctx, r)
	}
	r.done = make(chan error, 1)
	select {
	case s.g.reqs <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.g.stop:
		return errors.New("closed pool")
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
