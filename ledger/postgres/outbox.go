package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// The transactional outbox (ledger.Outbox): table ledger_outbox, rows
// claimed by lease with FOR UPDATE SKIP LOCKED, so relays in any number of
// processes share it; an insert trigger notifies channel
// "switchyard_outbox" with the schema's name at commit (ListenOutbox).

var (
	_ ledger.Outbox         = (*Store)(nil)
	_ ledger.OutboxNotifier = (*Store)(nil)
)

// OutboxChannel is the LISTEN/NOTIFY channel of the outbox; a
// notification's payload is the ledger's schema.
const OutboxChannel = "switchyard_outbox"

// table returns name qualified with the store's schema: statements run in
// a caller's transaction, whose search_path is the caller's.
func (s *Store) table(name string) string {
	if s.opts.Schema == "" {
		return name
	}
	return pgx.Identifier{s.opts.Schema, name}.Sanitize()
}

// createTxSQL is createManySQL that also writes outbox rows, with
// schema-qualified tables; it returns the IDs it inserted.
func (s *Store) createTxSQL() string {
	return `WITH v AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bytea[],
			$8::int[], $9::int[], $10::timestamptz[], $11::timestamptz[], $12::text[], $13::bytea[], $14::text[], $15::text[])
			WITH ORDINALITY AS v(id, tenant, idem_key, kind, lane, ordering_key, args, attempt, max_attempts,
				run_at, deadline, metadata, result, last_error, headers, ord)),
	ins AS (
		INSERT INTO ` + s.table("ledger_tasks") + ` (` + taskCols + `, event_seq)
		SELECT id, tenant, idem_key, kind, lane, ordering_key, args, 'queued', attempt, max_attempts,
			run_at, deadline, metadata::jsonb, result, last_error, $16, $16, NULL::timestamptz, 1
		FROM v ORDER BY ord
		ON CONFLICT DO NOTHING
		RETURNING id),
	ob AS (INSERT INTO ` + s.table("ledger_outbox") + ` (task_id, ordering_key, headers, created_at, lease_until, owner)
		SELECT v.id, v.ordering_key, v.headers::jsonb, $16, $17, $18 FROM v JOIN ins ON ins.id = v.id ORDER BY v.ord)
	SELECT id FROM ins`
}

func (s *Store) existingTxSQL() string {
	return `SELECT ` + taskCols + ` FROM ` + s.table("ledger_tasks") + `
	WHERE id = ANY($1::text[])
	   OR (idem_key <> '' AND (tenant, idem_key) IN (SELECT * FROM unnest($2::text[], $3::text[])))`
}

// runner runs the outbox's statements on a pgx.Tx, a *sql.Tx or the pool.
type runner interface {
	query(ctx context.Context, q string, args ...any) (rows, error)
}

type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

type pgxRunner struct {
	q interface {
		Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	}
}

func (r pgxRunner) query(ctx context.Context, q string, args ...any) (rows, error) {
	return r.q.Query(ctx, q, args...)
}

type sqlRunner struct{ tx *sql.Tx }

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { r.Rows.Close() }

func (r sqlRunner) query(ctx context.Context, q string, args ...any) (rows, error) {
	rs, err := r.tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rs}, nil
}

// maxChecked bounds the connections CreateTx remembers as checked.
const maxChecked = 4096

// marker is the ledger's identity: the random comment migration 0008 put
// on its outbox table.
type marker struct {
	mu sync.Mutex
	m  string
}

func (s *Store) markerQuery() (string, string) {
	return `SELECT obj_description(to_regclass($1), 'pg_class')`, s.table("ledger_outbox")
}

func (s *Store) marker(ctx context.Context) (string, error) {
	mk := &s.mark
	mk.mu.Lock()
	defer mk.mu.Unlock()
	if mk.m == "" {
		q, arg := s.markerQuery()
		var m *string
		if err := s.pool.QueryRow(ctx, q, arg).Scan(&m); err != nil {
			return "", classify("postgres: identity", err, false)
		}
		if m == nil || *m == "" {
			return "", &broker.Error{Op: "postgres: identity", Class: broker.Permanent, Err: errors.New("the ledger's outbox table has no marker")}
		}
		mk.m = *m
	}
	return mk.m, nil
}

