package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/switchyard-dev/switchyard/internal/runtimebench"
)

// runBenchPrune is `switchyard bench prune`: the ledger filled with
// completed tasks, its table sizes, and the hot path's latency with and
// without a concurrent Prune (issue 15, "ledger growth at scale"; see
// runtimebench.Prune).
func runBenchPrune(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench prune", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("ledger", "", "ledger DSN (postgres://… or sqlite:///path); a fresh schema or file, removed after")
	rows := fs.Int("rows", 1000000, "completed tasks to fill the ledger with")
	workers := fs.Int("workers", 8, "goroutines running the hot path")
	window := fs.Duration("window", 10*time.Second, "how long the baseline hot path runs")
	timeout := fs.Duration("timeout", 30*time.Minute, "bound on the whole run")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return errUsage
	}
	if len(pos) != 0 || *dsn == "" || *rows < 1 || *workers < 1 || *window <= 0 {
		fmt.Fprintln(stderr, "usage: switchyard bench prune --ledger DSN [--rows 1000000] [--workers 8] [--window 10s] [--json]")
		return errUsage
	}
	rep, err := runtimebench.Prune(ctx, runtimebench.PruneConfig{LedgerDSN: *dsn, Rows: *rows, Workers: *workers, Window: *window, Timeout: *timeout}, stderr)
	if err != nil {
		return err
	}
	if *asJSON {
		return rep.WriteJSON(stdout)
	}
	return rep.WriteTable(stdout)
}
