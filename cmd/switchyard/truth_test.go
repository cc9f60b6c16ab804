package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// TestCLI_OpensExistingStoresOnly (issue 20, item 2): a mistyped path is
// "no such database", and nothing is created; --create creates.
func TestCLI_OpensExistingStoresOnly(t *testing.T) {
	e := newOpsEnv(t)
	dir := t.TempDir()
	typo := filepath.Join(dir, "typo", "q.db")
	expectFail(t, 1, "no such database: "+typo, "stats", "--broker", "embedded://"+typo)
	expectFail(t, 1, "no such database: "+typo, "peek", "--broker", "embedded://"+typo, "--lane", "batch")
	nosuch := filepath.Join(dir, "nosuch.db")
	expectFail(t, 1, "no such database: "+nosuch, "tasks", "ls", "--broker", e.url, "--ledger", "sqlite://"+nosuch)
	expectFail(t, 1, "no such database: "+nosuch, "lanes", "ls", "--broker", e.url, "--ledger", "sqlite:"+nosuch)
	for _, p := range []string{filepath.Join(dir, "typo"), nosuch} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s was created (%v)", p, err)
		}
	}
	// The stores that exist open as before.
	if code, out, errs := runCLI(t, "stats", "--broker", e.url); code != 0 || !strings.Contains(out, "batch") {
		t.Fatalf("stats on the existing queue: %d %s %s", code, out, errs)
	}
	// An explicit --create makes a new one.
	if code, _, errs := runCLI(t, "stats", "--broker", "embedded://"+typo, "--create"); code != 0 {
		t.Fatalf("stats --create: %d %s", code, errs)
	}
	if _, err := os.Stat(typo); err != nil {
		t.Errorf("--create did not create %s: %v", typo, err)
	}
}

// TestCLI_UnknownLanes (issue 20, item 3): peek, dlq ls, lanes pause and
// enqueue refuse a lane nobody knows and name the known ones; --lanes
// declares more.
func TestCLI_UnknownLanes(t *testing.T) {
	e := newOpsEnv(t)
	common := []string{"--broker", e.url, "--ledger", e.dsn}
	const want = `unknown lane "nosuch" (known lanes: batch, human-review, interactive, scheduled)`
	for _, args := range [][]string{
		{"peek", "--lane", "nosuch"},
		{"dlq", "ls", "--lane", "nosuch"},
		{"dlq", "purge", "--lane", "nosuch", "--yes"},
		{"lanes", "pause", "nosuch"},
		{"enqueue", "--kind", "pdf.parse", "--lane", "nosuch", "--args", "{}"},
	} {
		expectFail(t, 1, want, append(args, common...)...)
	}
	if s := e.stats("nosuch"); s.Ready != 0 {
		t.Errorf("a message reached the unknown lane: %+v", s)
	}
	if code, out, errs := runCLI(t, append([]string{"lanes", "pause", "nosuch", "--lanes", "nosuch"}, common...)...); code != 0 || !strings.Contains(out, "paused lane nosuch") {
		t.Fatalf("pause with --lanes naming it: %d %s %s", code, out, errs)
	}
}

// TestCLI_PurgeEverythingNeedsAll (issue 20, item 6): dlq purge --yes with
// no filter purges nothing and asks for --all, as the HTTP API refuses it.
func TestCLI_PurgeEverythingNeedsAll(t *testing.T) {
	e := newOpsEnv(t)
	e.enqueue("batch", "acme", `{}`)
	e.enqueue("interactive", "acme", `{}`)
	e.kill("batch", broker.ReasonPermanent, "boom")
	e.kill("interactive", broker.ReasonPermanent, "boom")
	common := []string{"--broker", e.url, "--ledger", e.dsn}
	expectFail(t, 2, "give a filter (--lane, --kind, --tenant, --reason, --id) or --all", append([]string{"dlq", "purge", "--yes"}, common...)...)
	if s := e.stats("batch"); s.DeadLettered != 1 {
		t.Fatalf("purge without --all removed dead letters: %+v", s)
	}
	code, out, errs := runCLI(t, append([]string{"dlq", "purge", "--yes", "--all"}, common...)...)
	if code != 0 || !strings.Contains(out, "purged 2 dead letter(s)") {
		t.Fatalf("purge --all: %d %s %s", code, out, errs)
	}
}

