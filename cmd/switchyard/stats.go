package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/lanes"
)

func runStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("broker", "", "broker URL, e.g. embedded:///var/lib/app/switchyard.db (required)")
	laneList := fs.String("lanes", "", "comma-separated lanes (default: the lanes the broker reports, else the four default lanes)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	watch := fs.Duration("watch", 0, "print the stats again every this long (e.g. 2s) until interrupted; with --json, one JSON array a line")
	count := fs.Int("count", 0, "with --watch, stop after this many frames (default: until interrupted)")
	create := fs.Bool("create", false, "create the broker's database file when it does not exist (default: an error, \"no such database\")")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if *url == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: switchyard stats --broker URL [--lanes a,b] [--json] [--watch 2s [--count N]]")
		return errUsage
	}
	if *watch < 0 || *count < 0 || (*count > 0 && *watch == 0) {
		return fmt.Errorf("--watch must be a positive interval, and --count needs --watch")
	}
	octx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	b, err := broker.Open(octx, existingOnly(*url, *create), nil)
	if err != nil {
		return err
	}
	defer b.Close()
	if *watch == 0 {
		return statsFrame(octx, b, *laneList, *asJSON, false, stdout)
	}
	// --watch: a frame every interval until interrupted (or --count
	// frames); each frame's reads have --timeout.
	tty := isTerminal(stdout)
	t := time.NewTicker(*watch)
	defer t.Stop()
	for n := 1; ; n++ {
		if tty && !*asJSON {
			fmt.Fprint(stdout, "\x1b[H\x1b[2J") // clear the screen
		}
		if !*asJSON {
			fmt.Fprintf(stdout, "%s  (every %s; Ctrl-C stops)\n", time.Now().Format("15:04:05"), *watch)
		}
		fctx, cancel := context.WithTimeout(ctx, *timeout)
		err := statsFrame(fctx, b, *laneList, *asJSON, true, stdout)
		cancel()
		if err != nil {
			return err
		}
		if *count > 0 && n >= *count {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil // interrupted: a normal end of watching
		case <-t.C:
		}
	}
}

// statsFrame prints the lanes' stats once: a table, or JSON (one line per
// frame when watching).
func statsFrame(ctx context.Context, b *broker.Broker, laneList string, asJSON, watching bool, stdout io.Writer) error {
	names, err := statLanes(ctx, b, laneList)
	if err != nil {
		return err
	}
	var rows []broker.Stats
	for _, l := range names {
		s, err := b.Stats(ctx, l)
		if err != nil {
			return err
		}
		rows = append(rows, s)
	}
	if asJSON {
		type row struct {
			Lane          string  `json:"lane"`
			Ready         int64   `json:"ready"`
			InFlight      int64   `json:"in_flight"`
			Delayed       int64   `json:"delayed"`
			DeadLettered  int64   `json:"dead_lettered"`
			OldestReadyMS float64 `json:"oldest_ready_ms"`
		}
		out := make([]row, 0, len(rows))
		for _, s := range rows {
			out = append(out, row{s.Lane, s.Ready, s.InFlight, s.Delayed, s.DeadLettered, millis(s.OldestReady)})
		}
		enc := json.NewEncoder(stdout)
		if !watching {
			enc.SetIndent("", "  ")
		}
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "LANE\tREADY\tIN FLIGHT\tDELAYED\tDEAD\tOLDEST READY\t")
	for _, s := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t\n", s.Lane, s.Ready, s.InFlight, s.Delayed, s.DeadLettered, age(s.OldestReady))
	}
	return tw.Flush()
}

func statLanes(ctx context.Context, b *broker.Broker, list string) ([]string, error) {
	if list != "" {
		var out []string
		for _, l := range strings.Split(list, ",") {
			l = strings.TrimSpace(l)
			if err := broker.ValidateName("lane", l); err != nil {
				return nil, err
			}
			out = append(out, l)
		}
		return out, nil
	}
	names := []string{}
	for _, l := range lanes.Defaults() {
		names = append(names, l.Name)
	}
	found, ok, err := b.Lanes(ctx)
	if err != nil {
		return nil, err
	}
	if ok {
		seen := map[string]bool{}
		for _, n := range names {
			seen[n] = true
		}
		for _, f := range found {
			if !seen[f] {
				names = append(names, f)
			}
		}
	}
	return names, nil
}

func age(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}
