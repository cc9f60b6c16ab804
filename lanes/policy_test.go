package lanes

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newDefaultPolicy(t *testing.T, total int) *Policy {
	t.Helper()
	p, err := NewPolicy(total, Defaults())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPolicy_Next(t *testing.T) {
	t.Parallel()
	ago := func(d time.Duration) time.Time { return t0.Add(-d) }
	// Defaults on 8 slots: interactive 2 + scheduled 1 reserved, 5 shared.
	// batch Running 1 keeps it at its 5 % minimum share (ceil(0.4) = 1).
	cases := []struct {
		name   string
		lanes  []Lane // nil: Defaults
		total  int    // 0: 8
		states []LaneState
		want   string // "" means ok=false
	}{
		{name: "nothing waiting", states: []LaneState{{Name: Batch, Running: 3}}},
		{name: "no states at all"},
		{name: "manual lane is never chosen",
			states: []LaneState{{Name: HumanReview, Waiting: true, OldestReady: ago(48 * time.Hour)}}},
		{name: "reserved slot even with shared slots full",
			states: []LaneState{{Name: Batch, Running: 5, Waiting: true}, {Name: Interactive, Waiting: true}},
			want:   Interactive},
		{name: "interactive first claim on shared",
			states: []LaneState{{Name: Batch, Running: 1, Waiting: true, OldestReady: ago(time.Second)}, {Name: Interactive, Running: 2, Waiting: true}},
			want:   Interactive},
		{name: "batch below its minimum share outranks weight",
			states: []LaneState{{Name: Batch, Running: 0, Waiting: true}, {Name: Interactive, Running: 4, Waiting: true}},
			want:   Batch},
		{name: "promoted batch outranks interactive on shared",
			states: []LaneState{{Name: Batch, Running: 1, Waiting: true, OldestReady: ago(3 * time.Second)}, {Name: Interactive, Running: 4, Waiting: true}},
			want:   Batch},
		{name: "promoted batch does not outrank a reservation",
			states: []LaneState{{Name: Batch, Running: 1, Waiting: true, OldestReady: ago(time.Hour)}, {Name: Scheduled, Waiting: true}},
			want:   Scheduled},
		{name: "paused interactive is skipped",
			states: []LaneState{{Name: Interactive, Waiting: true, Paused: true}, {Name: Batch, Running: 1, Waiting: true}},
			want:   Batch},
		{name: "idle reserved slots are not lent without P90",
			states: []LaneState{{Name: Batch, Running: 5, Waiting: true}}},
		{name: "idle reserved slot lent to short tasks",
			states: []LaneState{{Name: Batch, Running: 5, Waiting: true, P90: 20 * time.Millisecond}},
			want:   Batch},
		{name: "lender keeps one reserved slot idle",
			states: []LaneState{{Name: Batch, Running: 6, Waiting: true, P90: 20 * time.Millisecond}}},
		{name: "no lending to tasks long against the objective",
			states: []LaneState{{Name: Batch, Running: 5, Waiting: true, P90: 80 * time.Millisecond}}},
		{name: "no lending by a lane with work waiting",
			states: []LaneState{{Name: Batch, Running: 5, Waiting: true, P90: 20 * time.Millisecond}, {Name: Interactive, Running: 2, Waiting: true}}},
		{name: "scheduled with one reserved slot never lends",
			states: []LaneState{{Name: Batch, Running: 5, Waiting: true, P90: time.Millisecond}, {Name: Interactive, Running: 2}}},
		{name: "costly task that does not fit is skipped",
			states: []LaneState{{Name: Batch, Running: 0, Waiting: true, Cost: 2}, {Name: Scheduled, Running: 5, Waiting: true}},
			want:   Scheduled},
		{name: "promoted costly task holds the shared slots",
			states: []LaneState{{Name: Batch, Running: 4, Waiting: true, Cost: 2, OldestReady: ago(3 * time.Second)}, {Name: Interactive, Running: 2, Waiting: true}}},
		{name: "a hold never blocks a reservation",
			states: []LaneState{{Name: Batch, Running: 4, Waiting: true, Cost: 2, OldestReady: ago(3 * time.Second)}, {Name: Interactive, Running: 0, Waiting: true}},
			want:   Interactive},
		{name: "task costlier than the pool never holds",
			states: []LaneState{{Name: Batch, Running: 1, Waiting: true, Cost: 9, OldestReady: ago(time.Hour)}, {Name: Interactive, Running: 2, Waiting: true}},
			want:   Interactive},
		{name: "over-committed pool starts nothing",
			states: []LaneState{{Name: Batch, Running: 9}, {Name: Interactive, Waiting: true}}},
		{name: "a task spilling beyond its reservation competes for shared slots",
			states: []LaneState{{Name: Interactive, Running: 1, Waiting: true, Cost: 2}, {Name: Batch, Running: 5}, {Name: Scheduled, Waiting: true}},
			want:   Scheduled},
		{name: "unknown lanes are ignored, the first state of a lane wins",
			states: []LaneState{{Name: "nope", Waiting: true}, {Name: Interactive, Waiting: true}, {Name: Interactive, Paused: true}},
			want:   Interactive},
		{name: "earliest promotion deadline first",
			states: []LaneState{
				{Name: Scheduled, Running: 1, Waiting: true, OldestReady: ago(6 * time.Second)}, // deadline −1 s
				{Name: Batch, Running: 1, Waiting: true, OldestReady: ago(4 * time.Second)},     // deadline −2 s
			},
			want: Batch},
		{name: "age raises weight",
			lanes:  []Lane{{Name: "a", Weight: 10}, {Name: "b", Weight: 6, PromotionAge: 10 * time.Second}},
			total:  2,
			states: []LaneState{{Name: "a", Waiting: true}, {Name: "b", Waiting: true, OldestReady: ago(8 * time.Second)}},
			want:   "b"},
		{name: "young lane keeps its weight order",
			lanes:  []Lane{{Name: "a", Weight: 10}, {Name: "b", Weight: 6, PromotionAge: 10 * time.Second}},
			total:  2,
			states: []LaneState{{Name: "a", Waiting: true}, {Name: "b", Waiting: true, OldestReady: ago(5 * time.Second)}},
			want:   "a"},
		{name: "ties go to the lane defined first",
			lanes:  []Lane{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}},
			total:  1,
			states: []LaneState{{Name: "b", Waiting: true}, {Name: "a", Waiting: true}},
			want:   "a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lanes, total := tc.lanes, tc.total
			if lanes == nil {
				lanes = Defaults()
			}
			if total == 0 {
				total = 8
			}
			p, err := NewPolicy(total, lanes)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := p.Next(t0, tc.states)
			if ok != (tc.want != "") || got != tc.want {
				t.Fatalf("Next = %q, %v; want %q, %v", got, ok, tc.want, tc.want != "")
			}
		})
	}
}

