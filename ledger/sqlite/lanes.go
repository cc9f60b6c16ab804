package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
)

var _ ledger.LaneControls = (*Store)(nil)

// SetLanePaused implements front.Backend. Pausing a paused lane keeps
// the first pause's actor and time; resuming a lane that is not paused
// does nothing. A call that changes the lane's state appends a lane event
// in the same transaction.
func (s backend) SetLanePaused(ctx context.Context, op, lane string, paused bool, actor string) error {
	return s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		now := s.opts.Now().UnixNano()
		var res sql.Result
		var err error
		if paused {
			res, err = s.txExec(ctx, tx, `INSERT INTO ledger_lane_pauses (lane, actor, since) VALUES (?, ?, ?)
				ON CONFLICT (lane) DO NOTHING`, lane, actor, now)
		} else {
			res, err = s.txExec(ctx, tx, `DELETE FROM ledger_lane_pauses WHERE lane = ?`, lane)
		}
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil || n == 0 {
			return err // no change, no event
		}
		_, err = s.txExec(ctx, tx, `INSERT INTO ledger_lane_events (lane, actor, paused, at) VALUES (?, ?, ?, ?)`,
			lane, actor, paused, now)
		return err
	})
}

// LaneEvents implements front.Backend, newest first.
func (s backend) LaneEvents(ctx context.Context, op, lane string, limit int) ([]ledger.LaneEvent, error) {
	var (
		rows *sql.Rows
		err  error
	)
	if lane == "" {
		rows, err = s.rQuery(ctx, `SELECT lane, actor, paused, at FROM ledger_lane_events ORDER BY seq DESC LIMIT ?`, limit)
	} else {
		rows, err = s.rQuery(ctx, `SELECT lane, actor, paused, at FROM ledger_lane_events WHERE lane = ? ORDER BY seq DESC LIMIT ?`, lane, limit)
	}
	if err != nil {
		return nil, s.classify(op, err)
	}
	defer rows.Close()
	var out []ledger.LaneEvent
	for rows.Next() {
		var e ledger.LaneEvent
		var at int64
		if err := rows.Scan(&e.Lane, &e.Actor, &e.Paused, &at); err != nil {
			return nil, s.classify(op, err)
		}
		e.At = time.Unix(0, at)
		out = append(out, e)
	}
	return out, s.classify(op, rows.Err())
}

// PausedLanes implements front.Backend, ordered by lane name.
func (s backend) PausedLanes(ctx context.Context, op string) ([]ledger.LanePause, error) {
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
