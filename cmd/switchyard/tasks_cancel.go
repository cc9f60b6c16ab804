package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/switchyard-dev/switchyard/admin"
	"github.com/switchyard-dev/switchyard/ledger"
)

const tasksCancelUsage = `usage: switchyard tasks cancel --broker URL --ledger DSN [filters] [--reason R] [--yes]
       switchyard tasks result ID --broker URL --ledger DSN [--wait]
  cancel    cancel live tasks (queued, delayed, retrying, awaiting review or running):
            queued ones never start, running ones have their handler's context cancelled;
            filters: --id ID (repeatable, or comma-separated), --kind K, --lane L, --tenant T,
            --meta KEY=VALUE (repeatable: every pair must match); at least one is required.
            It lists what it would cancel and asks unless --yes, then cancels exactly the
            tasks listed (by ID); --limit N caps them (default 1000)
  result    a task's state and, once it completed, its result; --wait blocks until the task
            is done (completed, failed, dead, rejected or cancelled) or --timeout`

// runTasksCancel is "tasks cancel".
func runTasksCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newOpsCmd("tasks cancel", tasksCancelUsage, stderr)
	var ids, meta listFlag
	var f admin.CancelFilter
	c.fs.Var(&ids, "id", "only this task ID (repeatable, or comma-separated)")
	c.fs.StringVar(&f.Kind, "kind", "", "only this kind")
	c.fs.StringVar(&f.Lane, "lane", "", "only this lane")
	c.fs.StringVar(&f.Tenant, "tenant", "", "only this tenant")
	c.fs.Var(&meta, "meta", "only tasks whose metadata has KEY=VALUE (repeatable)")
	reason := c.fs.String("reason", "", "why, recorded in each task's event log")
	limit := c.fs.Int("limit", 1000, "most tasks to cancel (at most 1000 at a time)")
	yes := c.fs.Bool("yes", false, "cancel without asking")
	if _, err := c.parse(args, 0, true, stderr); err != nil {
		return err
	}
	if *limit <= 0 || *limit > 1000 {
		return fmt.Errorf("--limit must be 1 to 1000")
	}
	f.IDs = ids
	for _, kv := range meta {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("--meta %q: want KEY=VALUE", kv)
		}
		if f.Metadata == nil {
			f.Metadata = map[string]string{}
		}
		f.Metadata[k] = v
	}
	if len(f.IDs) == 0 && f.Kind == "" && f.Lane == "" && f.Tenant == "" && len(f.Metadata) == 0 {
		fmt.Fprintf(stderr, "refusing to cancel every live task: give --id or a filter\n%s\n", tasksCancelUsage)
		return errUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *c.timeout)
	defer cancel()
	ops, done, err := c.open(ctx, admin.Config{})
	if err != nil {
		return err
	}
	defer done()
	ts, truncated, err := ops.CancelPreview(ctx, admin.Scope{}, f, *limit)
	if err != nil {
		return err
	}
	if len(f.IDs) > 0 {
		found := map[string]bool{}
		for _, t := range ts {
			found[t.ID] = true
		}
		for _, id := range f.IDs {
			if !found[id] {
				return fmt.Errorf("no live task %s (unknown, finished, or outside the filter); nothing cancelled", term(id))
			}
		}
	}
	if len(ts) == 0 {
		if *c.asJSON {
			return writeJSON(stdout, reportJSON{Failed: []itemErrJSON{}})
		}
		fmt.Fprintln(stdout, "no live tasks match")
		return nil
	}
	if !*yes {
		printLive(stderr, ts)
		what := fmt.Sprintf("these %d tasks", len(ts))
		if len(ts) == 1 {
			what = "this task"
		}
		if truncated {
			what += fmt.Sprintf(" (the first %d that match; run it again for the rest)", len(ts))
		}
		if !confirm(stderr, "cancel "+what+"? [y/N] ") {
			return fmt.Errorf("not confirmed; nothing cancelled")
		}
	}
	// Act on exactly what was listed.
	act := admin.CancelFilter{}
	for _, t := range ts {
		act.IDs = append(act.IDs, t.ID)
	}
	p, finish := progress(stderr, "cancelled")
	rep, err := ops.CancelTasks(ctx, admin.Scope{}, act, *reason, c.who(), p)
	finish()
	if rep != nil {
		if *c.asJSON {
			out := reportJSON{Done: rep.Done, Failed: []itemErrJSON{}}
			for _, e := range rep.Failed {
				out.Failed = append(out.Failed, itemErrJSON{e.ID, e.Err})
			}
			if werr := writeJSON(stdout, out); err == nil {
				err = werr
			}
		} else {
			fmt.Fprintf(stdout, "cancelled %d task(s)\n", rep.Done)
			if skipped := len(ts) - rep.Done - len(rep.Failed); skipped > 0 {
				fmt.Fprintf(stdout, "  %d finished before they could be cancelled\n", skipped)
			}
			for _, e := range rep.Failed {
				fmt.Fprintf(stdout, "  failed %s: %s\n", term(e.ID), oneLine(e.Err, 300))
			}
		}
		if err == nil && len(rep.Failed) > 0 {
			err = fmt.Errorf("%d task(s) failed", len(rep.Failed))
		}
	}
	return err
}

func printLive(w io.Writer, ts []*ledger.Task) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tSTATE\tKIND\tLANE\tTENANT\tCREATED")
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s ago\n", term(t.ID), t.State, term(t.Kind), term(t.Lane), dash(t.Tenant), since(t.CreatedAt))
	}
	tw.Flush()
}

// runTasksResult is "tasks result ID".
func runTasksResult(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newOpsCmd("tasks result", tasksCancelUsage, stderr)
	wait := c.fs.Bool("wait", false, "block until the task is done (or --timeout)")
	pos, err := c.parse(args, 1, true, stderr)
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
	res, err := ops.Result(ctx, admin.Scope{}, pos[0])
	if err == nil && *wait && !res.Done {
		res, err = ops.Client().Wait(ctx, pos[0])
	}
	if err != nil {
		return err
	}
	if *c.asJSON {
		return writeJSON(stdout, struct {
			ID     string `json:"id"`
			State  string `json:"state"`
			Done   bool   `json:"done"`
			Result any    `json:"result,omitempty"`
			Error  string `json:"error,omitempty"`
		}{res.ID, string(res.State), res.Done, rawOrString(res.Value), res.Error})
	}
	fmt.Fprintf(stdout, "task    %s\nstate   %s\n", term(res.ID), res.State)
	if res.Value != nil {
		fmt.Fprintf(stdout, "result  %s\n", oneLine(string(res.Value), 4000))
	}
	if res.Error != "" {
		fmt.Fprintf(stdout, "error   %s\n", oneLine(res.Error, 300))
	}
	return nil
}
