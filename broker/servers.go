package broker

import (
	"context"
	"time"
)

// ServerInfo describes a worker process to a broker that keeps a registry
// of its own consumers, which the broker's own tools show (asynq's
// asynq:servers, listed by asynqmon's Servers tab). The scheduler
// announces itself every heartbeat with ServerAnnouncer when the driver
// implements it.
type ServerInfo struct {
	// ID names the server (scheduler.Config.WorkerID).
	ID   string
	Host string
	PID  int
	// Lanes are the physical lanes it receives from (a fair lane's shards
	// included); Slots how many tasks it runs at once and Busy how many
	// run now.
	Lanes   []string
	Slots   int
	Busy    int
	Started time.Time
	// Running lists the tasks the server runs now (at most
	// MaxServerRunning; asynq writes them as its per-task worker
	// records, which asynqmon's Servers tab shows as active workers).
	Running []RunningTask
}

// MaxServerRunning bounds ServerInfo.Running.
const MaxServerRunning = 10_000

// RunningTask is one task a server runs: what asynq calls a worker.
// Payloads are never included.
type RunningTask struct {
	// ID is the message's ID, Kind its kind, Lane the physical lane it
	// was received from.
	ID   string
	Kind string
	Lane string
	// Started is when its handler started; Deadline the task's deadline
	// (zero: none).
	Started  time.Time
	Deadline time.Time
}

// ServerAnnouncer is an optional Driver interface: a broker with a
// registry of its consumers. AnnounceServer writes or refreshes info's
// record so that it lives for ttl unless announced again; WithdrawServer
// deletes it. Both are best effort for the caller: a failure is logged,
// never fatal.
type ServerAnnouncer interface {
	AnnounceServer(ctx context.Context, info ServerInfo, ttl time.Duration) error
	WithdrawServer(ctx context.Context, info ServerInfo) error
}

// AnnounceServer announces info to the driver when it keeps a registry of
// its consumers (ServerAnnouncer); ok is false when it does not. info's
// Lanes are logical lanes: a fair lane is expanded to its shards here.
func (b *Broker) AnnounceServer(ctx context.Context, info ServerInfo, ttl time.Duration) (ok bool, err error) {
	a, can := b.d.(ServerAnnouncer)
	if !can {
		return false, nil
	}
	if b.closed.Load() {
		return true, closedErr("announce server")
	}
	if info.ID == "" {
		return true, Invalidf("announce server: the server has no ID")
	}
	info.Lanes = b.physicalLanes(info.Lanes)
	if len(info.Running) > MaxServerRunning {
		info.Running = info.Running[:MaxServerRunning]
	}
	return true, Wrap("announce server", Transient, a.AnnounceServer(ctx, info, ttl))
}

// WithdrawServer deletes info's record from the driver's registry, when it
// keeps one (ServerAnnouncer).
func (b *Broker) WithdrawServer(ctx context.Context, info ServerInfo) error {
	a, can := b.d.(ServerAnnouncer)
	if !can {
		return nil
	}
	if b.closed.Load() {
		return closedErr("withdraw server")
	}
	info.Lanes = b.physicalLanes(info.Lanes)
	return Wrap("withdraw server", Transient, a.WithdrawServer(ctx, info))
}

// physicalLanes expands fair lanes to their shards.
func (b *Broker) physicalLanes(lanes []string) []string {
	out := make([]string, 0, len(lanes))
	for _, l := range lanes {
		if fl := b.fair[l]; fl != nil {
			out = append(out, fl.shards...)
			continue
		}
		out = append(out, l)
	}
	return out
}