// CreateTx implements front.Backend for a pgx.Tx (a pgxpool.Tx, say) or a
// *sql.Tx of the pgx stdlib driver, on the ledger's database; the tables
// are named with the ledger's schema, whatever the transaction's
// search_path. The tasks and their outbox rows are written
// by one statement (one round trip, after one that checks the
// transaction's database); as for any statement, a database error in it
// aborts tx (PostgreSQL's rule): roll tx back.
func (s backend) CreateTx(ctx context.Context, op string, txv any, in []ledger.OutboxTask, ts []*ledger.Task, res []ledger.CreateResult, now time.Time) error {
	var r runner
	switch tx := txv.(type) {
	case pgx.Tx:
		if tx == nil {
			return ledger.TxError(op, ledger.ErrTxType, "nil pgx.Tx")
		}
		r = pgxRunner{tx}
	case *sql.Tx:
		if tx == nil {
			return ledger.TxError(op, ledger.ErrTxType, "nil *sql.Tx")
		}
		r = sqlRunner{tx}
	default:
		return ledger.TxError(op, ledger.ErrTxType, "%T (the PostgreSQL ledger takes a pgx.Tx or a *sql.Tx of the pgx stdlib driver)", txv)
	}
	// A connection never changes database: a pgx connection checked once
	// is not checked again (saving a round trip per call). The closed
	// check stays: a finished transaction's statements fail with
	// ErrTxClosed anyway.
	var conn *pgx.Conn
	if tx, ok := txv.(pgx.Tx); ok {
		conn = tx.Conn()
	}
	if _, ok := s.checked.Load(conn); conn == nil || !ok {
		mine, err := s.marker(ctx)
		if err != nil {
			return err
		}
		q, arg := s.markerQuery()
		theirs, err := queryMarker(ctx, r, q, arg)
		if err != nil {
			return s.txErr(op, err)
		}
		if theirs != mine {
			return ledger.TxError(op, ledger.ErrForeignTx, "it does not see this ledger's outbox table %s", arg)
		}
		if conn != nil {
			if s.nChecked.Add(1) > maxChecked {
				// Bounded: connections come and go; forget them all now
				// and then.
				s.checked.Clear()
				s.nChecked.Store(1)
			}
			s.checked.Store(conn, struct{}{})
		}
	}
	return s.createOutbox(ctx, op, r, in, ts, res, now, "", time.Time{})
}

func queryMarker(ctx context.Context, r runner, q, arg string) (string, error) {
	rs, err := r.query(ctx, q, arg)
	if err != nil {
		return "", err
	}
	defer rs.Close()
	var m *string
	if rs.Next() {
		if err := rs.Scan(&m); err != nil {
			return "", err
		}
	}
	if err := rs.Err(); err != nil {
		return "", err
	}
	if m == nil {
		return "", nil
	}
	return *m, nil
}

// CreateOutbox implements front.Backend with the statement CreateTx uses,
// in its own implicit transaction.
func (s backend) CreateOutbox(ctx context.Context, op string, in []ledger.OutboxTask, ts []*ledger.Task, res []ledger.CreateResult, now time.Time, owner string, lease time.Duration) error {
	var until time.Time
	if lease > 0 {
		until = now.Add(lease)
	}
	return s.createOutbox(ctx, op, pgxRunner{s.pool}, in, ts, res, now, owner, until)
}

