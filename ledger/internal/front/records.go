package front

import (
	"context"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// StartAttempt implements ledger.Ledger. Starting an attempt number that
// is already recorded updates its worker and start time; a zero Start is
// now.
func (f *Front) StartAttempt(ctx context.Context, a ledger.Attempt) error {
	op := f.op("start attempt")
	if err := store.Attempt(op, &a); err != nil {
		return err
	}
	if err := f.check(op); err != nil {
		return err
	}
	if a.Start.IsZero() {
		a.Start = f.now()
	}
	return f.b.StartAttempt(ctx, op, a)
}

// FinishAttempt implements ledger.Ledger. Empty Worker and zero Start keep
// what StartAttempt recorded.
func (f *Front) FinishAttempt(ctx context.Context, a ledger.Attempt) error {
	op := f.op("finish attempt")
	if err := store.Attempt(op, &a); err != nil {
		return err
	}
	if err := f.check(op); err != nil {
		return err
	}
	return f.b.FinishAttempt(ctx, op, a)
}

// Attempts implements ledger.Ledger. An unknown task has no attempts.
func (f *Front) Attempts(ctx context.Context, taskID string) ([]ledger.Attempt, error) {
	op := f.op("attempts")
	if err := store.ID(op, taskID); err != nil {
		return nil, err
	}
	if err := f.check(op); err != nil {
		return nil, err
	}
	out, err := f.b.Attempts(ctx, op, taskID)
	return nilIfEmpty(out), err
}

// Events implements ledger.Ledger. An unknown task has no events.
func (f *Front) Events(ctx context.Context, taskID string) ([]ledger.Event, error) {
	op := f.op("events")
	if err := store.ID(op, taskID); err != nil {
		return nil, err
	}
	if err := f.check(op); err != nil {
		return nil, err
	}
	out, err := f.b.Events(ctx, op, taskID)
	return nilIfEmpty(out), err
}

// AppendEvent implements ledger.Ledger. e.Seq is assigned; a zero e.At is
// now.
func (f *Front) AppendEvent(ctx context.Context, e ledger.Event) error {
	op := f.op("append event")
	if err := store.Event(op, &e); err != nil {
		return err
	}
	if err := f.check(op); err != nil {
		return err
	}
	if e.At.IsZero() {
		e.At = f.now()
	}
	return f.b.AppendEvent(ctx, op, e)
}

// GetStep implements ledger.Ledger. A stored output is never nil.
func (f *Front) GetStep(ctx context.Context, taskID, name string) ([]byte, bool, error) {
	op := f.op("get step")
	if err := stepArgs(op, taskID, name); err != nil {
		return nil, false, err
	}
	if err := f.check(op); err != nil {
		return nil, false, err
	}
	out, ok, err := f.b.GetStep(ctx, op, taskID, name)
	if err != nil || !ok {
		return nil, false, err
	}
	return notNil(out), true, nil
}

// PutStep implements ledger.Ledger: the first output stored for the step
// wins and is returned. A nil output is stored as empty.
func (f *Front) PutStep(ctx context.Context, taskID, name string, output []byte) ([]byte, error) {
	op := f.op("put step")
	if err := stepArgs(op, taskID, name); err != nil {
		return nil, err
	}
	if err := f.check(op); err != nil {
		return nil, err
	}
	stored, err := f.b.PutStep(ctx, op, taskID, name, notNil(output))
	if err != nil {
		return nil, err
	}
	return notNil(stored), nil
}

func stepArgs(op, taskID, name string) error {
	if err := store.ID(op, taskID); err != nil {
		return err
	}
	return store.Key(op, "step name", name)
}

func effectArgs(op, taskID, key string) error {
	if err := store.ID(op, taskID); err != nil {
		return err
	}
	return store.Key(op, "effect key", key)
}

// BeginEffect implements ledger.Ledger.
func (f *Front) BeginEffect(ctx context.Context, taskID, key string, attempt int) (ledger.Effect, bool, error) {
	op := f.op("begin effect")
	if err := effectArgs(op, taskID, key); err != nil {
		return ledger.Effect{}, false, err
	}
	if attempt < 0 {
		return ledger.Effect{}, false, store.Invalid(op, "attempt %d is negative", attempt)
	}
	if err := f.check(op); err != nil {
		return ledger.Effect{}, false, err
	}
	return f.b.BeginEffect(ctx, op, taskID, key, attempt)
}

// SetEffect implements ledger.Ledger. A nil result keeps the stored one;
// a confirmed effect never changes (ledger.ErrConflict).
func (f *Front) SetEffect(ctx context.Context, taskID, key string, state ledger.EffectState, result []byte) error {
	op := f.op("set effect")
	if err := effectArgs(op, taskID, key); err != nil {
		return err
	}
	if err := store.EffectState(op, state); err != nil {
		return err
	}
	if err := f.check(op); err != nil {
		return err
	}
	return f.b.SetEffect(ctx, op, taskID, key, state, result)
}

// Effects implements ledger.Ledger, in the order they were begun.
func (f *Front) Effects(ctx context.Context, taskID string) ([]ledger.Effect, error) {
	op := f.op("effects")
	if err := store.ID(op, taskID); err != nil {
		return nil, err
	}
	if err := f.check(op); err != nil {
		return nil, err
	}
	out, err := f.b.Effects(ctx, op, taskID)
	return nilIfEmpty(out), err
}

// Claim implements broker.DedupStore. A task this store has just created
// with the key is answered without a round trip (store.Claims).
func (f *Front) Claim(ctx context.Context, lane, tenant, key, id string) (string, bool, error) {
	op := f.op("dedup claim")
	if err := store.Dedup(op, lane, tenant, key, id); err != nil {
		return "", false, err
	}
	if err := f.check(op); err != nil {
		return "", false, err
	}
	if f.claims.Take(id, tenant, key) {
		return "", false, nil
	}
	return f.b.Claim(ctx, op, lane, tenant, key, id)
}

// Release implements broker.DedupStore: it forgets the claim when id still
// holds it.
func (f *Front) Release(ctx context.Context, lane, tenant, key, id string) error {
	op := f.op("dedup release")
	if err := store.Dedup(op, lane, tenant, key, id); err != nil {
		return err
	}
	if err := f.check(op); err != nil {
		return err
	}
	return f.b.Release(ctx, op, lane, tenant, key, id)
}

// nilIfEmpty returns nil for an empty list: an empty result is nil on
// every store.
func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

func notNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
