package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/admin"
	"github.com/switchyard-dev/switchyard/ledger"
)

const tasksUsage = `usage: switchyard tasks <ls|show> --broker URL --ledger DSN [flags]
  ls        tasks from the ledger, oldest first
            filters: --state S (repeatable: queued, running, retry_wait, awaiting_review,
            awaiting_event, completed, failed, dead, rejected, cancelled), --kind K, --lane L, --tenant T,
            --limit N (default 50, at most 1000), --after ID (the next page)
  show ID   one task with its attempts, timeline (event log) and effects
  cancel    cancel live tasks by ID or filter, after a preview (tasks cancel -h)
  result ID a task's result; --wait blocks until it is done`

func runTasks(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(stderr, tasksUsage)
		return errUsage
	}
	sub := args[0]
	switch sub {
	case "cancel":
		return runTasksCancel(ctx, args[1:], stdout, stderr) // tasks_cancel.go
	case "result":
		return runTasksResult(ctx, args[1:], stdout, stderr)
	}
	if sub != "ls" && sub != "show" {
		fmt.Fprintf(stderr, "unknown tasks command %q\n%s\n", sub, tasksUsage)
		return errUsage
	}
	c := newOpsCmd("tasks "+sub, tasksUsage, stderr)
	var states listFlag
	var f admin.TaskFilter
	c.fs.Var(&states, "state", "only tasks in this state (repeatable, or comma-separated)")
	c.fs.StringVar(&f.Kind, "kind", "", "only this kind")
	c.fs.StringVar(&f.Lane, "lane", "", "only this lane")
	c.fs.StringVar(&f.Tenant, "tenant", "", "only this tenant")
	c.fs.IntVar(&f.Limit, "limit", 50, "most tasks to list (at most 1000)")
	c.fs.StringVar(&f.After, "after", "", "list the tasks after this ID (the previous page's last)")
	npos := 0
	if sub == "show" {
		npos = 1
	}
	pos, err := c.parse(args[1:], npos, true, stderr)
	if err != nil {
		return err
	}
	for _, s := range states {
		f.States = append(f.States, ledger.State(s))
	}
	ctx, cancel := context.WithTimeout(ctx, *c.timeout)
	defer cancel()
	ops, done, err := c.open(ctx, admin.Config{})
	if err != nil {
		return err
	}
	defer done()
	if sub == "show" {
		info, err := ops.Task(ctx, admin.Scope{}, pos[0])
		if err != nil {
			return err
		}
		if *c.asJSON {
			return writeJSON(stdout, taskInfoJSON(info))
		}
		printTaskInfo(stdout, info)
		return nil
	}
	page, err := ops.Tasks(ctx, admin.Scope{}, f)
	if err != nil {
		return err
	}
	if *c.asJSON {
		out := struct {
			Tasks []taskOut `json:"tasks"`
			Next  string    `json:"next"`
		}{Tasks: []taskOut{}, Next: page.Next}
		for _, t := range page.Tasks {
			out.Tasks = append(out.Tasks, taskJSON(t))
		}
		return writeJSON(stdout, out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tSTATE\tKIND\tLANE\tTENANT\tATTEMPT\tUPDATED\tERROR")
	for _, t := range page.Tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s ago\t%s\n", term(t.ID), t.State, term(t.Kind), term(t.Lane), dash(t.Tenant), attemptCell(t), since(t.UpdatedAt), oneLine(t.LastError, 60))
	}
	tw.Flush()
	if page.Next != "" {
		fmt.Fprintf(stderr, "more: add --after %s\n", term(page.Next))
	}
	return nil
}

