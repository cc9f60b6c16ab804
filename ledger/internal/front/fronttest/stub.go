package fronttest

import (
	"context"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/front"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// Stub is a front.Backend that runs no SQL: each method records the op
// it was called with and returns zero values. A store whose backend is a
// Stub shows what its front does alone.
type Stub struct {
	mu  sync.Mutex
	ops []string
}

var _ front.Backend = (*Stub)(nil)

// Ops returns the ops of the calls that reached the stub, and forgets them.
func (b *Stub) Ops() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	ops := b.ops
	b.ops = nil
	return ops
}

func (b *Stub) hit(op string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ops = append(b.ops, op)
}

func (b *Stub) Create(_ context.Context, op string, _ *ledger.Task) (*ledger.Task, bool, error) {
	b.hit(op)
	return nil, false, nil
}

func (b *Stub) CreateMany(_ context.Context, op string, _ []*ledger.Task, _ []ledger.CreateResult) error {
	b.hit(op)
	return nil
}

func (b *Stub) Get(_ context.Context, op, _ string) (*ledger.Task, error) { b.hit(op); return nil, nil }

func (b *Stub) GetByKey(_ context.Context, op, _, _ string) (*ledger.Task, error) {
	b.hit(op)
	return nil, nil
}

func (b *Stub) Transition(_ context.Context, op string, _ ledger.TransitionRequest, _ []ledger.State) (*ledger.Task, error) {
	b.hit(op)
	return nil, nil
}

func (b *Stub) List(_ context.Context, op string, _ ledger.Filter) ([]*ledger.Task, error) {
	b.hit(op)
	return nil, nil
}

func (b *Stub) Prune(_ context.Context, op string, _ time.Time) (int, error) {
	b.hit(op)
	return 0, nil
}

func (b *Stub) StartAttempt(_ context.Context, op string, _ ledger.Attempt) error {
	b.hit(op)
	return nil
}

func (b *Stub) FinishAttempt(_ context.Context, op string, _ ledger.Attempt) error {
	b.hit(op)
	return nil
}

func (b *Stub) Attempts(_ context.Context, op, _ string) ([]ledger.Attempt, error) {
	b.hit(op)
	return nil, nil
}

func (b *Stub) Events(_ context.Context, op, _ string) ([]ledger.Event, error) {
	b.hit(op)
	return nil, nil
}

func (b *Stub) AppendEvent(_ context.Context, op string, _ ledger.Event) error { b.hit(op); return nil }

func (b *Stub) GetStep(_ context.Context, op, _, _ string) ([]byte, bool, error) {
	b.hit(op)
	return nil, false, nil
}

func (b *Stub) PutStep(_ context.Context, op, _, _ string, _ []byte) ([]byte, error) {
	b.hit(op)
	return nil, nil
}

func (b *Stub) BeginEffect(_ context.Context, op, _, _ string, _ int) (ledger.Effect, bool, error) {
	b.hit(op)
	return ledger.Effect{}, false, nil
}

func (b *Stub) SetEffect(_ context.Context, op, _, _ string, _ ledger.EffectState, _ []byte) error {
	b.hit(op)
	return nil
}

func (b *Stub) Effects(_ context.Context, op, _ string) ([]ledger.Effect, error) {
	b.hit(op)
	return nil, nil
}

func (b *Stub) Claim(_ context.Context, op, _, _, _, _ string) (string, bool, error) {
	b.hit(op)
	return "", false, nil
}

func (b *Stub) Release(_ context.Context, op, _, _, _, _ string) error { b.hit(op); return nil }

func (b *Stub) BeginRun(_ context.Context, op string, _ ledger.RunStart) (*ledger.Task, error) {
	b.hit(op)
	return nil, nil
}

func (b *Stub) EndRun(_ context.Context, op string, _ ledger.RunEnd, _ []ledger.State) (*ledger.Task, error) {
	b.hit(op)
	return nil, nil
}

func (b *Stub) RenewLeases(_ context.Context, op string, _ []ledger.Lease, _ time.Duration) ([]string, error) {
	b.hit(op)
	return nil, nil
}

func (b *Stub) SetLanePaused(_ context.Context, op, _ string, _ bool, _ string) error {
	b.hit(op)
	return nil
}

func (b *Stub) LaneEvents(_ context.Context, op, _ string, _ int) ([]ledger.LaneEvent, error) {
	b.hit(op)
	return nil, nil
}

func (b *Stub) PausedLanes(_ context.Context, op string) ([]ledger.LanePause, error) {
	b.hit(op)
	return nil, nil
}

func (b *Stub) RegisterServer(_ context.Context, op string, _ ledger.Server, _ string) error {
	b.hit(op)
	return nil
}

