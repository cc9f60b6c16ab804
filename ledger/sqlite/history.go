package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

var _ ledger.History = (*Store)(nil)

// RecordHistory implements front.Backend, in one write transaction.
func (s backend) RecordHistory(ctx context.Context, op, server string, rows []store.HistoryRow) error {
	return s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		for _, r := range rows {
			if _, err := s.txExec(ctx, tx, `INSERT INTO ledger_history (minute, lane, server, processed, failed, dead)
				VALUES (?, ?, ?, ?, ?, ?)
				ON CONFLICT (minute, lane, server) DO UPDATE SET processed = excluded.processed,
					failed = excluded.failed, dead = excluded.dead`,
				r.Minute, r.Lane, server, r.Processed, r.Failed, r.Dead); err != nil {
				return err
			}
		}
		return nil
	})
}

// ListHistory implements front.Backend: a range scan of the primary key
// (minute first).
func (s backend) ListHistory(ctx context.Context, op string, since time.Time, lane string) ([]ledger.HistoryPoint, error) {
	rows, err := s.rQuery(ctx, `SELECT minute, lane, SUM(processed), SUM(failed), SUM(dead) FROM ledger_history
		WHERE minute >= ? AND (? = '' OR lane = ?) GROUP BY minute, lane ORDER BY minute, lane`,
		store.UnixMinute(since), lane, lane)
	if err != nil {
		return nil, s.classify(op, err)
	}
	defer rows.Close()
	var out []ledger.HistoryPoint
	for rows.Next() {
		var p ledger.HistoryPoint
		var m int64
		if err := rows.Scan(&m, &p.Lane, &p.Processed, &p.Failed, &p.Dead); err != nil {
			return nil, s.classify(op, err)
		}
		p.Minute = store.MinuteTime(m)
		out = append(out, p)
	}
	return out, s.classify(op, rows.Err())
}

// PruneHistory implements front.Backend.
func (s backend) PruneHistory(ctx context.Context, op string, before time.Time) (int, error) {
	var n int64
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		res, err := s.txExec(ctx, tx, `DELETE FROM ledger_history WHERE minute < ?`, store.UnixMinute(before))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}
