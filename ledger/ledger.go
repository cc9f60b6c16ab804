// Package ledger is the durable record of what happened to every task: its
// state, attempts, memoised step outputs, side effects and an append-only
// event log. The broker carries envelopes that describe work; the ledger
// holds the truth.
//
// # State machine
//
// One table (Allowed) decides every legal transition; every store enforces it
// with a guarded compare-and-set and appends an Event carrying a reason code.
//
//	queued ─► running ─► completed
//	   ▲         │ ├───► retry_wait ─► running
//	   │         │ ├───► dead ─(replay)─► queued
//	   │         │ ├───► failed
//	   │         │ ├───► cancelled
//	   │         │ ├───► awaiting_review ─► queued (approved) | rejected
//	   │         │ └───► awaiting_event ─► queued (signalled) | failed (timed out)
//	   └─────────┘ (returned unstarted on shutdown, or snoozed)
//
// running ─► running is legal: a redelivery after a crashed worker starts a
// new attempt of a task the ledger still shows as running — but only once
// the crashed holder's ledger lease has passed (BeginRun). A holder renews
// its lease (RenewLeases) for as long as its handler runs, so a copy of a
// message, however high its delivery count, never starts a second handler
// beside a live one.
//
// # Optional interfaces
//
// LaneControls stores lane pauses that every process sharing the ledger
// sees, and the history of who paused and resumed each lane (LaneEvents);
// both stores implement it.
//
// Notes (notify.go) is a control channel between the processes sharing
// the ledger, beside the task broker: PostgreSQL LISTEN/NOTIFY, or a
// polled table on SQLite. Every move to a terminal state (or
// awaiting_review) sends a note; the runtime cancels the handlers of
// tasks cancelled while they run by it, and Client.Wait waits on it.
// Both stores implement it; find it with NotesOf.
// Outbox (outbox.go) is the transactional outbox: tasks written in the
// caller's own database transaction (CreateTx) or with a durable row
// before their publish (CreateOutbox), published by relays that claim
// rows by lease. Both stores implement it; OutboxOf finds it through
// WithCodec.
//
// # Stores
//
// ledger/sqlite (pure Go, WAL; the embedded default) and ledger/postgres
// (pgx). Both pass ledger/ledgertest. Open one by DSN with Open after
// importing its package.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// State is a task's state. The values are stable strings stored in the
// database and shown to operators.
type State string

// Task states.
const (
	Queued         State = "queued"
	Running        State = "running"
	RetryWait      State = "retry_wait"
	Completed      State = "completed"
	Failed         State = "failed"
	Dead           State = "dead"
	AwaitingReview State = "awaiting_review"
	Rejected       State = "rejected"
	Cancelled      State = "cancelled"
	// AwaitingEvent: the handler returned AwaitEvent; the task waits
	// durably (no process holds it) for a signal or its timeout.
	AwaitingEvent State = "awaiting_event"
)

// Terminal reports whether no transition leaves s except an operator's
// replay (dead) .
func (s State) Terminal() bool {
	switch s {
	case Completed, Failed, Dead, Rejected, Cancelled:
		return true
	}
	return false
}

// Valid reports whether s is a known state.
func (s State) Valid() bool {
	_, ok := Allowed[s]
	return ok
}

// Allowed is the state machine: Allowed[from] lists the states a task may
// move to from `from`. Stores refuse every other transition with
// ErrConflict.
var Allowed = map[State][]State{
	Queued:         {Running, Cancelled, Dead, AwaitingReview, AwaitingEvent},
	Running:        {Running, Completed, RetryWait, Failed, Dead, Cancelled, AwaitingReview, Queued, AwaitingEvent},
	RetryWait:      {Running, Dead, Cancelled, Queued},
	AwaitingReview: {Queued, Rejected, Cancelled},
	AwaitingEvent:  {Queued, Failed, Cancelled},
	Dead:           {Queued},
	Completed:      {},
	Failed:         {Queued},
	Rejected:       {},
	Cancelled:      {},
}

