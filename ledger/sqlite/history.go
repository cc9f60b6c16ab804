package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

var _ ledger.History = (*Store)(nil)

// RecordHistory implements ledger.History, in one write transaction.
func (s *Store) RecordHistory(ctx context.Context, server string, pts []ledger.HistoryPoint) error {
	const op = "sqlite: record history"
	if err := store.History(op, server, pts); err != nil {
		return err
	}
	rows := store.HistoryRows(pts)
	if len(rows) == 0 {
		return nil
	}
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

// ListHistory implements ledger.History: a range scan of the primary key
// (minute first).
func (s *Store) ListHistory(ctx context.Context, since time.Time, lane string) ([]ledger.HistoryPoint, error) {
	const op = "sqlite: list history"
	if err := s.read(op); err != nil {
		return nil, err
	}
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

// PruneHistory implements ledger.History.
func (s *Store) PruneHistory(ctx context.Context, before time.Time) (int, error) {
	const op = "sqlite: prune history"
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