func TestPolicy_NextAgeResetsWhenServed(t *testing.T) {
	t.Parallel()
	p := newDefaultPolicy(t, 8)
	states := []LaneState{
		{Name: Batch, Running: 1, Waiting: true, OldestReady: t0.Add(-3 * time.Second)},
		{Name: Interactive, Running: 2, Waiting: true, OldestReady: t0},
	}
	if got, _ := p.Next(t0, states); got != Batch {
		t.Fatalf("first Next = %q, want the promoted batch", got)
	}
	states[0].Running = 2
	if got, _ := p.Next(t0, states); got != Interactive {
		t.Fatalf("second Next = %q, want interactive: batch was just served", got)
	}
	states[1].Running = 3
	states[1].OldestReady = t0.Add(1900 * time.Millisecond) // a fresh task
	// Promoted again one promotion age after its last slot.
	if got, _ := p.Next(t0.Add(2*time.Second), states); got != Batch {
		t.Fatalf("Next 2 s later = %q, want batch promoted again", got)
	}
}

func TestPolicy_NextUnknownOldestReadyUsesWaitingSince(t *testing.T) {
	t.Parallel()
	p := newDefaultPolicy(t, 8)
	states := []LaneState{{Name: Batch, Running: 1, Waiting: true}, {Name: Interactive, Running: 2, Waiting: true}}
	if got, _ := p.Next(t0, states); got != Interactive {
		t.Fatalf("Next = %q, want interactive", got)
	}
	states[1].Running = 3
	if got, _ := p.Next(t0.Add(1999*time.Millisecond), states); got != Interactive {
		t.Fatalf("Next before the promotion age = %q, want interactive", got)
	}
	states[1].Running = 4
	if got, _ := p.Next(t0.Add(2*time.Second), states); got != Batch {
		t.Fatalf("Next at the promotion age = %q, want batch", got)
	}
}

