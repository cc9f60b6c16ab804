package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/switchyard-dev/switchyard/admin"
	"github.com/switchyard-dev/switchyard/broker"
)

const dlqUsage = `usage: switchyard dlq <ls|show|replay|move|purge> --broker URL [--ledger DSN] [filters] [flags]
  ls                 list dead letters with their reasons (they stay in the queue)
  show ID            one dead letter: reason, error, attempt history, arguments
  replay             move the selected dead letters back to their live lane;
                     with --ledger, their tasks go back to queued so they run again
  move --to LANE     publish the selected dead letters to another lane's live queue
  purge              delete the selected dead letters for good; without a filter it needs
                     --all (every dead letter of every lane)
filters: --lane L (default: every lane), --kind K, --tenant T, --reason R, --id ID (repeatable)
replay, move and purge list what they would affect and ask first unless --yes; they then
act on exactly the dead letters listed (by ID), unless the list was cut short at 1000:
then they act by the filter, on every match at the time they run (the question says so).`

func runDLQ(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(stderr, dlqUsage)
		return errUsage
	}
	sub := args[0]
	switch sub {
	case "ls", "show", "replay", "move", "purge":
	default:
		fmt.Fprintf(stderr, "unknown dlq command %q\n%s\n", sub, dlqUsage)
		return errUsage
	}
	c := newOpsCmd("dlq "+sub, dlqUsage, stderr)
	var f admin.DeadFilter
	var ids listFlag
	c.fs.StringVar(&f.Lane, "lane", "", "only this lane (default: every lane)")
	c.fs.StringVar(&f.Kind, "kind", "", "only this kind")
	c.fs.StringVar(&f.Tenant, "tenant", "", "only this tenant")
	reason := c.fs.String("reason", "", "only this reason ("+reasonList()+")")
	c.fs.Var(&ids, "id", "only this task ID (repeatable, or comma-separated)")
	limit := c.fs.Int("limit", 50, "most dead letters to list (ls, at most 1000), or to act on (replay, move, purge: 0 = every match)")
	yes := c.fs.Bool("yes", false, "replay, move or purge without asking")
	to := c.fs.String("to", "", "target lane (move; required)")
	all := c.fs.Bool("all", false, "purge: every dead letter of every lane (required when no filter is given)")
	npos := 0
	if sub == "show" {
		npos = 1
	}
	pos, err := c.parse(args[1:], npos, false, stderr)
	if err != nil {
		return err
	}
	f.Reason, f.IDs = broker.Reason(*reason), ids
	if *limit < 0 {
		return fmt.Errorf("--limit must be 0 or more")
	}
	if sub == "purge" && !*all && f.Lane == "" && f.Kind == "" && f.Tenant == "" && f.Reason == "" && len(f.IDs) == 0 {
		fmt.Fprintf(stderr, "refusing to purge every dead letter: give a filter (--lane, --kind, --tenant, --reason, --id) or --all\n")
		return errUsage
	}
	if sub == "move" && *to == "" {
		fmt.Fprintf(stderr, "missing required flag --to\n%s\n", dlqUsage)
		return errUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *c.timeout)
	defer cancel()
	ops, done, err := c.open(ctx, admin.Config{})
	if err != nil {
		return err
	}
	defer done()

	switch sub {
	case "ls":
		f.Limit = min(*limit, 1000)
		if f.Limit == 0 {
			f.Limit = 1000
		}
		l, err := ops.DeadList(ctx, admin.Scope{}, f)
		if err != nil {
			return err
		}
		items := l.Items
		readNotes(stderr, l.Mode, l.More, l.Truncated, "dead letters")
		if *c.asJSON {
			return writeJSON(stdout, deadJSON(items, false))
		}
		printDead(stdout, items)
		return nil
	case "show":
		it, err := ops.DeadLetter(ctx, admin.Scope{}, f.Lane, pos[0])
		if err != nil {
			return err
		}
		if *c.asJSON {
			return writeJSON(stdout, deadJSON([]admin.DeadItem{*it}, true)[0])
		}
		printDeadItem(stdout, it)
		return nil
	}

	// replay, move, purge: show what they would affect, ask, act.
	if sub == "move" {
		if err := broker.ValidateName("target lane", *to); err != nil {
			return err
		}
	}
	// The preview is what gets acted on: by the IDs it shows, unless it
	// was cut short (then by the filter, and the question says so).
	items, byFilter, err := dlqPreview(ctx, ops, f, *limit, limitSet(c.fs))
	if err != nil {
		return err
	}
	if len(items) == 0 {
		if *c.asJSON {
			return writeJSON(stdout, reportJSON{Failed: []itemErrJSON{}})
		}
		fmt.Fprintf(stdout, "no dead letters match%s\n", whereLane(f.Lane))
		return nil
	}
	verb := map[string]string{"replay": "replayed", "move": "moved", "purge": "purged"}[sub]
	act := f
	what := fmt.Sprintf("these %d dead letters", len(items))
	if len(items) == 1 {
		what = "this dead letter"
	}
	if byFilter {
		act.Max = *limit
		what = fmt.Sprintf("every dead letter matching (at least the %d listed, and any that arrive before it runs)", len(items))
		if *limit > 0 {
			what = fmt.Sprintf("up to %d matching dead letters (the first %d listed; more may arrive before it runs)", *limit, len(items))
		}
	} else {
		act.IDs, act.Max = nil, 0
		seen := map[string]bool{}
		for _, it := range items {
			if !seen[it.ID] {
				seen[it.ID] = true
				act.IDs = append(act.IDs, it.ID)
			}
		}
	}
	if !*yes {
		printDead(stderr, items)
		q := fmt.Sprintf("%s %s? [y/N] ", sub, what)
		if sub == "move" {
			q = fmt.Sprintf("move %s to lane %s? [y/N] ", what, *to)
		}
		if sub == "purge" {
			q = fmt.Sprintf("purge %s for good? [y/N] ", what)
		}
		if !confirm(stderr, q) {
			return fmt.Errorf("not confirmed; nothing %s", verb)
		}
	}
	f = act
	p, finish := progress(stderr, verb)
	var rep *admin.Report
	switch sub {
	case "replay":
		rep, err = ops.Replay(ctx, admin.Scope{}, f, c.who(), p)
	case "move":
		rep, err = ops.Move(ctx, admin.Scope{}, f, *to, c.who(), p)
	case "purge":
		rep, err = ops.Purge(ctx, admin.Scope{}, f, c.who(), p)
	}
	finish()
	if rep != nil {
		if *c.asJSON {
			out := reportJSON{Done: rep.Done, Failed: []itemErrJSON{}, Truncated: rep.Truncated}
			for _, e := range rep.Failed {
				out.Failed = append(out.Failed, itemErrJSON{e.ID, e.Err})
			}
			if werr := writeJSON(stdout, out); err == nil {
				err = werr
			}
		} else {
			where := strings.TrimPrefix(whereLane(f.Lane), " ")
			if sub == "move" {
				where = "to lane " + *to
			}
			fmt.Fprintf(stdout, "%s %d dead letter(s) %s\n", verb, rep.Done, where)
			for _, e := range rep.Failed {
				fmt.Fprintf(stdout, "  failed %s: %s\n", term(e.ID), oneLine(e.Err, 300))
			}
			if rep.Truncated {
				fmt.Fprintln(stdout, "  the scan stopped at its limit of dead letters held at once: more may match; run it again")
			}
		}
		if err == nil && len(rep.Failed) > 0 {
			err = fmt.Errorf("%d dead letter(s) failed", len(rep.Failed))
		}
	}
	return err
}

