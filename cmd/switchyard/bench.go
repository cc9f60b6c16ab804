package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/internal/benchkit"
	"github.com/switchyard-dev/switchyard/internal/lanesbench"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "runtime" {
		return runBenchRuntime(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 {
		switch args[0] {
		case "fleet":
			return runBenchFleet(ctx, args[1:], stdout, stderr)
		case "fleet-worker":
			return runBenchFleetWorker(ctx, args[1:], stdout, stderr)
		case "prune":
			return runBenchPrune(ctx, args[1:], stdout, stderr)
		}
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("n", 20000, "messages")
	size := fs.Int("size", 1024, "message body bytes")
	batch := fs.Int("batch", 100, "publish and receive batch size")
	consumers := fs.Int("consumers", 2, "concurrent receive loops")
	url := fs.String("broker", "", "broker URL (default: a fresh embedded database in a temporary directory)")
	window := fs.Duration("window", 30*time.Second, "lanes: the measured window of each scenario phase")
	only := fs.String("only", "", "lanes: run only scenarios whose name contains this (S1, S2, S3, S4)")
	prefetch := fs.Int("prefetch", 0, "lanes: the server's per-lane prefetch (default: the scheduler's)")
	fair := fs.Int("fair", 0, "lanes: shards of the fair batch lane (0: 8 in S4, none elsewhere; -1: a plain FIFO lane)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return errUsage
	}
	if len(pos) != 1 || pos[0] != "embedded" && pos[0] != "broker" && pos[0] != "lanes" {
		fmt.Fprintln(stderr, "usage: switchyard bench [flags] embedded | broker --broker URL | lanes [--broker URL] [--window 30s] [--only S3] | runtime [--broker URL] [--ledger DSN] | fleet --ledger DSN [--broker URL] [--procs 1,3] | prune --ledger DSN [--rows N] (see bench runtime|fleet|prune -h)")
		return errUsage
	}
	if pos[0] == "lanes" {
		var reports []lanesbench.Report
		for _, sc := range lanesbench.Scenarios() {
			if *only != "" && !strings.Contains(sc.Name, *only) {
				continue
			}
			fmt.Fprintf(stderr, "running %s (%s window, plus the idle baseline)…\n", sc.Name, *window)
			r, err := lanesbench.Run(ctx, *url, sc, &lanesbench.Options{Duration: *window, Prefetch: *prefetch, FairShards: *fair})
			if err != nil {
				return err
			}
			reports = append(reports, r)
		}
		return lanesbench.WriteTable(stdout, reports)
	}
	if *n < 1 || *size < 0 || *batch < 1 || *consumers < 1 {
		fmt.Fprintln(stderr, "bench: need n ≥ 1, size ≥ 0, batch ≥ 1, consumers ≥ 1")
		return errUsage
	}
	if *url == "" {
		if pos[0] == "broker" {
			fmt.Fprintln(stderr, "bench broker: --broker URL is required")
			return errUsage
		}
		dir, err := os.MkdirTemp("", "switchyard-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		*url = "embedded://" + filepath.Join(dir, "bench.db")
	}
	b, err := broker.Open(ctx, *url, nil)
	if err != nil {
		return err
	}
	defer b.Close()
	lane := "bench-" + broker.NewID()[:8]
	pub, err := benchkit.Publish(ctx, b, lane, *n, *size, *batch)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "publish     %s\n", pub)
	con, err := benchkit.Consume(ctx, b, lane, *n, *batch, *consumers)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "consume     %s\n", con)
	e2e, err := benchkit.EndToEnd(ctx, b, lane, *n, *size, *batch, *consumers)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "end-to-end  %s\n", e2e)
	return nil
}
