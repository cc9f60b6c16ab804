package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard-dev/switchyard/admin"
)

const peekUsage = `usage: switchyard peek --broker URL --lane LANE [-n N] [--tenant T] [--json]
  the next ready messages of a lane, without taking them or spending an attempt`

func runPeek(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newOpsCmd("peek", peekUsage, stderr)
	lane := c.fs.String("lane", "", "lane (required)")
	n := c.fs.Int("n", 10, "most messages to show (at most 1000)")
	tenant := c.fs.String("tenant", "", "only this tenant's messages")
	if _, err := c.parse(args, 0, false, stderr); err != nil {
		return err
	}
	if *lane == "" {
		fmt.Fprintf(stderr, "missing required flag --lane\n%s\n", peekUsage)
		return errUsage
	}
	if *n <= 0 {
		return fmt.Errorf("-n must be at least 1")
	}
	ctx, cancel := context.WithTimeout(ctx, *c.timeout)
	defer cancel()
	ops, done, err := c.open(ctx, admin.Config{})
	if err != nil {
		return err
	}
	defer done()
	res, err := ops.PeekLane(ctx, admin.Scope{Tenant: *tenant}, *lane, *n)
	if err != nil {
		return err
	}
	ms := res.Messages
	readNotes(stderr, res.Mode, false, res.Truncated, "ready messages")
	if *c.asJSON {
		type row struct {
			ID          string            `json:"id"`
			Lane        string            `json:"lane"`
			Kind        string            `json:"kind"`
			Tenant      string            `json:"tenant"`
			Key         string            `json:"idempotency_key,omitempty"`
			OrderingKey string            `json:"ordering_key,omitempty"`
			EnqueuedAt  string            `json:"enqueued_at"`
			RunAt       string            `json:"run_at,omitempty"`
			MaxAttempts int               `json:"max_attempts,omitempty"`
			Headers     map[string]string `json:"headers,omitempty"`
			Args        any               `json:"args,omitempty"`
		}
		out := make([]row, 0, len(ms))
		for _, m := range ms {
			out = append(out, row{m.ID, m.Lane, m.Kind, m.Tenant, m.IdempotencyKey, m.OrderingKey, rfc3339(m.EnqueuedAt), rfc3339(m.RunAt), m.MaxAttempts, m.Headers, rawOrString(m.Body)})
		}
		return writeJSON(stdout, out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tKIND\tTENANT\tENQUEUED\tARGS")
	for _, m := range ms {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\t%s\n", term(m.ID), term(m.Kind), dash(m.Tenant), since(m.EnqueuedAt), oneLine(string(m.Body), 60))
	}
	return tw.Flush()
}

const enqueueUsage = `usage: switchyard enqueue --broker URL [--ledger DSN] --kind KIND [--args JSON] [flags]
  enqueue one task; its arguments are a JSON object from --args, or from standard input
  when --args is absent`

func runEnqueue(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newOpsCmd("enqueue", enqueueUsage, stderr)
	var r admin.EnqueueRequest
	var meta listFlag
	c.fs.StringVar(&r.Kind, "kind", "", "task kind (required)")
	argsJSON := c.fs.String("args", "", "the arguments, a JSON object (default: read from standard input)")
	c.fs.StringVar(&r.Lane, "lane", "", "lane (default: scheduled when delayed, else batch)")
	c.fs.StringVar(&r.Tenant, "tenant", "", "tenant")
	c.fs.StringVar(&r.IdempotencyKey, "key", "", "idempotency key: the same key (and tenant) gives the same task")
	c.fs.StringVar(&r.OrderingKey, "ordering-key", "", "ordering key")
	c.fs.StringVar(&r.Delay, "delay", "", "run after this long, e.g. 90s")
	runAt := c.fs.String("run-at", "", "run at this time (RFC 3339)")
	deadline := c.fs.String("deadline", "", "dead-letter the task if it has not started by then (RFC 3339)")
	c.fs.IntVar(&r.MaxAttempts, "max-attempts", 0, "attempt limit (default: the retry policy's)")
	c.fs.Var(&meta, "meta", "metadata key=value (repeatable)")
	if _, err := c.parse(args, 0, false, stderr); err != nil {
		return err
	}
	if r.Kind == "" {
		fmt.Fprintf(stderr, "missing required flag --kind\n%s\n", enqueueUsage)
		return errUsage
	}
	for _, s := range []struct {
		flag, v string
		t       *time.Time
	}{{"--run-at", *runAt, &r.RunAt}, {"--deadline", *deadline, &r.Deadline}} {
		if s.v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, s.v)
		if err != nil {
			return fmt.Errorf("%s %q is not an RFC 3339 time like 2026-01-02T15:04:05Z", s.flag, s.v)
		}
		*s.t = t
	}
	for _, kv := range meta {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("--meta %q is not key=value", kv)
		}
		if r.Metadata == nil {
			r.Metadata = map[string]string{}
		}
		r.Metadata[k] = v
	}
	if *argsJSON != "" {
		r.Args = json.RawMessage(*argsJSON)
	} else {
		b, err := io.ReadAll(io.LimitReader(stdin, 16<<20))
		if err != nil {
			return fmt.Errorf("read the arguments from standard input: %w", err)
		}
		r.Args = b
	}
	ctx, cancel := context.WithTimeout(ctx, *c.timeout)
	defer cancel()
	// The command line enqueues any kind: an operator names it.
	ops, done, err := c.open(ctx, admin.Config{Kinds: map[string]admin.KindSpec{r.Kind: {}}})
	if err != nil {
		return err
	}
	defer done()
	res, err := ops.Enqueue(ctx, admin.Scope{}, r)
	if err != nil {
		return err
	}
	if *c.asJSON {
		return writeJSON(stdout, struct {
			ID        string `json:"id"`
			Duplicate bool   `json:"duplicate"`
		}{res.ID, res.Duplicate})
	}
	if res.Duplicate {
		fmt.Fprintf(stdout, "duplicate: the key already names task %s; nothing new enqueued\n", term(res.ID))
		return nil
	}
	fmt.Fprintf(stdout, "enqueued %s\n", term(res.ID))
	return nil
}
