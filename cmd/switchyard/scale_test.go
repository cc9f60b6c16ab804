package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/scaling"
)

// TestCLI_Scale: switchyard scale prints a lane's desired slots as a plain
// number (depth scaling without a duration; the backlog over the drain
// horizon with --expect), the whole signal with --json; a missing --lane
// is a usage error, an unknown lane an error.
func TestCLI_Scale(t *testing.T) {
	e := newOpsEnv(t)
	for range 5 {
		e.enqueue("batch", "", `{}`)
	}
	common := []string{"--broker", e.url, "--ledger", e.dsn, "--window", "0"}
	code, out, errs := runCLI(t, append([]string{"scale", "--lane", "batch"}, common...)...)
	if code != 0 || strings.TrimSpace(out) != "5" {
		t.Fatalf("scale --lane batch: %d %q %q, want 5", code, out, errs)
	}
	code, out, errs = runCLI(t, append([]string{"scale", "--lane", "batch", "--expect", "20s", "--slots", "4", "--json"}, common...)...)
	var s scaling.Signal
	if code != 0 || json.Unmarshal([]byte(out), &s) != nil {
		t.Fatalf("scale --json: %d %q %q", code, out, errs)
	}
	if s.Lane != "batch" || s.Ready != 5 || s.Desired != 1 || s.Workers != 1 || s.Reason != "catch_up" || s.P90MS != 20000 {
		t.Errorf("signal %+v, want batch: 5 ready, 1 slot (5 × 20 s over 10 min), catch_up", s)
	}
	if code, _, errs := runCLI(t, append([]string{"scale"}, common...)...); code != 2 || !strings.Contains(errs, "--lane") {
		t.Errorf("scale without --lane: %d %q, want a usage error", code, errs)
	}
	if code, _, errs := runCLI(t, append([]string{"scale", "--lane", "nope"}, common...)...); code != 1 || !strings.Contains(errs, "nope") {
		t.Errorf("scale --lane nope: %d %q, want an error naming the lane", code, errs)
	}
}
