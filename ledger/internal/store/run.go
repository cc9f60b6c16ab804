package store

import (
	"fmt"
	"math"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// MaxLease bounds a ledger lease: a day is far beyond any heartbeat, and
// keeps the lease's end representable.
const MaxLease = 24 * time.Hour

// MaxAttemptNumber bounds attempt numbers the ledger accepts from a
// delivery: a count beyond it is a tampered or corrupt message, not a
// history (it also keeps attempt+1 inside an SQL integer).
const MaxAttemptNumber = math.MaxInt32 - 1

// RunStart validates a BeginRun request.
func RunStart(op string, r *ledger.RunStart) error {
	if err := ID(op, r.ID); err != nil {
		return err
	}
	if r.Attempt < 0 || r.Attempt > MaxAttemptNumber {
		return Invalid(op, "attempt %d is out of range [0, %d]", r.Attempt, MaxAttemptNumber)
	}
	if r.Lease <= 0 || r.Lease > MaxLease {
		return Invalid(op, "lease %v is out of range (0, %v]", r.Lease, MaxLease)
	}
	return keyAllowEmpty(op, "worker", r.Worker)
}

// RunEnd validates an EndRun request and returns the states the task may
// be in for its transition (nil without one).
func RunEnd(op string, r *ledger.RunEnd) ([]ledger.State, error) {
	if err := Attempt(op, &r.Attempt); err != nil {
		return nil, err
	}
	if r.Transition == nil {
		return nil, nil
	}
	if r.Transition.ID != r.Attempt.TaskID {
		return nil, Invalid(op, "the transition's task %q is not the attempt's %q", r.Transition.ID, r.Attempt.TaskID)
	}
	return Transition(op, r.Transition)
}

// Leases validates a RenewLeases request.
func Leases(op string, ls []ledger.Lease, d time.Duration) error {
	if d <= 0 || d > MaxLease {
		return Invalid(op, "lease %v is out of range (0, %v]", d, MaxLease)
	}
	for _, l := range ls {
		if err := ID(op, l.ID); err != nil {
			return err
		}
		if l.Attempt < 1 || l.Attempt > MaxAttemptNumber {
			return Invalid(op, "attempt %d is out of range [1, %d]", l.Attempt, MaxAttemptNumber)
		}
	}
	return nil
}

// NextRun decides BeginRun for a task found as cur at time now, for a
// delivery counting delivered attempts: the attempt number the run gets,
// the event's reason and detail, and ok=false when the task cannot run
// now (ErrConflict).
//
// A running task is taken over only when its holder's lease has passed.
// A task running without a lease was started by a runtime from before
// leases: it is taken over, as then, only by a delivery whose count is
// newer than the ledger's.
func NextRun(cur *ledger.Task, delivered int, now time.Time) (n int, reason, detail string, ok bool) {
	switch cur.State {
	case ledger.Queued:
		return max(delivered, cur.Attempt, 1), "attempt_started", "", true
	case ledger.RetryWait:
		return max(delivered, cur.Attempt+1), "attempt_started", "", true
	case ledger.Running:
		switch {
		case cur.LeaseUntil.IsZero() && delivered > cur.Attempt:
			return delivered, "lease_expired", fmt.Sprintf("attempt %d was running without a lease; a newer delivery takes it over", cur.Attempt), true
		case !cur.LeaseUntil.IsZero() && !now.Before(cur.LeaseUntil):
			return max(delivered, cur.Attempt+1), "lease_expired",
				fmt.Sprintf("attempt %d's lease ended at %s without a renewal: its holder is gone", cur.Attempt, cur.LeaseUntil.UTC().Format(time.RFC3339Nano)), true
		}
	}
	return 0, "", "", false
}

// RunConflict is the ErrConflict of a BeginRun that found cur.
func RunConflict(op string, cur *ledger.Task) error {
	return &broker.Error{Op: op, Class: broker.Permanent, Kind: ledger.ErrConflict,
		Err: &ledger.ConflictError{ID: cur.ID, Current: cur.State, To: ledger.Running, LeaseUntil: cur.LeaseUntil}}
}
