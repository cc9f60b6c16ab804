package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

var _ broker.SequencerSource = (*Store)(nil)

// SeqAssign implements front.Backend.
func (q backend) SeqAssign(ctx context.Context, op, lane, key string) (int64, error) {
	var n int64
	err := q.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		now := q.opts.Now()
		base := store.SeqBase(now)
		return q.txQueryRow(ctx, tx, `INSERT INTO ledger_order_keys (lane, okey, assigned, next_start, progress) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (lane, okey) DO UPDATE SET assigned = ledger_order_keys.assigned + 1,
				progress = CASE WHEN ledger_order_keys.next_start > ledger_order_keys.assigned THEN excluded.progress ELSE ledger_order_keys.progress END
			RETURNING assigned`, lane, key, base, base, now.UnixNano()).Scan(&n)
	})
	return n, err
}

// seqTx is store.SeqTx on the writer's transaction.
type seqTx struct {
	s         *Store
	tx        *sql.Tx
	lane, key string
}

func (t seqTx) Load(ctx context.Context) (store.SeqKey, bool, error) {
	var k store.SeqKey
	var until, progress int64
	err := t.s.txQueryRow(ctx, t.tx, `SELECT assigned, next_start, running, until, progress, started FROM ledger_order_keys WHERE lane = ? AND okey = ?`,
		t.lane, t.key).Scan(&k.Assigned, &k.NextStart, &k.Running, &until, &progress, &k.Started)
	if errors.Is(err, sql.ErrNoRows) {
		return k, false, nil
	}
	k.Until, k.Progress = time.Unix(0, until), time.Unix(0, progress)
	return k, err == nil, err
}

func (t seqTx) Save(ctx context.Context, k *store.SeqKey) error {
	_, err := t.s.txExec(ctx, t.tx, `UPDATE ledger_order_keys SET next_start = ?, running = ?, until = ?, progress = ?, started = ? WHERE lane = ? AND okey = ?`,
		k.NextStart, k.Running, k.Until.UnixNano(), k.Progress.UnixNano(), k.Started, t.lane, t.key)
	return err
}

func (t seqTx) IsDone(ctx context.Context, seq int64) (bool, error) {
	var one int
	err := t.s.txQueryRow(ctx, t.tx, `SELECT 1 FROM ledger_order_done WHERE lane = ? AND okey = ? AND seq = ?`, t.lane, t.key, seq).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (t seqTx) MarkDone(ctx context.Context, seq int64) error {
	_, err := t.s.txExec(ctx, t.tx, `INSERT INTO ledger_order_done (lane, okey, seq) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`, t.lane, t.key, seq)
	return err
}

func (t seqTx) TakeDone(ctx context.Context, seq int64) (bool, error) {
	res, err := t.s.txExec(ctx, t.tx, `DELETE FROM ledger_order_done WHERE lane = ? AND okey = ? AND seq = ?`, t.lane, t.key, seq)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// SeqAcquire implements front.Backend.
func (q backend) SeqAcquire(ctx context.Context, op, lane, key string, seq int64, until time.Time) (broker.Grant, int64, error) {
	var (
		g     broker.Grant
		ahead int64
	)
	err := q.write(ctx, op, func(ctx context.Context, tx *sql.Tx) (err error) {
		g, ahead, err = store.SeqAcquireTx(ctx, seqTx{q.Store, tx, lane, key}, seq, until, q.opts.Now(), q.opts.OrderingStall)
		return err
	})
	return g, ahead, err
}

// SeqRelease implements front.Backend.
func (q backend) SeqRelease(ctx context.Context, op, lane, key string, seq int64, done bool) error {
	return q.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		return store.SeqReleaseTx(ctx, seqTx{q.Store, tx, lane, key}, seq, done, q.opts.Now())
	})
}
