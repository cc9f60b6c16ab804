package scheduler

import (
	"errors"
	"fmt"
	"time"
)

// Handlers steer the runtime with what they return. nil is success; any
// error not built by the functions below is retried by the retry policy and
// dead-lettered when attempts run out.

// Permanent marks err as one that will fail the same way again: the task is
// dead-lettered at once with reason permanent_error, without retrying.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &resultError{kind: resultPermanent, err: err}
}

// Cancel ends the task as cancelled (not an error, not dead-lettered): the
// work is no longer wanted.
func Cancel(err error) error {
	if err == nil {
		err = errors.New("cancelled by handler")
	}
	return &resultError{kind: resultCancel, err: err}
}

// Snooze puts the task back to run again after d without spending an
// attempt (waiting for capacity, for a dependency, for a rate limit).
func Snooze(d time.Duration) error {
	return &resultError{kind: resultSnooze, delay: d, err: fmt.Errorf("snoozed for %s", d)}
}

// RetryAfter retries the task after d (spending an attempt), instead of the
// policy's backoff — for a 429 with Retry-After, for example.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = fmt.Errorf("retry after %s", d)
	}
	return &resultError{kind: resultRetry, delay: d, err: err}
}

// UnknownOutcome marks err as leaving it unknown whether the work took
// effect. The task is retried by policy; effects recorded with Effect are
// reconciled before they are repeated.
func UnknownOutcome(err error) error {
	if err == nil {
		err = errors.New("unknown outcome")
	}
	return &resultError{kind: resultUnknown, err: err}
}

// Budget stops the task because it crossed a budget (wall clock, calls,
// tokens, spend): it is dead-lettered at once with reason budget_exceeded
// and the whole attempt history, without retrying.
func Budget(err error) error {
	if err == nil {
		err = errors.New("budget exceeded")
	}
	return &resultError{kind: resultBudget, err: err}
}

// AwaitApproval parks the task in state awaiting_review until a reviewer
// approves or rejects it (it needs a ledger). reason says why review is
// needed; action describes what the handler wants to do, for the reviewer.
func AwaitApproval(reason, action string) error {
	return &resultError{kind: resultAwait, reason: reason, action: action, err: fmt.Errorf("awaiting approval: %s", reason)}
}

type resultKind int

const (
	resultRetry resultKind = iota
	resultPermanent
	resultCancel
	resultSnooze
	resultUnknown
	resultAwait
	resultBudget
	resultAwaitEvent // AwaitEvent: park until a signal (await.go)
)

type resultError struct {
	kind   resultKind
	delay  time.Duration
	reason string
	action string
	err    error
}

func (e *resultError) Error() string { return e.err.Error() }
func (e *resultError) Unwrap() error { return e.err }

// ResultClass names how the runtime will treat a handler's error: "" for
// success, "transient", "permanent", "cancel", "snooze", "unknown_outcome",
// "await_review", "await_event" or "budget". Middleware uses it to label outcomes.
func ResultClass(err error) string { return classifyResult(err).class() }

// IsPermanent reports whether err was marked with Permanent or Budget:
// the runtime will not retry it.
func IsPermanent(err error) bool {
	var r *resultError
	return errors.As(err, &r) && (r.kind == resultPermanent || r.kind == resultBudget)
}

// outcome is what the runtime does with a handler's return.
type outcome struct {
	kind   resultKind
	ok     bool
	delay  time.Duration // snooze or retry-after delay; 0 = policy
	err    error
	reason string
	action string
	panic  bool
	stack  string
}

func classifyResult(err error) outcome {
	if err == nil {
		return outcome{ok: true}
	}
	var r *resultError
	if errors.As(err, &r) {
		return outcome{kind: r.kind, delay: r.delay, err: err, reason: r.reason, action: r.action}
	}
	return outcome{kind: resultRetry, err: err}
}

// class names the outcome for attempt records and metrics.
func (o outcome) class() string {
	switch {
	case o.ok:
		return ""
	case o.panic:
		return "panic"
	}
	switch o.kind {
	case resultPermanent:
		return "permanent"
	case resultCancel:
		return "cancel"
	case resultSnooze:
		return "snooze"
	case resultUnknown:
		return "unknown_outcome"
	case resultAwait:
		return "await_review"
	case resultBudget:
		return "budget"
	case resultAwaitEvent:
		return "await_event"
	}
	return "transient"
}
