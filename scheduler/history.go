package scheduler

import (
	"context"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
)

// maxHistoryBuckets bounds the minutes of counts a scheduler keeps while
// the ledger refuses them (two hours of eight lanes); beyond it the
// oldest are dropped, with a warning.
const maxHistoryBuckets = 2 * 60 * 8

// history counts, per lane and minute, the attempts this scheduler
// finished (processed), the failed ones among them and the tasks it
// dead-lettered, for ledger.History. Counting is a mutex and a map
// lookup per finished task; the register loop writes the minutes that
// changed once a heartbeat (flush), never the task's own path.
type history struct {
	mu      sync.Mutex
	buckets map[histKey]*histBucket
	dropped int // buckets dropped since the last warning
}

type histKey struct {
	minute int64 // Unix minutes
	lane   string
}

type histBucket struct {
	processed, failed, dead int64
	dirty                   bool // changed since it was last written
}

// count adds one finished outcome of lane at now: ran says a handler
// attempt ended (processed), failed that it failed, dead that the task
// was dead-lettered.
func (h *history) count(now time.Time, lane string, ran, failed, dead bool) {
	k := histKey{now.Unix() / 60, lane}
	h.mu.Lock()
	b := h.buckets[k]
	if b == nil {
		if h.buckets == nil {
			h.buckets = map[histKey]*histBucket{}
		}
		if len(h.buckets) >= maxHistoryBuckets {
			h.dropOldest()
		}
		b = &histBucket{}
		h.buckets[k] = b
	}
	if ran {
		b.processed++
	}
	if failed {
		b.failed++
	}
	if dead {
		b.dead++
	}
	b.dirty = true
	h.mu.Unlock()
}

// dropOldest forgets the oldest bucket; callers hold h.mu.
func (h *history) dropOldest() {
	var oldest histKey
	first := true
	for k := range h.buckets {
		if first || k.minute < oldest.minute {
			oldest, first = k, false
		}
	}
	delete(h.buckets, oldest)
	h.dropped++
}

// pending returns the buckets changed since they were last written, as
// points.
func (h *history) pending() []ledger.HistoryPoint {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []ledger.HistoryPoint
	for k, b := range h.buckets {
		if b.dirty {
			out = append(out, ledger.HistoryPoint{Minute: time.Unix(k.minute*60, 0).UTC(), Lane: k.lane,
				Processed: b.processed, Failed: b.failed, Dead: b.dead})
		}
	}
	return out
}

// written marks pts written (unless they changed meanwhile) and forgets
// the written buckets of minutes before the one before now's: their
// totals are final.
func (h *history) written(pts []ledger.HistoryPoint, now time.Time) {
	cur := now.Unix() / 60
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range pts {
		k := histKey{p.Minute.Unix() / 60, p.Lane}
		b := h.buckets[k]
		if b == nil || b.processed != p.Processed || b.failed != p.Failed || b.dead != p.Dead {
			continue // counted again since: still dirty
		}
		b.dirty = false
	}
	for k, b := range h.buckets {
		if !b.dirty && k.minute < cur-1 { // a minute's grace for a count stamped just before the minute turned
			delete(h.buckets, k)
		}
	}
}

// flushHistory writes the counts that changed since the last flush to the
// ledger's history (when it keeps one). It runs in the register loop,
// once a heartbeat, and once more when the scheduler stops.
func (s *Scheduler) flushHistory(ctx context.Context, hs ledger.History) error {
	if hs == nil {
		return nil
	}
	s.hist.mu.Lock()
	if d := s.hist.dropped; d > 0 {
		s.hist.dropped = 0
		s.hist.mu.Unlock()
		s.cfg.Logger.Warn("switchyard: task history not written to the ledger for too long; dropped the oldest minutes", "minutes", d)
	} else {
		s.hist.mu.Unlock()
	}
	pts := s.hist.pending()
	for len(pts) > 0 {
		n := min(len(pts), ledger.MaxHistoryPoints)
		if err := hs.RecordHistory(ctx, s.cfg.WorkerID, pts[:n]); err != nil {
			return err
		}
		s.hist.written(pts[:n], s.cfg.Now())
		pts = pts[n:]
	}
	return nil
}
