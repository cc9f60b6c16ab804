package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard-dev/switchyard/admin"
)

const serversUsage = `usage: switchyard servers --broker URL --ledger DSN [--json]
  the fleet: every worker process (Server) registered in the ledger, with its host, pid,
  lanes, slots busy and free, Switchyard version, start time and last heartbeat. A server
  that missed three heartbeats is shown as gone (it died without saying so); its record is
  pruned after an hour.`

func runServers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newOpsCmd("servers", serversUsage, stderr)
	if _, err := c.parse(args, 0, true, stderr); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *c.timeout)
	defer cancel()
	ops, done, err := c.open(ctx, admin.Config{})
	if err != nil {
		return err
	}
	defer done()
	ss, err := ops.Servers(ctx)
	if err != nil {
		return err
	}
	if *c.asJSON {
		return writeJSON(stdout, ss)
	}
	return printServers(stdout, ss)
}

// printServers prints the fleet as a table, live servers and gone ones
// alike, with a count line.
func printServers(w io.Writer, ss []admin.ServerInfo) error {
	if len(ss) == 0 {
		fmt.Fprintln(w, "no server is registered in this ledger (servers register when they start, with a ledger)")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tHOST\tPID\tSTATE\tBUSY\tFREE\tLANES\tVERSION\tUP\tHEARTBEAT")
	gone := 0
	for _, s := range ss {
		state := s.State
		if s.State == admin.ServerGone {
			gone++
			state = "GONE"
		}
		hb := age(time.Duration(s.HeartbeatAgeMS*float64(time.Millisecond))) + " ago"
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", term(s.ID), dash(s.Host), s.PID, state,
			s.Busy, s.Free, term(strings.Join(s.Lanes, ",")), dash(s.Version), since(s.Started), hb)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "%d live, %d gone\n", len(ss)-gone, gone)
	return nil
}
