package scheduler

import (
	"math"
	"math/rand/v2"
	"time"
)

// RetryPolicy decides how often and when a failed task is tried again.
type RetryPolicy struct {
	// MaxAttempts is the most attempts a task gets, the first included.
	// Defaults to 10. A task's own MaxAttempts (set at enqueue) wins.
	MaxAttempts int
	// Base is the backoff before the second attempt. Defaults to 1s.
	Base time.Duration
	// Max caps the backoff. Defaults to 10m.
	Max time.Duration
	// Jitter chooses how the backoff is randomised. Defaults to FullJitter.
	Jitter Jitter
	// Rand returns a float in [0, 1); tests inject it. Defaults to
	// math/rand/v2.
	Rand func() float64
}

// Jitter is a backoff randomisation strategy.
type Jitter int

const (
	// FullJitter waits a uniform random time in [0, base·2^(n-1)], capped:
	// the spread that best de-synchronises retries of many tasks.
	FullJitter Jitter = iota
	// EqualJitter waits half the exponential backoff plus a uniform random
	// half.
	EqualJitter
	// NoJitter waits exactly the exponential backoff (for tests and
	// predictable schedules).
	NoJitter
)

// WithDefaults returns a copy with zero fields set to their defaults.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 10
	}
	if p.Base <= 0 {
		p.Base = time.Second
	}
	if p.Max <= 0 {
		p.Max = 10 * time.Minute
	}
	if p.Rand == nil {
		p.Rand = rand.Float64
	}
	return p
}

// Backoff returns the wait before attempt+1, after attempt failed
// (attempt ≥ 1).
func (p RetryPolicy) Backoff(attempt int) time.Duration {
	p = p.WithDefaults()
	if attempt < 1 {
		attempt = 1
	}
	exp := float64(p.Base) * math.Pow(2, float64(attempt-1))
	if exp > float64(p.Max) || math.IsInf(exp, 0) {
		exp = float64(p.Max)
	}
	switch p.Jitter {
	case NoJitter:
		return time.Duration(exp)
	case EqualJitter:
		return time.Duration(exp/2 + p.Rand()*exp/2)
	default:
		return time.Duration(p.Rand() * exp)
	}
}
