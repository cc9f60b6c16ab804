package limits

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/scheduler"
	"github.com/switchyard-dev/switchyard/spend"
)

// Errors. Every error this package returns for a control decision is one
// of the typed errors below; Result maps them to the runtime's handler
// results.
var (
	// ErrLimited matches a *WaitError: capacity is not there now.
	ErrLimited = errors.New("limits: rate limited")
	// ErrThrottled matches a *ThrottledError: the provider said to back off.
	ErrThrottled = errors.New("limits: throttled by the provider")
	// ErrOpen matches an *OpenError: a circuit breaker is open.
	ErrOpen = errors.New("limits: circuit breaker open")
	// ErrBudgetExceeded matches a *BudgetError: a run crossed a hard limit.
	ErrBudgetExceeded = errors.New("limits: budget exceeded")
	// ErrTooLarge: a request can never fit its limit (more tokens than the
	// bucket holds). Permanent.
	ErrTooLarge = errors.New("limits: request larger than the limit")
)

func invalidf(format string, args ...any) error { return broker.Invalidf(format, args...) }

// WaitError says a call must wait Wait for capacity under Key's limits.
type WaitError struct {
	Key  Key
	Wait time.Duration
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("limits: rate limited (%s): capacity in %s", e.Key, e.Wait)
}

// Is makes errors.Is(err, ErrLimited) true.
func (e *WaitError) Is(target error) bool { return target == ErrLimited }

// ThrottledError says a provider answered "rate limited, retry after" for
// Key.
type ThrottledError struct {
	Key        Key
	RetryAfter time.Duration
	Err        error
}

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("limits: throttled by the provider (%s), retry after %s: %v", e.Key, e.RetryAfter, e.Err)
}

// Unwrap returns the provider's error.
func (e *ThrottledError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrThrottled) true.
func (e *ThrottledError) Is(target error) bool { return target == ErrThrottled }

// OpenError says the breaker of Dependency is open (or half-open with its
// probe in flight); the next probe is allowed in RetryIn.
type OpenError struct {
	Dependency string
	RetryIn    time.Duration
}

func (e *OpenError) Error() string {
	return fmt.Sprintf("limits: circuit breaker for %q is open; next probe in %s", e.Dependency, e.RetryIn)
}

// Is makes errors.Is(err, ErrOpen) true.
func (e *OpenError) Is(target error) bool { return target == ErrOpen }

// BudgetError says a run crossed (or a call would cross) one of its hard
// limits. Limit is one of the Field* names.
type BudgetError struct {
	TaskID string
	Limit  string
	Used   string // the usage that crossed it, formatted
	Max    string // the limit, formatted
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("budget exceeded: %s: task %s would use %s of at most %s", e.Limit, e.TaskID, e.Used, e.Max)
}

// Is makes errors.Is(err, ErrBudgetExceeded) true.
func (e *BudgetError) Is(target error) bool { return target == ErrBudgetExceeded }

// Result turns this package's control errors into the runtime's handler
// results, and returns every other error unchanged:
//
//   - *WaitError, *ThrottledError, *OpenError → scheduler.Snooze with
//     jitter: the task is re-delayed without spending an attempt and its
//     slot is freed. Waiting for capacity, a provider's back-off or a
//     dependency's recovery is not the task's failure. (A task that waits
//     forever is bounded by its Deadline and its Budget.WallClock.)
//   - *BudgetError, ErrTooLarge → scheduler.Permanent: the task is
//     dead-lettered at once (reason permanent_error; see doc.go).
//   - *SpendCapError → scheduler.Snooze until the tenant's window resets
//     (plus up to a minute of jitter) when the window's Action is spend.Snooze; otherwise
//     scheduler.Budget: dead-lettered with reason budget_exceeded and the
//     window's text.
//
// A handler ends with `return limits.Result(err)`.
func Result(err error) error {
	if err == nil {
		return nil
	}
	var (
		we *WaitError
		te *ThrottledError
		oe *OpenError
		se *SpendCapError
	)
	switch {
	case errors.As(err, &se) && se.Window.Action == spend.Snooze:
		// Until the window resets, plus at most a minute: 20% of a
		// day's wait would be hours.
		d := max(se.RetryIn, MinSnooze)
		return scheduler.Snooze(d + rand.N(min(d/5, time.Minute)+1))
	case errors.Is(err, ErrBudgetExceeded):
		if scheduler.IsPermanent(err) {
			return err
		}
		return scheduler.Budget(err)
	case errors.Is(err, ErrTooLarge):
		if scheduler.IsPermanent(err) {
			return err
		}
		return scheduler.Permanent(err)
	case errors.As(err, &te):
		return scheduler.Snooze(Jitter(te.RetryAfter))
	case errors.As(err, &oe):
		return scheduler.Snooze(Jitter(oe.RetryIn))
	case errors.As(err, &we):
		return scheduler.Snooze(Jitter(we.Wait))
	}
	return err
}

// MinSnooze is the shortest delay Result snoozes for: a re-delivery costs
// a broker round trip, so waiting less is pointless.
const MinSnooze = 10 * time.Millisecond

// Jitter returns d plus up to 20% at random (at least MinSnooze), so that
// tasks delayed together do not all return at the same instant.
func Jitter(d time.Duration) time.Duration {
	d = max(d, MinSnooze)
	return d + rand.N(d/5+1)
}

// Middleware applies Result to every handler's error, so that handlers can
// return the limiter's, breaker's and budget's errors as they are:
//
//	srv, _ := switchyard.NewServer(b, &switchyard.ServerConfig{
//		Middleware: []switchyard.Middleware{limits.Middleware()},
//	})
func Middleware() scheduler.Middleware {
	return func(next scheduler.HandlerFunc) scheduler.HandlerFunc {
		return func(ctx context.Context, job *scheduler.Job) ([]byte, error) {
			res, err := next(ctx, job)
			return res, Result(err)
		}
	}
}
