package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/migrate"
)

const migrateUsage = `usage: switchyard migrate --from URL --to URL [--lanes a,b] [--include-dead-letters] [--dry-run] [--wait 0s] [--ledger DSN] [--yes]
  Copies ready (and, as they come due within --wait, delayed) messages and,
  with --include-dead-letters, dead letters with their reasons and history,
  from one broker to another of the same namespace. Each message is
  published to the target and confirmed before it leaves the source, and a
  journal makes an interrupted run safe to run again. Keyed messages moved
  to a broker without native ordering (RabbitMQ, NATS, SQS standard) are
  numbered by the ledger's sequencer: give the fleet's --ledger (it numbered
  the source's keyed messages too; their old numbers are released as the
  target confirms their copies).`

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "", "source broker URL (required)")
	to := fs.String("to", "", "target broker URL (required)")
	laneList := fs.String("lanes", "", "comma-separated lanes (default: the lanes the source reports, else the default lanes)")
	dead := fs.Bool("include-dead-letters", false, "move dead letters too, keeping reason and history")
	dry := fs.Bool("dry-run", false, "report what would move; change nothing")
	wait := fs.Duration("wait", 0, "how long to wait for delayed or leased messages to become movable")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	stateDir := fs.String("state-dir", "", "where the journal lives (default: the user cache directory)")
	ledgerDSN := fs.String("ledger", "", "the fleet's ledger DSN: orders keyed messages on a target without native ordering")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return errUsage
	}
	if *from == "" || *to == "" || len(pos) != 0 || *wait < 0 {
		fmt.Fprintln(stderr, migrateUsage)
		return errUsage
	}
	if err := migrate.CheckURLs(*from, *to); err != nil {
		return err
	}
	var lanes []string
	if *laneList != "" {
		for _, l := range strings.Split(*laneList, ",") {
			l = strings.TrimSpace(l)
			if err := broker.ValidateName("lane", l); err != nil {
				return err
			}
			lanes = append(lanes, l)
		}
	}
	if !*dry && !*yes && !confirm(stderr, "move messages from the source broker to the target? [y/N] ") {
		return fmt.Errorf("not confirmed; nothing moved")
	}
	dir := *stateDir
	if dir == "" {
		if c, err := os.UserCacheDir(); err == nil {
			dir = filepath.Join(c, "switchyard")
		} else {
			dir = os.TempDir()
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tty := isTerminal(stderr)
	last := time.Time{}
	opts := &migrate.Options{Lanes: lanes, IncludeDeadLetters: *dead, DryRun: *dry, Wait: *wait,
		Journal: migrate.JournalPath(dir, *from, *to),
		Progress: func(p migrate.Progress) {
			if time.Since(last) < 200*time.Millisecond {
				return
			}
			last = time.Now()
			line := progressBar(int64(p.Moved+p.Skipped+p.Failed), p.Expected) +
				fmt.Sprintf(" %s moved %d, skipped %d, failed %d", p.Lane, p.Moved, p.Skipped, p.Failed)
			if tty {
				fmt.Fprintf(stderr, "\r\033[K%s", line)
			} else {
				fmt.Fprintln(stderr, line)
			}
		}}
	var topts *broker.Options
	if *ledgerDSN != "" {
		L, err := ledger.Open(ctx, *ledgerDSN)
		if err != nil {
			return err
		}
		defer L.Close()
		topts = &broker.Options{Sequencer: ledger.SequencerOf(L)}
		// The fleet's ledger numbered the source's keyed messages too:
		// their old numbers are released as they move (see
		// migrate.Options.SourceSequencer).
		opts.SourceSequencer = topts.Sequencer
	}
	rep, err := migrate.RunURL(ctx, *from, *to, topts, opts)
	if tty {
		fmt.Fprintln(stderr)
	}
	if rep != nil {
		printMigrateReport(stdout, rep)
	}
	if errors.Is(err, migrate.ErrIncomplete) {
		return fmt.Errorf("some messages stayed on the source (listed above); fix the cause and run again")
	}
	return err
}

func progressBar(done, total int64) string {
	const width = 30
	if total <= 0 {
		return "[" + strings.Repeat("·", width) + "]"
	}
	n := int(min(done, total) * width / total)
	return "[" + strings.Repeat("#", n) + strings.Repeat("·", width-n) + fmt.Sprintf("] %d/%d", done, total)
}

func printMigrateReport(w io.Writer, rep *migrate.Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if rep.DryRun {
		fmt.Fprintln(tw, "LANE\tWOULD MOVE\tREADY\tDELAYED\tIN FLIGHT\tDEAD")
		for _, l := range rep.Lanes {
			b := l.Before
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\n", l.Lane, l.WouldMove, b.Ready, b.Delayed, b.InFlight, b.DeadLettered)
		}
		tw.Flush()
		return
	}
	fmt.Fprintln(tw, "LANE\tMOVED\tDEAD MOVED\tSKIPPED\tFAILED\tLEFT DELAYED\tLEFT IN FLIGHT")
	for _, l := range rep.Lanes {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\n", l.Lane, l.Moved, l.DeadMoved, l.Skipped, l.Failed, l.LeftDelayed, l.LeftInFlight)
	}
	tw.Flush()
	fmt.Fprintf(w, "moved %d, skipped as duplicate %d, failed %d\n", rep.Moved, rep.Skipped, len(rep.Failures))
	if len(rep.InDoubt) > 0 {
		fmt.Fprintf(w, "%d message(s) were being published when an earlier run stopped and may be on the target twice (the ledger runs them once)\n", len(rep.InDoubt))
	}
	for _, f := range rep.Failures {
		fmt.Fprintf(w, "  %s/%s: %s\n", f.Lane, f.ID, f.Reason)
	}
}
