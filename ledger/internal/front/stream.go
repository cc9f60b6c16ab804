package front

import (
	"context"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// AppendStream implements ledger.StreamStore.
func (f *Front) AppendStream(ctx context.Context, taskID string, attempt int, es []ledger.StreamEntry) (int64, error) {
	op := f.op("append stream")
	if err := store.StreamEntries(op, taskID, attempt, es); err != nil {
		return 0, err
	}
	if err := f.check(op); err != nil {
		return 0, err
	}
	return f.b.AppendStream(ctx, op, taskID, attempt, es)
}

// ReadStream implements ledger.StreamStore.
func (f *Front) ReadStream(ctx context.Context, taskID string, after int64, limit int) ([]ledger.StreamEntry, error) {
	op := f.op("read stream")
	if err := store.ID(op, taskID); err != nil {
		return nil, err
	}
	limit, err := store.StreamLimit(op, after, limit)
	if err != nil {
		return nil, err
	}
	if err := f.check(op); err != nil {
		return nil, err
	}
	out, err := f.b.ReadStream(ctx, op, taskID, after, limit)
	return nilIfEmpty(out), err
}

// LatestProgress implements ledger.StreamStore.
func (f *Front) LatestProgress(ctx context.Context, ids []string) (map[string]ledger.StreamEntry, error) {
	op := f.op("latest progress")
	if err := store.ProgressIDs(op, ids); err != nil {
		return nil, err
	}
	out := map[string]ledger.StreamEntry{}
	if len(ids) == 0 {
		return out, nil
	}
	if err := f.check(op); err != nil {
		return nil, err
	}
	if err := f.b.LatestProgress(ctx, op, ids, out); err != nil {
		return nil, err
	}
	return out, nil
}

// PruneStreams implements ledger.StreamStore.
func (f *Front) PruneStreams(ctx context.Context, before time.Time) (int, error) {
	op := f.op("prune streams")
	if err := f.check(op); err != nil {
		return 0, err
	}
	return f.b.PruneStreams(ctx, op, before)
}

// PutWait implements ledger.StreamStore.
func (f *Front) PutWait(ctx context.Context, w ledger.Wait) (ledger.Wait, bool, error) {
	op := f.op("put wait")
	if err := store.Wait(op, &w); err != nil {
		return ledger.Wait{}, false, err
	}
	if err := f.check(op); err != nil {
		return ledger.Wait{}, false, err
	}
	return f.b.PutWait(ctx, op, w)
}

// GetWait implements ledger.StreamStore.
func (f *Front) GetWait(ctx context.Context, taskID, name string) (ledger.Wait, error) {
	op := f.op("get wait")
	if err := store.ID(op, taskID); err != nil {
		return ledger.Wait{}, err
	}
	if err := store.Key(op, "wait name", name); err != nil {
		return ledger.Wait{}, err
	}
	if err := f.check(op); err != nil {
		return ledger.Wait{}, err
	}
	return f.b.GetWait(ctx, op, taskID, name)
}

// SignalWait implements ledger.StreamStore. A nil payload is stored as
// empty.
func (f *Front) SignalWait(ctx context.Context, t ledger.WaitTarget, payload []byte) (ledger.Wait, error) {
	return f.moveWait(ctx, "signal wait", t, ledger.WaitSignalled, notNil(payload))
}

// ExpireWait implements ledger.StreamStore.
func (f *Front) ExpireWait(ctx context.Context, taskID, name string) (ledger.Wait, error) {
	return f.moveWait(ctx, "expire wait", ledger.WaitTarget{TaskID: taskID, Name: name}, ledger.WaitTimedOut, nil)
}

func (f *Front) moveWait(ctx context.Context, name string, t ledger.WaitTarget, to ledger.WaitState, payload []byte) (ledger.Wait, error) {
	op := f.op(name)
	if err := store.WaitTarget(op, t); err != nil {
		return ledger.Wait{}, err
	}
	if err := f.check(op); err != nil {
		return ledger.Wait{}, err
	}
	return f.b.MoveWait(ctx, op, t, to, payload)
}

// FindWait implements ledger.StreamStore.
func (f *Front) FindWait(ctx context.Context, t ledger.WaitTarget) (ledger.Wait, error) {
	op := f.op("find wait")
	if err := store.WaitTarget(op, t); err != nil {
		return ledger.Wait{}, err
	}
	if err := f.check(op); err != nil {
		return ledger.Wait{}, err
	}
	return f.b.FindWait(ctx, op, t)
}
