package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/internal/benchkit"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("n", 20000, "messages")
	size := fs.Int("size", 1024, "message body bytes")
	batch := fs.Int("batch", 100, "publish and receive batch size")
	consumers := fs.Int("consumers", 2, "concurrent receive loops")
	url := fs.String("broker", "", "broker URL (default: a fresh embedded database in a temporary directory)")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() != 1 || fs.Arg(0) != "embedded" && fs.Arg(0) != "broker" {
		fmt.Fprintln(stderr, "usage: switchyard bench [flags] embedded | broker --broker URL")
		return errUsage
	}
	if *n < 1 || *size < 0 || *batch < 1 || *consumers < 1 {
		fmt.Fprintln(stderr, "bench: need n ≥ 1, size ≥ 0, batch ≥ 1, consumers ≥ 1")
		return errUsage
	}
	if *url == "" {
		if fs.Arg(0) == "broker" {
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
