package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

var _ ledger.LaneControls = (*Store)(nil)

// SetLanePaused implements ledger.LaneControls. Pausing a paused lane keeps
// the first pause's actor and time (INSERT … ON CONFLICT DO NOTHING);
// resuming a lane that is not paused does nothing.
func (s *Store) SetLanePaused(ctx context.Context, lane string, paused bool, actor string) error {
	const op = "postgres: set lane paused"
	if err := store.LanePause(op, lane, actor); err != nil {
		return err
	}
	if err := s.check(op); err != nil {
		return err
	}
	var err error
	if paused {
		_, err = s.pool.Exec(ctx, `INSERT INTO ledger_lane_pauses (lane, actor, since) VALUES ($1, $2, $3)
			ON CONFLICT (lane) DO NOTHING`, lane, actor, s.opts.Now())
	} else {
		_, err = s.pool.Exec(ctx, `DELETE FROM ledger_lane_pauses WHERE lane = $1`, lane)
	}
	return classify(op, err, true)
}

// PausedLanes implements ledger.LaneControls, ordered by lane name.
func (s *Store) PausedLanes(ctx context.Context) ([]ledger.LanePause, error) {
	const op = "postgres: paused lanes"
	if err := s.check(op); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT lane, actor, since FROM ledger_lane_pauses ORDER BY lane`)
	if err != nil {
		return nil, classify(op, err, false)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.LanePause, error) {
		var p ledger.LanePause
		err := r.Scan(&p.Lane, &p.Actor, &p.Since)
		return p, err
	})
	if len(out) == 0 {
		out = nil
	}
	return out, classify(op, err, false)
}