func (b *Stub) RemoveServer(_ context.Context, op, _ string) error { b.hit(op); return nil }

func (b *Stub) PruneServers(_ context.Context, op string, _ time.Time) (int, error) {
	b.hit(op)
	return 0, nil
}

func (b *Stub) ListServers(_ context.Context, op string) ([]ledger.Server, error) {
	b.hit(op)
	return nil, nil
}

func (b *Stub) RecordHistory(_ context.Context, op, _ string, _ []store.HistoryRow) error {
	b.hit(op)
	return nil
}

func (b *Stub) ListHistory(_ context.Context, op string, _ time.Time, _ string) ([]ledger.HistoryPoint, error) {
	b.hit(op)
	return nil, nil
}

func (b *Stub) PruneHistory(_ context.Context, op string, _ time.Time) (int, error) {
	b.hit(op)
	return 0, nil
}

func (b *Stub) Notify(_ context.Context, op string, _ ledger.Note) error { b.hit(op); return nil }

func (b *Stub) WatchTask(_ context.Context, op, _ string) (*ledger.Task, error) {
	b.hit(op)
	return nil, nil
}

func (b *Stub) FollowTask(_ context.Context, op, _ string) (*ledger.Task, error) {
	b.hit(op)
	return nil, nil
}

func (b *Stub) Listen(_ context.Context, op string) (<-chan ledger.Note, error) {
	b.hit(op)
	return nil, nil
}

func (b *Stub) AppendStream(_ context.Context, op, _ string, _ int, _ []ledger.StreamEntry) (int64, error) {
	b.hit(op)
	return 0, nil
}

func (b *Stub) ReadStream(_ context.Context, op, _ string, _ int64, _ int) ([]ledger.StreamEntry, error) {
	b.hit(op)
	return nil, nil
}

func (b *Stub) LatestProgress(_ context.Context, op string, _ []string, _ map[string]ledger.StreamEntry) error {
	b.hit(op)
	return nil
}

func (b *Stub) PruneStreams(_ context.Context, op string, _ time.Time) (int, error) {
	b.hit(op)
	return 0, nil
}

func (b *Stub) PutWait(_ context.Context, op string, _ ledger.Wait) (ledger.Wait, bool, error) {
	b.hit(op)
	return ledger.Wait{}, false, nil
}

func (b *Stub) GetWait(_ context.Context, op, _, _ string) (ledger.Wait, error) {
	b.hit(op)
	return ledger.Wait{}, nil
}

func (b *Stub) MoveWait(_ context.Context, op string, _ ledger.WaitTarget, _ ledger.WaitState, _ []byte) (ledger.Wait, error) {
	b.hit(op)
	return ledger.Wait{}, nil
}

func (b *Stub) FindWait(_ context.Context, op string, _ ledger.WaitTarget) (ledger.Wait, error) {
	b.hit(op)
	return ledger.Wait{}, nil
}

func (b *Stub) CreateTx(_ context.Context, op string, _ any, _ []ledger.OutboxTask, _ []*ledger.Task, _ []ledger.CreateResult, _ time.Time) error {
	b.hit(op)
	return nil
}

func (b *Stub) CreateOutbox(_ context.Context, op string, _ []ledger.OutboxTask, _ []*ledger.Task, _ []ledger.CreateResult, _ time.Time, _ string, _ time.Duration) error {
	b.hit(op)
	return nil
}

func (b *Stub) ClaimOutbox(_ context.Context, op, _ string, _ int, _ time.Duration) ([]ledger.OutboxItem, error) {
	b.hit(op)
	return nil, nil
}

func (b *Stub) DoneOutbox(_ context.Context, op, _ string, _ []string) error { b.hit(op); return nil }

func (b *Stub) ReleaseOutbox(_ context.Context, op, _ string, _ []string, _ time.Duration, _ string) error {
	b.hit(op)
	return nil
}

func (b *Stub) OutboxStats(_ context.Context, op string) (ledger.OutboxStats, error) {
	b.hit(op)
	return ledger.OutboxStats{}, nil
}

func (b *Stub) SchemaVersion(_ context.Context, op string) (int, error) { b.hit(op); return 0, nil }

func (b *Stub) SeqAssign(_ context.Context, op, _, _ string) (int64, error) { b.hit(op); return 0, nil }

func (b *Stub) SeqAcquire(_ context.Context, op, _, _ string, _ int64, _ time.Time) (broker.Grant, int64, error) {
	b.hit(op)
	return 0, 0, nil
}

func (b *Stub) SeqRelease(_ context.Context, op, _, _ string, _ int64, _ bool) error {
	b.hit(op)
	return nil
}
