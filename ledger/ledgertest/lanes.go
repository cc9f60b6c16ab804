package ledgertest

import (
	"strings"
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
