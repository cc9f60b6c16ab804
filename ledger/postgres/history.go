package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

var _ ledger.History = (*Store)(nil)

// RecordHistory implements ledger.History, in one statement.
func (s *Store) RecordHistory(ctx context.Context, server string, pts []ledger.HistoryPoint) error {
	const op = "postgres: record history"
	if err := store.History(op, server, pts); err != nil {
		return err
	}
	rows := store.HistoryRows(pts)
	if len(rows) == 0 {
		return nil
	}
	if err := s.check(op); err != nil {
		return err
	}
	mins, lanes := make([]int64, len(rows)), make([]string, len(rows))
	pr, fa, de := make([]int64, len(rows)), make([]int64, len(rows)), make([]int64, len(rows))
	for i, r := range rows {
		mins[i], lanes[i], pr[i], fa[i], de[i] = r.Minute, r.Lane, r.Processed, r.Failed, r.Dead
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO ledger_history (minute, lane, server, processed, failed, dead)
		SELECT m, l, $3, p, f, d FROM unnest($1::bigint[], $2::text[], $4::bigint[], $5::bigint[], $6::bigint[]) AS u(m, l, p, f, d)
		ON CONFLICT (minute, lane, server) DO UPDATE SET processed = excluded.processed,
			failed = excluded.failed, dead = excluded.dead`,
		mins, lanes, server, pr, fa, de)
	return classify(op, err, true)
}

// ListHistory implements ledger.History: a range scan of the primary key
// (minute first).
func (s *Store) ListHistory(ctx context.Context, since time.Time, lane string) ([]ledger.HistoryPoint, error) {
	const op = "postgres: list history"
	if err := s.check(op); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT minute, lane, SUM(processed)::bigint, SUM(failed)::bigint, SUM(dead)::bigint
		FROM ledger_history WHERE minute >= $1 AND ($2 = '' OR lane = $2)
		GROUP BY minute, lane ORDER BY minute, lane`, store.UnixMinute(since), lane)
	if err != nil {
		return nil, classify(op, err, false)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.HistoryPoint, error) {
		var p ledger.HistoryPoint
		var m int64
		err := r.Scan(&m, &p.Lane, &p.Processed, &p.Failed, &p.Dead)
		p.Minute = store.MinuteTime(m)
		return p, err
	})
	if len(out) == 0 {
		out = nil
	}
	return out, classify(op, err, false)
}

// PruneHistory implements ledger.History.
func (s *Store) PruneHistory(ctx context.Context, before time.Time) (int, error) {
	const op = "postgres: prune history"
	if err := s.check(op); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM ledger_history WHERE minute < $1`, store.UnixMinute(before))
	if err != nil {
		return 0, classify(op, err, true)
	}
	return int(tag.RowsAffected()), nil
}
