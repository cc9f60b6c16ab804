package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

var _ ledger.History = (*Store)(nil)

// RecordHistory implements front.Backend, in one statement.
func (s backend) RecordHistory(ctx context.Context, op, server string, rows []store.HistoryRow) error {
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

// ListHistory implements front.Backend: a range scan of the primary key
// (minute first).
func (s backend) ListHistory(ctx context.Context, op string, since time.Time, lane string) ([]ledger.HistoryPoint, error) {
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
	return out, classify(op, err, false)
}

// PruneHistory implements front.Backend.
func (s backend) PruneHistory(ctx context.Context, op string, before time.Time) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM ledger_history WHERE minute < $1`, store.UnixMinute(before))
	if err != nil {
		return 0, classify(op, err, true)
	}
	return int(tag.RowsAffected()), nil
}
