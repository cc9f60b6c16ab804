package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/internal/runtimebench"
)

// runBenchFleet is `switchyard bench fleet`: P worker processes (this
// binary re-executed as `bench fleet-worker`) sharing one ledger drain a
// queue pre-filled with no-op tasks, for each P of --procs (issue 15, "a
// fleet"; see runtimebench.Fleet).
func runBenchFleet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("broker", "", "broker URL (default: a fresh embedded file in a temporary directory)")
	dsn := fs.String("ledger", "", "the shared ledger's DSN (postgres://… or sqlite:///path); a fresh schema or file per run, removed after")
	procs := fs.String("procs", "1,3", "comma-separated worker process counts")
	tasks := fs.Int("tasks", 10000, "tasks per run")
	runs := fs.Int("runs", 1, "runs of every process count (medians are printed)")
	slots := fs.Int("slots", 64, "each worker's handler slots")
	prefetch := fs.Int("prefetch", 0, "each worker's per-lane prefetch (default: 2 × slots)")
	timeout := fs.Duration("timeout", 5*time.Minute, "bound on each run")
	asJSON := fs.Bool("json", false, "print JSON (every run and the medians)")
	verbose := fs.Bool("v", false, "log warnings and cleanup failures to stderr")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return errUsage
	}
	var ps []int
	for _, f := range strings.Split(*procs, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || p < 1 || p > 64 {
			ps = nil
			break
		}
		ps = append(ps, p)
	}
	if len(pos) != 0 || *dsn == "" || len(ps) == 0 || *tasks < 1 || *runs < 1 || *slots < 1 || *prefetch < 0 {
		fmt.Fprintln(stderr, "usage: switchyard bench fleet --ledger DSN [--broker URL] [--procs 1,3] [--tasks N] [--runs 1] [--slots 64] [--prefetch N] [--json]")
		return errUsage
	}
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	cfg := runtimebench.FleetConfig{BrokerURL: *url, LedgerDSN: *dsn, Procs: ps, Tasks: *tasks, Runs: *runs, Slots: *slots, Prefetch: *prefetch,
		Timeout: *timeout,
		Command: func(ctx context.Context, args []string) *exec.Cmd {
			a := []string{"bench", "fleet-worker"}
			if *verbose {
				a = append(a, "-v")
			}
			return exec.CommandContext(ctx, exe, append(a, args...)...)
		}}
	if *verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	rep, err := runtimebench.Fleet(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	if *asJSON {
		return rep.WriteJSON(stdout)
	}
	return rep.WriteTable(stdout)
}

// runBenchFleetWorker is the hidden `bench fleet-worker`: one worker of a
// fleet run, driven over stdin and stdout by its parent.
func runBenchFleetWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench fleet-worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("broker", "", "broker URL")
	dsn := fs.String("ledger", "", "ledger DSN")
	slots := fs.Int("slots", 64, "handler slots")
	prefetch := fs.Int("prefetch", 0, "per-lane prefetch")
	id := fs.String("worker-id", "", "worker id")
	verbose := fs.Bool("v", false, "log warnings to stderr")
	if _, err := parseInterspersed(fs, args); err != nil || *url == "" || *dsn == "" {
		fmt.Fprintln(stderr, "usage: switchyard bench fleet-worker --broker URL --ledger DSN (run by bench fleet, which drives it over stdin and stdout)")
		return errUsage
	}
	cfg := runtimebench.FleetWorkerConfig{BrokerURL: *url, LedgerDSN: *dsn, Slots: *slots, Prefetch: *prefetch, WorkerID: *id}
	if *verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return runtimebench.FleetWorker(ctx, cfg, os.Stdin, stdout)
}
