package embedded

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"

	"github.com/switchyard-dev/switchyard/broker"
)

const insertColumns = 12

// insertSizes are the row counts of the prepared INSERT statements, largest
// first: a batch
// is written in as few statements as its size's binary digits (32 rows at a
// time above that), one VALUES row per message. A statement per message
// cost more in the driver and in SQLite's statement setup than the row
// itself.
var insertSizes = []int{32, 16, 8, 4, 2, 1}

// insertSQL holds the INSERT of n messages at n, for each n of insertSizes.
var insertSQL = func() map[int]string {
	m := map[int]string{}
	for _, n := range insertSizes {
		m[n] = insertSQLOf(n)
	}
	return m
}()

// insertChunk is the size of the next statement for n rows.
func insertChunk(n int) int {
	for _, sz := range insertSizes {
		if sz <= n {
			return sz
		}
	}
	return insertSizes[len(insertSizes)-1]
}

// insertQueries are the statements n rows take.
func insertQueries(n int) []string {
	var qs []string
	for n > 0 {
		sz := insertChunk(n)
		qs = append(qs, insertSQL[sz])
		n -= sz
	}
	return qs
}

func insertSQLOf(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO sy_messages
		(lane_id, id, kind, body, headers, tenant, idem_key, ord_key, run_at, enqueued_at, max_attempts, visible_at)
		VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
	}
	return b.String()
}

// Publish implements broker.Driver.
func (d *Driver) Publish(ctx context.Context, msgs []*broker.Message) ([]broker.PublishResult, error) {
	if d.closed.Load() {
		return nil, broker.ClosedError("publish")
	}
	var res []broker.PublishResult
	// The lanes' ids, before the transaction: a new lane's is written in
	// one of its own.
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		if i > 0 && m.Lane == msgs[i-1].Lane {
			ids[i] = ids[i-1]
			continue
		}
		id, _, err := d.laneID(ctx, m.Lane, true)
		if err != nil {
			return nil, classify("publish", err)
		}
		ids[i] = id
	}
	d.shared.prepare(ctx, insertQueries(len(msgs))...)
	err := d.shared.w.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res = make([]broker.PublishResult, len(msgs))
		return d.publishTx(ctx, tx, msgs, ids, res)
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

// publishTx writes msgs, whose lanes' ids are laneIDs, in tx and sets their
// results in res.
func (d *Driver) publishTx(ctx context.Context, tx *sql.Tx, msgs []*broker.Message, laneIDs []int64, res []broker.PublishResult) error {
	if d.closed.Load() {
		return broker.ClosedError("publish")
	}
	now := d.nowNano()
	// The rows to insert, insertColumns values each, in publish order (the
	// VALUES rows of one statement get increasing seqs in their order).
	rows := make([]any, 0, insertColumns*len(msgs))
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
		rows = append(rows, laneIDs[i], m.ID, m.Kind, m.Body, hdr, m.Tenant, m.IdempotencyKey, m.OrderingKey,
			nano(m.RunAt), nano(m.EnqueuedAt), m.MaxAttempts, visible)
	}
	for len(rows) > 0 {
		size := insertChunk(len(rows) / insertColumns)
		ins, err := d.txStmt(ctx, tx, insertSQL[size])
		if err != nil {
			return err
		}
		if _, err := ins.ExecContext(ctx, rows[:size*insertColumns]...); err != nil {
			return err
		}
		rows = rows[size*insertColumns:]
	}
	return nil
}
