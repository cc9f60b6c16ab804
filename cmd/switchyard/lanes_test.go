package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestCLI_LanesHistory: lanes pause and resume are in lanes history with
// the actor, newest first, as a table and as JSON, by lane and limited;
// bad input fails clearly with a non-zero exit and changes nothing.
func TestCLI_LanesHistory(t *testing.T) {
	e := newOpsEnv(t)
	common := []string{"--broker", e.url, "--ledger", e.dsn}
	code, out, errs := runCLI(t, append([]string{"lanes", "history"}, common...)...)
	if code != 0 || !strings.Contains(out, "no lane has been paused") {
		t.Fatalf("lanes history of a new ledger: %d %q %q", code, out, errs)
	}
	for _, step := range [][]string{
		{"pause", "batch", "--actor", "operator:ann"},
		{"pause", "batch", "--actor", "operator:bob"}, // already paused: not recorded
		{"resume", "batch", "--actor", "operator:bob"},
		{"pause", "interactive", "--actor", "operator:cy"},
	} {
		if code, out, errs := runCLI(t, append(append([]string{"lanes"}, step...), common...)...); code != 0 {
			t.Fatalf("lanes %v: %d %s %s", step, code, out, errs)
		}
	}

	// Table: a header and one row per change, newest first.
	code, out, errs = runCLI(t, append([]string{"lanes", "history"}, common...)...)
	if code != 0 {
		t.Fatalf("lanes history: %d %s %s", code, out, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "AT") || !strings.Contains(lines[0], "BY") {
		t.Fatalf("lanes history table:\n%s", out)
	}
	for i, want := range [][]string{{"interactive", "pause", "operator:cy"}, {"batch", "resume", "operator:bob"}, {"batch", "pause", "operator:ann"}} {
		f := strings.Fields(lines[i+1])
		if len(f) != 5 || f[2] != want[0] || f[3] != want[1] || f[4] != want[2] {
			t.Errorf("row %d = %q, want %v", i+1, lines[i+1], want)
		}
		if at, err := time.Parse(time.RFC3339Nano, f[0]); err != nil || time.Since(at) > time.Hour || time.Since(at) < -time.Minute {
			t.Errorf("row %d time %q: %v", i+1, f[0], err)
		}
	}

	// JSON, one lane, limited.
	type row struct {
		Lane, Action, Actor, At string
		Paused                  bool
	}
	var rows []row
	code, out, _ = runCLI(t, append([]string{"lanes", "history", "--json", "--lane", "batch"}, common...)...)
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 2 {
		t.Fatalf("lanes history --json --lane batch: %d %s", code, out)
	}
	if rows[0].Lane != "batch" || rows[0].Action != "resume" || rows[0].Paused || rows[0].Actor != "operator:bob" ||
		rows[1].Action != "pause" || !rows[1].Paused || rows[1].Actor != "operator:ann" || rows[1].At == "" {
		t.Errorf("lanes history --json --lane batch: %+v", rows)
	}
	code, out, _ = runCLI(t, append([]string{"lanes", "history", "--json", "--limit", "1"}, common...)...)
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || rows[0].Lane != "interactive" {
		t.Errorf("lanes history --json --limit 1: %d %s", code, out)
	}
	code, out, _ = runCLI(t, append([]string{"lanes", "history", "--json", "--lane", "scheduled"}, common...)...)
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("lanes history --json of a lane never paused: %d %q, want []", code, out)
	}

	// Bad input.
	before, _ := e.ops.Client().LaneEvents(e.ctx, "", 0)
	expectFail(t, 1, "lane", append([]string{"lanes", "history", "--lane", "bad lane"}, common...)...)
	expectFail(t, 1, "--limit", append([]string{"lanes", "history", "--limit", "-1"}, common...)...)
	expectFail(t, 1, "--limit", append([]string{"lanes", "history", "--limit", "5000"}, common...)...)
	expectFail(t, 2, "invalid value", append([]string{"lanes", "history", "--limit", "many"}, common...)...)
	expectFail(t, 2, "unexpected argument", append([]string{"lanes", "history", "batch"}, common...)...)
	expectFail(t, 2, "missing required flag --ledger", "lanes", "history", "--broker", e.url)
	expectFail(t, 1, "", "lanes", "history", "--broker", e.url, "--ledger", "nosuch://x")
	expectFail(t, 2, "unknown lanes command", append([]string{"lanes", "hist"}, common...)...)
	if after, _ := e.ops.Client().LaneEvents(e.ctx, "", 0); len(after) != len(before) {
		t.Errorf("bad input changed the history: %+v", after)
	}
}
