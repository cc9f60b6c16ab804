package ledgertest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// EffectStates: every ledger.EffectState is accepted by SetEffect and read
// back — failed (tried, known not done) and would_do (a sandbox replay
// reached the effect and did not perform it) included — and a would_do
// effect is a record like any other: BeginEffect returns it without
// beginning it again.
func EffectStates(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	for _, st := range []ledger.EffectState{ledger.EffectPending, ledger.EffectUnknown, ledger.EffectFailed, ledger.EffectWouldDo} {
		key := "e-" + string(st)
		if _, begun, err := l.BeginEffect(ctx(t), task.ID, key, 1); err != nil || !begun {
			t.Fatalf("BeginEffect %s: begun=%v %v", key, begun, err)
		}
		if err := l.SetEffect(ctx(t), task.ID, key, st, nil); err != nil {
			t.Fatalf("SetEffect %s: %v", st, err)
		}
		e, begun, err := l.BeginEffect(ctx(t), task.ID, key, 2)
		if err != nil || begun || e.State != st || e.Attempt != 1 {
			t.Fatalf("BeginEffect after SetEffect %s: %+v begun=%v %v", st, e, begun, err)
		}
	}
	// A would_do effect may still be confirmed (it was not done, so it is
	// not final); a confirmed one never becomes would_do.
	if err := l.SetEffect(ctx(t), task.ID, "e-would_do", ledger.EffectConfirmed, []byte("r")); err != nil {
		t.Fatalf("confirming a would_do effect: %v", err)
	}
	err := l.SetEffect(ctx(t), task.ID, "e-would_do", ledger.EffectWouldDo, nil)
	wantIs(t, "SetEffect would_do on a confirmed effect", err, ledger.ErrConflict)
	es, err := l.Effects(ctx(t), task.ID)
	if err != nil || len(es) != 4 {
		t.Fatalf("Effects = %+v, %v; want 4", es, err)
	}
	byKey := map[string]ledger.EffectState{}
	for _, e := range es {
		byKey[e.Key] = e.State
	}
	want := map[string]ledger.EffectState{"e-pending": ledger.EffectPending, "e-unknown": ledger.EffectUnknown,
		"e-failed": ledger.EffectFailed, "e-would_do": ledger.EffectConfirmed}
	for k, st := range want {
		if byKey[k] != st {
			t.Errorf("effect %s is %q, want %q", k, byKey[k], st)
		}
	}
}

// LaneControls: a store implementing ledger.LaneControls pauses and
// resumes lanes idempotently (a second pause keeps the first actor and
// time), lists them by name, and refuses bad lane names and actors. A store without the optional interface skips.
func LaneControls(t *testing.T, mk Maker) {
	l := mk(t)
	lc, ok := l.(ledger.LaneControls)
	if !ok {
		t.Skipf("%T does not implement the optional ledger.LaneControls", l)
	}
	ps, err := lc.PausedLanes(ctx(t))
	if err != nil || len(ps) != 0 {
		t.Fatalf("PausedLanes of a new store = %+v, %v", ps, err)
	}
	before := time.Now().Add(-time.Second)
	if err := lc.SetLanePaused(ctx(t), "batch", true, "operator:alice"); err != nil {
		t.Fatal(err)
	}
	if err := lc.SetLanePaused(ctx(t), "interactive", true, ""); err != nil {
		t.Fatal(err)
	}
	ps, err = lc.PausedLanes(ctx(t))
	if err != nil || len(ps) != 2 {
		t.Fatalf("PausedLanes = %+v, %v; want batch and interactive", ps, err)
	}
	if ps[0].Lane != "batch" || ps[0].Actor != "operator:alice" || ps[0].Since.Before(before) || ps[0].Since.After(time.Now().Add(time.Second)) {
		t.Errorf("first pause = %+v", ps[0])
	}
	if ps[1].Lane != "interactive" || ps[1].Actor != "" {
		t.Errorf("second pause = %+v", ps[1])
	}
	first := ps[0]
	// Pausing again keeps the first pause.
	if err := lc.SetLanePaused(ctx(t), "batch", true, "operator:bob"); err != nil {
		t.Fatal(err)
	}
	ps, _ = lc.PausedLanes(ctx(t))
	if len(ps) != 2 || ps[0].Actor != "operator:alice" || !sameTime(ps[0].Since, first.Since) {
		t.Errorf("after a second pause: %+v, want alice's pause kept", ps)
	}
	// Resume; resuming again (or a lane never paused) is a no-op.
	for i := 0; i < 2; i++ {
		if err := lc.SetLanePaused(ctx(t), "batch", false, "operator:bob"); err != nil {
			t.Fatalf("resume %d: %v", i+1, err)
		}
	}
	if err := lc.SetLanePaused(ctx(t), "scheduled", false, ""); err != nil {
		t.Fatalf("resuming a lane never paused: %v", err)
	}
	ps, _ = lc.PausedLanes(ctx(t))
	if len(ps) != 1 || ps[0].Lane != "interactive" {
		t.Errorf("after resume: %+v, want only interactive", ps)
	}
	// Bad input.
	for _, lane := range []string{"", "-bad", "has space", strings.Repeat("a", broker.MaxNameLen+1)} {
		wantInvalid(t, "SetLanePaused "+lane, lc.SetLanePaused(ctx(t), lane, true, "x"))
	}
	wantInvalid(t, "SetLanePaused with a control character in the actor", lc.SetLanePaused(ctx(t), "batch", true, "a\nb"))
	if ps, _ := lc.PausedLanes(ctx(t)); len(ps) != 1 {
		t.Errorf("refused calls changed the pauses: %+v", ps)
	}
}

