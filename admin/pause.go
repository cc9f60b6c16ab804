package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// ErrTenantScoped is returned to a tenant-scoped caller (a Scope with a
// Tenant) by an operation on what every tenant shares, such as the lanes'
// history. The HTTP API answers it with 403.
var ErrTenantScoped = errors.New("admin: not for a tenant-scoped caller")

// PauseLane stops every server on this ledger from starting tasks of lane
// (within about a second); running tasks finish. ResumeLane undoes it.
// A lane that is not known (KnownLanes) is refused with ErrUnknownLane.
// Both need a ledger that keeps lane controls (ErrNoLedger without a
// ledger) and record who did it with the pause.
func (o *Ops) PauseLane(ctx context.Context, lane string, who Actor) error {
	if err := o.knownLane(ctx, lane); err != nil {
		return err
	}
	return o.client.PauseLane(ctx, lane, who.String())
}

// ResumeLane lets servers start tasks of lane again.
func (o *Ops) ResumeLane(ctx context.Context, lane string, who Actor) error {
	if err := o.knownLane(ctx, lane); err != nil {
		return err
	}
	return o.client.ResumeLane(ctx, lane, who.String())
}

// LaneEvents lists who paused and resumed lanes through the ledger, and
// when, newest first (see switchyard.Client.LaneEvents): lane "" lists
// every lane's; limit 0 means 100, at most 1000. The lanes are shared by
// every tenant, so a tenant-scoped caller gets ErrTenantScoped. It needs a
// ledger (ErrNoLedger); a bad lane name or a negative limit matches
// broker.ErrInvalid.
func (o *Ops) LaneEvents(ctx context.Context, sc Scope, lane string, limit int) ([]ledger.LaneEvent, error) {
	if sc.Tenant != "" {
		return nil, fmt.Errorf("%w: the lanes' history is shared by every tenant", ErrTenantScoped)
	}
	if lane == "" {
		return o.client.LaneEvents(ctx, "", limit)
	}
	if err := broker.ValidateName("lane", lane); err != nil {
		return nil, err
	}
	es, err := o.client.LaneEvents(ctx, lane, limit)
	if err != nil || len(es) > 0 {
		return es, err
	}
	// No history: an empty list only for a lane that exists. A lane
	// with history is answered whether or not it is still configured (a
	// removed lane's pauses stay readable); a name no configuration
	// knows is refused, as every other lane lookup refuses it.
	if err := o.knownLane(ctx, lane); err != nil {
		return nil, err
	}
	return es, nil
}

// pausedLanes maps each paused lane to who paused it; known is false (and
// the map empty) without a ledger or when the ledger keeps no lane
// controls: pauses may exist that this process cannot see.
func (o *Ops) pausedLanes(ctx context.Context) (paused map[string]string, known bool, err error) {
	out := map[string]string{}
	if o.cfg.Ledger == nil {
		return out, false, nil
	}
	ps, err := o.client.PausedLanes(ctx)
	if err != nil {
		if isUnsupported(err) {
			return out, false, nil
		}
		return nil, false, err
	}
	for _, p := range ps {
		out[p.Lane] = p.Actor
	}
	return out, true, nil
}

func (o *Ops) replaySandbox(ctx context.Context, lane, id string, who Actor) (string, error) {
	return o.client.ReplaySandbox(ctx, lane, id, who.String())
}

func isUnsupported(err error) bool { return errors.Is(err, broker.ErrUnsupported) }
