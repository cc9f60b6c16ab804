package front

import (
	"context"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// Backend is one store's SQL. The Front method of the same name calls
// each method after validating its arguments and checking the store is
// open; op is the Op its errors carry ("sqlite: get"). The methods are
// exported only because Backend is implemented in other packages: a
// store implements them on an unexported type, never on the Store users
// see.
type Backend interface {
	// Tasks (ledger.Ledger).

	// Create records t, validated by store.CreateTask (ID assigned,
	// queued, timestamps set), or returns the task that holds its ID or
	// idempotency key with created=false.
	Create(ctx context.Context, op string, t *ledger.Task) (got *ledger.Task, created bool, err error)
	// CreateMany records the tasks of ts that are not nil (validated as
	// for Create) and sets their entries of res, which has ts's length;
	// res already holds the validation errors of the nil ones.
	CreateMany(ctx context.Context, op string, ts []*ledger.Task, res []ledger.CreateResult) error
	Get(ctx context.Context, op, id string) (*ledger.Task, error)
	GetByKey(ctx context.Context, op, tenant, key string) (*ledger.Task, error)
	// Transition moves req.ID when its state is one of from (store.Transition).
	Transition(ctx context.Context, op string, req ledger.TransitionRequest, from []ledger.State) (*ledger.Task, error)
	// List lists by f, whose defaults are applied (store.Filter).
	List(ctx context.Context, op string, f ledger.Filter) ([]*ledger.Task, error)
	Prune(ctx context.Context, op string, before time.Time) (int, error)

	// Attempts, events, steps and effects (ledger.Ledger).

	// StartAttempt: a.Start is set.
	StartAttempt(ctx context.Context, op string, a ledger.Attempt) error
	FinishAttempt(ctx context.Context, op string, a ledger.Attempt) error
	Attempts(ctx context.Context, op, taskID string) ([]ledger.Attempt, error)
	Events(ctx context.Context, op, taskID string) ([]ledger.Event, error)
	// AppendEvent: e.At is set.
	AppendEvent(ctx context.Context, op string, e ledger.Event) error
	// GetStep: ok is false when no output is stored.
	GetStep(ctx context.Context, op, taskID, name string) (out []byte, ok bool, err error)
	// PutStep: output is not nil.
	PutStep(ctx context.Context, op, taskID, name string, output []byte) ([]byte, error)
	BeginEffect(ctx context.Context, op, taskID, key string, attempt int) (ledger.Effect, bool, error)
	SetEffect(ctx context.Context, op, taskID, key string, state ledger.EffectState, result []byte) error
	Effects(ctx context.Context, op, taskID string) ([]ledger.Effect, error)

	// Dedup claims (broker.DedupStore).

	// Claim is asked only for a claim this store did not just record
	// with the task's Create.
	Claim(ctx context.Context, op, lane, tenant, key, id string) (string, bool, error)
	Release(ctx context.Context, op, lane, tenant, key, id string) error

	// Runs (ledger.Ledger).

	BeginRun(ctx context.Context, op string, req ledger.RunStart) (*ledger.Task, error)
	// EndRun: from is the states the task may be in for req.Transition
	// (nil without one).
	EndRun(ctx context.Context, op string, req ledger.RunEnd, from []ledger.State) (*ledger.Task, error)
	// RenewLeases: leases is not empty.
	RenewLeases(ctx context.Context, op string, leases []ledger.Lease, d time.Duration) ([]string, error)

	// Lanes, servers, history, notes.

	SetLanePaused(ctx context.Context, op, lane string, paused bool, actor string) error
	// LaneEvents: limit has its default and maximum applied.
	LaneEvents(ctx context.Context, op, lane string, limit int) ([]ledger.LaneEvent, error)
	PausedLanes(ctx context.Context, op string) ([]ledger.LanePause, error)
	// RegisterServer: lanes is sv.Lanes joined for storage.
	RegisterServer(ctx context.Context, op string, sv ledger.Server, lanes string) error
	RemoveServer(ctx context.Context, op, id string) error
	PruneServers(ctx context.Context, op string, before time.Time) (int, error)
	ListServers(ctx context.Context, op string) ([]ledger.Server, error)
	// RecordHistory: rows is not empty (store.HistoryRows).
	RecordHistory(ctx context.Context, op, server string, rows []store.HistoryRow) error
	ListHistory(ctx context.Context, op string, since time.Time, lane string) ([]ledger.HistoryPoint, error)
	PruneHistory(ctx context.Context, op string, before time.Time) (int, error)
	Notify(ctx context.Context, op string, n ledger.Note) error
	Listen(ctx context.Context, op string) (<-chan ledger.Note, error)
	// WatchTask (ledger.Watcher): the task, once marked watched.
	WatchTask(ctx context.Context, op, id string) (*ledger.Task, error)
	// FollowTask (ledger.Watcher): the task, once marked watched
	// whatever its state.
	FollowTask(ctx context.Context, op, id string) (*ledger.Task, error)

	// Streams and waits (ledger.StreamStore).

	AppendStream(ctx context.Context, op, taskID string, attempt int, es []ledger.StreamEntry) (int64, error)
	// ReadStream: limit has its default and maximum applied.
	ReadStream(ctx context.Context, op, taskID string, after int64, limit int) ([]ledger.StreamEntry, error)
	// LatestProgress: ids is not empty; out is the map to fill.
	LatestProgress(ctx context.Context, op string, ids []string, out map[string]ledger.StreamEntry) error
	PruneStreams(ctx context.Context, op string, before time.Time) (int, error)
	PutWait(ctx context.Context, op string, w ledger.Wait) (ledger.Wait, bool, error)
	GetWait(ctx context.Context, op, taskID, name string) (ledger.Wait, error)
	// MoveWait settles the pending wait t to state (ledger.WaitSignalled
	// with a non-nil payload, or ledger.WaitTimedOut with none).
	MoveWait(ctx context.Context, op string, t ledger.WaitTarget, state ledger.WaitState, payload []byte) (ledger.Wait, error)
	FindWait(ctx context.Context, op string, t ledger.WaitTarget) (ledger.Wait, error)

	// The outbox (ledger.Outbox).

	// CreateTx: ts and res as for CreateMany (validated at now), in the
	// caller's transaction txv, whose type and database the backend
	// checks.
	CreateTx(ctx context.Context, op string, txv any, in []ledger.OutboxTask, ts []*ledger.Task, res []ledger.CreateResult, now time.Time) error
	// CreateOutbox: ts and res as for CreateTx; lease is not negative,
	// and owner is "" when lease is 0.
	CreateOutbox(ctx context.Context, op string, in []ledger.OutboxTask, ts []*ledger.Task, res []ledger.CreateResult, now time.Time, owner string, lease time.Duration) error
	ClaimOutbox(ctx context.Context, op, owner string, limit int, lease time.Duration) ([]ledger.OutboxItem, error)
	// DoneOutbox, ReleaseOutbox: taskIDs is not empty; retryIn is not
	// negative.
	DoneOutbox(ctx context.Context, op, owner string, taskIDs []string) error
	ReleaseOutbox(ctx context.Context, op, owner string, taskIDs []string, retryIn time.Duration, lastError string) error
	OutboxStats(ctx context.Context, op string) (ledger.OutboxStats, error)

	SchemaVersion(ctx context.Context, op string) (int, error)

	// The ordering sequencer (broker.SequencerPosition).

	SeqAssign(ctx context.Context, op, lane, key string) (int64, error)
	SeqAcquire(ctx context.Context, op, lane, key string, seq int64, until time.Time) (broker.Grant, int64, error)
	SeqRelease(ctx context.Context, op, lane, key string, seq int64, done bool) error
}
