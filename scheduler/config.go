package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/lanes"
	"github.com/switchyard-dev/switchyard/ledger"
)

// Config configures a Scheduler. A nil *Config means every default; every
// field documents its default.
type Config struct {
	// Lanes are the lanes to serve and their policy. Defaults to
	// lanes.Defaults() (interactive, scheduled, batch, human-review).
	Lanes []lanes.Lane
	// Slots is the number of tasks run at once (a task of cost c takes c).
	// Defaults to 8.
	Slots int
	// Lease is how long a received task stays invisible to other workers
	// before it must be extended. Defaults to 30s.
	Lease time.Duration
	// Heartbeat is how often leases of held tasks are extended. Defaults to
	// Lease/3, so a lease survives two missed heartbeats.
	Heartbeat time.Duration
	// Prefetch is how many tasks per lane are received ahead of a free
	// slot, so the lane policy can see what waits (their leases are
	// extended while they wait). Too small a buffer lets a lane look idle
	// between receives under load, and the policy then gives its shared
	// slots away. Defaults to Slots.
	Prefetch int
	// PollWait is how long one receive waits for work. Defaults to 1s.
	PollWait time.Duration
	// Retry is the retry policy. Per-kind policies go in HandlerOpts.
	Retry RetryPolicy
	// Ledger, when set, records every task, attempt, step and effect, and
	// makes duplicate deliveries and crash retries harmless: completed
	// steps are not recomputed and confirmed effects not repeated.
	// Defaults to nil: broker-level guarantees only.
	Ledger ledger.Ledger
	// ControlInterval is how often, with a ledger that implements
	// ledger.LaneControls, the scheduler reads the lanes paused through the
	// ledger (by an operator, from any process) and applies them: a lane
	// is paused while Pause or the ledger says so. A failed read is logged
	// and observed (EventControlFailed) and the last known pauses stay.
	// Defaults to 1s.
	ControlInterval time.Duration
	// Retention, with a ledger, prunes tasks that finished (completed,
	// failed, dead, rejected, cancelled) longer ago than this, with their
	// attempts, steps, effects and events, checking every PruneEvery.
	// Defaults to 0: keep everything.
	Retention time.Duration
	// PruneEvery is how often Retention is applied. Defaults to 10m.
	PruneEvery time.Duration
	// MaxResultBytes bounds a task's result (what a handler returns, or
	// SetResult): a larger one is refused with a *ResultTooLargeError
	// naming the limit (from SetResult at once; a returned one
	// dead-letters the task with reason permanent_error, since running it
	// again would give the same). Results live in the ledger as long as
	// the task (Retention). Defaults to DefaultMaxResultBytes (1 MiB).
	MaxResultBytes int
	// WorkerID names this worker in attempt records. Defaults to
	// hostname-pid-random.
	WorkerID string
	// Logger defaults to slog.Default(). Payloads are never logged.
	Logger *slog.Logger
	// Observer, when set, is called (synchronously, keep it fast) for every
	// task event: for progress displays and metrics.
	Observer func(Event)
	// Middleware wraps every handler, outermost first: tracing, metrics,
	// limits. Each sees the job before the handler and its result after.
	// Defaults to none.
	Middleware []Middleware
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Faults, when set, is called before a Step or Effect calls its
	// function (that is, only when the ledger says it must run): a non-nil
	// error is returned from the Step or Effect as if the function had
	// failed with it, and the function is not called. It is a seam for
	// tests of handlers (switchyardtest's FailStepOnce and FailEffectOnce);
	// production code has no reason to set it. Defaults to nil.
	Faults func(ctx context.Context, p FaultPoint) error
}

// Middleware wraps a handler.
type Middleware func(next HandlerFunc) HandlerFunc

