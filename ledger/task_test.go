package ledger

import "testing"

func TestTask_NextAttempt(t *testing.T) {
	for _, c := range []struct {
		state   State
		attempt int
		want    int
	}{
		{Queued, 0, 1},         // fresh
		{Queued, 1, 1},         // snoozed or returned: the number is not spent
		{Queued, 3, 3},         // replayed, approved or resumed after 2 attempts
		{RetryWait, 1, 2},      // failed once, waiting
		{Running, 2, 0},        // no next attempt lined up
		{AwaitingReview, 1, 0}, // parked
		{Completed, 1, 0},
		{Dead, 2, 0},
	} {
		task := &Task{State: c.state, Attempt: c.attempt}
		if got := task.NextAttempt(); got != c.want {
			t.Errorf("%s with Attempt %d: NextAttempt %d, want %d", c.state, c.attempt, got, c.want)
		}
	}
}
