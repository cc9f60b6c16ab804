package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

var _ ledger.Servers = (*Store)(nil)

// RegisterServer implements front.Backend.
func (s backend) RegisterServer(ctx context.Context, op string, sv ledger.Server, lanes string) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO ledger_servers
		(id, host, pid, lanes, slots, busy, version, started, heartbeat, interval_ns)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, lanes = excluded.lanes,
			slots = excluded.slots, busy = excluded.busy, version = excluded.version,
			started = excluded.started, heartbeat = excluded.heartbeat, interval_ns = excluded.interval_ns`,
		sv.ID, sv.Host, sv.PID, lanes, sv.Slots, sv.Busy, sv.Version, sv.Started, s.opts.Now(), int64(sv.Interval))
	return classify(op, err, true)
}

// RemoveServer implements front.Backend.
func (s backend) RemoveServer(ctx context.Context, op string, id string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM ledger_servers WHERE id = $1`, id)
	return classify(op, err, true)
}

// PruneServers implements front.Backend.
func (s backend) PruneServers(ctx context.Context, op string, before time.Time) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM ledger_servers WHERE heartbeat < $1`, before)
	if err != nil {
		return 0, classify(op, err, true)
	}
	return int(tag.RowsAffected()), nil
}

// ListServers implements front.Backend, by ID.
func (s backend) ListServers(ctx context.Context, op string) ([]ledger.Server, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, host, pid, lanes, slots, busy, version, started, heartbeat, interval_ns
		FROM ledger_servers ORDER BY id`)
	if err != nil {
		return nil, classify(op, err, false)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.Server, error) {
		var sv ledger.Server
		var lanes string
		var iv int64
		err := r.Scan(&sv.ID, &sv.Host, &sv.PID, &lanes, &sv.Slots, &sv.Busy, &sv.Version, &sv.Started, &sv.Heartbeat, &iv)
		sv.Lanes, sv.Interval = store.ServerLanes(lanes), time.Duration(iv)
		return sv, err
	})
	return out, classify(op, err, false)
}