func TestPolicy_Share(t *testing.T) {
	t.Parallel()
	p := newDefaultPolicy(t, 8)
	states := []LaneState{{Name: Batch, Running: 4}, {Name: Interactive, Running: 2}}
	for s := range 30 {
		p.Next(t0.Add(time.Duration(s)*time.Second), states)
	}
	if got := p.Share(Batch); got < 0.49 || got > 0.51 {
		t.Errorf("Share(batch) = %.3f, want 0.5", got)
	}
	if got := p.Share(Interactive); got < 0.24 || got > 0.26 {
		t.Errorf("Share(interactive) = %.3f, want 0.25", got)
	}
	if got := p.Share("nope"); got != 0 {
		t.Errorf("Share(unknown) = %v, want 0", got)
	}
	// A clock that steps back changes nothing.
	p.Next(t0, states)
	if got := p.Share(Batch); got < 0.49 || got > 0.51 {
		t.Errorf("Share(batch) after a step back = %.3f, want 0.5", got)
	}
}

func TestPolicy_Accessors(t *testing.T) {
	t.Parallel()
	lanes := Defaults()
	p, err := NewPolicy(8, lanes)
	if err != nil {
		t.Fatal(err)
	}
	lanes[0].Reserved = 7 // the policy keeps its own copy
	if p.Total() != 8 || p.Shared() != 5 || p.Lanes()[0].Reserved != 2 || len(p.Lanes()) != 4 {
		t.Fatalf("Total %d Shared %d Lanes %+v", p.Total(), p.Shared(), p.Lanes())
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		total int
		lanes []Lane
		want  string // substring of the error; "" means valid
	}{
		{"defaults on 8", 8, Defaults(), ""},
		{"defaults on 4", 4, Defaults(), ""},
		{"defaults on 3: batch could never run", 3, Defaults(), `lane "batch": Reserved: the lane has no reserved slots`},
		{"defaults on 2", 2, Defaults(), "reserved slots sum to 3, more than the 2 slots"},
		{"zero slots", 0, Defaults(), "totalSlots: must be positive"},
		{"no lanes", 4, nil, "no lanes defined"},
		{"empty name", 4, []Lane{{Name: ""}}, "lane name is empty"},
		{"bad name", 4, []Lane{{Name: "a b"}}, "characters outside"},
		{"duplicate", 4, []Lane{{Name: "a"}, {Name: "a"}}, `lane "a": Name: defined twice`},
		{"negative reserved", 4, []Lane{{Name: "a", Reserved: -1}}, "Reserved: must not be negative"},
		{"negative weight", 4, []Lane{{Name: "a", Weight: -1}}, "Weight: must not be negative"},
		{"negative promotion", 4, []Lane{{Name: "a", PromotionAge: -1}}, "PromotionAge: must not be negative"},
		{"negative objective", 4, []Lane{{Name: "a", WaitObjective: -1}}, "WaitObjective: must not be negative"},
		{"share above 1", 4, []Lane{{Name: "a", MinShare: 1.5}}, "MinShare: must be within [0, 1]"},
		{"shares above 1", 4, []Lane{{Name: "a", MinShare: 0.6}, {Name: "b", MinShare: 0.6}}, "minimum shares sum to 1.200"},
		{"share beyond reach", 4, []Lane{{Name: "a", Reserved: 3}, {Name: "b", MinShare: 0.5}}, "more than the 1 slots the lane can hold"},
		{"manual with reservation", 4, []Lane{{Name: "a", Manual: true, Reserved: 1}, {Name: "b"}}, "a manual lane cannot reserve slots"},
		{"all reserved, no shared-only lane", 3, []Lane{{Name: "a", Reserved: 2}, {Name: "b", Reserved: 1}, {Name: "r", Manual: true}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := Validate(tc.total, tc.lanes)
			_, nerr := NewPolicy(tc.total, tc.lanes)
			if tc.want == "" {
				if err != nil || nerr != nil {
					t.Fatalf("Validate = %v, NewPolicy = %v; want nil", err, nerr)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v; want an error containing %q", err, tc.want)
			}
			if nerr == nil {
				t.Fatal("NewPolicy accepted what Validate refused")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Errorf("errors.As(%v, *ConfigError) = false", err)
			}
		})
	}
}

// TestPolicy_ConcurrentUse: Next and Share may be called from several
// goroutines (the race detector checks the locking); every answer is
// still a valid lane.
func TestPolicy_ConcurrentUse(t *testing.T) {
	t.Parallel()
	p := newDefaultPolicy(t, 8)
	done := make(chan error, 4)
	for g := range 4 {
		go func() {
			for k := range 200 {
				now := t0.Add(time.Duration(g*200+k) * time.Millisecond)
				states := []LaneState{{Name: Batch, Running: k % 6, Waiting: true}, {Name: Interactive, Running: k % 3, Waiting: k%2 == 0}}
				if lane, ok := p.Next(now, states); ok && lane != Batch && lane != Interactive {
					done <- errors.New("Next returned " + lane)
					return
				}
				_ = p.Share(Batch)
			}
			done <- nil
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
