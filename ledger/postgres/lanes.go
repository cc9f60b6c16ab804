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
// resuming a lane that is not paused does nothing. A call that changes the
// lane's state appends a lane event in the same statement.
func (s *Store) SetLanePaused(ctx context.Context, lane string, paused bool, actor string) error {
	const op = "postgres: set lane paused"
	if err := store.LanePause(op, lane, actor); err != nil {
		return err
	}
	if err := s.check(op); err != nil {
		return err
	}
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

// LaneEvents implements ledger.LaneControls, newest first.
func (s *Store) LaneEvents(ctx context.Context, lane string, limit int) ([]ledger.LaneEvent, error) {
	const op = "postgres: lane events"
	limit, err := store.LaneEvents(op, lane, limit)
	if err != nil {
		return nil, err
	}
	if err := s.check(op); err != nil {
		return nil, err
	}
	var rows pgx.Rows
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
	if len(out) == 0 {
		out = nil
	}
	return out, classify(op, err, false)
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