// LaneEvents: every SetLanePaused call that changes a lane's state appends
// a lane event with its actor, listed newest first; calls that change
// nothing (pausing a paused lane, resuming a running one) and refused
// calls add none; the listing filters by lane, applies its limit (0 = 100)
// and refuses a bad lane or a negative limit. A store without
// ledger.LaneControls skips.
func LaneEvents(t *testing.T, mk Maker) {
	l := mk(t)
	lc, ok := l.(ledger.LaneControls)
	if !ok {
		t.Skipf("%T does not implement the optional ledger.LaneControls", l)
	}
	es, err := lc.LaneEvents(ctx(t), "", 0)
	if err != nil || len(es) != 0 {
		t.Fatalf("LaneEvents of a new store = %+v, %v", es, err)
	}
	before := time.Now().Add(-time.Second)
	set := func(lane string, paused bool, actor string) {
		t.Helper()
		if err := lc.SetLanePaused(ctx(t), lane, paused, actor); err != nil {
			t.Fatalf("SetLanePaused(%s, %v, %s): %v", lane, paused, actor, err)
		}
	}
	set("batch", true, "operator:alice")
	set("batch", true, "operator:bob")      // already paused: no event
	set("scheduled", false, "operator:bob") // never paused: no event
	set("batch", false, "operator:bob")
	set("batch", false, "operator:carol") // already running: no event
	set("interactive", true, "token:ci")
	set("batch", true, "operator:carol")
	after := time.Now().Add(time.Second)

	type ev struct {
		lane, actor string
		paused      bool
	}
	check := func(what string, got []ledger.LaneEvent, want ...ev) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d events %+v, want %d %+v", what, len(got), got, len(want), want)
		}
		for i, w := range want {
			g := got[i]
			if g.Lane != w.lane || g.Actor != w.actor || g.Paused != w.paused {
				t.Errorf("%s: event %d = %+v, want %+v", what, i, g, w)
			}
			if g.At.Before(before) || g.At.After(after) {
				t.Errorf("%s: event %d at %v, not between %v and %v", what, i, g.At, before, after)
			}
			if i > 0 && g.At.After(got[i-1].At) {
				t.Errorf("%s: event %d (%v) is newer than event %d (%v): want newest first", what, i, g.At, i-1, got[i-1].At)
			}
		}
	}
	batch := []ev{{"batch", "operator:carol", true}, {"batch", "operator:bob", false}, {"batch", "operator:alice", true}}
	es, err = lc.LaneEvents(ctx(t), "batch", 0)
	if err != nil {
		t.Fatal(err)
	}
	check("LaneEvents(batch)", es, batch...)
	// The history agrees with the current pause.
	ps, _ := lc.PausedLanes(ctx(t))
	if len(ps) != 2 || ps[0].Lane != "batch" || ps[0].Actor != "operator:carol" || !sameTime(ps[0].Since, es[0].At) {
		t.Errorf("PausedLanes = %+v, want batch paused by carol at %v", ps, es[0].At)
	}
	es, err = lc.LaneEvents(ctx(t), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	check("LaneEvents(all)", es, batch[0], ev{"interactive", "token:ci", true}, batch[1], batch[2])
	es, err = lc.LaneEvents(ctx(t), "interactive", 100)
	if err != nil {
		t.Fatal(err)
	}
	check("LaneEvents(interactive)", es, ev{"interactive", "token:ci", true})
	es, err = lc.LaneEvents(ctx(t), "scheduled", 0)
	if err != nil || len(es) != 0 {
		t.Errorf("LaneEvents of a lane never changed = %+v, %v", es, err)
	}
	// Limit: the newest n.
	es, err = lc.LaneEvents(ctx(t), "", 2)
	if err != nil {
		t.Fatal(err)
	}
	check("LaneEvents(all, 2)", es, batch[0], ev{"interactive", "token:ci", true})
	es, err = lc.LaneEvents(ctx(t), "batch", 1)
	if err != nil {
		t.Fatal(err)
	}
	check("LaneEvents(batch, 1)", es, batch[0])
	// 0 is 100 and above 1000 is 1000: 110 changes give 100, then 110.
	for i := range 110 {
		set("bulk", i%2 == 0, fmt.Sprintf("operator:%d", i))
	}
	for _, c := range []struct{ limit, want int }{{0, 100}, {100, 100}, {5000, 110}} {
		es, err = lc.LaneEvents(ctx(t), "bulk", c.limit)
		if err != nil || len(es) != c.want {
			t.Fatalf("LaneEvents(bulk, %d) = %d events, %v; want %d", c.limit, len(es), err, c.want)
		}
		if es[0].Actor != "operator:109" || es[0].Paused || es[len(es)-1].Actor != fmt.Sprintf("operator:%d", 110-c.want) {
			t.Errorf("LaneEvents(bulk, %d): first %+v, last %+v", c.limit, es[0], es[len(es)-1])
		}
	}
	// Bad input; refused pauses write no event.
	for _, lane := range []string{"-bad", "has space", strings.Repeat("a", broker.MaxNameLen+1)} {
		_, err := lc.LaneEvents(ctx(t), lane, 0)
		wantInvalid(t, "LaneEvents "+lane, err)
	}
	_, err = lc.LaneEvents(ctx(t), "batch", -1)
	wantInvalid(t, "LaneEvents with a negative limit", err)
	wantInvalid(t, "SetLanePaused with a bad actor", lc.SetLanePaused(ctx(t), "fresh", true, "a\nb"))
	if es, _ := lc.LaneEvents(ctx(t), "fresh", 0); len(es) != 0 {
		t.Errorf("a refused pause wrote events: %+v", es)
	}
}

