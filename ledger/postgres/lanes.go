package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/ledger"
)

var _ ledger.LaneControls = (*Store)(nil)

// SetLanePaused implements front.Backend. Pausing a paused lane keeps
// the first pause's actor and time (INSERT … ON CONFLICT DO NOTHING);
// resuming a lane that is not paused does nothing. A call that changes the
// lane's state appends a lane event in the same statement.
func (s backend) SetLanePaused(ctx context.Context, op string, lane string, paused bool, actor string) error {
	// One statement: the event is written if and only if the pause row was
	// inserted or deleted. Concurrent calls on one lane serialise on that
	// row, so only the one that changed it writes an event.
	var err error
	if paused {
		_, err = s.pool.Exec(ctx, `WITH p AS (
				INSERT INTO ledger_lane_pauses (lane, actor, since) VALUES ($1, $2, $3)
				ON CONFLICT (lane) DO NOTHING RETURNING lane, actor, since)
			INSERT INTO ledger_lane_events (lane, actor, paused, at) SELECT lane, actor, true, since FROM p`,
			lane, actor, s.opts.Now())
	} else {
		_, err = s.pool.Exec(ctx, `WITH d AS (DELETE FROM ledger_lane_pauses WHERE lane = $1 RETURNING lane)
			INSERT INTO ledger_lane_events (lane, actor, paused, at) SELECT lane, $2, false, $3 FROM d`,
			lane, actor, s.opts.Now())
	}
	return classify(op, err, true)
}

// LaneEvents implements front.Backend, newest first.
func (s backend) LaneEvents(ctx context.Context, op string, lane string, limit int) ([]ledger.LaneEvent, error) {
	var (
		rows pgx.Rows
		err  error
	)
	if lane == "" {
		rows, err = s.pool.Query(ctx, `SELECT lane, actor, paused, at FROM ledger_lane_events ORDER BY seq DESC LIMIT $1`, limit)
	} else {
		rows, err = s.pool.Query(ctx, `SELECT lane, actor, paused, at FROM ledger_lane_events WHERE lane = $1 ORDER BY seq DESC LIMIT $2`, lane, limit)
	}
	if err != nil {
		return nil, classify(op, err, false)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.LaneEvent, error) {
		var e ledger.LaneEvent
		err := r.Scan(&e.Lane, &e.Actor, &e.Paused, &e.At)
		return e, err
	})
	return out, classify(op, err, false)
}

// PausedLanes implements front.Backend, ordered by lane name.
func (s backend) PausedLanes(ctx context.Context, op string) ([]ledger.LanePause, error) {
	rows, err := s.pool.Query(ctx, `SELECT lane, actor, since FROM ledger_lane_pauses ORDER BY lane`)
	if err != nil {
		return nil, classify(op, err, false)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.LanePause, error) {
		var p ledger.LanePause
		err := r.Scan(&p.Lane, &p.Actor, &p.Since)
		return p, err
	})
	return out, classify(op, err, false)
}
