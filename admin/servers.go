package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// ServerInfo is one worker process of the fleet, as it registered itself
// in the ledger (ledger.Servers), with its state as of now. The CLI's
// --json and GET /api/v1/servers print it as it is.
type ServerInfo struct {
	ID    string   `json:"id"`
	Host  string   `json:"host"`
	PID   int      `json:"pid"`
	Lanes []string `json:"lanes"`
	Slots int      `json:"slots"`
	Busy  int      `json:"busy"`
	Free  int      `json:"free"`
	// Version is the Switchyard version the server runs.
	Version   string    `json:"version"`
	Started   time.Time `json:"started"`
	Heartbeat time.Time `json:"heartbeat"`
	// HeartbeatAgeMS is how long ago the last heartbeat was, by this
	// process's clock; IntervalMS how often the server sends one.
	HeartbeatAgeMS float64 `json:"heartbeat_age_ms"`
	IntervalMS     float64 `json:"interval_ms"`
	// State is "live", or "gone" when the server missed
	// ledger.ServerGoneAfter heartbeats (it died without removing its
	// record; the record is pruned after ledger.ServerPruneAfter).
	State string `json:"state"`
}

// ServerLive and ServerGone are ServerInfo.State's values.
const (
	ServerLive = "live"
	ServerGone = "gone"
)

// Servers lists the fleet: every server registered in the ledger, by ID,
// gone ones included and marked. Without a ledger it returns ErrNoLedger;
// with a ledger that keeps no registry, an error matching
// broker.ErrUnsupported.
func (o *Ops) Servers(ctx context.Context) ([]ServerInfo, error) {
	if o.cfg.Ledger == nil {
		return nil, ErrNoLedger
	}
	reg := ledger.ServersOf(o.cfg.Ledger)
	if reg == nil {
		return nil, &broker.Error{Op: "admin: servers", Class: broker.Permanent, Kind: broker.ErrUnsupported,
			Err: fmt.Errorf("the ledger (%T) keeps no server registry (ledger.Servers)", o.cfg.Ledger)}
	}
	rs, err := reg.ListServers(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]ServerInfo, 0, len(rs))
	for i := range rs {
		r := &rs[i]
		st := ServerLive
		if r.Gone(now) {
			st = ServerGone
		}
		lanes := r.Lanes
		if lanes == nil {
			lanes = []string{}
		}
		out = append(out, ServerInfo{
			ID: r.ID, Host: r.Host, PID: r.PID, Lanes: lanes, Slots: r.Slots, Busy: r.Busy,
			Free: max(r.Slots-r.Busy, 0), Version: r.Version, Started: r.Started.UTC(), Heartbeat: r.Heartbeat.UTC(),
			HeartbeatAgeMS: ms(max(now.Sub(r.Heartbeat), 0)), IntervalMS: ms(r.Interval), State: st,
		})
	}
	return out, nil
}

// registeredLanes returns the lanes the servers registered in the ledger
// serve (none without a ledger or a registry).
func (o *Ops) registeredLanes(ctx context.Context) ([]string, error) {
	reg := ledger.ServersOf(o.cfg.Ledger)
	if reg == nil {
		return nil, nil
	}
	rs, err := reg.ListServers(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range rs {
		out = append(out, r.Lanes...)
	}
	return out, nil
}