// createOutbox sends the valid tasks ts of in (each idempotency key and
// ID once) in one statement, fills res, and looks up the tasks that held
// the keys or IDs of those it did not insert.
func (s *Store) createOutbox(ctx context.Context, op string, r runner, in []ledger.OutboxTask, ts []*ledger.Task, res []ledger.CreateResult, now time.Time, owner string, until time.Time) error {
	follows := make([]int, len(in))
	byKey := map[[2]string]int{}
	byID := map[string]int{}
	var todo []int
	var (
		ids, tenants, keys, kinds, lanes, ords, errs []string
		args, results                                [][]byte
		attempts, maxes                              []int32
		runAts, deadlines                            []*time.Time
		metas, hdrs                                  []*string
	)
	for i, c := range ts {
		follows[i] = -1
		if c == nil {
			continue
		}
		var err error
		var meta, hdr *string
		if len(c.Metadata) > 0 {
			b, merr := json.Marshal(c.Metadata)
			if merr != nil {
				err = store.Invalid(op, "metadata: %v", merr)
			}
			m := string(b)
			meta = &m
		}
		if err == nil && len(in[i].Headers) > 0 {
			b, herr := json.Marshal(in[i].Headers)
			if herr != nil {
				err = store.Invalid(op, "headers: %v", herr)
			}
			h := string(b)
			hdr = &h
		}
		if err != nil {
			res[i].Err, ts[i] = err, nil
			continue
		}
		k := [2]string{c.Tenant, c.IdempotencyKey}
		if j, ok := byKey[k]; ok && c.IdempotencyKey != "" {
			follows[i] = j
			continue
		}
		if j, ok := byID[c.ID]; ok {
			follows[i] = j
			continue
		}
		if c.IdempotencyKey != "" {
			byKey[k] = i
		}
		byID[c.ID] = i
		todo = append(todo, i)
		ids, tenants, keys, kinds, lanes, ords, errs = append(ids, c.ID), append(tenants, c.Tenant), append(keys, c.IdempotencyKey),
			append(kinds, c.Kind), append(lanes, c.Lane), append(ords, c.OrderingKey), append(errs, c.LastError)
		args, results = append(args, c.Args), append(results, c.Result)
		attempts, maxes = append(attempts, int32(c.Attempt)), append(maxes, int32(c.MaxAttempts))
		var ra, dl *time.Time
		if !c.RunAt.IsZero() {
			ra = &c.RunAt
		}
		if !c.Deadline.IsZero() {
			dl = &c.Deadline
		}
		runAts, deadlines = append(runAts, ra), append(deadlines, dl)
		metas, hdrs = append(metas, meta), append(hdrs, hdr)
	}
	if len(todo) > 0 {
		leaseUntil := pgtype.Timestamptz{Time: until, Valid: true}
		if until.IsZero() {
			leaseUntil = pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
		}
		rs, err := r.query(ctx, s.createTxSQL(), ids, tenants, keys, kinds, lanes, ords, args, attempts, maxes,
			runAts, deadlines, metas, results, errs, hdrs, now, leaseUntil, owner)
		if err != nil {
			return s.txErr(op, err)
		}
		inserted := map[string]bool{}
		for rs.Next() {
			var id string
			if err := rs.Scan(&id); err != nil {
				rs.Close()
				return s.txErr(op, err)
			}
			inserted[id] = true
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return s.txErr(op, err)
		}
		var missing []int
		var mids, mtenants, mkeys []string
		for _, i := range todo {
			if inserted[ts[i].ID] {
				res[i] = ledger.CreateResult{Task: ts[i], Created: true}
				continue
			}
			missing = append(missing, i)
			mids = append(mids, ts[i].ID)
			if ts[i].IdempotencyKey != "" {
				mtenants, mkeys = append(mtenants, ts[i].Tenant), append(mkeys, ts[i].IdempotencyKey)
			}
		}
		if len(missing) > 0 {
			rs, err := r.query(ctx, s.existingTxSQL(), mids, mtenants, mkeys)
			if err != nil {
				return s.txErr(op, err)
			}
			byKeyT := map[[2]string]*ledger.Task{}
			byIDT := map[string]*ledger.Task{}
			for rs.Next() {
				t, err := scanTask(rs)
				if err != nil {
					rs.Close()
					return s.txErr(op, err)
				}
				byIDT[t.ID] = t
				if t.IdempotencyKey != "" {
					byKeyT[[2]string{t.Tenant, t.IdempotencyKey}] = t
				}
			}
			rs.Close()
			if err := rs.Err(); err != nil {
				return s.txErr(op, err)
			}
			for _, i := range missing {
				t := ts[i]
				e := byKeyT[[2]string{t.Tenant, t.IdempotencyKey}]
				if t.IdempotencyKey == "" || e == nil {
					e = byIDT[t.ID]
				}
				if e == nil {
					// The conflicting row vanished (a prune) between the two
					// statements: rare; the caller may simply try again.
					res[i].Err = classify(op, fmt.Errorf("task %s: insert conflicted but no conflicting task was found", t.ID), true)
					continue
				}
				res[i] = ledger.CreateResult{Task: e}
			}
		}
	}
	for i, j := range follows {
		if j >= 0 {
			res[i] = ledger.CreateResult{Task: res[j].Task, Err: res[j].Err}
		}
	}
	return nil
}

// txErr classifies err of a statement in a caller's transaction: a
// finished transaction is ErrTxClosed.
func (s *Store) txErr(op string, err error) error {
	if errors.Is(err, pgx.ErrTxClosed) || errors.Is(err, sql.ErrTxDone) {
		return ledger.TxError(op, ledger.ErrTxClosed, "%v", err)
	}
	return classify(op, err, true)
}

