package sqs

import (
	"testing"
	"time"
)

// TestMoverBackoff: a failing mover's pause doubles from moverPause to
// moverMaxPause, its warnings come at most once per moverLogEvery, and a
// success resets both (and reports a logged run so the recovery is
// logged too).
func TestMoverBackoff(t *testing.T) {
	t.Parallel()
	var b moverBackoff
	if n, logged := b.succeeded(); n != 0 || logged {
		t.Fatalf("succeeded without failures = %d, %v", n, logged)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	wantPause := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute}
	now := t0
	logs := 0
	for i, want := range wantPause {
		wait, n, log := b.failed(now)
		if wait != want || n != i+1 {
			t.Fatalf("failure %d: pause %v, count %d; want %v, %d", i+1, wait, n, want, i+1)
		}
		if log {
			logs++
		}
		if i == 0 && !log {
			t.Fatal("the first failure is not logged")
		}
		now = now.Add(wait)
	}
	// 1+2+4+8+16+32 s = 63 s after the first: the 7th is logged again, the
	// 8th (60 s later still, but 60 s after the 7th) too.
	if logs != 3 {
		t.Errorf("%d warnings over %v of failures; want 3 (one a minute)", logs, now.Sub(t0))
	}
	if n, logged := b.succeeded(); n != len(wantPause) || !logged {
		t.Errorf("succeeded = %d, %v; want %d, true", n, logged, len(wantPause))
	}
	if wait, n, log := b.failed(now); wait != moverPause || n != 1 || !log {
		t.Errorf("after a success: pause %v, count %d, log %v; want a fresh run", wait, n, log)
	}
}
