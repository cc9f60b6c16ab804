package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard-dev/switchyard/providerbatch/sqlstore"
	"github.com/switchyard-dev/switchyard/spend"
)

const spendUsage = `usage: switchyard spend --ledger DSN [--since 24h|RFC3339] [--until RFC3339] [--tenant T] [--by tenant,model,...] [--json]
  model spend recorded by the provider-batch lane (and direct calls through it) and by limits.Meter
  with a spend store (one row per metered call; run is its task): calls, input,
  cached-input and output tokens, the cached-token share, and money (settled to the provider's
  reported usage; a reserved row holds its estimate until it settles). --by groups by any of
  tenant, kind, run, provider, model, mode (batch|direct), cache_key, state (reserved|settled);
  defaults to tenant,provider,model,mode. --since defaults to 24h ago.`

type spendJSON struct {
	Group       map[string]string `json:"group"`
	Calls       int64             `json:"calls"`
	Input       int64             `json:"input_tokens"`
	CachedInput int64             `json:"cached_input_tokens"`
	Output      int64             `json:"output_tokens"`
	CachedShare float64           `json:"cached_share"`
	Micros      int64             `json:"micros"`
	Amount      string            `json:"amount"`
}

func runSpend(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("spend", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, spendUsage) }
	dsn := fs.String("ledger", "", "ledger DSN (sqlite:///path or postgres://…)")
	since := fs.String("since", "24h", "a duration back from now, or an RFC 3339 time")
	until := fs.String("until", "", "an RFC 3339 time (default: open)")
	tenant := fs.String("tenant", "", "one tenant")
	by := fs.String("by", "tenant,provider,model,mode", "comma-separated grouping fields")
	asJSON := fs.Bool("json", false, "print JSON")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 0 || *dsn == "" {
		fs.Usage()
		return errUsage
	}
	q := sqlstore.SpendQuery{Tenant: *tenant}
	if *by != "" {
		q.By = strings.Split(*by, ",")
	}
	now := time.Now()
	if d, err := time.ParseDuration(*since); err == nil {
		if d < 0 {
			return errors.New("--since: a negative duration")
		}
		q.Since = now.Add(-d)
	} else if t, err := time.Parse(time.RFC3339, *since); err == nil {
		q.Since = t
	} else {
		return fmt.Errorf("--since %q: not a duration (24h) or an RFC 3339 time", *since)
	}
	if *until != "" {
		t, err := time.Parse(time.RFC3339, *until)
		if err != nil {
			return fmt.Errorf("--until %q: not an RFC 3339 time", *until)
		}
		q.Until = t
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	st, err := sqlstore.OpenDSN(ctx, *dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	rows, err := st.Spend(ctx, q)
	if err != nil {
		return err
	}
	if *asJSON {
		out := make([]spendJSON, 0, len(rows))
		for _, r := range rows {
			out = append(out, spendJSON{Group: r.Group, Calls: r.Calls, Input: r.Usage.Input, CachedInput: r.Usage.CachedInput,
				Output: r.Usage.Output, CachedShare: r.CachedShare(), Micros: int64(r.Cost), Amount: r.Cost.String()})
		}
		return writeJSON(stdout, out)
	}
	if len(rows) == 0 || (len(rows) == 1 && rows[0].Calls == 0) {
		fmt.Fprintln(stdout, "no spend recorded in this window")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	var head []string
	for _, f := range q.By {
		head = append(head, strings.ToUpper(f))
	}
	fmt.Fprintln(tw, strings.Join(append(head, "CALLS", "INPUT", "CACHED", "OUTPUT", "CACHED%", "SPEND"), "\t"))
	var total int64
	for _, r := range rows {
		var cells []string
		for _, f := range q.By {
			cells = append(cells, dash(term(r.Group[f])))
		}
		cells = append(cells, fmt.Sprint(r.Calls), fmt.Sprint(r.Usage.Input), fmt.Sprint(r.Usage.CachedInput), fmt.Sprint(r.Usage.Output),
			fmt.Sprintf("%.1f", 100*r.CachedShare()), r.Cost.String())
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
		total += int64(r.Cost)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "total %s over %d groups\n", spend.Micros(total), len(rows))
	return nil
}