// ClaimOutbox implements front.Backend: FOR UPDATE SKIP LOCKED picks rows
// no other relay is claiming, and the lease keeps them this relay's after
// the statement commits.
func (s backend) ClaimOutbox(ctx context.Context, op string, owner string, limit int, lease time.Duration) ([]ledger.OutboxItem, error) {
	now := s.opts.Now()
	// A read first: an idle relay's polls take no lock and open no
	// transaction.
	var waiting bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ledger_outbox WHERE lease_until <= $1)`, now).Scan(&waiting); err != nil {
		return nil, classify(op, err, false)
	}
	if !waiting {
		return nil, nil
	}
	type row struct {
		seq int64
		it  ledger.OutboxItem
	}
	var got []row
	// Claims take turns (a transaction-scoped advisory lock): a row with an
	// ordering key is claimed only when no earlier row of its key is
	// leased, and that holds only if a claim sees the leases of the claims
	// before it. SKIP LOCKED keeps the claim clear of rows CreateTx is
	// inserting.
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		got = got[:0]
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "switchyard-outbox:"+s.opts.Schema); err != nil {
			return err
		}
		rs, err := tx.Query(ctx, `WITH c AS (
				SELECT seq FROM ledger_outbox o WHERE lease_until <= $1 AND (ordering_key = '' OR NOT EXISTS (
					SELECT 1 FROM ledger_outbox e WHERE e.ordering_key = o.ordering_key AND e.seq < o.seq AND e.lease_until > $1))
				ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED)
			UPDATE ledger_outbox o SET lease_until = $3, owner = $4 FROM c WHERE o.seq = c.seq
			RETURNING o.seq, o.task_id, o.headers, o.tries, o.created_at`, now, limit, now.Add(lease), owner)
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			var (
				r    row
				hdrs []byte
			)
			if err := rs.Scan(&r.seq, &r.it.TaskID, &hdrs, &r.it.Tries, &r.it.CreatedAt); err != nil {
				return err
			}
			if len(hdrs) > 0 {
				if err := json.Unmarshal(hdrs, &r.it.Headers); err != nil {
					return err
				}
			}
			got = append(got, r)
		}
		return rs.Err()
	})
	if err != nil {
		return nil, classify(op, err, true)
	}
	if len(got) == 0 {
		return nil, nil
	}
	ids := make([]string, len(got))
	for i, r := range got {
		ids[i] = r.it.TaskID
	}
	trs, err := s.pool.Query(ctx, `SELECT `+taskCols+` FROM ledger_tasks WHERE id = ANY($1::text[])`, ids)
	if err != nil {
		return nil, classify(op, err, false)
	}
	byID := map[string]*ledger.Task{}
	for trs.Next() {
		t, err := scanTask(trs)
		if err != nil {
			trs.Close()
			return nil, classify(op, err, false)
		}
		byID[t.ID] = t
	}
	trs.Close()
	if err := trs.Err(); err != nil {
		return nil, classify(op, err, false)
	}
	// RETURNING has no order: oldest first.
	items := make([]ledger.OutboxItem, len(got))
	sortRows(got, func(r row) int64 { return r.seq })
	for i, r := range got {
		r.it.Task = byID[r.it.TaskID]
		items[i] = r.it
	}
	return items, nil
}

func sortRows[T any](rs []T, key func(T) int64) {
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && key(rs[j]) < key(rs[j-1]); j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
}

// DoneOutbox implements front.Backend (through group commit).
func (s backend) DoneOutbox(ctx context.Context, op string, owner string, taskIDs []string) error {
	_, err := s.exec(ctx, `DELETE FROM ledger_outbox WHERE owner = $1 AND task_id = ANY($2::text[])`, owner, taskIDs)
	return classify(op, err, true)
}

// ReleaseOutbox implements front.Backend (through group commit).
func (s backend) ReleaseOutbox(ctx context.Context, op string, owner string, taskIDs []string, retryIn time.Duration, lastError string) error {
	retryIn = max(retryIn, 0)
	_, err := s.exec(ctx, `UPDATE ledger_outbox SET owner = '', lease_until = $1, tries = tries + 1, last_error = $2
		WHERE owner = $3 AND task_id = ANY($4::text[])`, s.opts.Now().Add(retryIn), lastError, owner, taskIDs)
	return classify(op, err, true)
}

// OutboxStats implements front.Backend.
func (s backend) OutboxStats(ctx context.Context, op string) (ledger.OutboxStats, error) {
	var st ledger.OutboxStats
	var oldest *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT count(*), MIN(created_at) FROM ledger_outbox`).Scan(&st.Depth, &oldest); err != nil {
		return st, classify(op, err, false)
	}
	if oldest != nil {
		st.Oldest = *oldest
	}
	return st, nil
}
