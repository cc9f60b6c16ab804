package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

// fleetChildEnv, when "1", makes the test binary act as the command line:
// `bench fleet` re-executes its own binary (here the test binary) as
// `bench fleet-worker`.
const fleetChildEnv = "SWITCHYARD_CLI_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(fleetChildEnv) == "1" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestCLI_BenchFleet runs `bench fleet` at a tiny size: 1 and 2 worker
// processes on one embedded broker file, sharing a PostgreSQL ledger.
// Every task completes once in the ledger and the workers share them; no
// figure is checked.
func TestCLI_BenchFleet(t *testing.T) {
	if code, _, errs := runCLI(t, "bench", "fleet", "--procs", "1,x", "--ledger", "postgres://x"); code != 2 || !strings.Contains(errs, "usage") {
		t.Errorf("--procs 1,x: code %d, stderr %q", code, errs)
	}
	if code, _, errs := runCLI(t, "bench", "fleet"); code != 2 || !strings.Contains(errs, "usage") {
		t.Errorf("no --ledger: code %d, stderr %q", code, errs)
	}
	dsn := testenv.Postgres.Endpoint(t)
	t.Setenv(fleetChildEnv, "1")
	code, out, errs := runCLI(t, "bench", "fleet", "--ledger", dsn, "--tasks", "200", "--procs", "1,2", "--slots", "8", "--timeout", "90s", "--json")
	if code != 0 {
		t.Fatalf("code %d, stderr %s", code, errs)
	}
	var rep struct {
		Rows []struct {
			Procs     int   `json:"procs"`
			Tasks     int   `json:"tasks"`
			PerWorker []int `json:"per_worker"`
			Completed int   `json:"completed_in_ledger"`
			Elapsed   int64 `json:"elapsed_ns"`
			// Read once the workers' backends have exited (they report
			// their commits late while running): a drain of 200 tasks
			// commits its BeginRuns and EndRuns, well under a second.
			Commits float64 `json:"pg_commits_per_task"`
		} `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Rows) != 2 {
		t.Fatalf("JSON: %v\n%s", err, out)
	}
	for i, r := range rep.Rows {
		sum := 0
		for _, n := range r.PerWorker {
			sum += n
		}
		if r.Procs != i+1 || len(r.PerWorker) != r.Procs || sum != 200 || r.Completed != 200 || r.Elapsed <= 0 || r.Commits <= 0 || r.Commits > 4 {
			t.Errorf("row %d: %+v", i, r)
		}
	}
}

// TestCLI_BenchPrune runs `bench prune` at a tiny size on SQLite (and on
// PostgreSQL when it is there): the filled tasks are measured and pruned,
// the hot path's own are not.
func TestCLI_BenchPrune(t *testing.T) {
	if code, _, errs := runCLI(t, "bench", "prune"); code != 2 || !strings.Contains(errs, "usage") {
		t.Errorf("no --ledger: code %d, stderr %q", code, errs)
	}
	dir := filepath.Join(t.TempDir(), "l")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	dsns := []string{"sqlite://" + filepath.Join(dir, "ledger.db")}
	if pg, why := testenv.Postgres.Lookup(); pg != "" {
		dsns = append(dsns, pg)
	} else {
		t.Logf("PostgreSQL unavailable, SQLite only: %s", why)
	}
	for _, dsn := range dsns {
		code, out, errs := runCLI(t, "bench", "prune", "--ledger", dsn, "--rows", "500", "--window", "300ms", "--json")
		if code != 0 {
			t.Fatalf("%s: code %d, stderr %s", dsn, code, errs)
		}
		var rep struct {
			Pruned int `json:"pruned"`
			Sizes  []struct {
				Table string `json:"table"`
				Rows  int    `json:"rows"`
				Bytes int64  `json:"bytes"`
			} `json:"sizes"`
			Baseline struct {
				Tasks int `json:"tasks"`
			} `json:"baseline"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%s: JSON: %v\n%s", dsn, err, out)
		}
		// Event rows per task: the "enqueued" event is derived from the
		// task row (schema 12); the "attempt started" event and the
		// completion live there too (PostgreSQL schema 14 and 15, SQLite
		// schema 15), so a completed task has no event row.
		events := 0
		if rep.Pruned != 500 || len(rep.Sizes) < 3 || rep.Sizes[0].Rows != 501 || rep.Sizes[2].Rows != events*501 || rep.Sizes[0].Bytes <= 0 || rep.Baseline.Tasks == 0 {
			t.Errorf("%s: %+v", dsn, rep)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the SQLite ledger files are left behind: %v", ents)
	}
}