// RaceLanePause: of racing pauses of a running lane exactly one writes an
// event (and its actor holds the pause); of racing resumes, exactly one.
func RaceLanePause(t *testing.T, mk Maker) {
	l := mk(t)
	lc, ok := l.(ledger.LaneControls)
	if !ok {
		t.Skipf("%T does not implement the optional ledger.LaneControls", l)
	}
	for _, paused := range []bool{true, false} {
		var (
			mu   sync.Mutex
			errs []error
		)
		race(func(i int) {
			err := lc.SetLanePaused(ctx(t), "batch", paused, fmt.Sprintf("operator:%d", i))
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
		if len(errs) > 0 {
			t.Fatalf("racing SetLanePaused(%v): %d errors, first %v", paused, len(errs), errs[0])
		}
		es, err := lc.LaneEvents(ctx(t), "batch", 0)
		if err != nil {
			t.Fatal(err)
		}
		want := 1
		if !paused {
			want = 2
		}
		if len(es) != want || es[0].Paused != paused {
			t.Fatalf("after racing SetLanePaused(%v): events %+v, want %d", paused, es, want)
		}
		if paused {
			ps, _ := lc.PausedLanes(ctx(t))
			if len(ps) != 1 || ps[0].Actor != es[0].Actor {
				t.Errorf("pause held by %+v, event by %q", ps, es[0].Actor)
			}
		}
	}
}
