package scheduler

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

func TestRetryPolicy_Backoff(t *testing.T) {
	t.Parallel()
	half := func() float64 { return 0.5 }
	cases := []struct {
		name    string
		p       RetryPolicy
		attempt int
		want    time.Duration
	}{
		{"no jitter 1", RetryPolicy{Base: time.Second, Jitter: NoJitter}, 1, time.Second},
		{"no jitter 2", RetryPolicy{Base: time.Second, Jitter: NoJitter}, 2, 2 * time.Second},
		{"no jitter 5", RetryPolicy{Base: time.Second, Jitter: NoJitter}, 5, 16 * time.Second},
		{"capped", RetryPolicy{Base: time.Second, Max: 10 * time.Second, Jitter: NoJitter}, 8, 10 * time.Second},
		{"huge attempt capped", RetryPolicy{Base: time.Second, Max: time.Minute, Jitter: NoJitter}, 5000, time.Minute},
		{"full jitter", RetryPolicy{Base: time.Second, Jitter: FullJitter, Rand: half}, 3, 2 * time.Second},
		{"equal jitter", RetryPolicy{Base: time.Second, Jitter: EqualJitter, Rand: half}, 3, 3 * time.Second},
		{"attempt 0 is 1", RetryPolicy{Base: time.Second, Jitter: NoJitter}, 0, time.Second},
		{"defaults", RetryPolicy{Jitter: NoJitter}, 1, time.Second},
	}
	for _, c := range cases {
		if got := c.p.Backoff(c.attempt); got != c.want {
			t.Errorf("%s: Backoff(%d) = %s, want %s", c.name, c.attempt, got, c.want)
		}
	}
	// Full jitter stays within [0, cap] for any random value.
	p := RetryPolicy{Base: 100 * time.Millisecond, Max: time.Second}
	for i := 1; i < 50; i++ {
		if d := p.Backoff(i); d < 0 || d > time.Second {
			t.Fatalf("Backoff(%d) = %s outside [0, 1s]", i, d)
		}
	}
}

func TestClassifyResult(t *testing.T) {
	t.Parallel()
	base := errors.New("boom")
	cases := []struct {
		err   error
		class string
		delay time.Duration
	}{
		{nil, "", 0},
		{base, "transient", 0},
		{Permanent(base), "permanent", 0},
		{fmt.Errorf("wrapped: %w", Permanent(base)), "permanent", 0},
		{Cancel(nil), "cancel", 0},
		{Snooze(3 * time.Second), "snooze", 3 * time.Second},
		{RetryAfter(time.Minute, base), "transient", time.Minute},
		{UnknownOutcome(base), "unknown_outcome", 0},
		{AwaitApproval("big refund", "refund order 7"), "await_review", 0},
	}
	for _, c := range cases {
		o := classifyResult(c.err)
		if o.class() != c.class || o.delay != c.delay {
			t.Errorf("%v: class %q delay %s, want %q %s", c.err, o.class(), o.delay, c.class, c.delay)
		}
	}
	if !IsPermanent(fmt.Errorf("x: %w", Permanent(nil))) || IsPermanent(base) {
		t.Error("IsPermanent")
	}
	if !errors.Is(Permanent(base), base) {
		t.Error("Permanent does not wrap its cause")
	}
}

func TestConfig_Validate(t *testing.T) {
	t.Parallel()
	if _, err := New(nil, nil); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("New(nil broker) = %v", err)
	}
	c := (&Config{Lease: time.Second, Heartbeat: 2 * time.Second}).WithDefaults()
	if err := c.validate(); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("heartbeat ≥ lease: %v", err)
	}
	c = (&Config{Slots: 2}).WithDefaults()
	if err := c.validate(); err == nil {
		t.Error("2 slots with the default lanes (3 reserved) validated")
	}
	d := (*Config)(nil).WithDefaults()
	if d.Slots != 8 || d.Lease != 30*time.Second || d.Heartbeat != 10*time.Second || d.WorkerID == "" || len(d.Lanes) != 4 {
		t.Errorf("defaults = %+v", d)
	}
}