// CanTransition reports whether from → to is legal.
func CanTransition(from, to State) bool {
	for _, s := range Allowed[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Task is one unit of work as the ledger knows it.
type Task struct {
	ID             string
	Tenant         string
	IdempotencyKey string
	Kind           string
	Lane           string
	OrderingKey    string
	// Args is the encoded task arguments, kept for replay, migration and
	// inspection.
	Args  []byte
	State State
	// Attempt is the number of the latest attempt: attempts started so
	// far. On a queued task that goes back to work after attempts
	// (replayed from the dead letters, approved in review, resumed by an
	// event) it is already the number the next attempt takes, one more
	// than the attempts started; a snooze or a return at shutdown does not
	// spend a number. NextAttempt says which number the next attempt
	// takes, without that ambiguity.
	Attempt     int
	MaxAttempts int
	RunAt       time.Time
	Deadline    time.Time // zero: none
	Metadata    map[string]string
	Result      []byte // the handler's result, once completed
	LastError   string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	// LeaseUntil is when the running attempt's ledger lease ends (zero:
	// no lease, as for every task that is not running). The holder renews
	// it while its handler runs (RenewLeases); another delivery may take
	// the task over (BeginRun) only once it has passed: a holder that is
	// alive is never superseded.
	LeaseUntil time.Time
}

// NextAttempt is the number the task's next attempt takes (when the
// broker's delivery count is not ahead of it): for a queued task its
// Attempt, or 1 when none was started; for one waiting to retry, one more
// than its Attempt; 0 for a task running, parked or finished, which has no
// next attempt lined up. Displays use it to say "next attempt 2" where
// Attempt alone would read as "2 attempts" after one run.
func (t *Task) NextAttempt() int {
	switch t.State {
	case Queued:
		return max(t.Attempt, 1)
	case RetryWait:
		return t.Attempt + 1
	}
	return 0
}

// Attempt is one attempt at running a task.
type Attempt struct {
	TaskID   string
	Number   int
	Worker   string
	Start    time.Time
	Duration time.Duration
	// Outcome is "" while running, then "ok", "retry", "snooze",
	// "permanent", "cancel", "panic", "unknown_outcome", "await_review",
	// "lease_lost", "returned" or "budget".
	Outcome string
	// Class is the error class (broker.Class names, or "panic").
	Class string
	Error string
	Stack string // on panic
}

// Event is one entry of a task's append-only log.
type Event struct {
	TaskID string
	Seq    int64
	At     time.Time
	From   State // "" for creation
	To     State
	Reason string // a stable code, e.g. "enqueued", "attempt_started", "retry", "permanent_error"
	Detail string // free text for people
	Actor  string // who: a worker id, "operator:alice", "reviewer:bob"
}

// EffectState is the state of a recorded side effect.
type EffectState string

// Effect states.
const (
	EffectPending   EffectState = "pending"   // begun, outcome not yet recorded
	EffectConfirmed EffectState = "confirmed" // done; never repeated
	EffectUnknown   EffectState = "unknown"   // the worker died between doing and recording
	EffectFailed    EffectState = "failed"    // tried and known not done; may be tried again
	// EffectWouldDo: a task replayed in sandbox mode reached the effect and
	// deliberately did not perform it. The record says what the task would
	// have done; nothing happened outside.
	EffectWouldDo EffectState = "would_do"
)

// Effect is a recorded side effect of a task, keyed by the handler's key.
type Effect struct {
	TaskID    string
	Key       string
	State     EffectState
	Attempt   int // the attempt that began it
	Result    []byte
	UpdatedAt time.Time
}

// TransitionRequest is a guarded compare-and-set on a task's state.
type TransitionRequest struct {
	ID string
	// From lists the states the task must be in; empty means any state from
	// which To is legal.
	From   []State
	To     State
	Reason string // required: a stable code
	Detail string
	Actor  string
	// Optional updates applied with the transition.
	Attempt   int       // when > 0, sets Task.Attempt
	Result    []byte    // when non-nil, sets Task.Result
	LastError *string   // when non-nil, sets Task.LastError
	RunAt     time.Time // when non-zero, sets Task.RunAt
	// Lane, when non-empty, sets Task.Lane: a dead letter moved to another
	// lane's queue runs there, and the ledger says so.
	Lane string
	// IfAttemptBelow, when > 0, adds a guard: the transition applies only
	// if the task's Attempt is below it (else ErrConflict). The runtime
	// uses it so that of two deliveries of a running task only one with a
	// newer attempt takes it over.
	IfAttemptBelow int
}

// RunStart is BeginRun's request: a delivery of task ID is about to run.
type RunStart struct {
	ID string
	// Attempt is the delivery's attempt count (the broker's). The attempt
	// the run records is the larger of it and the ledger's: the ledger's
	// own after a snooze or a return (which spend none), one past it
	// after a failed attempt or a takeover.
	Attempt int
	// Worker is recorded on the attempt and as the event's actor.
	Worker string
	// Start is the attempt's start time; zero means the store's clock.
	Start time.Time
	// Lease is how long the run holds the task without renewing it
	// (required, > 0). The lease ends at the store's clock plus Lease.
	Lease time.Duration
}

// RunEnd is EndRun's request: how an attempt ended and, optionally, the
// move it makes.
type RunEnd struct {
	// Attempt is the outcome record (TaskID and Number required; as for
	// FinishAttempt, an empty Worker and zero Start keep what BeginRun
	// recorded).
	Attempt Attempt
	// Transition, when not nil, is applied in the same write, guarded as
	// Transition guards it; its ID must be Attempt.TaskID. A task that
	// leaves running loses its lease. Nil records the attempt and gives
	// the lease up (the task stays as it is, for a later delivery to take
	// over at once).
	Transition *TransitionRequest
}

// Lease names a run whose ledger lease RenewLeases extends.
type Lease struct {
	ID      string
	Attempt int
}

// Filter selects tasks for List.
type Filter struct {
	Tenant string // "" = all tenants
	States []State
	Kind   string
	Lane   string
	Limit  int    // default 100, at most 1000
	After  string // page after this task ID (IDs sort by creation time)
}

// Ledger is the contract every store implements. All methods are safe for
// concurrent use and honour ctx. Errors from an unreachable store match
// broker.ErrTransient.
type Ledger interface {
	// Create records t in state queued with an "enqueued" event. When t's
	// (Tenant, IdempotencyKey) is already taken it returns the existing task
	// and created=false, without error. An empty ID is assigned.
	Create(ctx context.Context, t *Task) (task *Task, created bool, err error)
	// CreateMany records ts as Create would, in one transaction (PostgreSQL:
	// one round trip in the common case), and returns one result per task,
	// in order; see CreateResult. A task that fails validation gets its own
	// Err and does not stop the others; a task whose (Tenant,
	// IdempotencyKey) an earlier one in ts or the ledger holds gets that
	// task and Created=false. The error is non-nil only when the call as a
	// whole failed, and then none of ts was recorded.
	CreateMany(ctx context.Context, ts []*Task) ([]CreateResult, error)
	// Get returns the task or ErrNotFound.
	Get(ctx context.Context, id string) (*Task, error)
	// GetByKey returns the task holding (tenant, idempotency key) or
	// ErrNotFound.
	GetByKey(ctx context.Context, tenant, key string) (*Task, error)
	// Transition applies a guarded compare-and-set and appends an event. It
	// returns ErrConflict (with the current state) when the task is not in
	// one of req.From or the move is not in Allowed.
	Transition(ctx context.Context, req TransitionRequest) (*Task, error)
	// List returns tasks matching f, oldest first.
	List(ctx context.Context, f Filter) ([]*Task, error)

	// BeginRun starts a run of a task in one write: it moves the task to
	// running (from queued or retry_wait, or from running when the
	// holder's lease has passed — the holder is gone), sets the attempt
	// number, records the attempt as begun and the lease, and appends the
	// event ("attempt_started", or "lease_expired" for a takeover). When
	// the task cannot run now it returns ErrConflict together with the
	// task as it is (a live holder's LeaseUntil tells when to come back);
	// an unknown task is ErrNotFound.
	BeginRun(ctx context.Context, req RunStart) (*Task, error)
	// EndRun records an attempt's outcome and applies its transition in
	// one write. The attempt is recorded even when the transition is
	// refused (ErrConflict, with the task as it is).
	EndRun(ctx context.Context, req RunEnd) (*Task, error)
	// RenewLeases extends the leases of running tasks to the store's
	// clock plus d, in one write, and returns the IDs whose run is no
	// longer theirs (the task left running or a newer attempt holds it):
	// their holders must stop.
	RenewLeases(ctx context.Context, leases []Lease, d time.Duration) (lost []string, err error)

	// StartAttempt records attempt a.Number as begun.
	StartAttempt(ctx context.Context, a Attempt) error
	// FinishAttempt records the outcome of an attempt begun earlier (it
	// creates the record if StartAttempt never ran).
	FinishAttempt(ctx context.Context, a Attempt) error
	// Attempts returns a task's attempts, oldest first.
	Attempts(ctx context.Context, taskID string) ([]Attempt, error)
	// Events returns a task's event log, oldest first.
	Events(ctx context.Context, taskID string) ([]Event, error)
	// AppendEvent adds an event without a state change (an admin action, a
	// note).
	AppendEvent(ctx context.Context, e Event) error

	// GetStep returns a completed step's stored output.
	GetStep(ctx context.Context, taskID, name string) (output []byte, ok bool, err error)
	// PutStep stores a step's output; the first write wins and later ones
	// return the stored output.
	PutStep(ctx context.Context, taskID, name string, output []byte) (stored []byte, err error)

	// BeginEffect records the effect as pending for attempt, unless it is
	// already recorded, in which case it returns the existing record and
	// begun=false.
	BeginEffect(ctx context.Context, taskID, key string, attempt int) (e Effect, begun bool, err error)
	// SetEffect records the effect's outcome. A confirmed effect never
	// changes again (ErrConflict).
	SetEffect(ctx context.Context, taskID, key string, state EffectState, result []byte) error
	// Effects lists a task's effects.
	Effects(ctx context.Context, taskID string) ([]Effect, error)

	// Prune deletes tasks in a terminal state last updated before `before`,
	// with their attempts, steps, effects and events. It returns how many
	// tasks it deleted.
	Prune(ctx context.Context, before time.Time) (int, error)

	// The ledger deduplicates publishes for brokers without native dedup,
	// across processes.
	broker.DedupStore

	// StreamStore keeps progress, streamed chunks and durable waits
	// (stream.go).
	StreamStore

	Close() error
}

// LanePause is a lane paused in the ledger: every scheduler sharing the
// ledger stops starting tasks of Lane until it is resumed.
type LanePause struct {
	Lane string
	// Actor is who paused it ("operator:alice"); Since is when. Pausing a
	// lane that is already paused keeps the first pause's Actor and Since.
	Actor string
	Since time.Time
}

// LaneControls is an optional interface of a Ledger: lane pauses that every
// process sharing the ledger sees (a scheduler polls PausedLanes every
// scheduler.Config.ControlInterval). ledger/sqlite and ledger/postgres
// implement it; check with a type assertion.
//
// The pause is keyed by lane name alone: processes of different broker
// namespaces that share one ledger share its pauses.
type LaneControls interface {
	// SetLanePaused pauses (paused=true) or resumes lane. It is idempotent:
	// pausing a paused lane keeps the first pause's actor and time, and
	// resuming a lane that is not paused does nothing. The lane must be a
	// valid name (broker.ValidateName); an empty actor is recorded as "".
	SetLanePaused(ctx context.Context, lane string, paused bool, actor string) error
	// PausedLanes lists the paused lanes, by name.
	PausedLanes(ctx context.Context) ([]LanePause, error)
	// LaneEvents lists the lane history, newest first: one LaneEvent for
	// every SetLanePaused call that changed a lane's state (a pause of a
	// running lane, a resume of a paused one), appended in the same
	// transaction as the change; calls that changed nothing add none.
	// lane "" lists every lane's events; otherwise it must be a valid name.
	// limit 0 means 100, above 1000 means 1000; a negative limit is
	// refused (broker.ErrInvalid).
	LaneEvents(ctx context.Context, lane string, limit int) ([]LaneEvent, error)
}

// LaneEvent is one change of a lane's pause state made through the ledger
// (LaneControls.SetLanePaused): the lane's audit trail of who paused and
// who resumed it.
type LaneEvent struct {
	Lane string
	// Actor is who made the change ("operator:alice"), as given to
	// SetLanePaused.
	Actor string
	// Paused is true for a pause, false for a resume.
	Paused bool
	// At is when the change was made, by the store's clock.
	At time.Time
}

// SequencerOf returns L's ordering Sequencer (broker.Sequencer) shared by
// every process using the ledger, or nil when L has none. ledger/sqlite and
// ledger/postgres have one; a Broker on a driver without native ordering
// uses it for ordering keys (switchyard.NewClient and NewServer hand it
// over with broker.Broker.AdoptSequencer).
func SequencerOf(L Ledger) broker.Sequencer {
	if src, ok := L.(broker.SequencerSource); ok {
		return src.Sequencer()
	}
	return nil
}

// Errors.
var (
	ErrNotFound = errors.New("ledger: not found")
	ErrConflict = errors.New("ledger: conflict")
)

// ConflictError is the detail of ErrConflict on a transition.
type ConflictError struct {
	ID      string
	Current State
	To      State
	// LeaseUntil is the live holder's lease when a BeginRun found the task
	// running.
	LeaseUntil time.Time
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("ledger: task %s is %s; cannot move to %s", e.ID, e.Current, e.To)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Validate checks a task before Create: kind and lane names, key lengths,
// a valid ID when one is given.
func (t *Task) Validate() error {
	m := broker.Message{ID: t.ID, Lane: t.Lane, Kind: t.Kind, Tenant: t.Tenant, IdempotencyKey: t.IdempotencyKey, OrderingKey: t.OrderingKey, MaxAttempts: t.MaxAttempts}
	return m.Validate()
}
