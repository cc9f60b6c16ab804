package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/postgres"
)

const reviewUsage = `usage: switchyard review <ls|show|claim|approve|reject> --broker URL --ledger DSN [flags] [task-id]
  ls                           tasks awaiting review, oldest first
  show ID                      one task's review request
  claim ID --reviewer NAME     mark it as yours
  approve ID --reviewer NAME [--note TEXT]
  reject ID --reviewer NAME --reason TEXT`

func runReview(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, reviewUsage)
		return errUsage
	}
	sub := args[0]
	fs := flag.NewFlagSet("review "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("broker", "", "broker URL (required)")
	dsn := fs.String("ledger", "", "ledger DSN, e.g. sqlite:///var/lib/app/ledger.db (required)")
	reviewer := fs.String("reviewer", "", "your name, recorded with the decision")
	note := fs.String("note", "", "a note for the handler (approve)")
	reason := fs.String("reason", "", "why (reject; required)")
	tenant := fs.String("tenant", "", "only this tenant's reviews (ls)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return errUsage
	}
	needID := sub != "ls"
	if *url == "" || *dsn == "" || (needID && len(pos) != 1) || (!needID && len(pos) != 0) {
		fmt.Fprintln(stderr, reviewUsage)
		return errUsage
	}
	switch sub {
	case "ls", "show", "claim", "approve", "reject":
	default:
		fmt.Fprintf(stderr, "unknown review command %q\n%s\n", sub, reviewUsage)
		return errUsage
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	L, err := ledger.Open(ctx, *dsn)
	if err != nil {
		return err
	}
	defer L.Close()
	b, err := broker.Open(ctx, *url, &broker.Options{Dedup: L})
	if err != nil {
		return err
	}
	defer b.Close()
	c, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		return err
	}
	id := ""
	if len(pos) > 0 {
		id = pos[0]
	}
	switch sub {
	case "ls":
		items, err := c.Reviews(ctx, switchyard.ReviewFilter{Tenant: *tenant})
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(stdout, reviewJSON(items...))
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TASK\tKIND\tLANE\tTENANT\tWAITING\tCLAIMED BY\tREASON")
		for _, it := range items {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", it.Task.ID, it.Task.Kind, it.Task.Lane, dash(it.Task.Tenant), age(it.Age), dash(it.ClaimedBy), it.Reason)
		}
		return tw.Flush()
	case "show":
		it, err := c.Review(ctx, id)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(stdout, reviewJSON(it)[0])
		}
		fmt.Fprintf(stdout, "task      %s\nkind      %s\nlane      %s\ntenant    %s\nwaiting   %s (since %s)\nclaimed   %s\nreason    %s\naction    %s\nargs      %s\n",
			it.Task.ID, it.Task.Kind, it.Task.Lane, dash(it.Task.Tenant), age(it.Age), it.Since.Format(time.RFC3339), dash(it.ClaimedBy), it.Reason, it.Action, it.Task.Args)
		return nil
	case "claim":
		if *reviewer == "" {
			return fmt.Errorf("--reviewer is required")
		}
		if err := c.Claim(ctx, id, *reviewer); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "claimed %s for %s\n", id, *reviewer)
	case "approve":
		if *reviewer == "" {
			return fmt.Errorf("--reviewer is required")
		}
		if err := c.Approve(ctx, id, *reviewer, *note); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "approved %s; it resumes in its lane\n", id)
	case "reject":
		if *reviewer == "" || *reason == "" {
			return fmt.Errorf("--reviewer and --reason are required")
		}
		if err := c.Reject(ctx, id, *reviewer, *reason); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "rejected %s\n", id)
	}
	return nil
}

// parseInterspersed parses flags that may come before or after positional
// arguments ("approve ID --reviewer x") and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

type reviewOut struct {
	ID         string  `json:"id"`
	Kind       string  `json:"kind"`
	Lane       string  `json:"lane"`
	Tenant     string  `json:"tenant"`
	Reason     string  `json:"reason"`
	Action     string  `json:"action"`
	Since      string  `json:"since"`
	AgeSeconds float64 `json:"age_seconds"`
	ClaimedBy  string  `json:"claimed_by"`
}

func reviewJSON(items ...*switchyard.ReviewItem) []reviewOut {
	out := make([]reviewOut, 0, len(items))
	for _, it := range items {
		out = append(out, reviewOut{it.Task.ID, it.Task.Kind, it.Task.Lane, it.Task.Tenant, it.Reason, it.Action,
			it.Since.UTC().Format(time.RFC3339Nano), it.Age.Seconds(), it.ClaimedBy})
	}
	return out
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