// WithDefaults returns a copy of c (which may be nil) with defaults filled.
func (c *Config) WithDefaults() *Config {
	var o Config
	if c != nil {
		o = *c
	}
	if o.Lanes == nil {
		o.Lanes = lanes.Defaults()
	}
	if o.Slots <= 0 {
		o.Slots = 8
	}
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = o.Lease / 3
	}
	if o.Prefetch <= 0 {
		o.Prefetch = o.Slots
	}
	if o.PollWait <= 0 {
		o.PollWait = time.Second
	}
	o.Retry = o.Retry.WithDefaults()
	if o.ControlInterval <= 0 {
		o.ControlInterval = time.Second
	}
	if o.PruneEvery <= 0 {
		o.PruneEvery = 10 * time.Minute
	}
	if o.MaxResultBytes <= 0 {
		o.MaxResultBytes = DefaultMaxResultBytes
	}
	if o.WorkerID == "" {
		host, _ := os.Hostname()
		var b [3]byte
		_, _ = rand.Read(b[:])
		o.WorkerID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &o
}

// MaxLease is the longest lease a scheduler takes: the ledger refuses
// longer ones (a lease is renewed every heartbeat; a day is far beyond
// any need).
const MaxLease = 24 * time.Hour

func (c *Config) validate() error {
	if c.Lease > MaxLease {
		return broker.Invalidf("scheduler: lease %s is longer than %s", c.Lease, MaxLease)
	}
	if c.Heartbeat >= c.Lease {
		return broker.Invalidf("scheduler: heartbeat %s must be shorter than the lease %s", c.Heartbeat, c.Lease)
	}
	if err := lanes.Validate(c.Slots, c.Lanes); err != nil {
		return err
	}
	return nil
}

// HandlerFunc processes one task. It returns the task's result (stored in
// the ledger, may be nil) or an error built with Permanent, Cancel, Snooze,
// RetryAfter, UnknownOutcome, AwaitApproval — or any other error, which is
// retried by policy.
type HandlerFunc func(ctx context.Context, job *Job) ([]byte, error)

// HandlerOpts tune one kind's handling. A nil *HandlerOpts means defaults.
type HandlerOpts struct {
	// Retry overrides the scheduler's retry policy for this kind.
	Retry *RetryPolicy
	// Cost is how many slots one task takes (a heavy model call may take
	// more than one). Defaults to 1.
	Cost int
	// Timeout bounds one attempt; past it the handler's context is
	// cancelled and the attempt counts as failed. Defaults to none.
	Timeout time.Duration
}

// Job is one delivery of a task, as a handler sees it.
type Job struct {
	ID          string
	Kind        string
	Lane        string
	Tenant      string
	Args        []byte
	Headers     map[string]string
	Attempt     int
	MaxAttempts int
	EnqueuedAt  time.Time
	// Task is the ledger's record (nil without a ledger).
	Task *ledger.Task
	// Review is the reviewer's decision when the task resumed after
	// AwaitApproval (nil otherwise).
	Review *Review
	// Sandbox reports a sandbox replay (a copy of a dead letter made by
	// switchyard's Client.ReplaySandbox): steps run, but Effect records
	// each effect as ledger.EffectWouldDo and does not perform it.
	Sandbox bool
}

// Review is a reviewer's decision on a task that awaited approval.
type Review struct {
	Approved bool
	Reviewer string
	Note     string
}

// EventType names what happened to a task.
type EventType string

// Event types.
const (
	EventStarted    EventType = "started"
	EventSucceeded  EventType = "succeeded"
	EventRetried    EventType = "retried"
	EventSnoozed    EventType = "snoozed"
	EventDead       EventType = "dead"
	EventCancelled  EventType = "cancelled"
	EventAwaiting   EventType = "awaiting_review"
	EventDuplicate  EventType = "duplicate"
	EventLeaseLost  EventType = "lease_lost"
	EventReturned   EventType = "returned"
	EventExtendFail EventType = "extend_failed"
)

// Event is one observation for Config.Observer.
type Event struct {
	Type     EventType
	TaskID   string
	Kind     string
	Lane     string
	Attempt  int
	Duration time.Duration
	Reason   broker.Reason // for EventDead
	Err      error

	// ran: an EventDead ends a handler attempt (for the history counts).
	ran bool
}
