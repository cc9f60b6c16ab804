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
// first: a batch of up to 8 — what concurrent Enqueue calls gather into
// one publish — is written in one statement; a larger one in as few as its
// size's binary digits above 8 (32 rows at a time above that), one VALUES
// row per message. A statement per message cost more in the driver and in
// SQLite's statement setup than the row itself.
var insertSizes = []int{32, 16, 8, 7, 6, 5, 4, 3, 2, 1}

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
	if len(msgs) > 1 {
		d.shared.prepare(ctx, insertQueries(len(msgs))...)
	}
	var alone func(ctx context.Context) error
	if oneStatement(msgs, d.cfg.Reduced) {
		// Written by one INSERT when the writer is idle: SQLite commits a
		// lone statement by itself, atomically, without the transaction's
		// BEGIN and COMMIT through database/sql.
		alone = func(ctx context.Context) error {
			if d.closed.Load() {
				return broker.ClosedError("publish")
			}
			res = make([]broker.PublishResult, len(msgs))
			rows := make([]any, 0, insertColumns*len(msgs))
			now := d.nowNano()
			for i, m := range msgs {
				res[i].ID = m.ID
				rows = appendRow(rows, m, ids[i], now)
			}
			q := insertSQL[len(msgs)]
			if st, err := d.shared.stmt(q); err == nil {
				_, err = st.ExecContext(ctx, rows...)
				return err
			}
			_, err := d.shared.db.ExecContext(ctx, q, rows...)
			return err
		}
	}
	err := d.shared.w.doOr(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res = make([]broker.PublishResult, len(msgs))
		return d.publishTx(ctx, tx, msgs, ids, res)
	}, alone)
	if err != nil {
		return nil, classify("publish", err)
	}
	if len(msgs) == 0 {
		return res, nil
	}
	d.wake(msgs[0].Lane)
	var woken map[string]bool // the other lanes woken; most batches have one
	for _, m := range msgs[1:] {
		if m.Lane != msgs[0].Lane && !woken[m.Lane] {
			if woken == nil {
				woken = map[string]bool{}
			}
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
		rows = appendRow(rows, m, laneIDs[i], now)
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

// appendRow appends m's insertColumns values, in lane laneID at now, to
// rows.
func appendRow(rows []any, m *broker.Message, laneID, now int64) []any {
	var hdr []byte
	if len(m.Headers) > 0 {
		hdr, _ = json.Marshal(m.Headers)
	}
	visible := now
	if rn := nano(m.RunAt); rn > visible {
		visible = rn
	}
	return append(rows, laneID, m.ID, m.Kind, m.Body, hdr, m.Tenant, m.IdempotencyKey, m.OrderingKey,
		nano(m.RunAt), nano(m.EnqueuedAt), m.MaxAttempts, visible)
}

// oneStatement reports whether msgs are written by one INSERT and nothing
// else: a prepared size, and no idempotency key to look up (reduced
// databases do not deduplicate).
func oneStatement(msgs []*broker.Message, reduced bool) bool {
	if len(msgs) == 0 || insertChunk(len(msgs)) != len(msgs) {
		return false
	}
	if !reduced {
		for _, m := range msgs {
			if m.IdempotencyKey != "" {
				return false
			}
		}
	}
	return true
}
