package front

import (
	"context"
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
func (f *Front) Sequencer() broker.Sequencer { return f.seq }

// seqFront is the Sequencer of a Front.
type seqFront struct{ f *Front }

var _ broker.SequencerPosition = seqFront{}

// Assign implements broker.Sequencer.
func (q seqFront) Assign(ctx context.Context, lane, key string) (int64, error) {
	op := q.f.op("sequence assign")
	if err := store.SeqArgs(op, lane, key, 0, false); err != nil {
		return 0, err
	}
	if err := q.f.check(op); err != nil {
		return 0, err
	}
	return q.f.b.SeqAssign(ctx, op, lane, key)
}

// Acquire implements broker.Sequencer.
func (q seqFront) Acquire(ctx context.Context, lane, key string, seq int64, until time.Time) (broker.Grant, error) {
	g, _, err := q.AcquirePosition(ctx, lane, key, seq, until)
	return g, err
}

// AcquirePosition implements broker.SequencerPosition.
func (q seqFront) AcquirePosition(ctx context.Context, lane, key string, seq int64, until time.Time) (broker.Grant, int64, error) {
	op := q.f.op("sequence acquire")
	if err := store.SeqArgs(op, lane, key, seq, true); err != nil {
		return 0, 0, err
	}
	if err := q.f.check(op); err != nil {
		return 0, 0, err
	}
	return q.f.b.SeqAcquire(ctx, op, lane, key, seq, until)
}

// Release implements broker.Sequencer.
func (q seqFront) Release(ctx context.Context, lane, key string, seq int64, done bool) error {
	op := q.f.op("sequence release")
	if err := store.SeqArgs(op, lane, key, seq, true); err != nil {
		return err
	}
	if err := q.f.check(op); err != nil {
		return err
	}
	return q.f.b.SeqRelease(ctx, op, lane, key, seq, done)
}
