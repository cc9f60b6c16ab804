package limits

import (
	"context"
	"errors"
	"fmt"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// Route is one way to make a call, typically one model.
type Route[T any] struct {
	// Name says which route answered (recorded by the caller, e.g. in a
	// Step output or as the Key.Model of the usage record).
	Name string
	Call func(ctx context.Context) (T, error)
}

// FallbackOn decides whether an error of one route moves on to the next.
// DefaultFallbackOn falls back on capacity and availability failures (rate
// limited, throttled, breaker open, transient errors) and not on a
// permanent error, a budget stop or a cancelled context, which the next
// route would meet as well.
func DefaultFallbackOn(err error) bool {
	switch {
	case err == nil, errors.Is(err, ErrBudgetExceeded), errors.Is(err, ErrTooLarge),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), scheduler.IsPermanent(err):
		return false
	case errors.Is(err, ErrLimited), errors.Is(err, ErrThrottled), errors.Is(err, ErrOpen):
		return true
	}
	return broker.ClassOf(err) != broker.Permanent
}

// Fallback calls routes in order until one succeeds or fails in a way
// fallbackOn (nil: DefaultFallbackOn) does not classify as worth another
// route. It returns the result and the name of the route that produced
// it; when every route failed, the last error wrapped with the names
// tried, so Result still sees a control error (an open breaker on the
// last route still snoozes the task).
func Fallback[T any](ctx context.Context, fallbackOn func(error) bool, routes ...Route[T]) (T, string, error) {
	var zero T
	if len(routes) == 0 {
		return zero, "", invalidf("limits: Fallback needs at least one route")
	}
	if fallbackOn == nil {
		fallbackOn = DefaultFallbackOn
	}
	var tried []string
	var last error
	for _, r := range routes {
		v, err := r.Call(ctx)
		if err == nil {
			return v, r.Name, nil
		}
		tried, last = append(tried, r.Name), err
		if !fallbackOn(err) {
			break
		}
	}
	return zero, "", fmt.Errorf("limits: routes %v failed: %w", tried, last)
}