type taskOut struct {
	ID          string            `json:"id"`
	State       string            `json:"state"`
	Kind        string            `json:"kind"`
	Lane        string            `json:"lane"`
	Tenant      string            `json:"tenant"`
	Key         string            `json:"idempotency_key,omitempty"`
	OrderingKey string            `json:"ordering_key,omitempty"`
	Attempt     int               `json:"attempt"`
	NextAttempt int               `json:"next_attempt,omitempty"` // queued or waiting to retry: the number the next attempt takes
	MaxAttempts int               `json:"max_attempts,omitempty"`
	RunAt       string            `json:"run_at,omitempty"`
	Deadline    string            `json:"deadline,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	Args        any               `json:"args,omitempty"`
	Result      any               `json:"result,omitempty"`
	LastError   string            `json:"last_error,omitempty"`
	CreatedAt   string            `json:"created_at"`
	UpdatedAt   string            `json:"updated_at"`
}

func taskJSON(t *ledger.Task) taskOut {
	return taskOut{ID: t.ID, State: string(t.State), Kind: t.Kind, Lane: t.Lane, Tenant: t.Tenant, Key: t.IdempotencyKey, OrderingKey: t.OrderingKey,
		Attempt: t.Attempt, NextAttempt: t.NextAttempt(), MaxAttempts: t.MaxAttempts, RunAt: rfc3339(t.RunAt), Deadline: rfc3339(t.Deadline), Metadata: t.Metadata,
		Args: rawOrString(t.Args), Result: rawOrString(t.Result), LastError: t.LastError, CreatedAt: rfc3339(t.CreatedAt), UpdatedAt: rfc3339(t.UpdatedAt)}
}

type eventOut struct {
	Seq    int64  `json:"seq"`
	At     string `json:"at"`
	From   string `json:"from"`
	To     string `json:"to"`
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
	Actor  string `json:"actor,omitempty"`
}

type taskAttemptOut struct {
	Number     int     `json:"number"`
	Worker     string  `json:"worker,omitempty"`
	Start      string  `json:"start"`
	DurationMS float64 `json:"duration_ms"`
	Outcome    string  `json:"outcome"`
	Class      string  `json:"class,omitempty"`
	Error      string  `json:"error,omitempty"`
}

type effectOut struct {
	Key     string `json:"key"`
	State   string `json:"state"`
	Attempt int    `json:"attempt"`
	Result  any    `json:"result,omitempty"`
	Updated string `json:"updated_at"`
}

func taskInfoJSON(info *switchyard.TaskInfo) any {
	out := struct {
		taskOut
		Attempts []taskAttemptOut `json:"attempts"`
		Events   []eventOut       `json:"events"`
		Effects  []effectOut      `json:"effects"`
	}{taskOut: taskJSON(info.Task), Attempts: []taskAttemptOut{}, Events: []eventOut{}, Effects: []effectOut{}}
	for _, a := range info.Attempts {
		out.Attempts = append(out.Attempts, taskAttemptOut{a.Number, a.Worker, rfc3339(a.Start), millis(a.Duration), a.Outcome, a.Class, a.Error})
	}
	for _, e := range info.Events {
		out.Events = append(out.Events, eventOut{e.Seq, rfc3339(e.At), string(e.From), string(e.To), e.Reason, e.Detail, e.Actor})
	}
	for _, e := range info.Effects {
		out.Effects = append(out.Effects, effectOut{e.Key, string(e.State), e.Attempt, rawOrString(e.Result), rfc3339(e.UpdatedAt)})
	}
	return out
}

func printTaskInfo(w io.Writer, info *switchyard.TaskInfo) {
	t := info.Task
	fmt.Fprintf(w, "task      %s\nstate     %s\nkind      %s\nlane      %s\ntenant    %s\nattempt   %d\ncreated   %s\nupdated   %s (%s ago)\n",
		term(t.ID), t.State, term(t.Kind), term(t.Lane), dash(t.Tenant), t.Attempt, rfc3339(t.CreatedAt), rfc3339(t.UpdatedAt), since(t.UpdatedAt))
	if t.IdempotencyKey != "" {
		fmt.Fprintf(w, "key       %s\n", term(t.IdempotencyKey))
	}
	if !t.RunAt.IsZero() {
		fmt.Fprintf(w, "run at    %s\n", rfc3339(t.RunAt))
	}
	if t.LastError != "" {
		fmt.Fprintf(w, "error     %s\n", oneLine(t.LastError, 200))
	}
	fmt.Fprintf(w, "args      %s\n", dash(string(t.Args)))
	if len(t.Result) > 0 {
		fmt.Fprintf(w, "result    %s\n", oneLine(string(t.Result), 200))
	}
	fmt.Fprintln(w, "\ntimeline:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  AT\tFROM\tTO\tREASON\tACTOR\tDETAIL")
	for _, e := range info.Events {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", e.At.UTC().Format("2006-01-02 15:04:05.000"), dash(string(e.From)), dash(string(e.To)), term(e.Reason), dash(e.Actor), oneLine(e.Detail, 80))
	}
	tw.Flush()
	if len(info.Attempts) > 0 {
		fmt.Fprintln(w, "\nattempts:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  #\tSTARTED\tTOOK\tOUTCOME\tWORKER\tERROR")
		for _, a := range info.Attempts {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", a.Number, rfc3339(a.Start), age(a.Duration), dash(a.Outcome), dash(a.Worker), oneLine(a.Error, 80))
		}
		tw.Flush()
	}
	if len(info.Effects) > 0 {
		fmt.Fprintln(w, "\neffects:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  KEY\tSTATE\tATTEMPT\tRESULT")
		for _, e := range info.Effects {
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\n", term(e.Key), e.State, e.Attempt, oneLine(string(e.Result), 60))
		}
		tw.Flush()
	}
}

// attemptCell is a task's ATTEMPT column: the latest attempt's number, or
// "next N" for a task lined up to run again, whose Attempt can already
// be the next attempt's number (ledger.Task.NextAttempt).
func attemptCell(t *ledger.Task) string {
	if n := t.NextAttempt(); n > 0 {
		return "next " + strconv.Itoa(n)
	}
	return strconv.Itoa(t.Attempt)
}
