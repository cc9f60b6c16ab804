// Package admin is Switchyard's operator surface as a library: the
// operations behind the admin HTTP API, the web dashboard and the command
// line (lanes and their stats, tasks and their timelines, dead letters with
// replay, move and purge, lane pause and resume, the review queue, and
// ingestion), the same for every broker.
//
// Ops holds the operations; Handler serves them over HTTP with bearer-token
// authentication (read-only, enqueue and admin roles, optionally scoped to
// one tenant).
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// NOTE(skeleton): the signatures below are the agreed surface; bodies are
// being filled in. errTODO disappears with the last of them.
var errTODO = errors.New("admin: not implemented yet")

// Config configures Ops.
type Config struct {
	// Broker is the namespace's broker (required).
	Broker *broker.Broker
	// Ledger is the task ledger; without it, task listings, timelines,
	// reviews, sandbox replay, ingestion status and cross-process lane pause
	// are unavailable (ErrNoLedger) and dead letters come from the broker
	// alone.
	Ledger ledger.Ledger
	// Lanes are the lanes to show when the broker cannot list its own
	// (broker.LaneLister); defaults to the four default lanes.
	Lanes []string
	// Kinds are the task kinds ingestion accepts, each with an optional
	// validator for its JSON arguments. Enqueue refuses other kinds. Nil
	// means ingestion accepts no kind.
	Kinds map[string]KindSpec
	// Objectives are the lanes' wait objectives, reported with the lane
	// stats (OldestReady above it is "late"). Defaults to the default lanes'.
	Objectives map[string]time.Duration
}

// KindSpec describes a task kind accepted by Enqueue.
type KindSpec struct {
	// Validate checks the JSON arguments; an error is a 400 with its text.
	// Nil accepts any JSON object.
	Validate func(args json.RawMessage) error
	// Lane is the default lane of the kind ("" = the client's default).
	Lane string
}

// Ops are the operator operations. They are safe for concurrent use.
type Ops struct {
	cfg    Config
	client *switchyard.Client
}

// New returns Ops over cfg.
func New(cfg Config) (*Ops, error) {
	if cfg.Broker == nil {
		return nil, broker.Invalidf("admin: nil broker")
	}
	c, err := switchyard.NewClient(cfg.Broker, &switchyard.ClientConfig{Ledger: cfg.Ledger})
	if err != nil {
		return nil, err
	}
	return &Ops{cfg: cfg, client: c}, nil
}

// Scope restricts an operation to one tenant; the zero Scope sees every
// tenant. A scoped caller never sees or touches another tenant's tasks or
// dead letters: they are reported as not found.
type Scope struct {
	Tenant string
}

// Actor names who performs a state-changing operation, for the event log
// ("operator:alice", "token:ci").
type Actor string

// LaneInfo is a lane at a glance.
type LaneInfo struct {
	broker.Stats
	Paused    bool
	PausedBy  string
	Objective time.Duration
	// Late: the oldest ready task is older than the lane's objective.
	Late bool
}

// Lanes returns every lane's stats (the broker's lanes when it can list
// them, else Config.Lanes), with pause state from the ledger.
func (o *Ops) Lanes(ctx context.Context) ([]LaneInfo, error) { return nil, errTODO }

// PauseLane stops every server on this ledger from starting tasks of lane
// (within about a second); running tasks finish. ResumeLane undoes it.
func (o *Ops) PauseLane(ctx context.Context, lane string, who Actor) error  { return errTODO }
func (o *Ops) ResumeLane(ctx context.Context, lane string, who Actor) error { return errTODO }

// TaskFilter selects tasks.
type TaskFilter struct {
	States []ledger.State
	Kind   string
	Lane   string
	Tenant string // combined with Scope: a scoped caller's tenant wins
	Limit  int    // default 50, at most 1000
	After  string // the previous page's Next
}

// TaskPage is one page of tasks, oldest first; Next is "" on the last page.
type TaskPage struct {
	Tasks []*ledger.Task
	Next  string
}

// Tasks lists tasks from the ledger.
func (o *Ops) Tasks(ctx context.Context, sc Scope, f TaskFilter) (*TaskPage, error) {
	return nil, errTODO
}

// Task returns a task with its attempts, event log (the timeline) and
// effects; ledger.ErrNotFound when it does not exist or is out of scope.
func (o *Ops) Task(ctx context.Context, sc Scope, id string) (*switchyard.TaskInfo, error) {
	return nil, errTODO
}

