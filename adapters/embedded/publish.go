package embedded

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"

	"github.com/switchyard-dev/switchyard/broker"
)

const insertSQL = `INSERT INTO sy_messages
		(ns, lane, id, kind, body, headers, tenant, idem_key, ord_key, run_at, enqueued_at, max_attempts, visible_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// Publish implements broker.Driver.
func (d *Driver) Publish(ctx context.Context, msgs []*broker.Message) ([]broker.PublishResult, error) {
	if d.closed.Load() {
		return nil, broker.ClosedError("publish")
	}
	var res []broker.PublishResult
	err := d.shared.w.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res = make([]broker.PublishResult, len(msgs))
		return d.publishTx(ctx, tx, msgs, res)
	})
	if err != nil {
		return nil, classify("publish", err)
	}
	woken := map[string]bool{}
	for _, m := range msgs {
		if !woken[m.Lane] {
			woken[m.Lane] = true
			d.wake(m.Lane)
		}
	}
	return res, nil
}

// publishTx writes msgs in tx and sets their results in res.
func (d *Driver) publishTx(ctx context.Context, tx *sql.Tx, msgs []*broker.Message, res []broker.PublishResult) error {
	if d.closed.Load() {
		return broker.ClosedError("publish")
	}
	ins, err := d.txStmt(ctx, tx, insertSQL)
	if err != nil {
		return err
	}
	now := d.nowNano()
	for i, m := range msgs {
		res[i].ID = m.ID
		if m.IdempotencyKey != "" && !d.cfg.Reduced {
			var id string
			var exp int64
			err := tx.QueryRowContext(ctx, `SELECT id, expires_at FROM sy_dedup WHERE ns = ? AND lane = ? AND tenant = ? AND key = ?`,
				d.cfg.Namespace, m.Lane, m.Tenant, m.IdempotencyKey).Scan(&id, &exp)
			if err == nil && exp > now {
				res[i] = broker.PublishResult{ID: id, Duplicate: true}
				continue
			}
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO sy_dedup (ns, lane, tenant, key, id, expires_at) VALUES (?, ?, ?, ?, ?, ?)`,
				d.cfg.Namespace, m.Lane, m.Tenant, m.IdempotencyKey, m.ID, now+int64(d.cfg.DedupWindow)); err != nil {
				return err
			}
		}
		var hdr []byte
		if len(m.Headers) > 0 {
			hdr, _ = json.Marshal(m.Headers)
		}
		visible := now
		if rn := nano(m.RunAt); rn > visible {
			visible = rn
		}
		if _, err := ins.ExecContext(ctx, d.cfg.Namespace, m.Lane, m.ID, m.Kind, m.Body, hdr, m.Tenant, m.IdempotencyKey, m.OrderingKey,
			nano(m.RunAt), nano(m.EnqueuedAt), m.MaxAttempts, visible); err != nil {
			return err
		}
	}
	return nil
}
