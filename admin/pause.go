package admin

import (
	"context"
	"errors"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// PauseLane stops every server on this ledger from starting tasks of lane
// (within about a second); running tasks finish. ResumeLane undoes it.
// Both need a ledger whose store keeps lane controls (ErrNoLedger
// otherwise) and record who did it.
func (o *Ops) PauseLane(ctx context.Context, lane string, who Actor) error {
	return o.setPaused(ctx, lane, true, who)
}

// ResumeLane lets servers start tasks of lane again.
func (o *Ops) ResumeLane(ctx context.Context, lane string, who Actor) error {
	return o.setPaused(ctx, lane, false, who)
}

func (o *Ops) setPaused(ctx context.Context, lane string, paused bool, who Actor) error {
	if err := broker.ValidateName("lane", lane); err != nil {
		return err
	}
	lc, ok := o.cfg.Ledger.(ledger.LaneControls)
	if !ok {
		return ErrNoLedger
	}
	return lc.SetLanePaused(ctx, lane, paused, who.String())
}

// pausedLanes maps each paused lane to who paused it; empty without lane
// controls.
func (o *Ops) pausedLanes(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	lc, ok := o.cfg.Ledger.(ledger.LaneControls)
	if !ok {
		return out, nil
	}
	ps, err := lc.PausedLanes(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		out[p.Lane] = p.Actor
	}
	return out, nil
}

func (o *Ops) replaySandbox(ctx context.Context, lane, id string, who Actor) (string, error) {
	return "", errors.New("admin: sandbox replay is not available yet")
}