func whereLane(lane string) string {
	if lane == "" {
		return ""
	}
	return " in lane " + lane
}

func reasonList() string {
	var s []string
	for _, r := range admin.Reasons() {
		s = append(s, string(r))
	}
	return strings.Join(s, ", ")
}

type reportJSON struct {
	Done      int           `json:"done"`
	Failed    []itemErrJSON `json:"failed"`
	Truncated bool          `json:"truncated,omitempty"`
}

// previewMax is the most dead letters a preview lists (DeadLetters' cap).
const previewMax = 1000

// dlqPreview lists what a replay, move or purge would act on. With --id it
// looks every ID up (previewMax at a time) and refuses IDs it cannot find;
// limit caps the IDs only when given explicitly. byFilter reports that the
// list was cut short, so the operation must run by filter.
func dlqPreview(ctx context.Context, ops *admin.Ops, f admin.DeadFilter, limit int, limitGiven bool) (items []admin.DeadItem, byFilter bool, err error) {
	if len(f.IDs) > 0 {
		found := map[string]bool{}
		for i := 0; i < len(f.IDs); i += previewMax {
			q := f
			q.IDs, q.Limit, q.Max = f.IDs[i:min(i+previewMax, len(f.IDs))], previewMax, 0
			got, err := ops.DeadLetters(ctx, admin.Scope{}, q)
			if err != nil {
				return nil, false, err
			}
			for _, it := range got {
				found[it.ID] = true
			}
			items = append(items, got...)
		}
		var missing []string
		for _, id := range f.IDs {
			if !found[id] && !slices.Contains(missing, id) {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			return nil, false, fmt.Errorf("no dead letter %s%s; nothing changed", strings.Join(missing, ", "), whereLane(f.Lane))
		}
		if limitGiven && limit > 0 && len(items) > limit {
			items = items[:limit]
		}
		return items, false, nil
	}
	q := f
	q.Limit, q.Max = previewMax, 0
	if limit > 0 {
		q.Limit = min(limit, previewMax)
	}
	items, err = ops.DeadLetters(ctx, admin.Scope{}, q)
	if err != nil {
		return nil, false, err
	}
	// Listed in full only if fewer than asked came back, or exactly the
	// limit the operation was given.
	complete := len(items) < q.Limit || (limit > 0 && limit <= previewMax)
	return items, !complete, nil
}

// limitSet reports whether --limit was given.
func limitSet(fs *flag.FlagSet) bool {
	set := false
	fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == "limit" })
	return set
}

