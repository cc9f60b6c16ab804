package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

var _ ledger.Servers = (*Store)(nil)

// RegisterServer implements front.Backend.
func (s backend) RegisterServer(ctx context.Context, op string, sv ledger.Server, lanes string) error {
	return s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		_, err := s.txExec(ctx, tx, `INSERT INTO ledger_servers
			(id, host, pid, lanes, slots, busy, version, started, heartbeat, interval_ns)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, lanes = excluded.lanes,
				slots = excluded.slots, busy = excluded.busy, version = excluded.version,
				started = excluded.started, heartbeat = excluded.heartbeat, interval_ns = excluded.interval_ns`,
			sv.ID, sv.Host, sv.PID, lanes, sv.Slots, sv.Busy, sv.Version, sv.Started.UnixNano(),
			s.opts.Now().UnixNano(), int64(sv.Interval))
		return err
	})
}

// RemoveServer implements front.Backend.
func (s backend) RemoveServer(ctx context.Context, op, id string) error {
	return s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		_, err := s.txExec(ctx, tx, `DELETE FROM ledger_servers WHERE id = ?`, id)
		return err
	})
}

// PruneServers implements front.Backend.
func (s backend) PruneServers(ctx context.Context, op string, before time.Time) (int, error) {
	var n int64
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		res, err := s.txExec(ctx, tx, `DELETE FROM ledger_servers WHERE heartbeat < ?`, before.UnixNano())
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// ListServers implements front.Backend, by ID.
func (s backend) ListServers(ctx context.Context, op string) ([]ledger.Server, error) {
	rows, err := s.rQuery(ctx, `SELECT id, host, pid, lanes, slots, busy, version, started, heartbeat, interval_ns
		FROM ledger_servers ORDER BY id`)
	if err != nil {
		return nil, s.classify(op, err)
	}
	defer rows.Close()
	var out []ledger.Server
	for rows.Next() {
		var sv ledger.Server
		var lanes string
		var started, hb, iv int64
		if err := rows.Scan(&sv.ID, &sv.Host, &sv.PID, &lanes, &sv.Slots, &sv.Busy, &sv.Version, &started, &hb, &iv); err != nil {
			return nil, s.classify(op, err)
		}
		sv.Lanes = store.ServerLanes(lanes)
		sv.Started, sv.Heartbeat, sv.Interval = time.Unix(0, started), time.Unix(0, hb), time.Duration(iv)
		out = append(out, sv)
	}
	return out, s.classify(op, rows.Err())
}