// DeadFilter selects dead letters. Empty fields match everything.
type DeadFilter struct {
	Lane   string // "" = every lane
	Kind   string
	Tenant string
	Reason broker.Reason
	IDs    []string // when set, only these
	Limit  int      // default 50, at most 1000 (listing only)
}

// DeadItem is a dead letter: the message, why it died and its attempts.
type DeadItem struct {
	ID, Lane, Kind, Tenant string
	Reason                 broker.Reason
	Error                  string
	Attempts               []broker.AttemptRecord
	DeadAt                 time.Time
	Payload                []byte // the task's arguments (admin role only over HTTP)
}

// DeadLetters lists dead letters without taking them out of their queue.
func (o *Ops) DeadLetters(ctx context.Context, sc Scope, f DeadFilter) ([]DeadItem, error) {
	return nil, errTODO
}

// DeadLetter returns one dead letter by task ID; ledger.ErrNotFound when no
// dead-letter queue in scope holds it.
func (o *Ops) DeadLetter(ctx context.Context, sc Scope, lane, id string) (*DeadItem, error) {
	return nil, errTODO
}

// Progress is called after each item of a bulk operation with how many are
// done and the total (total is -1 when unknown).
type Progress func(done, total int)

// Report is the outcome of a bulk operation.
type Report struct {
	Done   int
	Failed []ItemError
}

// ItemError is one item a bulk operation could not handle.
type ItemError struct {
	ID  string
	Err string
}

// Replay moves the selected dead letters back to their live lanes (their
// tasks back to queued, with a "replayed" event naming who).
func (o *Ops) Replay(ctx context.Context, sc Scope, f DeadFilter, who Actor, p Progress) (*Report, error) {
	return nil, errTODO
}

// ReplaySandbox runs a copy of dead letter id in sandbox mode: the task
// runs, its steps run, but its effects are recorded as "would do" instead
// of executed. The dead letter stays where it is. It returns the sandbox
// task's ID.
func (o *Ops) ReplaySandbox(ctx context.Context, sc Scope, lane, id string, who Actor) (string, error) {
	return "", errTODO
}

// Move moves the selected dead letters to lane toLane's live queue.
func (o *Ops) Move(ctx context.Context, sc Scope, f DeadFilter, toLane string, who Actor, p Progress) (*Report, error) {
	return nil, errTODO
}

// Purge deletes the selected dead letters for good (their tasks stay dead
// in the ledger, with a "purged" event).
func (o *Ops) Purge(ctx context.Context, sc Scope, f DeadFilter, who Actor, p Progress) (*Report, error) {
	return nil, errTODO
}

// Peek returns up to n ready messages of lane without taking them or
// spending an attempt.
func (o *Ops) Peek(ctx context.Context, sc Scope, lane string, n int) ([]*broker.Message, error) {
	return nil, errTODO
}

// EnqueueRequest is one task submitted through ingestion or the CLI.
type EnqueueRequest struct {
	Kind           string            `json:"kind"`
	Args           json.RawMessage   `json:"args"`
	Lane           string            `json:"lane,omitempty"`
	Tenant         string            `json:"tenant,omitempty"`
	IdempotencyKey string            `json:"-"` // from the Idempotency-Key header
	OrderingKey    string            `json:"ordering_key,omitempty"`
	RunAt          time.Time         `json:"run_at,omitempty"`
	Delay          string            `json:"delay,omitempty"` // Go duration, e.g. "90s"
	Deadline       time.Time         `json:"deadline,omitempty"`
	MaxAttempts    int               `json:"max_attempts,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
}

// Enqueue validates and enqueues one task. A request that fails validation
// (unknown kind, bad arguments, bad option) returns an error matching
// broker.ErrInvalid and enqueues nothing. The same idempotency key returns
// the same task (Duplicate=true).
func (o *Ops) Enqueue(ctx context.Context, sc Scope, r EnqueueRequest) (*switchyard.EnqueueResult, error) {
	return nil, errTODO
}

// Reviews, Approve, Reject and Claim wrap the Client's review queue with
// scope checks.
func (o *Ops) Reviews(ctx context.Context, sc Scope, limit int) ([]*switchyard.ReviewItem, error) {
	return nil, errTODO
}
func (o *Ops) Claim(ctx context.Context, sc Scope, id string, who Actor) error { return errTODO }
func (o *Ops) Approve(ctx context.Context, sc Scope, id string, who Actor, note string) error {
	return errTODO
}
func (o *Ops) Reject(ctx context.Context, sc Scope, id string, who Actor, reason string) error {
	return errTODO
}

// Ready reports whether the broker and the ledger answer (readyz).
func (o *Ops) Ready(ctx context.Context) error { return errTODO }
