// Package sqlstore keeps the provider-batch lane's items, batches, pump
// leases and spend records in the ledger's database: the tables of ledger
// migration 0013, in SQLite (the embedded default) or PostgreSQL. Open the
// ledger first (ledger/sqlite.Open or ledger/postgres.Open applies the
// migration); this package checks the schema version and refuses an older
// database.
//
// Every Store method is one transaction. Spend windows are checked and
// reserved atomically: SQLite serialises writers (BEGIN IMMEDIATE);
// PostgreSQL takes a transaction-scoped advisory lock per tenant.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // registers the "sqlite" database/sql driver

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/internal/sqliteopen"
	"github.com/switchyard-dev/switchyard/limits"
	"github.com/switchyard-dev/switchyard/providerbatch"
	"github.com/switchyard-dev/switchyard/spend"
)

// SchemaVersion is the ledger schema version holding these tables.
const SchemaVersion = 13

// Store is a providerbatch.Store on SQL.
type Store struct {
	db *sql.DB
	pg bool
}

var _ providerbatch.Store = (*Store)(nil)

// OpenSQLite opens the SQLite ledger file at path (already migrated by
// ledger/sqlite.Open).
func OpenSQLite(ctx context.Context, path string) (*Store, error) {
	if path == "" || strings.ContainsAny(path, "?#\x00") {
		return nil, broker.Invalidf("sqlstore: bad database path %q", path)
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("sqlstore: no ledger database at %s (open it with the ledger first): %w", path, err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return open(ctx, db, false)
}

// OpenDSN opens the store of an existing ledger named by a ledger DSN, as
// ledger.Open takes it: sqlite:///abs/path.db, sqlite:rel.db or
// postgres://…[?schema=NAME].
func OpenDSN(ctx context.Context, dsn string) (*Store, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, broker.Invalidf("sqlstore: ledger DSN does not parse as a URL")
	}
	switch strings.ToLower(u.Scheme) {
	case "sqlite":
		path := u.Path
		if u.Opaque != "" {
			path = u.Opaque
		}
		if u.Host != "" {
			return nil, broker.Invalidf("sqlstore: sqlite DSN with a host %q: use sqlite:///abs/path or sqlite:rel/path", u.Host)
		}
		return OpenSQLite(ctx, path)
	case "postgres", "postgresql":
		return OpenPostgres(ctx, dsn)
	}
	return nil, broker.Invalidf("sqlstore: ledger DSN scheme %q: want sqlite or postgres", u.Scheme)
}

// OpenPostgres opens the PostgreSQL ledger at dsn (already migrated by
// ledger/postgres.Open). A URL DSN may carry the ledger's schema=NAME
// parameter, as ledger.Open takes it; it becomes the search_path.
func OpenPostgres(ctx context.Context, dsn string) (*Store, error) {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		if schema := q.Get("schema"); schema != "" {
			q.Del("schema")
			q.Set("search_path", schema)
			u.RawQuery = q.Encode()
			dsn = u.String()
		}
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	return open(ctx, db, true)
}

func open(ctx context.Context, db *sql.DB, pg bool) (*Store, error) {
	s := &Store{db: db, pg: pg}
	var v int
	err := sqliteopen.RetryBusy(ctx, func() error {
		return db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM ledger_schema_version`).Scan(&v)
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlstore: read the ledger schema version (open the ledger first): %w", err)
	}
	if v < SchemaVersion {
		db.Close()
		return nil, fmt.Errorf("sqlstore: ledger schema version %d, need %d: open it with this version's ledger package first", v, SchemaVersion)
	}
	return s, nil
}

// Close closes the database handle.
func (s *Store) Close() error { return s.db.Close() }

// q rewrites ? placeholders to $n on PostgreSQL.
func (s *Store) q(query string) string {
	if !s.pg {
		return query
	}
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

func (s *Store) tx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return sqliteopen.RetryBusy(ctx, func() error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit()
	})
}

func ns(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNs(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, v)
}

const itemCols = `i.task_id, i.provider, i.model, i.tenant, i.kind, i.run_id, i.cache_key, i.params, i.state, COALESCE(i.batch_id, ''),
	i.attempts, i.created_at, i.result, i.err, COALESCE(s.input, 0), COALESCE(s.cached_input, 0), COALESCE(s.output, 0),
	COALESCE(s.micros, 0), COALESCE(s.mode, '')`

const itemFrom = ` FROM switchyard_pbatch_items i LEFT JOIN switchyard_spend s ON s.task_id = i.task_id `

type scanner interface{ Scan(...any) error }

func scanItem(r scanner) (*providerbatch.StoredItem, error) {
	var it providerbatch.StoredItem
	var state, mode string
	var created int64
	var cost int64
	var params, result []byte
	err := r.Scan(&it.TaskID, &it.Provider, &it.Model, &it.Tenant, &it.Kind, &it.Run, &it.CacheKey, &params, &state, &it.Batch,
		&it.Attempts, &created, &result, &it.Err, &it.Usage.Input, &it.Usage.CachedInput, &it.Usage.Output, &cost, &mode)
	if err != nil {
		return nil, err
	}
	it.Params, it.Result = params, result
	it.State, it.Mode, it.CreatedAt, it.Cost = providerbatch.ItemState(state), spend.Mode(mode), fromNs(created), spend.Micros(cost)
	return &it, nil
}

// Item implements providerbatch.Store.
func (s *Store) Item(ctx context.Context, taskID string) (*providerbatch.StoredItem, error) {
	it, err := scanItem(s.db.QueryRowContext(ctx, s.q(`SELECT `+itemCols+itemFrom+`WHERE i.task_id = ?`), taskID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return it, err
}

// checkWindows returns a *spend.CapError when reserving est for tenant at
// now would cross a window (not counting exclude's own reservation).
func (s *Store) checkWindows(ctx context.Context, tx *sql.Tx, tenant, exclude string, est spend.Micros, ws []spend.Window, now time.Time) error {
	applies := false
	for _, w := range ws {
		applies = applies || w.Applies(tenant)
	}
	if !applies {
		return nil
	}
	if s.pg {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('switchyard_spend:' || $1))`, tenant); err != nil {
			return err
		}
	}
	for _, w := range ws {
		if !w.Applies(tenant) {
			continue
		}
		start := w.Start(now)
		var spent int64
		if err := tx.QueryRowContext(ctx, s.q(`SELECT COALESCE(SUM(micros), 0) FROM switchyard_spend WHERE tenant = ? AND at >= ? AND at < ? AND task_id <> ?`),
			tenant, ns(start), ns(start.Add(w.Period)), exclude).Scan(&spent); err != nil {
			return err
		}
		if spend.Micros(spent)+est > w.Cap {
			return &spend.CapError{Tenant: tenant, Window: w, Spent: spend.Micros(spent), Estimate: est, Until: start.Add(w.Period)}
		}
	}
	return nil
}

// Add implements providerbatch.Store.
func (s *Store) Add(ctx context.Context, it providerbatch.StoredItem, r providerbatch.Reservation) (*providerbatch.StoredItem, error) {
	var out *providerbatch.StoredItem
	err := s.tx(ctx, func(tx *sql.Tx) error {
		got, err := scanItem(tx.QueryRowContext(ctx, s.q(`SELECT `+itemCols+itemFrom+`WHERE i.task_id = ?`), it.TaskID))
		if err == nil {
			out = got
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if err := s.checkWindows(ctx, tx, it.Tenant, it.TaskID, r.Estimate, r.Windows, r.Now); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO switchyard_pbatch_items (task_id, provider, model, tenant, kind, run_id, cache_key, params, state, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`), it.TaskID, it.Provider, it.Model, it.Tenant, it.Kind, it.Run, it.CacheKey, []byte(it.Params), string(it.State), ns(it.CreatedAt)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO switchyard_spend (task_id, tenant, kind, run_id, provider, model, cache_key, mode, state, micros, at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'reserved', ?, ?)`), it.TaskID, it.Tenant, it.Kind, it.Run, it.Provider, it.Model, it.CacheKey, string(r.Mode), int64(r.Estimate), ns(r.Now)); err != nil {
			return err
		}
		c := it
		c.Mode = r.Mode
		out = &c
		return nil
	})
	return out, err
}

// TakeDirect implements providerbatch.Store.
func (s *Store) TakeDirect(ctx context.Context, taskID string, r providerbatch.Reservation) (bool, error) {
	ok := false
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var tenant string
		err := tx.QueryRowContext(ctx, s.q(`SELECT tenant FROM switchyard_pbatch_items WHERE task_id = ? AND state = 'pending'`), taskID).Scan(&tenant)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.checkWindows(ctx, tx, tenant, taskID, r.Estimate, r.Windows, r.Now); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE switchyard_pbatch_items SET state = 'direct' WHERE task_id = ?`), taskID); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE switchyard_spend SET mode = 'direct', micros = ? WHERE task_id = ?`), int64(r.Estimate), taskID); err != nil {
			return err
		}
		ok = true
		return nil
	})
	return ok, err
}

