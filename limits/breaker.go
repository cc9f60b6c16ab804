package limits

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// BreakerConfig configures Breakers. Zero fields mean defaults.
type BreakerConfig struct {
	// Failures is how many consecutive transient failures open a breaker.
	// Defaults to 5.
	Failures uint32
	// Open is how long a breaker stays open before one half-open probe is
	// let through. Defaults to 30s.
	Open time.Duration
	// IsFailure says whether an error counts against the dependency.
	// Defaults to: every error except context cancellation, this package's
	// control errors and permanent errors (scheduler.Permanent, or
	// broker.Permanent class) — a 400 says the request was bad, not that
	// the dependency is down.
	IsFailure func(err error) bool
	// OnStateChange, when set, is told of every transition (for logs and
	// the example).
	OnStateChange func(dependency string, from, to string)
}

// Breakers holds one circuit breaker per dependency key (sony/gobreaker),
// in process. Calls through an open breaker fail fast with an *OpenError,
// which Result turns into a Snooze: tasks needing the dependency are
// delayed, not failed, and spend no attempt.
type Breakers struct {
	cfg BreakerConfig

	mu sync.Mutex
	m  map[string]*breaker
}

type breaker struct {
	cb       *gobreaker.CircuitBreaker[any]
	mu       sync.Mutex
	openedAt time.Time
}

// NewBreakers returns an empty set of breakers.
func NewBreakers(cfg BreakerConfig) *Breakers {
	if cfg.Failures == 0 {
		cfg.Failures = 5
	}
	if cfg.Open <= 0 {
		cfg.Open = 30 * time.Second
	}
	if cfg.IsFailure == nil {
		cfg.IsFailure = defaultIsFailure
	}
	return &Breakers{cfg: cfg, m: map[string]*breaker{}}
}

func defaultIsFailure(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, context.Canceled),
		errors.Is(err, ErrLimited), errors.Is(err, ErrBudgetExceeded), errors.Is(err, ErrOpen),
		scheduler.IsPermanent(err):
		return false
	case errors.Is(err, ErrThrottled):
		return false // a 429 is the limiter's business, not the breaker's
	}
	return broker.ClassOf(err) != broker.Permanent
}

func (b *Breakers) get(dep string) *breaker {
	b.mu.Lock()
	defer b.mu.Unlock()
	if br, ok := b.m[dep]; ok {
		return br
	}
	br := &breaker{}
	br.cb = gobreaker.NewCircuitBreaker[any](gobreaker.Settings{
		Name:        dep,
		MaxRequests: 1,
		Timeout:     b.cfg.Open,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= b.cfg.Failures },
		IsSuccessful: func(err error) bool {
			return !b.cfg.IsFailure(err)
		},
		IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) },
		OnStateChange: func(name string, from, to gobreaker.State) {
			if to == gobreaker.StateOpen {
				br.mu.Lock()
				br.openedAt = time.Now()
				br.mu.Unlock()
			}
			if b.cfg.OnStateChange != nil {
				b.cfg.OnStateChange(name, from.String(), to.String())
			}
		},
	})
	b.m[dep] = br
	return br
}

// State returns the breaker state of dep: "closed", "open" or
// "half-open".
func (b *Breakers) State(dep string) string { return b.get(dep).cb.State().String() }

// Protect runs fn through dep's breaker. When the breaker is open it returns
// an *OpenError without calling fn; otherwise fn's result, and fn's error
// counts for or against the dependency (BreakerConfig.IsFailure).
func Protect[T any](ctx context.Context, b *Breakers, dep string, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	br := b.get(dep)
	v, err := br.cb.Execute(func() (any, error) { return fn(ctx) })
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		br.mu.Lock()
		in := time.Until(br.openedAt.Add(b.cfg.Open))
		br.mu.Unlock()
		if in <= 0 {
			// Half-open with the probe in flight: look again shortly.
			in = min(b.cfg.Open/10+MinSnooze, time.Second)
		}
		return zero, &OpenError{Dependency: dep, RetryIn: in}
	}
	if err != nil {
		return zero, err
	}
	out, _ := v.(T)
	return out, nil
}
