// Command switchyard is Switchyard's command line: a demo that needs no
// server, and the operator's tools for any broker URL, built on package
// admin (the same operations as the admin API and the dashboard).
//
//	switchyard demo                                   run the AI pipeline demo on the embedded broker
//	switchyard stats --broker URL                     per-lane ready / in flight / delayed / dead / oldest age
//	switchyard lanes ls|pause|resume --broker URL     lanes at a glance; pause and resume (with --ledger)
//	switchyard servers --broker URL --ledger DSN      the fleet: every registered Server, live or gone
//	switchyard scale --broker URL --lane L [--json]   the worker slots a lane wants now
//	switchyard tasks ls|show|cancel|result --broker URL --ledger DSN   tasks by state, kind, lane, tenant; one task's timeline; cancel; result
//	switchyard dlq ls|show|replay|move|purge --broker URL   dead letters with their reasons, and what to do with them
//	switchyard peek --broker URL --lane L             the next ready messages, without taking them
//	switchyard enqueue --broker URL --kind K --args JSON   enqueue one task (arguments from stdin without --args)
//	switchyard review ls|show|claim|approve|reject    the human-review queue
//	switchyard admin --broker URL --ledger DSN --listen ADDR   the admin API, ingestion and the dashboard
//	switchyard spend --ledger DSN [--by tenant,model] model spend and cached-token share, from the ledger
//	switchyard migrate --from URL --to URL            move queued and dead-lettered messages between brokers
//	switchyard bench embedded|broker|lanes|runtime|fleet|prune   throughput, lane isolation, the runtime against the adapter,
//	                                                  worker processes sharing a ledger, pruning at scale
//
// The operator commands print human-readable tables by default and JSON
// with --json. Filters: --state, --kind, --lane, --tenant, --id
// (repeatable), --reason, --limit. Replay, move and purge show what they
// would affect and ask first unless --yes; on a terminal they draw a
// progress bar on stderr. Bad input (an unknown task, a bad filter, a bad
// URL, a missing flag) is reported on stderr with a non-zero exit status,
// and changes nothing. Every command accepts -h for its flags (and exits
// 0). The operator commands open existing stores only (--create makes a
// new one) and refuse lanes nobody knows (--lanes declares more); stats
// --watch keeps the table live.
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
		{"lanes", "list lanes with depths and pause state; pause or resume a lane; who paused and resumed it", runLanes},
		{"servers", "list the worker processes registered in the ledger: host, pid, lanes, slots busy and free, heartbeat", runServers},
		{"scale", "how many worker slots a lane wants now (scale --lane L [--json]), for autoscaling scripts", runScale},
		{"tasks", "list tasks from the ledger, show one with its timeline, cancel them, read a result", runTasks},
		{"dlq", "list, show, replay, move or purge dead letters", runDLQ},
		{"peek", "show the next ready messages of a lane without taking them", runPeek},
		{"enqueue", "enqueue one task with JSON arguments", runEnqueue},
		{"review", "list, claim, approve or reject tasks awaiting human review", runReview},
		{"admin", "serve the admin HTTP API, the ingestion endpoint and the web dashboard", runAdmin},
		{"spend", "model spend by tenant, model, kind, mode or cache key, with the cached-token share (provider-batch lane)", runSpend},
		{"migrate", "move queued and dead-lettered messages from one broker to another", runMigrate},
		{"bench", "measure throughput (bench embedded | broker --broker URL) or lane isolation (bench lanes), or the runtime through the public API (bench runtime --broker URL [--ledger DSN]), worker processes sharing a ledger (bench fleet --ledger DSN), pruning at scale (bench prune --ledger DSN)", runBench},
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
			case errors.Is(err, errUsage) && asksHelp(args[1:]):
				return 0 // the usage it printed is what was asked for
			case errors.Is(err, errUsage):
				return 2
			default:
				fmt.Fprintf(stderr, "switchyard %s: %s\n", c.name, errText(err))
				return 1
			}
		}
	}
	fmt.Fprintf(stderr, "switchyard: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

// asksHelp reports whether args ask for help (-h, -help or --help before
// a "--").
func asksHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help", "help":
			return true
		}
	}
	return false
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: switchyard <command> [flags]")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'switchyard <command> -h' for a command's flags.")
}