func (s *Store) settle(ctx context.Context, tx *sql.Tx, o providerbatch.Outcome, extra string, args ...any) error {
	a := append([]any{string(o.State), []byte(o.Result), o.Err, o.TaskID}, args...)
	res, err := tx.ExecContext(ctx, s.q(`UPDATE switchyard_pbatch_items SET state = ?, result = ?, err = ? WHERE task_id = ?`+extra), a...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil
	}
	cost := o.Cost
	if o.State != providerbatch.Done {
		cost, o.Usage = 0, spend.Usage{}
	}
	_, err = tx.ExecContext(ctx, s.q(`UPDATE switchyard_spend SET state = 'settled', input = ?, cached_input = ?, output = ?, micros = ? WHERE task_id = ?`),
		o.Usage.Input, o.Usage.CachedInput, o.Usage.Output, int64(cost), o.TaskID)
	return err
}

// Settle implements providerbatch.Store.
func (s *Store) Settle(ctx context.Context, o providerbatch.Outcome, now time.Time) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		return s.settle(ctx, tx, o, ` AND state = 'direct'`)
	})
}

// Lease implements providerbatch.Store.
func (s *Store) Lease(ctx context.Context, provider, holder string, now, until time.Time) (bool, error) {
	ok := false
	err := s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q(`INSERT INTO switchyard_pbatch_leases (provider, holder, until) VALUES (?, ?, ?)
			ON CONFLICT (provider) DO UPDATE SET holder = excluded.holder, until = excluded.until
			WHERE switchyard_pbatch_leases.until <= ? OR switchyard_pbatch_leases.holder = excluded.holder`), provider, holder, ns(until), ns(now))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		ok = n > 0
		return err
	})
	return ok, err
}

