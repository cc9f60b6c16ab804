package runtimebench

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLedgerFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"sqlite:///var/x/ledger.db", "sqlite:///var/x/ledger-ns1.db"},
		{"sqlite:data/ledger.db", "sqlite:data/ledger-ns1.db"},
		{"sqlite::memory:", "sqlite::memory:"},
		{"postgres://u@h:5432/db?sslmode=disable", "postgres://u@h:5432/db?schema=ns1&sslmode=disable"},
	} {
		got, _, err := ledgerFor(tc.in, "ns1", nil)
		if err != nil || got != tc.want {
			t.Errorf("ledgerFor(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, _, err := ledgerFor("mysql://x", "ns1", nil); err == nil {
		t.Error("ledgerFor accepted an unknown scheme")
	}
}

func TestBrokerFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"amqp://guest:guest@127.0.0.1:5672/", "rabbitmq://guest:guest@127.0.0.1:5672/?namespace=ns1"},
		{"nats://127.0.0.1:4222/old", "nats://127.0.0.1:4222/?namespace=ns1"},
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0?namespace=ns1"},
	} {
		got, _, err := brokerFor(context.Background(), tc.in, "ns1", nil)
		if err != nil || got != tc.want {
			t.Errorf("brokerFor(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestMedian(t *testing.T) {
	t.Parallel()
	rs := []Result{{Tasks: 10, Elapsed: 3 * time.Second, P50: 1}, {Tasks: 10, Elapsed: time.Second, P50: 9}, {Tasks: 10, Elapsed: 2 * time.Second, P50: 5}}
	m := Median(rs)
	if m.Elapsed != 2*time.Second || m.P50 != 5 {
		t.Errorf("Median = %+v; want elapsed 2s, p50 5", m)
	}
}

// TestSuite_Embedded runs every mode once at a tiny size on the embedded
// broker with a SQLite ledger: it checks the instrument works, not how
// fast anything is.
func TestSuite_Embedded(t *testing.T) {
	t.Parallel()
	cfg := Config{LedgerDSN: "sqlite://" + filepath.Join(t.TempDir(), "ledger.db"), Tasks: 50, Publishers: 2, Slots: 4, Timeout: time.Minute}
	rep, err := Suite(context.Background(), cfg, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != len(Modes) {
		t.Fatalf("%d rows; want %d", len(rep.Rows), len(Modes))
	}
	for _, r := range rep.Rows {
		if r.Skipped != "" {
			continue
		}
		if r.Tasks != 50 || r.Elapsed <= 0 {
			t.Errorf("%s: %d tasks in %s", r.Mode, r.Tasks, r.Elapsed)
		}
		if !isRaw(r.Mode) && (r.P50 <= 0 || r.P99 < r.P50) {
			t.Errorf("%s: p50 %s, p99 %s", r.Mode, r.P50, r.P99)
		}
	}
	var out bytes.Buffer
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"runtime, ledger off", "runtime, SQLite ledger, 1 Step + 1 Effect", "load average"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

// TestSuite_Delay: with Config.Delay the runtime rows' tasks go through
// the delay path (the "scheduled" lane) and none starts before its
// requested run time, from which the latency counts.
func TestSuite_Delay(t *testing.T) {
	t.Parallel()
	cfg := Config{Tasks: 50, Publishers: 2, Slots: 4, Timeout: time.Minute, Delay: 300 * time.Millisecond,
		Modes: []Mode{LedgerOff, LedgerOffBatched, LedgerOffBulk}}
	rep, err := Suite(context.Background(), cfg, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Rows {
		if r.Tasks != 50 {
			t.Errorf("%s: %d tasks; want 50", r.Mode, r.Tasks)
		}
		// P50 ≥ 0: at least half the tasks did not start before their run
		// time (the broker's contract is all of them; latency is not
		// measured per task here).
		if r.P50 < 0 {
			t.Errorf("%s: p50 %s: tasks started before their requested run time", r.Mode, r.P50)
		}
		// The run starts before the first Enqueue and ends after the last
		// start, which is not due before that Enqueue + Delay.
		if r.Elapsed < cfg.Delay {
			t.Errorf("%s: the run took %s, less than the delay %s", r.Mode, r.Elapsed, cfg.Delay)
		}
	}
	var out bytes.Buffer
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "delayed 300ms") {
		t.Errorf("table does not say the tasks were delayed:\n%s", out.String())
	}
}
