package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/internal/runtimebench"
)

// runBenchRuntime is `switchyard bench runtime`: the broker client's own
// loop (one publish per call and batched), the adapter's loop, the
// runtime with the ledger off and on, and with one Step and one Effect per
// task, on one broker in one process (issue 15; see internal/runtimebench).
func runBenchRuntime(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench runtime", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("broker", "", "broker URL (default: a fresh embedded file in a temporary directory)")
	dsn := fs.String("ledger", "", "ledger DSN (sqlite:///path or postgres://…); a fresh schema or file per run, removed after; none skips the ledger rows")
	tasks := fs.Int("tasks", 20000, "tasks per run")
	publishers := fs.Int("publishers", 8, "goroutines calling Client.Enqueue")
	runs := fs.Int("runs", 3, "runs of every row (medians are printed)")
	slots := fs.Int("slots", 64, "the server's handler slots")
	prefetch := fs.Int("prefetch", 0, "the server's per-lane prefetch (default: 2 × slots)")
	rate := fs.Int("rate", 0, "pace the publishers to this many tasks/s in total (latency at a load; default: as fast as possible)")
	timeout := fs.Duration("timeout", 5*time.Minute, "bound on each run")
	asJSON := fs.Bool("json", false, "print JSON (every run and the medians)")
	verbose := fs.Bool("v", false, "log the runtime's warnings and cleanup failures to stderr")
	keys := fs.Int("keys", 1000, "ordering keys of the keyed rows")
	delay := fs.Duration("delay", 0, "enqueue the runtime rows' tasks to run this long after Enqueue (the broker's delay path; latency counts from the requested run time)")
	modeList := fs.String("modes", "", "comma-separated rows to run (default: all): "+modeNames())
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return errUsage
	}
	if len(pos) != 0 || *tasks < 1 || *publishers < 1 || *runs < 1 || *slots < 1 || *prefetch < 0 || *rate < 0 || *keys < 1 || *delay < 0 {
		fmt.Fprintln(stderr, "usage: switchyard bench runtime [--broker URL] [--ledger DSN] [--tasks N] [--publishers 8] [--runs 3] [--slots 64] [--prefetch N] [--rate R] [--keys 1000] [--delay D] [--modes a,b] [--json]")
		return errUsage
	}
	var modes []runtimebench.Mode
	if *modeList != "" {
		for _, m := range strings.Split(*modeList, ",") {
			m = strings.TrimSpace(m)
			if !slices.Contains(runtimebench.Modes, runtimebench.Mode(m)) {
				return fmt.Errorf("bench runtime: no row %q; the rows are %s", m, modeNames())
			}
			modes = append(modes, runtimebench.Mode(m))
		}
	}
	cfg := runtimebench.Config{BrokerURL: *url, LedgerDSN: *dsn, Tasks: *tasks, Publishers: *publishers, Slots: *slots, Prefetch: *prefetch,
		Rate: *rate, Delay: *delay, Timeout: *timeout, Keys: *keys, Modes: modes}
	if *verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	rep, err := runtimebench.Suite(ctx, cfg, *runs, stderr)
	if err != nil {
		return err
	}
	if *asJSON {
		return rep.WriteJSON(stdout)
	}
	return rep.WriteTable(stdout)
}

func modeNames() string {
	var out []string
	for _, m := range runtimebench.Modes {
		out = append(out, string(m))
	}
	return strings.Join(out, ", ")
}
