package front

import (
	"context"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// outboxTasks validates in's tasks as CreateMany does.
func (f *Front) outboxTasks(op string, in []ledger.OutboxTask) ([]*ledger.Task, []ledger.CreateResult, time.Time) {
	ts, res, _, now := f.validTasks(op, len(in), func(i int) *ledger.Task { return in[i].Task })
	return ts, res, now
}

// CreateTx implements ledger.Outbox: the tasks are recorded, with their
// outbox rows, in the caller's transaction txv (of a type the store
// takes, on the ledger's database).
func (f *Front) CreateTx(ctx context.Context, txv any, in []ledger.OutboxTask) ([]ledger.CreateResult, error) {
	op := f.op("create in tx")
	if err := f.check(op); err != nil {
		return nil, err
	}
	ts, res, now := f.outboxTasks(op, in)
	if err := f.b.CreateTx(ctx, op, txv, in, ts, res, now); err != nil {
		return nil, err
	}
	return res, nil
}

// CreateOutbox implements ledger.Outbox.
func (f *Front) CreateOutbox(ctx context.Context, in []ledger.OutboxTask, owner string, lease time.Duration) ([]ledger.CreateResult, error) {
	op := f.op("create outbox")
	if lease < 0 {
		return nil, store.Invalid(op, "lease %v is negative", lease)
	}
	if err := f.check(op); err != nil {
		return nil, err
	}
	if lease == 0 {
		owner = ""
	}
	ts, res, now := f.outboxTasks(op, in)
	if err := f.b.CreateOutbox(ctx, op, in, ts, res, now, owner, lease); err != nil {
		return nil, err
	}
	return res, nil
}

// ClaimOutbox implements ledger.Outbox.
func (f *Front) ClaimOutbox(ctx context.Context, owner string, limit int, lease time.Duration) ([]ledger.OutboxItem, error) {
	op := f.op("claim outbox")
	if limit <= 0 || lease <= 0 || owner == "" {
		return nil, store.Invalid(op, "limit %d and lease %v must be positive and owner non-empty", limit, lease)
	}
	if err := f.check(op); err != nil {
		return nil, err
	}
	return f.b.ClaimOutbox(ctx, op, owner, limit, lease)
}

// DoneOutbox implements ledger.Outbox.
func (f *Front) DoneOutbox(ctx context.Context, owner string, taskIDs []string) error {
	op := f.op("done outbox")
	if len(taskIDs) == 0 {
		return nil
	}
	if err := f.check(op); err != nil {
		return err
	}
	return f.b.DoneOutbox(ctx, op, owner, taskIDs)
}

// ReleaseOutbox implements ledger.Outbox. A negative retryIn is 0.
func (f *Front) ReleaseOutbox(ctx context.Context, owner string, taskIDs []string, retryIn time.Duration, lastError string) error {
	op := f.op("release outbox")
	if len(taskIDs) == 0 {
		return nil
	}
	if err := f.check(op); err != nil {
		return err
	}
	return f.b.ReleaseOutbox(ctx, op, owner, taskIDs, max(retryIn, 0), lastError)
}

// OutboxStats implements ledger.Outbox.
func (f *Front) OutboxStats(ctx context.Context) (ledger.OutboxStats, error) {
	op := f.op("outbox stats")
	if err := f.check(op); err != nil {
		return ledger.OutboxStats{}, err
	}
	return f.b.OutboxStats(ctx, op)
}