// PendingStats implements providerbatch.Store.
func (s *Store) PendingStats(ctx context.Context, provider string) (int, time.Time, error) {
	var n int
	var oldest int64
	err := s.db.QueryRowContext(ctx, s.q(`SELECT COUNT(*), COALESCE(MIN(created_at), 0) FROM switchyard_pbatch_items WHERE provider = ? AND state = 'pending'`), provider).Scan(&n, &oldest)
	return n, fromNs(oldest), err
}

// Claim implements providerbatch.Store.
func (s *Store) Claim(ctx context.Context, provider, localID string, max int, now time.Time) ([]providerbatch.StoredItem, error) {
	var out []providerbatch.StoredItem
	err := s.tx(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO switchyard_pbatches (local_id, provider, state, created_at) VALUES (?, ?, 'submitting', ?)`), localID, provider, ns(now)); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, s.q(`UPDATE switchyard_pbatch_items SET state = 'batched', batch_id = ? WHERE task_id IN (
			SELECT task_id FROM switchyard_pbatch_items WHERE provider = ? AND state = 'pending' ORDER BY created_at, task_id LIMIT ?)`), localID, provider, max)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE switchyard_pbatches SET items = ? WHERE local_id = ?`), n, localID); err != nil {
			return err
		}
		out, err = s.batchItems(ctx, tx, localID)
		return err
	})
	return out, err
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func (s *Store) batchItems(ctx context.Context, q querier, localID string) ([]providerbatch.StoredItem, error) {
	rows, err := q.QueryContext(ctx, s.q(`SELECT `+itemCols+itemFrom+`WHERE i.batch_id = ? ORDER BY i.cache_key, i.created_at, i.task_id`), localID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []providerbatch.StoredItem
	for rows.Next() {
		it, err := scanItem(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *it)
	}
	return out, rows.Err()
}

// BatchItems implements providerbatch.Store.
func (s *Store) BatchItems(ctx context.Context, localID string) ([]providerbatch.StoredItem, error) {
	return s.batchItems(ctx, s.db, localID)
}

// Submitted implements providerbatch.Store.
func (s *Store) Submitted(ctx context.Context, localID, providerID string, nextPoll time.Time) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q(`UPDATE switchyard_pbatches SET state = 'submitted', provider_id = ?, next_poll = ? WHERE local_id = ? AND state = 'submitting'`),
			providerID, ns(nextPoll), localID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("sqlstore: batch %s (provider %s) was released while it was submitted: its items may be in two batches", localID, providerID)
		}
		return nil
	})
}

