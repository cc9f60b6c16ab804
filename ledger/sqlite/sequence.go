package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// Sequencer returns the ledger's ordering Sequencer: tasks that share an
// ordering key start in the order it numbered them, one at a time, across
// every process using this database, and a key held by a process that
// died is free again when the holder's lease ends. broker.Broker finds it
// through broker.SequencerSource when the store is its Dedup store, and
// switchyard.NewClient and NewServer hand it to their broker.
func (s *Store) Sequencer() broker.Sequencer { return sqliteSeq{s} }

var (
	_ broker.SequencerSource   = (*Store)(nil)
	_ broker.SequencerPosition = sqliteSeq{}
)

type sqliteSeq struct{ s *Store }

// Assign implements broker.Sequencer.
func (q sqliteSeq) Assign(ctx context.Context, lane, key string) (int64, error) {
	const op = "sqlite: sequence assign"
	if err := store.SeqArgs(op, lane, key, 0, false); err != nil {
		return 0, err
	}
	var n int64
	err := q.s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		now := q.s.opts.Now()
		base := store.SeqBase(now)
		return q.s.txQueryRow(ctx, tx, `INSERT INTO ledger_order_keys (lane, okey, assigned, next_start, progress) VALUES (?, ?, ?, ?, ?)
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

// Acquire implements broker.Sequencer.
func (q sqliteSeq) Acquire(ctx context.Context, lane, key string, seq int64, until time.Time) (broker.Grant, error) {
	g, _, err := q.AcquirePosition(ctx, lane, key, seq, until)
	return g, err
}

// AcquirePosition implements broker.SequencerPosition.
func (q sqliteSeq) AcquirePosition(ctx context.Context, lane, key string, seq int64, until time.Time) (broker.Grant, int64, error) {
	const op = "sqlite: sequence acquire"
	if err := store.SeqArgs(op, lane, key, seq, true); err != nil {
		return 0, 0, err
	}
	var (
		g     broker.Grant
		ahead int64
	)
	err := q.s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) (err error) {
		g, ahead, err = store.SeqAcquireTx(ctx, seqTx{q.s, tx, lane, key}, seq, until, q.s.opts.Now(), q.s.opts.OrderingStall)
		return err
	})
	return g, ahead, err
}

// Release implements broker.Sequencer.
func (q sqliteSeq) Release(ctx context.Context, lane, key string, seq int64, done bool) error {
	const op = "sqlite: sequence release"
	if err := store.SeqArgs(op, lane, key, seq, true); err != nil {
		return err
	}
	return q.s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		return store.SeqReleaseTx(ctx, seqTx{q.s, tx, lane, key}, seq, done, q.s.opts.Now())
	})
}
