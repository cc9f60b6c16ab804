package embedded

import (
	"context"
	"database/sql"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// Stats implements broker.Driver.
func (d *Driver) Stats(ctx context.Context, lane string) (broker.Stats, error) {
	if d.closed.Load() {
		return broker.Stats{}, broker.ClosedError("stats")
	}
	laneID, ok, err := d.laneID(ctx, lane, false)
	if err != nil {
		return broker.Stats{}, classify("stats", err)
	}
	if !ok {
		return broker.Stats{Lane: lane}, nil // never published to: empty
	}
	now := d.nowNano()
	var ready, inflight, delayed, dead sql.NullInt64
	var oldest sql.NullInt64
	err = d.db.QueryRowContext(ctx, `SELECT
		SUM(dead = 0 AND visible_at <= ?1),
		SUM(dead = 0 AND visible_at > ?1 AND lease_token <> 0),
		SUM(dead = 0 AND visible_at > ?1 AND lease_token = 0),
		SUM(dead = 1),
		MIN(CASE WHEN dead = 0 AND visible_at <= ?1 THEN visible_at END)
		FROM sy_messages WHERE lane_id = ?2`, now, laneID).Scan(&ready, &inflight, &delayed, &dead, &oldest)
	if err != nil {
		return broker.Stats{}, classify("stats", err)
	}
	s := broker.Stats{Lane: lane, Ready: ready.Int64, InFlight: inflight.Int64, Delayed: delayed.Int64, DeadLettered: dead.Int64}
	if oldest.Valid && oldest.Int64 > 0 {
		s.OldestReady = time.Duration(now - oldest.Int64)
	}
	return s, nil
}

// Lanes lists the lanes that have messages in this namespace, live or dead.
func (d *Driver) Lanes(ctx context.Context) ([]string, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT l.lane FROM sy_lanes l
		WHERE l.ns = ? AND EXISTS (SELECT 1 FROM sy_messages m WHERE m.lane_id = l.id)
		ORDER BY l.lane`, d.cfg.Namespace)
	if err != nil {
		return nil, classify("lanes", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			return nil, classify("lanes", err)
		}
		out = append(out, l)
	}
	return out, classify("lanes", rows.Err())
}