// Release implements providerbatch.Store.
func (s *Store) Release(ctx context.Context, localID string) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE switchyard_pbatch_items SET state = 'pending', batch_id = NULL WHERE batch_id = ? AND state = 'batched'`), localID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, s.q(`DELETE FROM switchyard_pbatches WHERE local_id = ? AND state = 'submitting'`), localID)
		return err
	})
}

// Open implements providerbatch.Store.
func (s *Store) Open(ctx context.Context, provider string) ([]providerbatch.Batch, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT local_id, provider, provider_id, state, items, created_at, next_poll FROM switchyard_pbatches
		WHERE provider = ? AND state <> 'closed' ORDER BY created_at, local_id`), provider)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []providerbatch.Batch
	for rows.Next() {
		var b providerbatch.Batch
		var state string
		var created, next int64
		if err := rows.Scan(&b.LocalID, &b.Provider, &b.ProviderID, &state, &b.Items, &created, &next); err != nil {
			return nil, err
		}
		b.State, b.CreatedAt, b.NextPoll = providerbatch.BatchState(state), fromNs(created), fromNs(next)
		out = append(out, b)
	}
	return out, rows.Err()
}

// Poll implements providerbatch.Store.
func (s *Store) Poll(ctx context.Context, localID string, next time.Time) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.q(`UPDATE switchyard_pbatches SET next_poll = ? WHERE local_id = ?`), ns(next), localID)
		return err
	})
}

// Finish implements providerbatch.Store.
func (s *Store) Finish(ctx context.Context, localID string, outcomes []providerbatch.Outcome, now time.Time) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q(`UPDATE switchyard_pbatches SET state = 'closed', closed_at = ? WHERE local_id = ? AND state = 'submitted'`), ns(now), localID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil // closed already (a concurrent pump after a lost lease)
		}
		for _, o := range outcomes {
			if o.State == providerbatch.Pending {
				if _, err := tx.ExecContext(ctx, s.q(`UPDATE switchyard_pbatch_items SET state = 'pending', batch_id = NULL, attempts = attempts + 1, err = ?
					WHERE task_id = ? AND batch_id = ? AND state = 'batched'`), o.Err, o.TaskID, localID); err != nil {
					return err
				}
				continue
			}
			if err := s.settle(ctx, tx, o, ` AND batch_id = ? AND state = 'batched'`, localID); err != nil {
				return err
			}
		}
		return nil
	})
}

var _ limits.SpendStore = (*Store)(nil)

// ReserveSpend implements limits.SpendStore: the reservation is a row of
// switchyard_spend (task_id is the reservation's ID, run_id the task's,
// mode direct), checked against the tenant's windows in the same
// transaction as the batch lane's reservations, so one window caps both.
func (s *Store) ReserveSpend(ctx context.Context, r limits.SpendReservation) error {
	if r.ID == "" || r.Estimate < 0 {
		return broker.Invalidf("sqlstore: ReserveSpend needs an ID and a non-negative estimate")
	}
	return s.tx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM switchyard_spend WHERE task_id = ?`), r.ID).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		if err := s.checkWindows(ctx, tx, r.Tenant, r.ID, r.Estimate, r.Windows, r.Now); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO switchyard_spend (task_id, tenant, kind, run_id, provider, model, cache_key, mode, state, micros, at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'reserved', ?, ?)`), r.ID, r.Tenant, r.Kind, r.TaskID, r.Provider, r.Model, r.CacheKey, string(spend.Direct), int64(r.Estimate), ns(r.Now))
		return err
	})
}

// SettleSpend implements limits.SpendStore. Zero usage and cost release
// the reservation (its row is deleted).
func (s *Store) SettleSpend(ctx context.Context, id string, u spend.Usage, cost spend.Micros) error {
	if err := u.Validate(); err != nil {
		return broker.Invalidf("sqlstore: %v", err)
	}
	return s.tx(ctx, func(tx *sql.Tx) error {
		if u == (spend.Usage{}) && cost == 0 { // released: the call was not made
			_, err := tx.ExecContext(ctx, s.q(`DELETE FROM switchyard_spend WHERE task_id = ? AND state = 'reserved'`), id)
			return err
		}
		_, err := tx.ExecContext(ctx, s.q(`UPDATE switchyard_spend SET state = 'settled', input = ?, cached_input = ?, output = ?, micros = ? WHERE task_id = ? AND state = 'reserved'`),
			u.Input, u.CachedInput, u.Output, int64(cost), id)
		return err
	})
}