// TestCLI_ConsistentOutput (issue 20, item 9): -h exits 0 on every
// command and subcommand; --json is honoured by lanes pause/resume and
// review claim/approve/reject; durations in JSON are *_ms like the API's;
// errors print no internal chain and no literal \n.
func TestCLI_ConsistentOutput(t *testing.T) {
	e := newOpsEnv(t)
	for _, args := range [][]string{
		{"-h"}, {"stats", "-h"}, {"peek", "-h"}, {"enqueue", "-h"}, {"admin", "-h"}, {"migrate", "-h"}, {"demo", "-h"},
		{"lanes", "-h"}, {"lanes", "ls", "-h"}, {"lanes", "pause", "-h"},
		{"dlq", "-h"}, {"dlq", "ls", "-h"}, {"dlq", "purge", "--help"},
		{"tasks", "-h"}, {"tasks", "ls", "-h"}, {"review", "-h"}, {"review", "approve", "-h"},
	} {
		if code, _, errs := runCLI(t, args...); code != 0 || !strings.Contains(strings.ToLower(errs), "usage") {
			t.Errorf("%v: exit %d (want 0), stderr %.80q", args, code, errs)
		}
	}
	common := []string{"--broker", e.url, "--ledger", e.dsn}
	var done map[string]any
	code, out, _ := runCLI(t, append([]string{"lanes", "pause", "batch", "--json", "--actor", "operator:ann"}, common...)...)
	if code != 0 || json.Unmarshal([]byte(out), &done) != nil || done["lane"] != "batch" || done["paused"] != true || done["by"] != "operator:ann" {
		t.Fatalf("lanes pause --json: %d %q", code, out)
	}
	code, out, _ = runCLI(t, append([]string{"lanes", "resume", "batch", "--json"}, common...)...)
	if code != 0 || json.Unmarshal([]byte(out), &done) != nil || done["paused"] != false {
		t.Fatalf("lanes resume --json: %d %q", code, out)
	}
	for _, args := range [][]string{{"stats", "--broker", e.url, "--json"}, append([]string{"lanes", "ls", "--json"}, common...)} {
		code, out, _ := runCLI(t, args...)
		if code != 0 || !strings.Contains(out, `"oldest_ready_ms"`) || strings.Contains(out, "_seconds") {
			t.Errorf("%v: %d %s; want *_ms fields", args, code, out)
		}
	}
	// A review to claim and approve, through the ledger the CLI opens.
	id := e.enqueue("batch", "acme", `{}`)
	for _, st := range []ledger.State{ledger.Running, ledger.AwaitingReview} {
		if _, err := e.L.Transition(e.ctx, ledger.TransitionRequest{ID: id, From: []ledger.State{ledger.Queued, ledger.Running}, To: st, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs := runCLI(t, append([]string{"review", "claim", id, "--reviewer", "ann", "--json"}, common...)...)
	if code != 0 || json.Unmarshal([]byte(out), &done) != nil || done["id"] != id || done["done"] != "claimed" || done["reviewer"] != "ann" {
		t.Fatalf("review claim --json: %d %q %s", code, out, errs)
	}
	// An error from deep in the ledger reads as a sentence, on one line.
	code, _, errs = runCLI(t, append([]string{"review", "reject", "nosuchtask", "--reviewer", "ann", "--reason", "no"}, common...)...)
	if code != 1 || strings.Contains(errs, `\n`) || strings.Contains(errs, "sqlite:") || strings.Contains(errs, "ledger:") {
		t.Errorf("review reject of an unknown task: %d %q; want a plain error", code, errs)
	}
}

// TestCLI_PauseStateNeedsTheLedger (issue 20, item 4): without --ledger a
// paused lane is not shown as running: its state is unknown.
func TestCLI_PauseStateNeedsTheLedger(t *testing.T) {
	e := newOpsEnv(t)
	if err := e.ops.PauseLane(e.ctx, "batch", "operator:ann"); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "lanes", "ls", "--broker", e.url)
	if code != 0 || strings.Contains(out, "running") || !strings.Contains(out, "unknown (needs the ledger)") {
		t.Fatalf("lanes ls without --ledger: %d\n%s%s", code, out, errs)
	}
	var rows []map[string]any
	code, out, _ = runCLI(t, "lanes", "ls", "--broker", e.url, "--json")
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) == 0 || rows[0]["pause_known"] != false {
		t.Fatalf("lanes ls --json without --ledger: %d %s", code, out)
	}
	code, out, _ = runCLI(t, "lanes", "ls", "--broker", e.url, "--ledger", e.dsn)
	if code != 0 || !strings.Contains(out, "paused by operator:ann") || strings.Contains(out, "unknown") {
		t.Fatalf("lanes ls with --ledger: %d\n%s", code, out)
	}
}

// TestCLI_DemoRerunOnTheSameFiles (issue 20, item 5): a second demo run on
// the files of the first does the work again instead of waiting for tasks
// its idempotency keys say are done.
func TestCLI_DemoRerunOnTheSameFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo takes a few seconds; -short skips it")
	}
	dir := t.TempDir()
	files := []string{"--broker", "embedded://" + filepath.Join(dir, "q.db"), "--ledger", "sqlite://" + filepath.Join(dir, "l.db")}
	for run := 1; run <= 2; run++ {
		code, out, errs := runCLI(t, append([]string{"demo", "--docs", "3", "--interactive", "1", "--quiet", "--seed", "7", "--timeout-rate", "0"}, files...)...)
		if code != 0 || !strings.Contains(out, "0 written twice") || !strings.Contains(out, "permanent_error") {
			t.Fatalf("demo run %d on the same files: code %d\n%s\n%s", run, code, out, errs)
		}
	}
}

// TestCLI_StatsWatch: stats --watch prints a frame every interval, here
// bounded by --count; with --json, one JSON array a line.
func TestCLI_StatsWatch(t *testing.T) {
	e := newOpsEnv(t)
	e.enqueue("batch", "", `{}`)
	code, out, errs := runCLI(t, "stats", "--broker", e.url, "--watch", "50ms", "--count", "3")
	if code != 0 || strings.Count(out, "LANE") != 3 || strings.Count(out, "(every 50ms; Ctrl-C stops)") != 3 {
		t.Fatalf("stats --watch --count 3: %d\n%s%s", code, out, errs)
	}
	code, out, _ = runCLI(t, "stats", "--broker", e.url, "--watch", "50ms", "--count", "2", "--json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 {
		t.Fatalf("stats --watch --json: %d %q", code, out)
	}
	for _, l := range lines {
		var rows []map[string]any
		if err := json.Unmarshal([]byte(l), &rows); err != nil || len(rows) < 4 {
			t.Errorf("frame %q: %v", l, err)
		}
	}
	expectFail(t, 1, "--count needs --watch", "stats", "--broker", e.url, "--count", "2")
}
