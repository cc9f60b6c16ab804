package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// The transactional outbox (ledger.Outbox): table ledger_outbox, rows
// claimed by lease (lease_until, Unix nanoseconds; 0 is free). SQLite has
// no notifications: relays poll (an indexed probe of an empty table).

var _ ledger.Outbox = (*Store)(nil)

// identity reads (once) the random marker migration 0008 wrote into this
// database's ledger_identity.
type identity struct {
	mu sync.Mutex
	id string
}

func (s *Store) identity(ctx context.Context) (string, error) {
	s.ident.mu.Lock()
	defer s.ident.mu.Unlock()
	if s.ident.id == "" {
		// A failed read is not kept: a cancelled first read must not
		// poison the store.
		if err := s.rQueryRow(ctx, `SELECT id FROM ledger_identity`).Scan(&s.ident.id); err != nil {
			return "", s.classify("sqlite: identity", err)
		}
	}
	return s.ident.id, nil
}

const outboxInsertSQL = `INSERT INTO ledger_outbox (task_id, ordering_key, headers, created_at, lease_until, owner) VALUES (?, ?, ?, ?, ?, ?)`

func headersJSON(h map[string]string) (any, error) {
	if len(h) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// encodeOutbox encodes the metadata and headers of the valid tasks ts of
// in; one that does not encode gets its error in res and a nil entry in
// ts.
func encodeOutbox(op string, in []ledger.OutboxTask, ts []*ledger.Task, res []ledger.CreateResult) (metas, hdrs []any) {
	metas, hdrs = make([]any, len(in)), make([]any, len(in))
	for i, t := range ts {
		if t == nil {
			continue
		}
		var err error
		if metas[i], err = metaJSON(t.Metadata); err != nil {
			err = store.Invalid(op, "metadata: %v", err)
		} else if hdrs[i], err = headersJSON(in[i].Headers); err != nil {
			err = store.Invalid(op, "headers: %v", err)
		}
		if err != nil {
			res[i].Err, ts[i] = err, nil
		}
	}
	return metas, hdrs
}

// CreateTx implements front.Backend for a *sql.Tx on the ledger's
// database file. The writes run inside a SAVEPOINT of tx: an error leaves
// tx as it was, usable. Use a transaction that takes the write lock at
// BEGIN (modernc.org/sqlite's _txlock=immediate), or SQLite may refuse
// the upgrade of a read transaction with SQLITE_BUSY.
func (s backend) CreateTx(ctx context.Context, op string, txv any, in []ledger.OutboxTask, ts []*ledger.Task, res []ledger.CreateResult, now time.Time) error {
	tx, ok := txv.(*sql.Tx)
	if !ok || tx == nil {
		return ledger.TxError(op, ledger.ErrTxType, "%T (the SQLite ledger takes a *sql.Tx on its own database file)", txv)
	}
	mine, err := s.identity(ctx)
	if err != nil {
		return err
	}
	var theirs string
	if err := tx.QueryRowContext(ctx, `SELECT id FROM ledger_identity`).Scan(&theirs); err != nil {
		switch {
		case errors.Is(err, sql.ErrTxDone):
			return ledger.TxError(op, ledger.ErrTxClosed, "%v", err)
		case strings.Contains(err.Error(), "no such table"), errors.Is(err, sql.ErrNoRows):
			return ledger.TxError(op, ledger.ErrForeignTx, "its database has no Switchyard ledger")
		}
		return s.classify(op, err)
	}
	if theirs != mine {
		return ledger.TxError(op, ledger.ErrForeignTx, "its database is another Switchyard ledger than %s", s.path)
	}
	metas, hdrs := encodeOutbox(op, in, ts, res)
	if _, err := tx.ExecContext(ctx, `SAVEPOINT switchyard_enqueue_tx`); err != nil {
		return s.classify(op, err)
	}
	err = func() error {
		for i, t := range ts {
			if t == nil {
				continue
			}
			existing, err := createIn(ctx, execTx{tx}, t, metas[i])
			if err != nil {
				return err
			}
			if existing != nil {
				res[i] = ledger.CreateResult{Task: existing}
				continue
			}
			if _, err := tx.ExecContext(ctx, outboxInsertSQL, t.ID, t.OrderingKey, hdrs[i], now.UnixNano(), 0, ""); err != nil {
				return err
			}
			res[i] = ledger.CreateResult{Task: t, Created: true}
		}
		return nil
	}()
	if err != nil {
		tx.ExecContext(context.WithoutCancel(ctx), `ROLLBACK TO switchyard_enqueue_tx`)
		tx.ExecContext(context.WithoutCancel(ctx), `RELEASE switchyard_enqueue_tx`)
		return s.classify(op, err)
	}
	if _, err := tx.ExecContext(ctx, `RELEASE switchyard_enqueue_tx`); err != nil {
		return s.classify(op, err)
	}
	return nil
}

// execTx runs createIn's statements straight on a caller's transaction
// (the writer's prepared statements belong to the ledger's connection).
type execTx struct{ tx *sql.Tx }

func (e execTx) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return e.tx.ExecContext(ctx, q, args...)
}

