package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/switchyard-dev/switchyard/broker"
)

// ErrUnknownLane is returned for a lane no configuration knows: not in
// Config.Lanes, not a kind's lane, not paused, not served by a server
// registered in the ledger, and holding no message in the broker. It matches
// broker.ErrInvalid too (a 400 over HTTP); the message names the known
// lanes.
var ErrUnknownLane = errors.New("unknown lane")

type unknownLaneError struct {
	lane  string
	known []string
}

func (e *unknownLaneError) Error() string {
	return fmt.Sprintf("unknown lane %q (known lanes: %s)", e.lane, strings.Join(e.known, ", "))
}

func (e *unknownLaneError) Is(target error) bool {
	return target == ErrUnknownLane || target == broker.ErrInvalid
}

// KnownLanes returns the lanes operations accept, sorted: Config.Lanes
// (the default lanes unless configured), the kinds' lanes (Config.Kinds),
// the lanes the broker holds messages in (when it can list them), the
// paused lanes and the lanes of the servers registered in the ledger
// (ledger.Servers; gone ones too, until their records are pruned).
func (o *Ops) KnownLanes(ctx context.Context) ([]string, error) {
	set := map[string]bool{}
	for _, l := range o.cfg.Lanes {
		set[l] = true
	}
	for _, k := range o.cfg.Kinds {
		if k.Lane != "" {
			set[k.Lane] = true
		}
		for _, l := range k.Lanes {
			set[l] = true
		}
	}
	found, ok, err := o.cfg.Broker.Lanes(ctx)
	if err != nil {
		return nil, err
	}
	if ok {
		for _, l := range found {
			set[l] = true
		}
	}
	paused, _, err := o.pausedLanes(ctx)
	if err != nil {
		return nil, err
	}
	for l := range paused {
		set[l] = true
	}
	served, err := o.registeredLanes(ctx) // servers.go
	if err != nil {
		return nil, err
	}
	for _, l := range served {
		set[l] = true
	}
	out := make([]string, 0, len(set))
	for l := range set {
		out = append(out, l)
	}
	slices.Sort(out)
	return out, nil
}

// knownLane checks lane's name, then that it is known (KnownLanes); the
// error for an unknown lane matches ErrUnknownLane and names the known
// ones.
func (o *Ops) knownLane(ctx context.Context, lane string) error {
	if err := broker.ValidateName("lane", lane); err != nil {
		return err
	}
	if slices.Contains(o.cfg.Lanes, lane) {
		return nil
	}
	known, err := o.KnownLanes(ctx)
	if err != nil {
		return err
	}
	if slices.Contains(known, lane) {
		return nil
	}
	return &unknownLaneError{lane: lane, known: known}
}
