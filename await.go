package switchyard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// Durable waits generalise human review: a handler waits for a named
// event, releasing its slot while it waits (no process holds the task),
// and resumes when Client.Signal or the admin API's signal callback
// delivers the event — or ends failed (reason await_timeout) when its
// timeout passes first.
//
//	tok, err := switchyard.EventToken(ctx, "paid", 24*time.Hour, nil)
//	...send a payment link with tok, inside an Effect...
//	p, err := switchyard.AwaitEvent[Payment](ctx, "paid", 24*time.Hour, nil)
//	if err != nil {
//		return err // parks the task until the event (or fails it on the timeout)
//	}
//
// The handler runs from the top when the task resumes: Steps and Effects
// before the wait are memoised, and AwaitEvent returns the payload.

// AwaitOpts tune AwaitEvent and EventToken. A nil *AwaitOpts means the
// defaults.
type AwaitOpts struct {
	// CorrelationKey, when set, lets Client.Signal find the wait by it
	// (an order number, a thread ID) instead of the task ID. Among open
	// waits it is unique per tenant. Defaults to "".
	CorrelationKey string
}

func (o *AwaitOpts) key() string {
	if o == nil {
		return ""
	}
	return o.CorrelationKey
}

// AwaitEvent returns the payload of event name (JSON, decoded into T) once
// a signal has delivered it. Until then it records the wait and returns an
// error the handler must return: the task parks in state awaiting_event,
// its delivery acknowledged and its slot free, until the signal comes or
// timeout passes (the task then fails with reason await_timeout). A name
// is one event per task, like a Step name. It needs a ledger.
func AwaitEvent[T any](ctx context.Context, name string, timeout time.Duration, opts *AwaitOpts) (T, error) {
	var out T
	b, err := scheduler.AwaitEvent(ctx, name, timeout, opts.key())
	if err != nil {
		return out, err
	}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &out); err != nil {
			return out, Permanent(fmt.Errorf("switchyard: event %s: payload does not decode: %w", name, err))
		}
	}
	return out, nil
}

// EventToken returns the one-time token with which an HTTP caller signals
// event name of the running task (POST /api/v1/signals/{token}): the same
// token on every attempt; the ledger keeps only its hash. Call it before
// AwaitEvent, with the same name and timeout.
func EventToken(ctx context.Context, name string, timeout time.Duration, opts *AwaitOpts) (string, error) {
	return scheduler.EventToken(ctx, name, timeout, opts.key())
}

// MaxSignalPayload is the largest signal payload, in bytes.
const MaxSignalPayload = 64 << 10

// SignalTarget names the wait a signal is for: TaskID and Name; or Tenant
// and CorrelationKey; or Token (exactly one of the three).
type SignalTarget struct {
	TaskID, Name           string
	Tenant, CorrelationKey string
	Token                  string
}

// ErrNoSuchWait: no open or closed wait matches a signal (an unknown task
// or name, a correlation key nobody waits on, a wrong token). It matches
// ledger.ErrNotFound.
var ErrNoSuchWait = fmt.Errorf("switchyard: no such wait: %w", ledger.ErrNotFound)

// ErrWaitClosed: the wait was signalled already (a reused token, a second
// signal) or timed out; the signal changed nothing. It matches
// ledger.ErrConflict.
var ErrWaitClosed = fmt.Errorf("switchyard: the wait is closed: %w", ledger.ErrConflict)

// SignalResult says what a signal did.
type SignalResult struct {
	TaskID, Name string
	// Resumed reports that the task was parked and is published again;
	// false means it was still running (its worker resumes it as it
	// parks) or that it had left awaiting_event otherwise.
	Resumed bool
}

// Signal delivers payload (JSON, at most MaxSignalPayload bytes) to the
// wait target names and resumes its task. A wrong token or an unknown
// wait is ErrNoSuchWait; a wait already signalled or timed out is
// ErrWaitClosed: both change nothing. It needs a ledger.
func (c *Client) Signal(ctx context.Context, target SignalTarget, payload []byte) (*SignalResult, error) {
	if c.l == nil {
		return nil, ErrNoLedger
	}
	if len(payload) > MaxSignalPayload {
		return nil, &broker.Error{Op: "switchyard: signal", Class: broker.Permanent, Kind: broker.ErrTooLarge,
			Err: &LimitError{Limit: "switchyard.MaxSignalPayload", Max: MaxSignalPayload, Size: len(payload)}}
	}
	if len(payload) > 0 && !json.Valid(payload) {
		return nil, broker.Invalidf("switchyard: signal payload is not JSON")
	}
	wt := ledger.WaitTarget{TaskID: target.TaskID, Name: target.Name, Tenant: target.Tenant, CorrelationKey: target.CorrelationKey}
	if target.Token != "" {
		wt.TokenHash = scheduler.TokenHash(target.Token)
	}
	w, err := c.l.SignalWait(ctx, wt, payload)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return nil, fmt.Errorf("%w (%v)", ErrNoSuchWait, err)
	case errors.Is(err, ledger.ErrConflict):
		return nil, fmt.Errorf("%w (%v)", ErrWaitClosed, err)
	case err != nil:
		return nil, err
	}
	res := &SignalResult{TaskID: w.TaskID, Name: w.Name}
	err = scheduler.ResumeAfterEvent(ctx, c.l, c.b, w.TaskID, w.Name, "signal")
	switch {
	case err == nil:
		res.Resumed = true
	case errors.Is(err, ledger.ErrConflict):
		// Not parked: still running (its worker sees the signal as it
		// parks), or already resumed — or ended (cancelled, say), which
		// the caller should know: the event will not be handled.
		if t, gerr := c.l.Get(ctx, w.TaskID); gerr == nil && t.State.Terminal() {
			return res, fmt.Errorf("%w: task %s is %s", ErrWaitClosed, w.TaskID, t.State)
		}
	default:
		// The event is stored; the task's timeout message (or its worker)
		// resumes it. Report the failure to publish.
		return res, fmt.Errorf("switchyard: signal stored; publishing the task failed (it resumes when its wait's timeout message comes): %w", err)
	}
	return res, nil
}
