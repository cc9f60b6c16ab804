package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLI_BenchRuntime runs `bench runtime` at a tiny size on the embedded
// broker with a SQLite ledger: the table and the JSON come out with every
// row, and bad flags are usage errors. No figure is checked.
func TestCLI_BenchRuntime(t *testing.T) {
	if code, _, errs := runCLI(t, "bench", "runtime", "--tasks", "0"); code != 2 || !strings.Contains(errs, "usage") {
		t.Errorf("--tasks 0: code %d, stderr %q", code, errs)
	}
	ledger := "sqlite://" + filepath.Join(t.TempDir(), "ledger.db")
	code, out, errs := runCLI(t, "bench", "runtime", "--ledger", ledger, "--tasks", "30", "--runs", "1", "--slots", "4")
	if code != 0 {
		t.Fatalf("code %d, stderr %s", code, errs)
	}
	for _, want := range []string{"raw (adapter loop", "raw client, one publish per call | – (embedded has no client library", "raw client, batched publish", "runtime, ledger off |", "runtime, ledger off, EnqueueMany, batched raw client's shape |", "runtime, ledger off, EnqueueMany, 1 × 1,000 a call", "runtime, SQLite ledger |", "EnqueueMany", "1 Step + 1 Effect", "ordering keys", "load average"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	code, out, errs = runCLI(t, "bench", "runtime", "--tasks", "30", "--runs", "1", "--slots", "4", "--json")
	if code != 0 {
		t.Fatalf("--json: code %d, stderr %s", code, errs)
	}
	var rep struct {
		Rows []struct {
			Mode    string `json:"mode"`
			Tasks   int    `json:"tasks"`
			Skipped string `json:"skipped"`
		} `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Rows) != 11 || rep.Rows[1].Skipped == "" || rep.Rows[3].Tasks != 30 ||
		rep.Rows[4].Mode != "ledger-off-batched" || rep.Rows[4].Tasks != 30 || rep.Rows[5].Tasks != 30 || rep.Rows[6].Skipped == "" ||
		rep.Rows[9].Mode != "ledger-off-keyed" || rep.Rows[9].Tasks != 30 { // embedded orders natively
		t.Errorf("JSON: %v, %+v", err, rep)
	}
	code, _, errs = runCLI(t, "bench", "runtime", "--tasks", "30", "--runs", "1", "--modes", "ledger-off,nosuch")
	if code == 0 || !strings.Contains(errs, `no row "nosuch"`) {
		t.Errorf("--modes with an unknown row: code %d, stderr %s", code, errs)
	}
}
