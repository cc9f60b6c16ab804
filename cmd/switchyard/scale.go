package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/switchyard-dev/switchyard/admin"
	"github.com/switchyard-dev/switchyard/scaling"
)

const scaleUsage = `usage: switchyard scale --broker URL --lane L [--ledger DSN] [--expect D] [--window D] [--lead D] [--slots N] [--json]
  how many worker slots lane L wants now (docs/SCALING.md), for scripts: a plain number, or
  with --json the whole signal (busy, desired, workers, the inputs and the deciding reason).
  The arrival rate is measured over --window (two samples of the lane's queue that far apart);
  --expect is the lane's p90 task duration (this command runs no handlers to measure it;
  without it every ready or busy task counts as one slot). With --ledger, the fleet's current
  slots come from the server registry. For a signal with history, read GET /api/v1/scaling or
  the switchyard_lane_desired_slots gauge of 'switchyard admin --metrics' instead.`

func runScale(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newOpsCmd("scale", scaleUsage, stderr)
	lane := c.fs.String("lane", "", "the lane to size (required)")
	expect := c.fs.Duration("expect", 0, "the lane's p90 task duration (default: unknown, depth scaling)")
	window := c.fs.Duration("window", 10*time.Second, "how long to measure the arrival rate over (0: no rate, depth and backlog only)")
	lead := c.fs.Duration("lead", 0, "the fleet's start-up delay, to extrapolate the arrival rate over")
	slots := c.fs.Int("slots", 1, "slots per worker, for the workers count")
	if _, err := c.parse(args, 0, false, stderr); err != nil {
		return err
	}
	if *lane == "" {
		fmt.Fprintf(stderr, "missing required flag --lane\n%s\n", scaleUsage)
		return errUsage
	}
	if *window < 0 || *expect < 0 || *lead < 0 || *slots <= 0 {
		fmt.Fprintf(stderr, "--window, --expect and --lead must not be negative, --slots must be positive\n%s\n", scaleUsage)
		return errUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *c.timeout)
	defer cancel()
	meter := &scaling.Meter{Bin: max(*window, time.Nanosecond)}
	if *expect > 0 {
		meter.Expected = map[string]time.Duration{*lane: *expect}
	}
	sc := &scaling.Scaler{Meter: meter, Policy: scaling.Policy{Lead: *lead, SlotsPerWorker: *slots}}
	ops, done, err := c.open(ctx, admin.Config{Scaler: sc})
	if err != nil {
		return err
	}
	defer done()
	sig, err := ops.Scaling(ctx, *lane)
	if err != nil {
		return err
	}
	if *window > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(*window):
		}
		if sig, err = ops.Scaling(ctx, *lane); err != nil {
			return err
		}
	}
	if *c.asJSON {
		return writeJSON(stdout, sig[0])
	}
	_, err = fmt.Fprintln(stdout, sig[0].Desired)
	return err
}
