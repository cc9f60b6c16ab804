package embedded

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// ackSizes are the pair counts of the prepared ack statements, smallest
// first: a batch is deleted 32 deliveries a statement, the rest in one of 8
// or 32, padded with NULL pairs, which match no row. The pairs are bound as
// parameters: passing them as one JSON array cost more in json_each and
// json_extract than the deletes.
var ackSizes = []int{8, 32}

// ackSQL holds the ack statement of n (seq, lease_token) pairs at n. The
// parameters are plain "?" (the driver looks a numbered one's name up and
// parses it at every bind). The pairs are a subquery of VALUES: "IN
// (VALUES …)" with a row value scans the whole table; "IN (SELECT … FROM
// (VALUES …))" looks each seq up (TestQueryPlans).
var ackSQL = func() map[int]string {
	m := map[int]string{}
	for _, n := range ackSizes {
		var b strings.Builder
		b.WriteString(`DELETE FROM sy_messages WHERE (seq, lease_token) IN (SELECT column1, column2 FROM (VALUES `)
		for i := range n {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?)")
		}
		b.WriteString(`)) RETURNING seq`)
		m[n] = b.String()
	}
	return m
}()

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
	want := make(map[int64]string, len(ds))
	pairs := make([]any, 0, 2*len(ds))
	for _, dv := range ds {
		h, err := handleOf("ack", dv)
		if err != nil {
			return err
		}
		pairs = append(pairs, h.seq, h.token)
		want[h.seq] = dv.ID
	}
	var qs []string
	for n := len(ds); n > 0; n -= ackChunk(n) {
		qs = append(qs, ackSQL[ackChunk(n)])
	}
	d.shared.prepare(ctx, qs...)
	// The statements' deletions stand even when some deliveries' leases
	// were lost: those are reported after the commit.
	err := d.shared.w.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if d.closed.Load() {
			return broker.ClosedError("ack")
		}
		for rest := pairs; len(rest) > 0; {
			size := ackChunk(len(rest) / 2)
			args := rest[:min(len(rest), 2*size)]
			rest = rest[len(args):]
			if len(args) < 2*size {
				args = append(make([]any, 0, 2*size), args...)
				for len(args) < 2*size {
					args = append(args, nil)
				}
			}
			st, err := d.txStmt(ctx, tx, ackSQL[size])
			if err != nil {
				return err
			}
			if err := ackRows(ctx, st, args, want); err != nil {
				return err
			}
		}
		return nil
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

// ackChunk is the size of the statement for the next n pairs.
func ackChunk(n int) int {
	for _, sz := range ackSizes {
		if sz >= n {
			return sz
		}
	}
	return ackSizes[len(ackSizes)-1]
}

// ackRows runs one ack statement and removes the deleted seqs from want.
func ackRows(ctx context.Context, st *sql.Stmt, args []any, want map[int64]string) error {
	rows, err := st.QueryContext(ctx, args...)
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
