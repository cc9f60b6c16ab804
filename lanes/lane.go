package lanes

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// The names of the four default lanes.
const (
	Interactive = "interactive"
	Scheduled   = "scheduled"
	Batch       = "batch"
	HumanReview = "human-review"
)

// Lane is the static definition of one lane: how many worker slots it owns,
// how it competes for the shared ones, and when its waiting work is
// promoted. The zero value of every field is valid and means "nothing
// special": no reservation, weight 0 (it runs on shared slots only when no
// lane with a weight wants them, or when promoted), no promotion, no wait
// objective (it never lends its reserved slots), no minimum share.
type Lane struct {
	// Name is the lane's name, as in broker.Message.Lane. Required; see
	// ValidateName (the rule broker.ValidateName applies too).
	Name string

	// Reserved is the number of slots only this lane may use. A lane below
	// its reservation with work waiting always gets the next of its own
	// slots; no other lane ever holds one of them, except a borrower
	// allowed by the lending rule (see WaitObjective). Defaults to 0
	// (shared slots only). The sum over all lanes must not exceed the
	// policy's total slots.
	Reserved int

	// Weight orders lanes competing for a shared slot when none of them is
	// promoted or below its minimum share: the higher effective priority
	// (Weight raised by the age of the lane's oldest waiting task) wins.
	// Defaults to 0.
	Weight int

	// PromotionAge is how long a lane's work may wait (since its oldest
	// ready task was enqueued, or since the lane last got a slot, whichever
	// is later) before the lane is promoted: a promoted lane outranks every
	// lane except one still within its reservation, so no lane starves.
	// It also scales the weight: effective priority = Weight × (1 +
	// age/PromotionAge). Defaults to 0: never promoted. A lane with no
	// reservation should set it, or it may wait indefinitely under load.
	// For a Manual lane it is the escalation age (informational here).
	PromotionAge time.Duration

	// WaitObjective is the start latency this lane's tasks should meet. The
	// policy uses it for lending: when the lane has nothing waiting, all
	// but one of its idle reserved slots may be lent to a lane whose
	// observed p90 task duration (LaneState.P90) is at most
	// WaitObjective × BorrowFraction, so a task of this lane that arrives
	// while every free reserved slot is lent waits, in the p90 case, no
	// more than half its objective, and a lone arrival waits not at all.
	// Defaults to 0: the lane never lends.
	WaitObjective time.Duration

	// MinShare is the fraction of all slots (0..1, time-averaged over
	// ShareWindow) the lane keeps under overload: while its share is below
	// MinShare and it has work waiting, it outranks lanes competing by
	// weight for shared slots. Defaults to 0. The sum over all lanes must
	// not exceed 1.
	MinShare float64

	// Manual marks a lane whose tasks are claimed by people (human review),
	// never pulled by handlers: the policy never returns it. A manual lane
	// cannot reserve slots. Defaults to false.
	Manual bool
}

// Defaults returns the four default lanes, in rank order for ties:
//
//   - interactive: 2 reserved slots, weight 100 (first claim on the shared
//     slots), promoted after 500 ms, wait objective 100 ms (lends at most
//     one idle reserved slot to tasks of p90 ≤ 50 ms).
//   - scheduled: 1 reserved slot, weight 10, promoted after 5 s, wait
//     objective 1 s (with one reserved slot it never lends).
//   - batch: shared slots only, weight 1, promoted after 2 s so it never
//     starves, minimum share 2 % of all slots under overload (every point
//     of share guaranteed to batch is taken from interactive when the pool
//     is overloaded: see docs/BENCHMARKS.md, S3).
//   - human-review: manual, escalates after 24 h.
//
// With these, a policy needs at least 4 slots (3 reserved + 1 shared).
// The slice is fresh; callers may change it before NewPolicy.
func Defaults() []Lane {
	return []Lane{
		{Name: Interactive, Reserved: 2, Weight: 100, PromotionAge: 500 * time.Millisecond, WaitObjective: 100 * time.Millisecond},
		{Name: Scheduled, Reserved: 1, Weight: 10, PromotionAge: 5 * time.Second, WaitObjective: time.Second},
		{Name: Batch, Weight: 1, PromotionAge: 2 * time.Second, MinShare: 0.02},
		{Name: HumanReview, Manual: true, PromotionAge: 24 * time.Hour},
	}
}

