package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

var _ broker.SequencerSource = (*Store)(nil)

// SeqAssign implements front.Backend.
func (q backend) SeqAssign(ctx context.Context, op, lane, key string) (int64, error) {
	now := q.opts.Now()
	base := store.SeqBase(now)
	var n int64
	err := q.queryRow(ctx, `INSERT INTO ledger_order_keys (lane, okey, assigned, next_start, progress) VALUES ($1, $2, $3, $3, $4)
		ON CONFLICT (lane, okey) DO UPDATE SET assigned = ledger_order_keys.assigned + 1,
			progress = CASE WHEN ledger_order_keys.next_start > ledger_order_keys.assigned THEN EXCLUDED.progress ELSE ledger_order_keys.progress END
		RETURNING assigned`, func(r pgx.Row) error { return r.Scan(&n) }, lane, key, base, now)
	return n, classify(op, err, true)
}

// seqTx is store.SeqTx on a transaction holding the key's row.
type seqTx struct {
	tx        pgx.Tx
	lane, key string
}

func (t seqTx) Load(ctx context.Context) (store.SeqKey, bool, error) {
	var k store.SeqKey
	err := t.tx.QueryRow(ctx, `SELECT assigned, next_start, running, until, progress, started FROM ledger_order_keys
		WHERE lane = $1 AND okey = $2 FOR UPDATE`, t.lane, t.key).Scan(&k.Assigned, &k.NextStart, &k.Running, &k.Until, &k.Progress, &k.Started)
	if errors.Is(err, pgx.ErrNoRows) {
		return k, false, nil
	}
	return k, err == nil, err
}

func (t seqTx) Save(ctx context.Context, k *store.SeqKey) error {
	_, err := t.tx.Exec(ctx, `UPDATE ledger_order_keys SET next_start = $3, running = $4, until = $5, progress = $6, started = $7
		WHERE lane = $1 AND okey = $2`, t.lane, t.key, k.NextStart, k.Running, k.Until, k.Progress, k.Started)
	return err
}

func (t seqTx) IsDone(ctx context.Context, seq int64) (bool, error) {
	var one int
	err := t.tx.QueryRow(ctx, `SELECT 1 FROM ledger_order_done WHERE lane = $1 AND okey = $2 AND seq = $3`, t.lane, t.key, seq).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (t seqTx) MarkDone(ctx context.Context, seq int64) error {
	_, err := t.tx.Exec(ctx, `INSERT INTO ledger_order_done (lane, okey, seq) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, t.lane, t.key, seq)
	return err
}

func (t seqTx) TakeDone(ctx context.Context, seq int64) (bool, error) {
	tag, err := t.tx.Exec(ctx, `DELETE FROM ledger_order_done WHERE lane = $1 AND okey = $2 AND seq = $3`, t.lane, t.key, seq)
	return err == nil && tag.RowsAffected() > 0, err
}

// SeqAcquire implements front.Backend.
func (q backend) SeqAcquire(ctx context.Context, op, lane, key string, seq int64, until time.Time) (broker.Grant, int64, error) {
	var (
		g     broker.Grant
		ahead int64
	)
	err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) (err error) {
		g, ahead, err = store.SeqAcquireTx(ctx, seqTx{tx, lane, key}, seq, until, q.opts.Now(), q.opts.OrderingStall)
		return err
	})
	if err != nil {
		return 0, 0, classify(op, err, true)
	}
	return g, ahead, nil
}

// SeqRelease implements front.Backend.
func (q backend) SeqRelease(ctx context.Context, op, lane, key string, seq int64, done bool) error {
	err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		return store.SeqReleaseTx(ctx, seqTx{tx, lane, key}, seq, done, q.opts.Now())
	})
	return classify(op, err, true)
}
