package embedded

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

const ackSQL = `DELETE FROM sy_messages WHERE (seq, lease_token) IN
	(SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?1))
RETURNING seq`

func handleOf(op string, dv *broker.Delivery) (handle, error) {
	if dv == nil {
		return handle{}, broker.Invalidf("%s: nil delivery", op)
	}
	h, ok := dv.Handle.(handle)
	if !ok {
		return handle{}, broker.Invalidf("%s: delivery %s was not received from the embedded broker", op, dv.ID)
	}
	return h, nil
}

// Ack implements broker.Driver.
func (d *Driver) Ack(ctx context.Context, ds []*broker.Delivery) error {
	if d.closed.Load() {
		return broker.ClosedError("ack")
	}
	if len(ds) == 0 {
		return nil
	}
	// One statement for the whole batch: the (seq, token) pairs travel as a
	// JSON array, so the statement stays prepared whatever the batch size.
	pairs := make([]byte, 0, 40*len(ds))
	pairs = append(pairs, '[')
	want := make(map[int64]string, len(ds))
	for i, dv := range ds {
		h, err := handleOf("ack", dv)
		if err != nil {
			return err
		}
		if i > 0 {
			pairs = append(pairs, ',')
		}
		pairs = fmt.Appendf(pairs, "[%d,%d]", h.seq, h.token)
		want[h.seq] = dv.ID
	}
	pairs = append(pairs, ']')
	st, err := d.shared.stmt(ackSQL)
	if err != nil {
		return classify("ack", err)
	}
	// The statement's deletions stand even when some deliveries' leases
	// were lost: those are reported after the commit.
	err = d.shared.w.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if d.closed.Load() {
			return broker.ClosedError("ack")
		}
		rows, err := tx.StmtContext(ctx, st).QueryContext(ctx, string(pairs))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var seq int64
			if err := rows.Scan(&seq); err != nil {
				return err
			}
			delete(want, seq)
		}
		return rows.Err()
	})
	if err != nil {
		return classify("ack", err)
	}
	if len(want) > 0 {
		lost := make([]string, 0, len(want))
		for _, id := range want {
			lost = append(lost, id)
		}
		return broker.LeaseLostError("ack", strings.Join(lost, ","))
	}
	return nil
}

// exec runs one guarded single-row update and reports ErrLeaseLost when the
// guard matched nothing.
func (d *Driver) exec(ctx context.Context, op string, dv *broker.Delivery, q string, args ...any) error {
	if d.closed.Load() {
		return broker.ClosedError(op)
	}
	r, err := d.db.ExecContext(ctx, q, args...)
	if err != nil {
		return classify(op, err)
	}
	if n, _ := r.RowsAffected(); n == 0 {
		return broker.LeaseLostError(op, dv.ID)
	}
	return nil
}

// Nack implements broker.Driver.
func (d *Driver) Nack(ctx context.Context, dv *broker.Delivery, delay time.Duration) error {
	h, err := handleOf("nack", dv)
	if err != nil {
		return err
	}
	err = d.exec(ctx, "nack", dv, `UPDATE sy_messages SET visible_at = ?, lease_token = 0 WHERE seq = ? AND lease_token = ?`,
		d.nowNano()+int64(delay), h.seq, h.token)
	if err == nil && delay <= d.cfg.Poll {
		d.wake(dv.Lane)
	}
	return err
}

// Release implements broker.Releaser: the message becomes deliverable after
// delay and its next delivery keeps the same attempt number.
func (d *Driver) Release(ctx context.Context, dv *broker.Delivery, delay time.Duration) error {
	h, err := handleOf("release", dv)
	if err != nil {
		return err
	}
	err = d.exec(ctx, "release", dv, `UPDATE sy_messages SET visible_at = ?, lease_token = 0, attempts = MAX(attempts - 1, 0) WHERE seq = ? AND lease_token = ?`,
		d.nowNano()+int64(delay), h.seq, h.token)
	if err == nil && delay <= d.cfg.Poll {
		d.wake(dv.Lane)
	}
	return err
}

// Extend implements broker.Driver.
func (d *Driver) Extend(ctx context.Context, ds []*broker.Delivery, lease time.Duration) error {
	if d.closed.Load() {
		return broker.ClosedError("extend")
	}
	end := d.nowNano() + int64(lease)
	var lost []string
	for _, dv := range ds {
		h, err := handleOf("extend", dv)
		if err != nil {
			return err
		}
		r, err := d.db.ExecContext(ctx, `UPDATE sy_messages SET visible_at = ? WHERE seq = ? AND lease_token = ?`, end, h.seq, h.token)
		if err != nil {
			return classify("extend", err)
		}
		if n, _ := r.RowsAffected(); n == 0 {
			lost = append(lost, dv.ID)
			continue
		}
		dv.LeaseDeadline = fromNano(end)
	}
	if len(lost) > 0 {
		return broker.LeaseLostError("extend", strings.Join(lost, ","))
	}
	return nil
}

// DeadLetter implements broker.Driver.
func (d *Driver) DeadLetter(ctx context.Context, dv *broker.Delivery, dl *broker.DeadLetter) error {
	h, err := handleOf("dead-letter", dv)
	if err != nil {
		return err
	}
	enc, err := broker.EncodeDeadLetter(dl)
	if err != nil {
		return broker.Wrap("dead-letter", broker.Permanent, err)
	}
	return d.exec(ctx, "dead-letter", dv, `UPDATE sy_messages SET dead = 1, lease_token = 0, visible_at = ?, dead_letter = ? WHERE seq = ? AND lease_token = ? AND dead = 0`,
		d.nowNano(), enc, h.seq, h.token)
}

// Replay implements broker.Driver.
func (d *Driver) Replay(ctx context.Context, dv *broker.Delivery) error {
	h, err := handleOf("replay", dv)
	if err != nil {
		return err
	}
	err = d.exec(ctx, "replay", dv, `UPDATE sy_messages SET dead = 0, attempts = 0, lease_token = 0, visible_at = ?, dead_letter = NULL WHERE seq = ? AND lease_token = ? AND dead = 1`,
		d.nowNano(), h.seq, h.token)
	if err == nil {
		d.wake(dv.Lane)
	}
	return err
}
