package switchyard

import (
	"context"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// Lane pause across processes. Server.Pause acts in one process; PauseLane
// writes the pause to the ledger, and every Server sharing that ledger
// stops starting tasks of the lane within its ServerConfig.ControlInterval
// (1s by default). Running tasks finish; queued ones wait. A lane is paused
// while either its Server or the ledger says so.

// PauseLane pauses lane for every Server sharing the client's ledger, with
// actor (default "operator") recorded as who did it. Pausing a paused lane
// keeps the first pause. It needs a ledger (ErrNoLedger) that implements
// ledger.LaneControls (else an error matching broker.ErrUnsupported).
func (c *Client) PauseLane(ctx context.Context, lane, actor string) error {
	return c.setLanePaused(ctx, lane, true, actor)
}

// ResumeLane undoes PauseLane; resuming a lane that is not paused does
// nothing. A Server that also paused the lane itself (Server.Pause) keeps
// it paused until Server.Resume.
func (c *Client) ResumeLane(ctx context.Context, lane, actor string) error {
	return c.setLanePaused(ctx, lane, false, actor)
}

// PausedLanes lists the lanes paused through the ledger, by name, with who
// paused them and since when.
func (c *Client) PausedLanes(ctx context.Context) ([]ledger.LanePause, error) {
	lc, err := c.laneControls("paused lanes")
	if err != nil {
		return nil, err
	}
	return lc.PausedLanes(ctx)
}

// LaneEvents lists the lanes' history, newest first: who paused or resumed
// each lane through the ledger, and when (one event for each change of
// state; a pause of a paused lane or a resume of a running one records
// none). lane "" lists every lane's events; limit 0 means 100, and at most
// 1000 are returned. It needs a ledger (ErrNoLedger) that implements
// ledger.LaneControls (else an error matching broker.ErrUnsupported); a
// bad lane name or a negative limit matches broker.ErrInvalid.
func (c *Client) LaneEvents(ctx context.Context, lane string, limit int) ([]ledger.LaneEvent, error) {
	if lane != "" {
		if err := broker.ValidateName("lane", lane); err != nil {
			return nil, err
		}
	}
	if limit < 0 {
		return nil, broker.KindError("switchyard: lane events", broker.Permanent, broker.ErrInvalid,
			"limit %d is negative", limit)
	}
	lc, err := c.laneControls("lane events")
	if err != nil {
		return nil, err
	}
	return lc.LaneEvents(ctx, lane, limit)
}

func (c *Client) setLanePaused(ctx context.Context, lane string, paused bool, actor string) error {
	if err := broker.ValidateName("lane", lane); err != nil {
		return err
	}
	op := "resume lane"
	if paused {
		op = "pause lane"
	}
	lc, err := c.laneControls(op)
	if err != nil {
		return err
	}
	if actor == "" {
		actor = "operator"
	}
	return lc.SetLanePaused(ctx, lane, paused, actor)
}

func (c *Client) laneControls(op string) (ledger.LaneControls, error) {
	if c.l == nil {
		return nil, ErrNoLedger
	}
	lc, ok := c.l.(ledger.LaneControls)
	if !ok {
		return nil, broker.KindError("switchyard: "+op, broker.Permanent, broker.ErrUnsupported,
			"the ledger (%T) cannot store lane pauses (ledger.LaneControls)", c.l)
	}
	return lc, nil
}