// ConfigError reports an invalid lane definition or policy size. It matches
// ErrInvalid (and so broker.ErrInvalid, the same error) with errors.Is.
type ConfigError struct {
	Lane   string // the lane concerned, empty for the whole policy
	Field  string // the field concerned, empty if none
	Reason string
}

func (e *ConfigError) Error() string {
	switch {
	case e.Lane != "" && e.Field != "":
		return fmt.Sprintf("lanes: lane %q: %s: %s", e.Lane, e.Field, e.Reason)
	case e.Lane != "":
		return fmt.Sprintf("lanes: lane %q: %s", e.Lane, e.Reason)
	case e.Field != "":
		return fmt.Sprintf("lanes: %s: %s", e.Field, e.Reason)
	}
	return "lanes: " + e.Reason
}

// Is makes errors.Is(err, ErrInvalid) true (broker.ErrInvalid is ErrInvalid).
func (e *ConfigError) Is(target error) bool { return target == ErrInvalid }

// Validate checks a set of lane definitions against totalSlots worker
// slots. It reports every problem found, joined with errors.Join; each is
// a *ConfigError.
func Validate(totalSlots int, lanes []Lane) error {
	var errs []error
	bad := func(lane, field, format string, args ...any) {
		errs = append(errs, &ConfigError{Lane: lane, Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if totalSlots <= 0 {
		bad("", "totalSlots", "must be positive, got %d", totalSlots)
	}
	if len(lanes) == 0 {
		bad("", "lanes", "no lanes defined")
	}
	seen := make(map[string]bool, len(lanes))
	reserved := 0
	share := 0.0
	needShared := ""
	for i, l := range lanes {
		name := l.Name
		if err := ValidateName("lane name", l.Name); err != nil {
			bad(fmt.Sprintf("#%d", i), "Name", "%v", err)
			name = fmt.Sprintf("#%d", i)
		} else if seen[l.Name] {
			bad(l.Name, "Name", "defined twice")
		}
		seen[l.Name] = true
		if l.Reserved < 0 {
			bad(name, "Reserved", "must not be negative, got %d", l.Reserved)
		}
		if l.Weight < 0 {
			bad(name, "Weight", "must not be negative, got %d", l.Weight)
		}
		if l.PromotionAge < 0 {
			bad(name, "PromotionAge", "must not be negative, got %v", l.PromotionAge)
		}
		if l.WaitObjective < 0 {
			bad(name, "WaitObjective", "must not be negative, got %v", l.WaitObjective)
		}
		if math.IsNaN(l.MinShare) || l.MinShare < 0 || l.MinShare > 1 {
			bad(name, "MinShare", "must be within [0, 1], got %v", l.MinShare)
		} else {
			share += l.MinShare
		}
		if l.Manual && l.Reserved != 0 {
			bad(name, "Reserved", "a manual lane cannot reserve slots, got %d", l.Reserved)
		}
		if l.Reserved > 0 {
			reserved += l.Reserved
		}
		if !l.Manual && l.Reserved <= 0 && needShared == "" {
			needShared = name
		}
	}
	if totalSlots > 0 && reserved > totalSlots {
		bad("", "Reserved", "reserved slots sum to %d, more than the %d slots in total", reserved, totalSlots)
	}
	if totalSlots > 0 && reserved == totalSlots && needShared != "" {
		bad(needShared, "Reserved", "the lane has no reserved slots and all %d slots are reserved, so it could never run", totalSlots)
	}
	if totalSlots > 0 && reserved <= totalSlots {
		for _, l := range lanes {
			if l.MinShare > 0 && l.Reserved >= 0 && l.MinShare*float64(totalSlots) > float64(totalSlots-reserved+l.Reserved)+1e-9 {
				bad(l.Name, "MinShare", "%.3f of %d slots is more than the %d slots the lane can hold (its reservation plus the shared slots)",
					l.MinShare, totalSlots, totalSlots-reserved+l.Reserved)
			}
		}
	}
	if share > 1+1e-9 {
		bad("", "MinShare", "minimum shares sum to %.3f, more than 1", share)
	}
	return errors.Join(errs...)
}