func (e execTx) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	return e.tx.QueryRowContext(ctx, q, args...)
}

// execWriter runs them through the writer's prepared statements.
type execWriter struct {
	s  *Store
	tx *sql.Tx
}

func (e execWriter) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return e.s.txExec(ctx, e.tx, q, args...)
}

func (e execWriter) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	return e.s.txQueryRow(ctx, e.tx, q, args...)
}

type execer interface {
	exec(ctx context.Context, q string, args ...any) (sql.Result, error)
	queryRow(ctx context.Context, q string, args ...any) *sql.Row
}

// createIn records t as createInTx does, through e.
func createIn(ctx context.Context, e execer, t *ledger.Task, meta any) (*ledger.Task, error) {
	if t.IdempotencyKey != "" {
		ex, err := scanTask(e.queryRow(ctx, `SELECT `+taskCols+` FROM ledger_tasks WHERE tenant = ? AND idem_key = ? AND idem_key <> ''`, t.Tenant, t.IdempotencyKey))
		if err == nil {
			return ex, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
	}
	now := t.CreatedAt.UnixNano()
	r, err := e.exec(ctx, `INSERT INTO ledger_tasks (`+taskCols+`, event_seq)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, 1) ON CONFLICT DO NOTHING`,
		t.ID, t.Tenant, t.IdempotencyKey, t.Kind, t.Lane, t.OrderingKey, t.Args, string(t.State), t.Attempt, t.MaxAttempts,
		nanos(t.RunAt), nanos(t.Deadline), meta, t.Result, t.LastError, now, now)
	if err != nil {
		return nil, err
	}
	if n, err := r.RowsAffected(); err != nil {
		return nil, err
	} else if n == 0 {
		return scanTask(e.queryRow(ctx, `SELECT `+taskCols+` FROM ledger_tasks WHERE id = ?`, t.ID))
	}
	// The "enqueued" event is derived (enqueuedEventSQL), not a row.
	return nil, nil
}

// CreateOutbox implements front.Backend in one write transaction.
func (s backend) CreateOutbox(ctx context.Context, op string, in []ledger.OutboxTask, ts []*ledger.Task, res []ledger.CreateResult, now time.Time, owner string, lease time.Duration) error {
	metas, hdrs := encodeOutbox(op, in, ts, res)
	var until int64
	if lease > 0 {
		until = now.Add(lease).UnixNano()
	}
	return s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		e := execWriter{s.Store, tx}
		for i, t := range ts {
			if t == nil {
				continue
			}
			existing, err := createIn(ctx, e, t, metas[i])
			if err != nil {
				return err
			}
			if existing != nil {
				res[i] = ledger.CreateResult{Task: existing}
				continue
			}
			if _, err := e.exec(ctx, outboxInsertSQL, t.ID, t.OrderingKey, hdrs[i], now.UnixNano(), until, owner); err != nil {
				return err
			}
			res[i] = ledger.CreateResult{Task: t, Created: true}
		}
		return nil
	})
}

