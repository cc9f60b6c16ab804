package scheduler

import (
	"context"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// modulePath is Switchyard's module, whose version a server reports.
const modulePath = "github.com/switchyard-dev/switchyard"

// pruneServersEvery is how many registrations pass between prunes of
// gone servers' records.
const pruneServersEvery = 60

// Version returns the Switchyard version this binary was built with, from
// its build information: the module's version when Switchyard is a
// dependency or the main module of a released build, else "(devel)".
var Version = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	if bi.Main.Path == modulePath && bi.Main.Version != "" {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == modulePath && d.Version != "" {
			return d.Version
		}
	}
	return "(devel)"
})

// serverRecord is this scheduler's record in the fleet registry (every
// lane it serves, manual ones included), the lanes it receives from
// (without the manual ones, claimed by reviewers, not fetched) and the
// tasks it runs now.
func (s *Scheduler) serverRecord(started time.Time) (ledger.Server, []string, []broker.RunningTask) {
	host, _ := os.Hostname()
	s.mu.Lock()
	busy := min(s.used, s.cfg.Slots)
	running := make([]broker.RunningTask, 0, len(s.running))
	for _, t := range s.running {
		if len(running) == broker.MaxServerRunning {
			break
		}
		running = append(running, broker.RunningTask{ID: t.d.ID, Kind: t.d.Kind, Lane: broker.WireLane(t.d), Started: t.started, Deadline: deadlineOf(t.d)})
	}
	lanes := append([]string(nil), s.order...)
	var fetched []string
	for _, name := range s.order {
		if !s.lanes[name].def.Manual {
			fetched = append(fetched, name)
		}
	}
	s.mu.Unlock()
	return ledger.Server{
		ID: s.cfg.WorkerID, Host: host, PID: os.Getpid(), Lanes: lanes,
		Slots: s.cfg.Slots, Busy: busy, Version: Version(),
		Started: started, Interval: s.cfg.Heartbeat,
	}, fetched, running
}

// register keeps this scheduler's record in the ledger's fleet registry
// (ledger.Servers, when reg is not nil): written at once, refreshed every
// heartbeat, removed when the scheduler stops. Now and then it prunes the
// records of servers gone longer than ledger.ServerPruneAfter. It also
// announces the scheduler to the broker when the driver keeps a registry
// of its own (broker.ServerAnnouncer: asynq's, shown by asynqmon), for
// ledger.ServerGoneAfter heartbeats at a time, and writes the task
// counts of the minutes that changed to the ledger's history
// (ledger.History, history.go). Failures are logged and retried at the
// next heartbeat; they never stop the scheduler.
func (s *Scheduler) register(reg ledger.Servers, started time.Time) {
	defer s.loopWG.Done()
	t := time.NewTicker(s.cfg.Heartbeat)
	defer t.Stop()
	announce := true // until the broker says it keeps no registry
	var last broker.ServerInfo
	failing, bfailing, hfailing := false, false, false
	hs := ledger.HistoryOf(s.cfg.Ledger)
	flush := func(ctx context.Context, prune bool) {
		if hs == nil {
			return
		}
		err := s.flushHistory(ctx, hs)
		if err == nil && prune {
			_, err = hs.PruneHistory(ctx, s.cfg.Now().Add(-ledger.HistoryKeep))
		}
		if err != nil && !hfailing {
			s.cfg.Logger.Warn("switchyard: writing the task history to the ledger failed; retrying every heartbeat", "error", err)
		}
		hfailing = err != nil
	}
	for n := 0; ; n++ {
		// A slow ledger or broker gets longer than one heartbeat: the
		// ticker drops the ticks missed meanwhile.
		ctx, cancel := context.WithTimeout(context.Background(), max(s.cfg.Heartbeat, 5*time.Second))
		rec, fetched, running := s.serverRecord(started)
		last = broker.ServerInfo{ID: rec.ID, Host: rec.Host, PID: rec.PID, Lanes: fetched,
			Slots: rec.Slots, Busy: rec.Busy, Started: rec.Started, Running: running}
		if reg != nil {
			err := reg.RegisterServer(ctx, rec)
			if err == nil && n%pruneServersEvery == 0 {
				_, err = reg.PruneServers(ctx, s.cfg.Now().Add(-ledger.ServerPruneAfter))
			}
			if err != nil && !failing {
				s.cfg.Logger.Warn("switchyard: registering this server in the ledger failed; retrying every heartbeat", "error", err)
			}
			failing = err != nil
		}
		flush(ctx, n%pruneServersEvery == 0)
		if announce {
			ok, err := s.b.AnnounceServer(ctx, last, ledger.ServerGoneAfter*s.cfg.Heartbeat)
			announce = ok
			if err != nil && !bfailing {
				s.cfg.Logger.Warn("switchyard: announcing this server to the broker failed; retrying every heartbeat", "error", err)
			}
			bfailing = err != nil
		}
		cancel()
		if reg == nil && !announce && hs == nil {
			return // nowhere to register
		}
		select {
		case <-s.stopped:
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			flush(ctx, false) // the counts of the last tasks
			if reg != nil {
				if err := reg.RemoveServer(ctx, s.cfg.WorkerID); err != nil {
					s.cfg.Logger.Warn("switchyard: removing this server from the ledger failed; it will show as gone", "error", err)
				}
			}
			if announce {
				if err := s.b.WithdrawServer(ctx, last); err != nil {
					s.cfg.Logger.Warn("switchyard: withdrawing this server from the broker failed; its record expires by itself", "error", err)
				}
			}
			cancel()
			return
		case <-t.C:
		}
	}
}
