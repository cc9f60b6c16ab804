package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

var _ ledger.LaneControls = (*Store)(nil)

// SetLanePaused implements ledger.LaneControls. Pausing a paused lane keeps
// the first pause's actor and time; resuming a lane that is not paused
// does nothing.
func (s *Store) SetLanePaused(ctx context.Context, lane string, paused bool, actor string) error {
	const op = "sqlite: set lane paused"
	if err := store.LanePause(op, lane, actor); err != nil {
		return err
	}
	return s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		if !paused {
			_, err := s.txExec(ctx, tx, `DELETE FROM ledger_lane_pauses WHERE lane = ?`, lane)
			return err
		}
		_, err := s.txExec(ctx, tx, `INSERT INTO ledger_lane_pauses (lane, actor, since) VALUES (?, ?, ?)
			ON CONFLICT (lane) DO NOTHING`, lane, actor, s.opts.Now().UnixNano())
		return err
	})
}

// PausedLanes implements ledger.LaneControls, ordered by lane name.
func (s *Store) PausedLanes(ctx context.Context) ([]ledger.LanePause, error) {
	const op = "sqlite: paused lanes"
	if err := s.read(op); err != nil {
		return nil, err
	}
	rows, err := s.rQuery(ctx, `SELECT lane, actor, since FROM ledger_lane_pauses ORDER BY lane`)
	if err != nil {
		return nil, s.classify(op, err)
	}
	defer rows.Close()
	var out []ledger.LanePause
	for rows.Next() {
		var p ledger.LanePause
		var since int64
		if err := rows.Scan(&p.Lane, &p.Actor, &since); err != nil {
			return nil, s.classify(op, err)
		}
		p.Since = time.Unix(0, since)
		out = append(out, p)
	}
	return out, s.classify(op, rows.Err())
}
