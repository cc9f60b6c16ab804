package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/switchyard-dev/switchyard/admin"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

const lanesUsage = `usage: switchyard lanes <ls|pause|resume|history> --broker URL [--ledger DSN] [flags]
  ls            every lane at a glance: depths, oldest ready age against its objective,
                pause state (with --ledger)
  pause LANE    stop every server on this ledger from starting tasks of LANE (needs --ledger);
                running tasks finish
  resume LANE   let them start tasks of LANE again (needs --ledger)
  history       who paused and resumed lanes, and when, newest first (needs --ledger);
                [--lane LANE] for one lane, [--limit N] (default 100, at most 1000)`

func runLanes(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(stderr, lanesUsage)
		return errUsage
	}
	sub := args[0]
	switch sub {
	case "ls", "pause", "resume", "history":
	default:
		fmt.Fprintf(stderr, "unknown lanes command %q\n%s\n", sub, lanesUsage)
		return errUsage
	}
	c := newOpsCmd("lanes "+sub, lanesUsage, stderr)
	var histLane *string
	var histLimit *int
	if sub == "history" {
		histLane = c.fs.String("lane", "", "only this lane's history (default: every lane's)")
		histLimit = c.fs.Int("limit", 0, "show at most this many events, newest first (default 100, at most 1000)")
	}
	npos := 1
	if sub == "ls" || sub == "history" {
		npos = 0
	}
	pos, err := c.parse(args[1:], npos, sub != "ls", stderr)
	if err != nil {
		return err
	}
	switch sub {
	case "pause", "resume":
		if err := broker.ValidateName("lane", pos[0]); err != nil {
			return err
		}
	case "history":
		if *histLane != "" {
			if err := broker.ValidateName("lane", *histLane); err != nil {
				return err
			}
		}
		if *histLimit < 0 || *histLimit > 1000 {
			return fmt.Errorf("--limit must be between 0 and 1000, got %d", *histLimit)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *c.timeout)
	defer cancel()
	ops, done, err := c.open(ctx, admin.Config{})
	if err != nil {
		return err
	}
	defer done()
	switch sub {
	case "pause":
		if err := ops.PauseLane(ctx, pos[0], c.who()); err != nil {
			return err
		}
		if *c.asJSON {
			return writeJSON(stdout, laneDone{Lane: pos[0], Paused: true, By: c.who().String()})
		}
		fmt.Fprintf(stdout, "paused lane %s: servers on this ledger start none of its tasks until it is resumed\n", pos[0])
		return nil
	case "resume":
		if err := ops.ResumeLane(ctx, pos[0], c.who()); err != nil {
			return err
		}
		if *c.asJSON {
			return writeJSON(stdout, laneDone{Lane: pos[0], Paused: false, By: c.who().String()})
		}
		fmt.Fprintf(stdout, "resumed lane %s\n", pos[0])
		return nil
	case "history":
		es, err := ops.LaneEvents(ctx, admin.Scope{}, *histLane, *histLimit)
		if err != nil {
			return err
		}
		return printLaneEvents(stdout, es, *c.asJSON)
	}
	ls, err := ops.Lanes(ctx)
	if err != nil {
		return err
	}
	if *c.asJSON {
		type row struct {
			Lane          string  `json:"lane"`
			Ready         int64   `json:"ready"`
			InFlight      int64   `json:"in_flight"`
			Delayed       int64   `json:"delayed"`
			DeadLettered  int64   `json:"dead_lettered"`
			OldestReadyMS float64 `json:"oldest_ready_ms"`
			ObjectiveMS   float64 `json:"objective_ms"`
			Late          bool    `json:"late"`
			Paused        bool    `json:"paused"`
			PausedBy      string  `json:"paused_by,omitempty"`
			PauseKnown    bool    `json:"pause_known"`
		}
		out := make([]row, 0, len(ls))
		for _, l := range ls {
			out = append(out, row{l.Lane, l.Ready, l.InFlight, l.Delayed, l.DeadLettered, millis(l.OldestReady), millis(l.Objective), l.Late, l.Paused, l.PausedBy, l.PauseKnown})
		}
		return writeJSON(stdout, out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LANE\tREADY\tIN FLIGHT\tDELAYED\tDEAD\tOLDEST READY\tOBJECTIVE\tSTATE")
	for _, l := range ls {
		state := "running"
		if !l.PauseKnown {
			state = "unknown (needs the ledger)"
		}
		if l.Paused {
			state = "paused by " + dash(l.PausedBy)
		}
		if l.Late {
			state += ", LATE"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", term(l.Lane), l.Ready, l.InFlight, l.Delayed, l.DeadLettered, age(l.OldestReady), age(l.Objective), state)
	}
	return tw.Flush()
}

// printLaneEvents prints the lanes' history as a table or, with asJSON, as
// a JSON array (the admin API's fields).
func printLaneEvents(w io.Writer, es []ledger.LaneEvent, asJSON bool) error {
	action := func(e ledger.LaneEvent) string {
		if e.Paused {
			return "pause"
		}
		return "resume"
	}
	if asJSON {
		type row struct {
			Lane   string `json:"lane"`
			Action string `json:"action"`
			Paused bool   `json:"paused"`
			Actor  string `json:"actor"`
			At     string `json:"at"`
		}
		out := make([]row, 0, len(es))
		for _, e := range es {
			out = append(out, row{e.Lane, action(e), e.Paused, e.Actor, rfc3339(e.At)})
		}
		return writeJSON(w, out)
	}
	if len(es) == 0 {
		fmt.Fprintln(w, "no lane has been paused or resumed through this ledger")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tAGO\tLANE\tACTION\tBY")
	for _, e := range es {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", rfc3339(e.At), since(e.At), term(e.Lane), action(e), dash(e.Actor))
	}
	return tw.Flush()
}

// laneDone is the --json output of lanes pause and resume.
type laneDone struct {
	Lane   string `json:"lane"`
	Paused bool   `json:"paused"`
	By     string `json:"by"`
}