// ClaimOutbox implements front.Backend.
func (s backend) ClaimOutbox(ctx context.Context, op, owner string, limit int, lease time.Duration) ([]ledger.OutboxItem, error) {
	// A read first: an idle relay's polls never take the write lock.
	var waiting int
	err := s.rQueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM ledger_outbox WHERE lease_until <= ? LIMIT 1)`, s.opts.Now().UnixNano()).Scan(&waiting)
	if err != nil {
		return nil, s.classify(op, err)
	}
	if waiting == 0 {
		return nil, nil
	}
	var items []ledger.OutboxItem
	err = s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		items = items[:0]
		now := s.opts.Now()
		rows, err := tx.QueryContext(ctx, `UPDATE ledger_outbox SET lease_until = ?1, owner = ?2
			WHERE seq IN (SELECT seq FROM ledger_outbox o WHERE lease_until <= ?3 AND (ordering_key = '' OR NOT EXISTS (
				SELECT 1 FROM ledger_outbox e WHERE e.ordering_key = o.ordering_key AND e.seq < o.seq AND e.lease_until > ?3))
				ORDER BY seq LIMIT ?4)
			RETURNING seq, task_id, headers, tries, created_at`, now.Add(lease).UnixNano(), owner, now.UnixNano(), limit)
		if err != nil {
			return err
		}
		type row struct {
			seq int64
			it  ledger.OutboxItem
		}
		var got []row
		for rows.Next() {
			var (
				r       row
				hdrs    sql.NullString
				created int64
			)
			if err := rows.Scan(&r.seq, &r.it.TaskID, &hdrs, &r.it.Tries, &created); err != nil {
				rows.Close()
				return err
			}
			r.it.CreatedAt = time.Unix(0, created)
			if hdrs.Valid && hdrs.String != "" {
				if err := json.Unmarshal([]byte(hdrs.String), &r.it.Headers); err != nil {
					rows.Close()
					return err
				}
			}
			got = append(got, r)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(got) == 0 {
			return nil
		}
		sort.Slice(got, func(i, j int) bool { return got[i].seq < got[j].seq })
		ids := make([]string, len(got))
		for i, r := range got {
			ids[i] = r.it.TaskID
		}
		idsJSON, _ := json.Marshal(ids)
		trows, err := tx.QueryContext(ctx, `SELECT `+taskCols+` FROM ledger_tasks WHERE id IN (SELECT value FROM json_each(?))`, string(idsJSON))
		if err != nil {
			return err
		}
		byID := map[string]*ledger.Task{}
		for trows.Next() {
			t, err := scanTask(trows)
			if err != nil {
				trows.Close()
				return err
			}
			byID[t.ID] = t
		}
		if err := trows.Err(); err != nil {
			return err
		}
		for _, r := range got {
			r.it.Task = byID[r.it.TaskID]
			items = append(items, r.it)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return items, nil
}

// DoneOutbox implements front.Backend.
func (s backend) DoneOutbox(ctx context.Context, op, owner string, taskIDs []string) error {
	ids, _ := json.Marshal(taskIDs)
	return s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		_, err := s.txExec(ctx, tx, `DELETE FROM ledger_outbox WHERE owner = ? AND task_id IN (SELECT value FROM json_each(?))`, owner, string(ids))
		return err
	})
}

// ReleaseOutbox implements front.Backend.
func (s backend) ReleaseOutbox(ctx context.Context, op, owner string, taskIDs []string, retryIn time.Duration, lastError string) error {
	ids, _ := json.Marshal(taskIDs)
	return s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		_, err := s.txExec(ctx, tx, `UPDATE ledger_outbox SET owner = '', lease_until = ?, tries = tries + 1, last_error = ?
			WHERE owner = ? AND task_id IN (SELECT value FROM json_each(?))`, s.opts.Now().Add(retryIn).UnixNano(), lastError, owner, string(ids))
		return err
	})
}

// OutboxStats implements front.Backend.
func (s backend) OutboxStats(ctx context.Context, op string) (ledger.OutboxStats, error) {
	var (
		st     ledger.OutboxStats
		oldest sql.NullInt64
	)
	if err := s.rQueryRow(ctx, `SELECT count(*), MIN(created_at) FROM ledger_outbox`).Scan(&st.Depth, &oldest); err != nil {
		return st, s.classify(op, err)
	}
	st.Oldest = fromNanos(oldest)
	return st, nil
}
