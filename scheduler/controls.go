package scheduler

import (
	"context"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
)

// Lane pauses come from two places: Pause/Resume in this process, and the
// ledger when it implements ledger.LaneControls (pauses made by an operator
// in another process). A lane is paused while either says so.

// EventControlFailed is observed when reading lane pauses from the ledger
// fails; the scheduler keeps the pauses it last read.
const EventControlFailed EventType = "control_failed"

// LanePaused reports whether lane is paused, in this process (Pause) or
// through the ledger (as of the last poll), and whether the lane is one the
// scheduler serves.
func (s *Scheduler) LanePaused(lane string) (paused, known bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lanes[lane]
	if l == nil {
		return false, false
	}
	return l.isPaused(), true
}

// isPaused is the lane's effective pause; callers hold s.mu.
func (l *laneState) isPaused() bool { return l.paused || l.ledgerPaused }

// laneControls returns the ledger's lane controls, or nil.
func (s *Scheduler) laneControls() ledger.LaneControls {
	if s.cfg.Ledger == nil {
		return nil
	}
	lc, _ := s.cfg.Ledger.(ledger.LaneControls)
	return lc
}

// pollControls reads the ledger's lane pauses once and applies them. On an
// error it keeps the last known state.
func (s *Scheduler) pollControls(ctx context.Context, lc ledger.LaneControls) error {
	ctx, cancel := context.WithTimeout(ctx, max(s.cfg.ControlInterval, 5*time.Second))
	ps, err := lc.PausedLanes(ctx)
	cancel()
	if err != nil {
		s.observe(Event{Type: EventControlFailed, Err: err})
		return err
	}
	in := make(map[string]bool, len(ps))
	for _, p := range ps {
		in[p.Lane] = true
	}
	var changed []*laneState
	s.mu.Lock()
	for name, l := range s.lanes {
		if l.ledgerPaused != in[name] {
			l.ledgerPaused = in[name]
			changed = append(changed, l)
		}
	}
	s.mu.Unlock()
	for _, l := range changed {
		s.cfg.Logger.Info("switchyard: lane pause from the ledger", "lane", l.def.Name, "paused", in[l.def.Name])
		signal(l.more)
	}
	if len(changed) > 0 {
		s.poke()
	}
	return nil
}

// controls polls the ledger's lane pauses every ControlInterval until the
// scheduler stops. Failures are logged once (and again when they clear)
// and observed every time; they never stop the scheduler.
func (s *Scheduler) controls(lc ledger.LaneControls) {
	defer s.loopWG.Done()
	t := time.NewTicker(s.cfg.ControlInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-s.fetchCtx.Done():
			return
		case <-t.C:
		}
		err := s.pollControls(s.fetchCtx, lc)
		switch {
		case err != nil && !failing && s.fetchCtx.Err() == nil:
			s.cfg.Logger.Warn("switchyard: reading lane pauses from the ledger failed; keeping the last known pauses", "error", err)
		case err == nil && failing:
			s.cfg.Logger.Info("switchyard: reading lane pauses from the ledger works again")
		}
		failing = err != nil
	}
}
