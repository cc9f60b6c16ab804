package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

const dlqUsage = `usage: switchyard dlq <ls|replay> --broker URL --lane LANE [flags]
  ls       list dead letters with their reasons (they stay in the queue)
  replay   move dead letters back to the live lane (asks first unless --yes);
           with --ledger, their tasks go back to queued so they run again`

func runDLQ(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, dlqUsage)
		return errUsage
	}
	sub := args[0]
	fs := flag.NewFlagSet("dlq "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("broker", "", "broker URL (required)")
	lane := fs.String("lane", "", "lane (required)")
	dsn := fs.String("ledger", "", "ledger DSN (replay: move the tasks back to queued too)")
	limit := fs.Int("limit", 50, "most dead letters to list or replay (replay: 0 = all)")
	yes := fs.Bool("yes", false, "replay without asking")
	asJSON := fs.Bool("json", false, "print JSON (ls)")
	actor := fs.String("actor", "", "who is replaying, for the ledger's event log (default: $USER)")
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return errUsage
	}
	if (sub != "ls" && sub != "replay") || len(pos) != 0 || *url == "" || *lane == "" || *limit < 0 {
		fmt.Fprintln(stderr, dlqUsage)
		return errUsage
	}
	if err := broker.ValidateName("lane", *lane); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var L ledger.Ledger
	if *dsn != "" {
		if L, err = ledger.Open(ctx, *dsn); err != nil {
			return err
		}
		defer L.Close()
	}
	opts := &broker.Options{}
	if L != nil {
		opts.Dedup = L
	}
	b, err := broker.Open(ctx, *url, opts)
	if err != nil {
		return err
	}
	defer b.Close()

	if sub == "ls" {
		ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: *lane, Max: max(*limit, 1), Lease: 5 * time.Second, DeadLetters: true})
		if err != nil {
			return err
		}
		// Listing must not take them: give each back at once.
		for _, d := range ds {
			_ = b.Nack(ctx, d, 0)
		}
		if *asJSON {
			type row struct {
				ID       string `json:"id"`
				Kind     string `json:"kind"`
				Tenant   string `json:"tenant"`
				Reason   string `json:"reason"`
				Error    string `json:"error"`
				Attempts int    `json:"attempts"`
				At       string `json:"dead_at"`
			}
			out := make([]row, 0, len(ds))
			for _, d := range ds {
				dl := d.DeadLetter
				out = append(out, row{d.ID, d.Kind, d.Tenant, string(dl.Reason), dl.Error, len(dl.Attempts), dl.At.UTC().Format(time.RFC3339)})
			}
			return writeJSON(stdout, out)
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TASK\tKIND\tTENANT\tREASON\tATTEMPTS\tDEAD FOR\tERROR")
		for _, d := range ds {
			dl := d.DeadLetter
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", d.ID, d.Kind, dash(d.Tenant), dl.Reason, len(dl.Attempts), age(time.Since(dl.At)), oneLine(dl.Error, 80))
		}
		return tw.Flush()
	}

	s, err := b.Stats(ctx, *lane)
	if err != nil {
		return err
	}
	n := int(s.DeadLettered)
	if *limit > 0 {
		n = min(n, *limit)
	}
	if n == 0 {
		fmt.Fprintf(stdout, "no dead letters in %s\n", *lane)
		return nil
	}
	if !*yes && !confirm(stderr, fmt.Sprintf("replay %d dead letter(s) of lane %s? [y/N] ", n, *lane)) {
		return fmt.Errorf("not confirmed; nothing replayed")
	}
	who := *actor
	if who == "" {
		who = os.Getenv("USER")
	}
	c, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		return err
	}
	done, err := c.ReplayDead(ctx, *lane, *limit, "operator:"+who)
	fmt.Fprintf(stdout, "replayed %d dead letter(s) of %s\n", done, *lane)
	return err
}

// confirm asks on stderr and reads y/N from standard input.
func confirm(w io.Writer, question string) bool {
	fmt.Fprint(w, question)
	line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	a := strings.ToLower(strings.TrimSpace(line))
	return a == "y" || a == "yes"
}

func oneLine(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}