type itemErrJSON struct {
	ID    string `json:"id"`
	Error string `json:"error"`
}

type attemptJSON struct {
	Attempt    int     `json:"attempt"`
	Start      string  `json:"start"`
	DurationMS float64 `json:"duration_ms"`
	Class      string  `json:"class,omitempty"`
	Error      string  `json:"error,omitempty"`
	Worker     string  `json:"worker,omitempty"`
}

type deadOut struct {
	ID        string        `json:"id"`
	Lane      string        `json:"lane"`
	Kind      string        `json:"kind"`
	Tenant    string        `json:"tenant"`
	Reason    string        `json:"reason"`
	Error     string        `json:"error"`
	Attempts  int           `json:"attempts"`
	SandboxOf string        `json:"sandbox_of,omitempty"`
	At        string        `json:"dead_at"`
	History   []attemptJSON `json:"history,omitempty"`
	Args      any           `json:"args,omitempty"`
}

func deadJSON(items []admin.DeadItem, full bool) []deadOut {
	out := make([]deadOut, 0, len(items))
	for _, it := range items {
		o := deadOut{ID: it.ID, Lane: it.Lane, Kind: it.Kind, Tenant: it.Tenant, Reason: string(it.Reason), Error: it.Error,
			Attempts: it.AttemptsMade, SandboxOf: it.SandboxOf, At: rfc3339(it.DeadAt)}
		if full {
			o.History = []attemptJSON{}
			for _, a := range it.Attempts {
				o.History = append(o.History, attemptJSON{a.Attempt, rfc3339(a.Start), millis(a.Duration), a.Class, a.Error, a.Worker})
			}
			o.Args = rawOrString(it.Payload)
		}
		out = append(out, o)
	}
	return out
}

func printDead(w io.Writer, items []admin.DeadItem) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tLANE\tKIND\tTENANT\tREASON\tATTEMPTS\tDEAD FOR\tERROR")
	for _, it := range items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", term(it.ID), term(it.Lane), term(it.Kind), dash(it.Tenant), term(string(it.Reason)), it.AttemptsMade, since(it.DeadAt), oneLine(it.Error, 80))
	}
	tw.Flush()
}

func printDeadItem(w io.Writer, it *admin.DeadItem) {
	if it.SandboxOf != "" {
		fmt.Fprintf(w, "sandbox   a sandbox copy of dead letter %s (its effects were not performed)\n", term(it.SandboxOf))
	}
	fmt.Fprintf(w, "task      %s\nlane      %s\nkind      %s\ntenant    %s\nreason    %s\ndead at   %s (%s ago)\nerror     %s\nargs      %s\n",
		term(it.ID), term(it.Lane), term(it.Kind), dash(it.Tenant), term(string(it.Reason)), rfc3339(it.DeadAt), since(it.DeadAt), dash(it.Error), dash(string(it.Payload)))
	if len(it.Attempts) == 0 {
		return
	}
	if len(it.Attempts) < it.AttemptsMade {
		fmt.Fprintf(w, "\nattempts: %d made; the history below holds %d of them (the others need the ledger: tasks show %s --ledger DSN)\n", it.AttemptsMade, len(it.Attempts), term(it.ID))
	} else {
		fmt.Fprintf(w, "\nattempts: %d\n", it.AttemptsMade)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tSTARTED\tTOOK\tCLASS\tWORKER\tERROR")
	for _, a := range it.Attempts {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", a.Attempt, rfc3339(a.Start), age(a.Duration), dash(a.Class), dash(a.Worker), oneLine(a.Error, 80))
	}
	tw.Flush()
}

// rawOrString returns b as raw JSON when it is valid JSON, else as a string.
func rawOrString(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	return string(b)
}
