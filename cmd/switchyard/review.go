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

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/admin"
	_ "github.com/switchyard-dev/switchyard/ledger/postgres"
)

const reviewUsage = `usage: switchyard review <ls|show|claim|approve|reject> --broker URL --ledger DSN [flags] [task-id]
  ls                           tasks awaiting review, oldest first
  show ID                      one task's review request
  claim ID --reviewer NAME     mark it as yours
  approve ID --reviewer NAME [--note TEXT]
  reject ID --reviewer NAME --reason TEXT`

func runReview(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(stderr, reviewUsage)
		return errUsage
	}
	sub := args[0]
	switch sub {
	case "ls", "show", "claim", "approve", "reject":
	default:
		fmt.Fprintf(stderr, "unknown review command %q\n%s\n", sub, reviewUsage)
		return errUsage
	}
	c := newOpsCmd("review "+sub, reviewUsage, stderr)
	reviewer := c.fs.String("reviewer", "", "your name, recorded with the decision")
	note := c.fs.String("note", "", "a note for the handler (approve)")
	reason := c.fs.String("reason", "", "why (reject; required)")
	tenant := c.fs.String("tenant", "", "only this tenant's reviews")
	limit := c.fs.Int("limit", 100, "most reviews to list (ls, at most 1000)")
	npos := 1
	if sub == "ls" {
		npos = 0
	}
	pos, err := c.parse(args[1:], npos, true, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *c.timeout)
	defer cancel()
	ops, done, err := c.open(ctx, admin.Config{})
	if err != nil {
		return err
	}
	defer done()
	sc := admin.Scope{Tenant: *tenant}
	id := ""
	if len(pos) > 0 {
		id = pos[0]
	}
	switch sub {
	case "ls":
		items, err := ops.Reviews(ctx, sc, *limit)
		if err != nil {
			return err
		}
		if *c.asJSON {
			return writeJSON(stdout, reviewJSON(items...))
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TASK\tKIND\tLANE\tTENANT\tWAITING\tCLAIMED BY\tREASON")
		for _, it := range items {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", term(it.Task.ID), term(it.Task.Kind), term(it.Task.Lane), dash(it.Task.Tenant), age(it.Age), dash(it.ClaimedBy), oneLine(it.Reason, 80))
		}
		return tw.Flush()
	case "show":
		if _, err := ops.Task(ctx, sc, id); err != nil {
			return err
		}
		it, err := ops.Client().Review(ctx, id)
		if err != nil {
			return err
		}
		if *c.asJSON {
			return writeJSON(stdout, reviewJSON(it)[0])
		}
		fmt.Fprintf(stdout, "task      %s\nkind      %s\nlane      %s\ntenant    %s\nwaiting   %s (since %s)\nclaimed   %s\nreason    %s\naction    %s\nargs      %s\n",
			term(it.Task.ID), term(it.Task.Kind), term(it.Task.Lane), dash(it.Task.Tenant), age(it.Age), it.Since.Format(time.RFC3339), dash(it.ClaimedBy), term(it.Reason), term(it.Action), term(string(it.Task.Args)))
		return nil
	}
	if *reviewer == "" {
		return fmt.Errorf("--reviewer is required")
	}
	who := admin.Actor(*reviewer)
	switch sub {
	case "claim":
		if err := ops.Claim(ctx, sc, id, who); err != nil {
			return err
		}
		if *c.asJSON {
			return writeJSON(stdout, reviewDone{ID: id, Done: "claimed", Reviewer: *reviewer})
		}
		fmt.Fprintf(stdout, "claimed %s for %s\n", term(id), term(*reviewer))
	case "approve":
		if err := ops.Approve(ctx, sc, id, who, *note); err != nil {
			return err
		}
		if *c.asJSON {
			return writeJSON(stdout, reviewDone{ID: id, Done: "approved", Reviewer: *reviewer, Note: *note})
		}
		fmt.Fprintf(stdout, "approved %s; it resumes in its lane\n", term(id))
	case "reject":
		if *reason == "" {
			return fmt.Errorf("--reviewer and --reason are required")
		}
		if err := ops.Reject(ctx, sc, id, who, *reason); err != nil {
			return err
		}
		if *c.asJSON {
			return writeJSON(stdout, reviewDone{ID: id, Done: "rejected", Reviewer: *reviewer, Reason: *reason})
		}
		fmt.Fprintf(stdout, "rejected %s\n", term(id))
	}
	return nil
}

// reviewDone is the --json output of claim, approve and reject.
type reviewDone struct {
	ID       string `json:"id"`
	Done     string `json:"done"`
	Reviewer string `json:"reviewer"`
	Note     string `json:"note,omitempty"`
	Reason   string `json:"reason,omitempty"`
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
	ID        string  `json:"id"`
	Kind      string  `json:"kind"`
	Lane      string  `json:"lane"`
	Tenant    string  `json:"tenant"`
	Reason    string  `json:"reason"`
	Action    string  `json:"action"`
	Since     string  `json:"since"`
	AgeMS     float64 `json:"age_ms"`
	ClaimedBy string  `json:"claimed_by"`
}

func reviewJSON(items ...*switchyard.ReviewItem) []reviewOut {
	out := make([]reviewOut, 0, len(items))
	for _, it := range items {
		out = append(out, reviewOut{it.Task.ID, it.Task.Kind, it.Task.Lane, it.Task.Tenant, it.Reason, it.Action,
			it.Since.UTC().Format(time.RFC3339Nano), millis(it.Age), it.ClaimedBy})
	}
	return out
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// dash is s for a table cell (term), "-" when empty.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return term(s)
}
