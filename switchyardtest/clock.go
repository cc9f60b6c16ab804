package switchyardtest

import (
	"sync"
	"time"
)

// Clock is a fake clock: it stands still until the test moves it. Env
// gives it to the broker, the ledger and the scheduler, so delays, retry
// back-off and leases all follow it.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock reading start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time. Its signature fits every Now field of
// Switchyard's configuration structs.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (a negative d is ignored: time does
// not run backwards) and returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > 0 {
		c.now = c.now.Add(d)
	}
	return c.now
}
