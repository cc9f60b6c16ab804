// Command switchyard is Switchyard's command line: a demo that needs no
// server, queue statistics for any broker URL, and (as the project grows)
// the operator's tools.
//
//	switchyard demo                  run the AI pipeline demo on the embedded broker
//	switchyard stats --broker URL    per-lane ready / in flight / delayed / dead / oldest age
//	switchyard review ls|show|claim|approve|reject   the human-review queue
//	switchyard dlq ls|replay --broker URL --lane L    dead letters and replay
//	switchyard bench embedded        throughput of the embedded broker
//	switchyard bench lanes           the lanes benchmark, scenarios S1–S4
//
// Every command accepts -h for its flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	_ "github.com/switchyard-dev/switchyard/adapters/all"
)

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"demo", "run the ingest → chunk → embed → summarize → sync pipeline on the embedded broker", runDemo},
		{"stats", "print per-lane queue depths for a broker URL", runStats},
		{"review", "list, claim, approve or reject tasks awaiting human review", runReview},
		{"dlq", "list dead letters with their reasons, or replay them", runDLQ},
		{"migrate", "move queued and dead-lettered messages from one broker to another", runMigrate},
		{"bench", "measure throughput (bench embedded | broker --broker URL) or lane isolation (bench lanes)", runBench},
	}
}

// errUsage marks errors already explained to the user by a usage message.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			err := c.run(ctx, args[1:], stdout, stderr)
			switch {
			case err == nil:
				return 0
			case errors.Is(err, errUsage):
				return 2
			default:
				fmt.Fprintf(stderr, "switchyard %s: %v\n", c.name, err)
				return 1
			}
		}
	}
	fmt.Fprintf(stderr, "switchyard: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: switchyard <command> [flags]")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'switchyard <command> -h' for a command's flags.")
}
